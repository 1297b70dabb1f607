"""Kernels of the lookup family (to be written)."""
