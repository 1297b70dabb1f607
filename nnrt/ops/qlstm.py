"""QUANTIZED_LSTM (in progress)."""
