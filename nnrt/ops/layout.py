"""Layout kernels (being written)."""
