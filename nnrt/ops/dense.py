"""Kernels of the dense family (to be written)."""
