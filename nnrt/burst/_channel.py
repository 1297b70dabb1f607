"""``Channel``: a bounded single-loop queue with a polling receiver, the FMQ of a burst.

NNAPI's bursts talk over fast message queues: the writer never blocks on the reader, a full
queue is the writer's problem, and the reader, after each message, spins for a *polling
window* before it blocks on the queue's event flag (a futex), because waking a blocked thread
costs more than a few microseconds of spinning when messages come back to back.

Here both ends live on one event loop (asyncio, uvloop or trio: ``nnrt._aio``). ``send_nowait`` appends or raises ``ChannelFull``;
``wait_for_space`` lets a writer wait for room (writers are woken in arrival order).
``receive(poll_window)`` returns a queued item at once; otherwise it polls, yielding to the
loop (``asyncio.sleep(0)``, trio's ``checkpoint``) until the window has elapsed on the channel's clock, and only
then parks on a future. Whether the window pays for itself on a single loop is measured by
``benchmarks/burst.py``; the counters ``poll_hits`` and ``blocking_waits`` show what happened.
``close()`` wakes every waiter with ``ChannelClosed``; items still queued can be ``drain``-ed.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from nnrt._aio import Future, checkpoint, create_future
from nnrt.clock import perf_ns

__all__ = ["Channel", "ChannelClosed", "ChannelFull"]

T = TypeVar("T")


class ChannelClosed(Exception):
    """The channel was closed (raised to waiting readers and writers)."""


class ChannelFull(Exception):
    """``send_nowait`` on a channel holding ``capacity`` items."""


def _monotonic_s() -> float:
    return perf_ns() / 1e9


class Channel(Generic[T]):
    """A bounded FIFO between tasks of one event loop, with a polling reader."""

    __slots__ = ("_clock", "_closed", "_items", "_reader", "_writers", "blocking_waits", "capacity", "max_depth", "poll_hits")

    def __init__(self, capacity: int, *, clock: Callable[[], float] = _monotonic_s) -> None:
        if capacity < 1:
            raise ValueError(f"a channel holds at least one item, not {capacity}")
        self.capacity = capacity
        self._clock = clock
        self._items: deque[T] = deque()
        self._reader: Future[None] | None = None
        self._writers: deque[Future[None]] = deque()
        self._closed = False
        #: Receives satisfied while polling (the item arrived within the window).
        self.poll_hits = 0
        #: Receives that had to park on a future.
        self.blocking_waits = 0
        #: The most items ever queued at once.
        self.max_depth = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def full(self) -> bool:
        return len(self._items) >= self.capacity

    # -- writer side ---------------------------------------------------------------------------

    def send_nowait(self, item: T) -> None:
        """Queue ``item``; ``ChannelFull`` when at capacity, ``ChannelClosed`` when closed."""
        if self._closed:
            raise ChannelClosed("send on a closed channel")
        items = self._items
        if len(items) >= self.capacity:
            raise ChannelFull(f"the channel holds {self.capacity} items")
        items.append(item)
        if len(items) > self.max_depth:
            self.max_depth = len(items)
        reader = self._reader
        if reader is not None:
            self._reader = None
            if not reader.done():
                reader.set_result(None)

    async def wait_for_space(self) -> None:
        """Return once ``send_nowait`` would not raise ``ChannelFull`` (FIFO among writers)."""
        while True:
            if self._closed:
                raise ChannelClosed("the channel was closed")
            if len(self._items) < self.capacity and not self._writers:
                return
            waiter = create_future()
            self._writers.append(waiter)
            try:
                await waiter
            except BaseException:
                self._forget(waiter)
                # A wake-up meant for us must not be lost with us: pass it on.
                if len(self._items) < self.capacity:
                    self._wake_writer()
                raise
            self._forget(waiter)
            if self._closed:
                raise ChannelClosed("the channel was closed")
            if len(self._items) < self.capacity:
                return

    def _forget(self, waiter: Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._writers.remove(waiter)

    def _wake_writer(self) -> None:
        for waiter in self._writers:
            if not waiter.done():
                waiter.set_result(None)
                return

    # -- reader side (one reader) --------------------------------------------------------------

    def receive_nowait(self) -> T | None:
        """The next item, or ``None`` when the channel is empty."""
        if not self._items:
            return None
        item = self._items.popleft()
        if self._writers:
            self._wake_writer()
        return item

    async def receive(self, poll_window: float = 0.0) -> T:
        """The next item: at once if queued, else after polling ``poll_window`` seconds, else parked."""
        items = self._items
        if not items:
            if self._closed:
                raise ChannelClosed("receive on a closed channel")
            if poll_window > 0:
                clock = self._clock
                end = clock() + poll_window
                while not items and not self._closed:
                    await checkpoint()
                    if items:
                        self.poll_hits += 1
                        break
                    if clock() >= end:
                        break
            while not items:
                if self._closed:
                    raise ChannelClosed("receive on a closed channel")
                self.blocking_waits += 1
                reader = self._reader = create_future()
                try:
                    await reader
                finally:
                    self._reader = None
        item = items.popleft()
        if self._writers:
            self._wake_writer()
        return item

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new items and wake every waiting reader and writer with ``ChannelClosed``."""
        self._closed = True
        waiters = [*self._writers]
        if self._reader is not None:
            waiters.append(self._reader)
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def drain(self) -> list[T]:
        """Remove and return every queued item."""
        items = list(self._items)
        self._items.clear()
        return items
