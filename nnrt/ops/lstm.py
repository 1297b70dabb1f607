"""LSTM kernels (in progress)."""
