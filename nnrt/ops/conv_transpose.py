"""TRANSPOSE_CONV_2D (to be written)."""
