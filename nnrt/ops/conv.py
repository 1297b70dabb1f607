"""Kernels of the conv family (to be written)."""
