"""Re-laid constants that preparation may take from (and give to) the compilation cache.

A prepare function that transforms a constant once (the convolution's weight matrix, the
transposed fully-connected weights) asks ``relaid(call, key, compute)`` instead of calling
``compute()`` directly. Outside a ``relay_store`` block that is exactly ``compute()``. Inside
one, an array the store was loaded with (from the data cache, mmap'd, no copy) is returned
without computing, and freshly computed arrays are recorded so that the cache can save them.
Arrays are keyed by the operation's label (which names its subgraph path and index) and
``key``. The store lives in a context variable, so preparations on other threads are unaffected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from nnrt.ops._registry import OpCall

__all__ = ["RelayStore", "relaid", "relay_store"]


class RelayStore:
    """Re-laid arrays by (operation label, key): ``loaded`` ones to reuse, ``computed`` ones to save."""

    def __init__(self, loaded: dict[tuple[str, str], np.ndarray] | None = None) -> None:
        self.loaded = loaded or {}
        self.computed: dict[tuple[str, str], np.ndarray] = {}
        self.reused = 0


_store: ContextVar[RelayStore | None] = ContextVar("nnrt_relay_store", default=None)


def relaid(call: OpCall, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """``compute()``, or the array the active store holds for this operation and ``key``."""
    store = _store.get()
    if store is None:
        return compute()
    k = (call.label, key)
    arr = store.loaded.get(k)
    if arr is not None:
        store.reused += 1
        return arr
    arr = compute()
    store.computed[k] = arr
    return arr


@contextmanager
def relay_store(store: RelayStore) -> Iterator[RelayStore]:
    """Make ``store`` active for preparations on this thread (context) inside the block."""
    token = _store.set(store)
    try:
        yield store
    finally:
        _store.reset(token)
