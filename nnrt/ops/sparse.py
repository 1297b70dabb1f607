"""Kernels of the sparse family (to be written)."""
