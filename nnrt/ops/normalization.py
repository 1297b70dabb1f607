"""Kernels of the normalization family (to be written)."""
