"""Kernels of the resize family (to be written)."""
