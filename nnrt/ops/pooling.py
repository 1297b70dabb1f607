"""Kernels of the pooling family (to be written)."""
