"""Kernels of the shape family (to be written)."""
