"""Kernels of the detection family (to be written)."""
