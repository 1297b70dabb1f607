"""Time, injected. The only module of nnrt that reads the system clock.

Deadlines are absolute times in seconds on a ``Clock``. Real runs use ``MonotonicClock``;
tests and the QoS simulator use ``VirtualClock``, which moves only when told to, so timing
behaviour is deterministic and needs no sleeping.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from nnrt.errors import InvalidArgumentError

__all__ = [
    "Cancellable",
    "Clock",
    "MonotonicClock",
    "TimerHandle",
    "VirtualClock",
    "call_at",
    "check_deadline",
    "deadline_after",
    "default_clock",
    "set_default_clock",
]


@runtime_checkable
class Clock(Protocol):
    """A source of the current time in seconds (monotonic, arbitrary origin)."""

    def now(self) -> float: ...


class Cancellable(Protocol):
    """A timer that can be called off (``TimerHandle``, ``asyncio.TimerHandle``)."""

    def cancel(self) -> None: ...


class MonotonicClock:
    """``time.monotonic()``: the clock of real runs."""

    __slots__ = ()
    now = staticmethod(time.monotonic)

    def __repr__(self) -> str:
        return "MonotonicClock()"


class TimerHandle:
    """A callback armed on a clock; ``cancel()`` disarms it."""

    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: TimerHandle) -> bool:
        return self.when < other.when


class VirtualClock:
    """A clock that stands still until ``advance`` or ``set`` moves it.

    ``call_at(when, callback)`` arms a timer on virtual time: moving the clock past ``when``
    runs the callback (in time order, on the thread that moves the clock).
    """

    __slots__ = ("_now", "_timers")

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._timers: list[TimerHandle] = []

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], object]) -> TimerHandle:
        handle = TimerHandle(float(when), callback)
        heapq.heappush(self._timers, handle)
        return handle

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        self._move(self._now + seconds)
        return self._now

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError(f"a clock does not go back (from {self._now} to {when})")
        self._move(float(when))

    def next_timer(self) -> float | None:
        """When the earliest armed timer fires (None: none armed)."""
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0].when if self._timers else None

    def _move(self, target: float) -> None:
        while (when := self.next_timer()) is not None and when <= target:
            handle = heapq.heappop(self._timers)
            self._now = max(self._now, handle.when)
            handle.callback()
        self._now = target

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now})"


_default: Clock = MonotonicClock()


def default_clock() -> Clock:
    """The clock devices use unless given another."""
    return _default


def set_default_clock(clock: Clock) -> None:
    """Replace the default clock (for tests and simulations; affects devices created after)."""
    global _default
    _default = clock


def call_at(clock: Clock, when: float, callback: Callable[[], object]) -> Cancellable:
    """Run ``callback`` once ``clock`` reads ``when``: a ``VirtualClock``'s own timer, else a
    timer on the running loop (asyncio or trio), whose wait is in whole milliseconds, so it
    may fire up to 1 ms late."""
    if isinstance(clock, VirtualClock):
        return clock.call_at(when, callback)
    from nnrt._aio import call_later

    return call_later(max(0.0, when - clock.now()), callback)


def perf_ns() -> int:
    """Nanoseconds for measuring durations (timing reports, cost calibration)."""
    return time.perf_counter_ns()


def deadline_after(seconds: float, clock: Clock | None = None) -> float:
    """The absolute deadline ``seconds`` from now on ``clock`` (the default clock)."""
    return (clock or _default).now() + seconds


def check_deadline(deadline: object, where: str) -> float:
    """A deadline argument (absolute seconds on the device clock: a real number, not NaN;
    +inf is "never") as a float; INVALID_ARGUMENT naming ``where`` otherwise."""
    if isinstance(deadline, (int, float)) and not isinstance(deadline, bool) and deadline == deadline:
        return float(deadline)
    raise InvalidArgumentError(f"{where}: deadline must be an absolute time in seconds, got {deadline!r:.60}")
