"""Kernels of the recurrent family (to be written)."""
