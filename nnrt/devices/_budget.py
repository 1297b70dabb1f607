"""Device memory accounting: a per-device budget and a per-app limit, checked at preparation.

A prepared model holds its constants and, at most, every intermediate tensor at once; that
footprint is reserved when it is prepared and released when the prepared model is garbage
collected. A model that can never fit (footprint over the device budget, or over the per-app
limit on its own) is RESOURCE_EXHAUSTED_PERSISTENT; one that does not fit now because of memory
in use is RESOURCE_EXHAUSTED_TRANSIENT (a retry after releasing models may succeed).

Releases come from finalizers (``weakref.finalize`` on a prepared model), which the cyclic
garbage collector may run on any thread at any allocation, including one made while this
ledger's lock is held by the same thread. So ``release`` never takes the lock: it appends to a
deque (atomic in CPython) that every locked reader drains first. A finalizer running inside
``reserve`` then only queues its release, and the next reader applies it.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Hashable

from nnrt.errors import ResourceExhaustedError
from nnrt.model import Model, dims_product
from nnrt.types import ErrorStatus, OperandLifeTime

__all__ = ["MemoryLedger", "model_footprint"]


def model_footprint(model: Model) -> int:
    """Bytes of constants, every sized temporary and the main model's sized outputs (which an
    execution allocates unless the caller gives buffers), over the model and its subgraphs."""
    total = 0
    for m in (model, *model.referenced_models()):
        for op in m.operands:
            if op.type.is_scalar or not op.dimensions or 0 in op.dimensions:
                continue
            if (
                op.is_constant
                or op.lifetime is OperandLifeTime.TEMPORARY_VARIABLE
                or (m is model and op.lifetime is OperandLifeTime.SUBGRAPH_OUTPUT)
            ):
                total += dims_product(op.dimensions) * op.type.dtype.itemsize
    return total


class MemoryLedger:
    """Reservations per app against ``budget`` (device) and ``per_app`` (each app); None: no limit."""

    def __init__(self, budget: int | None = None, per_app: int | None = None) -> None:
        self.budget = budget
        self.per_app = per_app
        self._used: Counter[Hashable] = Counter()
        self._lock = threading.Lock()
        #: Releases not yet applied (see the module doc: appended without the lock).
        self._released: deque[tuple[Hashable, int]] = deque()

    def _apply_releases(self) -> None:
        """Apply queued releases (the lock is held; a finalizer may append meanwhile)."""
        released = self._released
        while released:
            app, nbytes = released.popleft()
            self._used[app] -= nbytes
            if self._used[app] <= 0:
                del self._used[app]

    def in_use(self, app: Hashable | None = None) -> int:
        with self._lock:
            self._apply_releases()
            return sum(self._used.values()) if app is None else self._used[app]

    def reserve(self, app: Hashable, nbytes: int, what: str) -> None:
        """Reserve ``nbytes`` for ``app`` or raise RESOURCE_EXHAUSTED_*."""
        with self._lock:
            self._apply_releases()
            for limit, scope, used in (
                (self.budget, "the device's memory budget", sum(self._used.values())),
                (self.per_app, f"app {app!r}'s memory limit", self._used[app]),
            ):
                if limit is None:
                    continue
                if nbytes > limit:
                    raise ResourceExhaustedError(
                        f"{what} needs {nbytes} bytes, more than {scope} of {limit} bytes",
                        status=ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                    )
                if used + nbytes > limit:
                    raise ResourceExhaustedError(
                        f"{what} needs {nbytes} bytes; {used} of {scope} ({limit} bytes) are in use",
                        status=ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                    )
            self._used[app] += nbytes

    def release(self, app: Hashable, nbytes: int) -> None:
        """Give back a reservation; safe from a finalizer (never blocks, takes no lock)."""
        self._released.append((app, nbytes))
