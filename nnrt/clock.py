"""Time, injected. The only module of nnrt that reads the system clock.

Deadlines are absolute times in seconds on a ``Clock``. Real runs use ``MonotonicClock``;
tests and the QoS simulator use ``VirtualClock``, which moves only when told to, so timing
behaviour is deterministic and needs no sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "MonotonicClock", "VirtualClock", "deadline_after", "default_clock", "set_default_clock"]


@runtime_checkable
class Clock(Protocol):
    """A source of the current time in seconds (monotonic, arbitrary origin)."""

    def now(self) -> float: ...


class MonotonicClock:
    """``time.monotonic()``: the clock of real runs."""

    __slots__ = ()
    now = staticmethod(time.monotonic)

    def __repr__(self) -> str:
        return "MonotonicClock()"


class VirtualClock:
    """A clock that stands still until ``advance`` or ``set`` moves it."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        self._now += seconds
        return self._now

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError(f"a clock does not go back (from {self._now} to {when})")
        self._now = float(when)

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


def perf_ns() -> int:
    """Nanoseconds for measuring durations (timing reports, cost calibration)."""
    return time.perf_counter_ns()


def deadline_after(seconds: float, clock: Clock | None = None) -> float:
    """The absolute deadline ``seconds`` from now on ``clock`` (the default clock)."""
    return (clock or _default).now() + seconds
