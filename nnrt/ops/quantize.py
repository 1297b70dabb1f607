"""Kernels of the quantize family (to be written)."""
