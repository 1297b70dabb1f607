"""The fence state machine: pure, synchronous, thread-safe. No event loop, no I/O, no logging.

Theory
------
A sync fence is a one-shot latch. It is born ACTIVE and leaves that state exactly once, either
to SIGNALED (the work it stands for finished) or to ERROR (it failed, with an ``ErrorStatus``
other than NONE and a message). Both end states are final: a fence never goes back to ACTIVE
and never changes its outcome, which is what lets any number of waiters, on any number of
event loops and threads, read the outcome without coordinating with each other.

The transitions are the table ``TRANSITIONS`` below, keyed by (state, event). A pair missing
from the table is illegal: for nnrt's own code that is a bug, so the strict calls
(``signal``, ``fail``) raise ``InternalError``. Where a fence is legitimately resolved by
whichever of several sources gets there first (combinators, a task racing its cancellation),
callers use the idempotent calls ``try_signal`` / ``try_fail``: they apply the transition if the
fence is still ACTIVE and otherwise do nothing, reporting which happened.

Listeners are the bridge to the async shell: a listener registered while the fence is ACTIVE is
called once, right after the transition, in the thread that made it; one registered after the
transition is called at once, in the registering thread. Listeners run outside the lock, so a
listener may read the fence (or register on another fence) without deadlocking.
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections.abc import Callable, Iterable

from nnrt.errors import InternalError
from nnrt.types import ErrorStatus

__all__ = ["TRANSITIONS", "FenceCore", "FenceEvent", "FenceState", "Listener"]


class FenceState(enum.Enum):
    """Where a fence is in its life. ACTIVE is the only state that can change."""

    ACTIVE = "active"
    SIGNALED = "signaled"
    ERROR = "error"

    # Members are singletons, so identity is a correct hash; Enum's own hashes the name in
    # Python code, which was a measurable part of the signal path.
    __hash__ = object.__hash__


class FenceEvent(enum.Enum):
    """What can happen to a fence."""

    SIGNAL = "signal"
    FAIL = "fail"

    __hash__ = object.__hash__


#: (state, event) -> next state. Anything not listed is an illegal transition.
TRANSITIONS: dict[tuple[FenceState, FenceEvent], FenceState] = {
    (FenceState.ACTIVE, FenceEvent.SIGNAL): FenceState.SIGNALED,
    (FenceState.ACTIVE, FenceEvent.FAIL): FenceState.ERROR,
}

# The table, indexed per event for the hot path: one dict lookup on the state, no tuple.
_NEXT: dict[FenceEvent, dict[FenceState, FenceState]] = {
    event: {state: target for (state, e), target in TRANSITIONS.items() if e is event} for event in FenceEvent
}
_ON_SIGNAL = _NEXT[FenceEvent.SIGNAL]
_ON_FAIL = _NEXT[FenceEvent.FAIL]
# Enum members read through their class cost a descriptor call each (Python 3.11); the hot
# paths read these module constants instead.
_ACTIVE = FenceState.ACTIVE
_SUCCESS = ErrorStatus.NONE

#: Called with the fence core once it has left ACTIVE. Must not raise (see ``FenceCore``).
Listener = Callable[["FenceCore"], None]


class FenceCore:
    """One fence's state, outcome and listeners, guarded by a lock.

    ``status`` is None while ACTIVE, ``ErrorStatus.NONE`` once SIGNALED and the failing status
    once in ERROR; ``message`` says why a fence failed ("" otherwise). After the transition the
    three fields never change again, so reading them needs no lock.

    Listeners must not raise: one that does is a bug in its owner. The core still calls every
    other listener, then raises ``InternalError`` chained to the first exception, in the thread
    that made the transition.
    """

    __slots__ = ("_listeners", "_lock", "message", "state", "status")

    # Handles only need to be unique per fence; one shared counter is simpler and
    # ``next()`` on itertools.count is atomic under the GIL.
    _handles = itertools.count(1)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state: FenceState = _ACTIVE
        self.status: ErrorStatus | None = None
        self.message: str = ""
        # A dict so a cancelled waiter can deregister in O(1); insertion order = call order.
        self._listeners: dict[int, Listener] | None = {}

    # -- queries ------------------------------------------------------------------------------

    def done(self) -> bool:
        """True once the fence has left ACTIVE (signaled or failed)."""
        return self.state is not _ACTIVE

    # -- strict transitions ---------------------------------------------------------------------

    def signal(self) -> None:
        """ACTIVE -> SIGNALED. Raises ``InternalError`` if the fence is already resolved."""
        if not self._apply(_ON_SIGNAL, _SUCCESS, ""):
            raise self._illegal(FenceEvent.SIGNAL)

    def fail(self, status: ErrorStatus, message: str = "") -> None:
        """ACTIVE -> ERROR with ``status`` (not NONE). Raises ``InternalError`` if already resolved."""
        if not self._apply(_ON_FAIL, _check_failure(status), message):
            raise self._illegal(FenceEvent.FAIL)

    # -- idempotent transitions -----------------------------------------------------------------

    def try_signal(self) -> bool:
        """Signal if still ACTIVE. Returns True if this call resolved the fence, False if it was done."""
        return self._apply(_ON_SIGNAL, _SUCCESS, "")

    def try_fail(self, status: ErrorStatus, message: str = "") -> bool:
        """Fail with ``status`` if still ACTIVE. Returns True if this call resolved the fence.

        A status of NONE is still a bug (``InternalError``), resolved fence or not.
        """
        return self._apply(_ON_FAIL, _check_failure(status), message)

    # -- listeners ------------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> int | None:
        """Call ``listener(self)`` once the fence leaves ACTIVE.

        Returns a handle for ``remove_listener``, or None when the fence was already resolved,
        in which case ``listener`` has been called before this returns.
        """
        with self._lock:
            listeners = self._listeners
            if listeners is not None:
                handle = next(self._handles)
                listeners[handle] = listener
                return handle
        _call_all(self, (listener,))
        return None

    def remove_listener(self, handle: int | None) -> bool:
        """Forget a listener. True if it was removed before being called; False otherwise (or for None)."""
        if handle is None:
            return False
        with self._lock:
            listeners = self._listeners
            return listeners is not None and listeners.pop(handle, None) is not None

    # -- internals ------------------------------------------------------------------------------

    def _apply(self, next_states: dict[FenceState, FenceState], status: ErrorStatus, message: str) -> bool:
        with self._lock:
            target = next_states.get(self.state)
            if target is None:
                return False
            # Outcome fields first, state last: a lock-free reader that sees the new state also
            # sees its status (assignments are not reordered under the GIL).
            self.status = status
            self.message = message
            self.state = target
            listeners, self._listeners = self._listeners, None
        if listeners:  # nobody else can reach the dict now: iterate it without a copy
            _call_all(self, listeners.values())
        return True

    def _illegal(self, event: FenceEvent) -> InternalError:
        outcome = self.state.name if self.status is None else f"{self.state.name} ({self.status.name})"
        return InternalError(f"illegal fence transition: {event.name} on a fence already {outcome}")

    def __repr__(self) -> str:
        if self.state is FenceState.ERROR:
            assert self.status is not None
            return f"<FenceCore ERROR {self.status.name}: {self.message!r}>"
        return f"<FenceCore {self.state.name}>"


def _check_failure(status: ErrorStatus) -> ErrorStatus:
    status = ErrorStatus(status)
    if status is _SUCCESS:
        raise InternalError("a fence cannot fail with ErrorStatus.NONE (that is success: signal it)")
    return status


def _call_all(core: FenceCore, listeners: Iterable[Listener]) -> None:
    first: Exception | None = None
    for listener in listeners:
        try:
            listener(core)
        except Exception as exc:  # a buggy listener must not starve the others
            if first is None:
                first = exc
    if first is not None:
        raise InternalError(f"a fence listener raised {first!r}") from first
