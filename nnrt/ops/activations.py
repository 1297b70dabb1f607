"""Kernels of the activations family (to be written)."""
