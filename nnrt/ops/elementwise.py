"""Kernels of the elementwise family (to be written)."""
