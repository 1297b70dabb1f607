"""The compilation cache (NNAPI compilation caching): entries keyed by the app's 32-byte token.

See ``nnrt.cache._cache`` for the format and its verification, ``nnrt.cache._prepare`` for how
devices use it (``prepare_model(..., cache_dir=, token=)``, ``prepare_model_from_cache``).
"""

from nnrt.cache._cache import TOKEN_BYTES, CacheEntry, cache_key, check_cache_args, file_names, read_entry, write_entry
from nnrt.cache._prepare import load_from_cache, prepare_with_cache

__all__ = [
    "TOKEN_BYTES",
    "CacheEntry",
    "cache_key",
    "check_cache_args",
    "file_names",
    "load_from_cache",
    "prepare_with_cache",
    "read_entry",
    "write_entry",
]
