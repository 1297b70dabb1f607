"""Kernels of the reduce family (to be written)."""
