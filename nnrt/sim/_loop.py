"""Virtual time for real asyncio code: an event loop that jumps instead of sleeping.

``VirtualTimeLoop`` is an ordinary ``asyncio.SelectorEventLoop`` whose ``time()`` is a number
it keeps itself, and whose selector never blocks: when the loop would wait ``timeout``
seconds for the next timer (nothing is ready, nothing is due), the selector moves virtual
time to that timer instead ("autojump", as in aiotools' ``VirtualClock`` and trio's
``MockClock(autojump_threshold=0)``). Everything that sleeps, arms a timer or computes a
deadline on this loop (``asyncio.sleep``, ``loop.call_at``, the scheduler's expiry timer,
the interpreter's deadline checks through ``LoopClock``) then runs in virtual time, in the
same order every run: a simulation is as deterministic as the code it runs.

Guards: a loop whose tasks all wait with no timer armed would wait forever, so it raises
``SimulationError`` (a stall); so does virtual time passing ``limit_s``. A simulation does
no I/O, so real readiness is only polled (with a zero timeout) for the loop's own wake-up
pipe, and only every few thousand iterations. ``on_tick`` (the progress bar) is called every few thousand loop iterations.

``skip_to(t)`` is the fast path of a sleep: a task that is about to sleep until ``t`` while
nothing else is ready and no timer is due before ``t`` moves the clock itself and carries
on; the outcome is the same as sleeping (nothing could have run meanwhile), without a timer
and a loop iteration. It reads the loop's ready queue and timer heap (``_ready``,
``_scheduled``: asyncio internals, stable since 3.4).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable
from typing import Any

from nnrt.errors import GeneralFailureError

__all__ = ["LoopClock", "SimulationError", "VirtualTimeLoop"]

_TICK_EVERY = 4096


class SimulationError(GeneralFailureError):
    """The simulation could not finish: it stalled, or ran past its virtual-time limit."""


class _AutojumpSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self.loop
        assert loop is not None
        loop.iterations += 1
        events: list[tuple[selectors.SelectorKey, int]] = []
        if loop.iterations % _TICK_EVERY == 0:
            # Drain the wake-up pipe now and then (callbacks from threads are queued anyway).
            events = super().select(0)
            if loop.on_tick is not None:
                loop.on_tick(loop.vtime)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise SimulationError(f"the simulation stalled at t={loop.vtime:.6f} s: every task waits and no timer is armed")
        loop._jump(timeout)
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on virtual time (see the module docstring)."""

    def __init__(self, *, limit_s: float = float("inf"), on_tick: Callable[[float], None] | None = None) -> None:
        selector = _AutojumpSelector()
        super().__init__(selector)
        selector.loop = self
        self.vtime = 0.0
        self.limit_s = limit_s
        self.on_tick = on_tick
        self.iterations = 0

    def time(self) -> float:
        return self.vtime

    def skip_to(self, target: float) -> bool:
        """Move virtual time to ``target`` now if nothing could happen before it: no callback is
        ready and no timer is due until after ``target``. The caller then carries on as if it
        had slept until ``target``, saving a timer and a loop iteration. False: sleep instead."""
        if self._ready or target > self.limit_s:  # type: ignore[attr-defined]
            return False
        scheduled: list[Any] = self._scheduled  # type: ignore[attr-defined]
        if scheduled and scheduled[0].when() <= target:
            return False
        if target > self.vtime:
            self.vtime = target
        return True

    def _jump(self, timeout: float) -> None:
        target = self.vtime + timeout
        scheduled: list[Any] = self._scheduled  # type: ignore[attr-defined]
        if scheduled:
            # Land exactly on the timer (vtime + (when - vtime) may fall one ulp short of it).
            when = scheduled[0].when()
            if when <= target + 1e-9:
                target = max(target, when)
        if target > self.limit_s:
            raise SimulationError(
                f"the simulation passed its virtual-time limit max_time_s = {self.limit_s:g} s (raise it, or check "
                "for a workload that never ends)"
            )
        self.vtime = target


class LoopClock:
    """An nnrt ``Clock`` reading the running loop's time: virtual time on a ``VirtualTimeLoop``.

    ``origin`` is subtracted (a real-clock run counts from its own start; see ``set_origin``)."""

    __slots__ = ("_loop", "now", "origin")

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: float = 0.0) -> None:
        self._loop = loop
        self.origin = 0.0
        #: The current time (the loop's own ``time``, bound: the clock is read very often).
        self.now: Callable[[], float] = loop.time
        self.set_origin(origin)

    @property
    def precise_timers(self) -> bool:
        """True on a virtual-time loop, where timers land exactly (no early wake-up needed)."""
        return isinstance(self._loop, VirtualTimeLoop)

    def set_origin(self, origin: float) -> None:
        """Count from ``origin`` on the loop's time from now on (0: the loop's time as is)."""
        self.origin = origin
        if origin:
            time = self._loop.time
            self.now = lambda: time() - origin
        else:
            self.now = self._loop.time

    def skip_to(self, target: float) -> bool:
        """``VirtualTimeLoop.skip_to`` on a virtual loop; always False on a real one."""
        loop = self._loop
        return isinstance(loop, VirtualTimeLoop) and loop.skip_to(target)

    def __repr__(self) -> str:
        return f"LoopClock(now={self.now():g})"
