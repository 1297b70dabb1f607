"""The consumer role of a service's result ring, on the app side (``_client.ServiceProcess``).

One consumer at a time reads the result ring and completes every waiter whose result it finds
(the rules are in ``_client``'s docstring): an event loop awaiting an execution (which may
first poll for the reply, ``_poll.ReplyPoller``, then watches the doorbell with
``loop.add_reader``), a thread in ``execute_sync`` (polls, then blocks on the doorbell in
bounded waits), or the reader thread as the consumer of last resort. ``RingConsumer`` holds
how the role is claimed, handed over and given back, how long to poll for a reply, and how
the ring is drained; ``ServiceProcess`` inherits it and owns the process, the socket and the
requests. Split from ``_client`` to keep both modules readable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from nnrt._log import get_logger
from nnrt.burst._packet import MalformedPacketError, packet_id
from nnrt.errors import GeneralFailureError, NnrtError
from nnrt.process._fmq import Channel
from nnrt.process._forms import Expect, read_result
from nnrt.process._poll import ReplyPoller
from nnrt.process._wire import error_from

__all__ = ["RingConsumer"]

_log = get_logger("driver")

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]"] | concurrent.futures.Future[Any]

#: The services of this process with rings (whose outstanding requests decide who polls).
_LIVE: weakref.WeakSet[RingConsumer] = weakref.WeakSet()


def _outstanding() -> int:
    """Executions outstanding on the rings of every service of this process."""
    return sum([len(s._ring_ids) for s in list(_LIVE)])


def _busy(loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether ``loop`` has callbacks ready to run now other than its consumers' ``_doze``, such
    as tasks about to send more requests (asyncio's own loops tell; others, uvloop, do not: False)."""
    ready = getattr(loop, "_ready", None)
    if not ready:
        return False
    return len(ready) > sum(s._dozing for s in list(_LIVE) if s._consumer is loop)


def _resolve(fut: asyncio.Future[Any], ok: bool, payload: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(payload)
    else:
        fut.set_exception(payload if isinstance(payload, NnrtError) else error_from(payload))


class RingConsumer:
    """The result ring's consumer role (see the module docstring); a mixin of ``ServiceProcess``,
    which sets these attributes."""

    pid: int
    channel: Channel | None
    poller: ReplyPoller
    _ring_ids: dict[int, Expect]
    _pending: dict[int, _Waiter]
    _consumer: Any
    _attached: bool
    _lock: threading.Lock
    _drain_lock: threading.Lock
    _last_drain: float
    _last_rx: float
    _dozing: bool = False  # a ``_doze`` of this consumer is scheduled on its loop

    def _claimable(self) -> bool:
        """Whether the consumer role is free: nobody holds it, or an event loop that no longer
        runs (a loop keeps the role, and its doorbell reader, between its executions)."""
        consumer = self._consumer
        return consumer is None or (isinstance(consumer, asyncio.AbstractEventLoop) and not consumer.is_running())

    def _claim(self, who: Any) -> None:
        """Take the consumer role (under the lock; ``_claimable()`` was True)."""
        old, attached = self._consumer, self._attached
        self._consumer, self._attached = who, False
        ch = self.channel
        if ch is None or ch.closed:
            return
        if attached:  # a loop that stopped running: its reader goes (no select runs on it)
            with contextlib.suppress(Exception):
                old.remove_reader(ch.res_fd)
        ch.results.set_sleeping(True)  # whatever the last consumer left: ring the new one

    def _reply_window(self, base: float, mine: bool, loop: asyncio.AbstractEventLoop | None = None
                      ) -> tuple[bool, float]:
        """Whether the service is awake now (it polls or runs: no doorbell needed), and how long
        the consumer (``mine``: this caller holds the role) polls for the reply to the request
        just sent (0: it sleeps on the doorbell at once). Decided before the doorbell rings:
        the request ring's *polling* word tells the service, which then polls for the next
        request (``_service``), and the result ring's *sleeping* word is cleared, so a service
        that answers while the app is still ringing (the ring is a slow system call on this VM)
        does not ring back: both sides awake, no doorbell rung either way.

        It polls only for the one execution outstanding on the rings of this process, and only
        when its loop has nothing else ready to run (``_busy``: a task about to send the next
        request would otherwise wait for this poll, and a burst of requests would go one by one):
        with more, the services need the cores (three processes on two cores: a polling app
        takes the core a service needs), and a result wakes it soon enough. The rest is ``_poll.ReplyPoller``'s:
        a request expected shortly (``base``: the model's recent time on the device), a window
        fitted to the expected wait, polling only while it pays."""
        ch = self.channel
        assert ch is not None
        requests = ch.requests
        awake = not requests.consumer_sleeping
        alone = mine and len(self._ring_ids) == 1 and (len(_LIVE) == 1 or _outstanding() == 1) and not _busy(loop)
        window = self.poller.should(alone, awake, base) if alone else 0.0
        if window:
            requests.set_producer_polling(True)
            ch.results.set_sleeping(False)
        elif requests.producer_polling:  # (a store only when it changes: the service reads that line)
            requests.set_producer_polling(False)
        return awake, window

    def _spin(self, done: Callable[[], bool], window: float, awake: bool, base: float, since: float) -> None:
        """The consumer polls the result ring until ``done`` or ``window`` seconds after the request
        was sent (``since``; the service need not ring), and learns how long it took."""
        ch = self.channel
        assert ch is not None
        ring = ch.results
        ring.set_sleeping(False)

        def ready() -> bool:
            if ring.readable():
                self._drain()
            return done()

        self.poller.wait(ready, window, awake, base, since)
        if ring.set_sleeping(True):
            self._drain()

    def _settle(self, loop: asyncio.AbstractEventLoop) -> None:
        """The consumer loop watches the doorbell (and keeps watching it between executions:
        adding and removing the reader each time costs two system calls)."""
        if self._attached and self._consumer is loop:  # the usual case, without the lock
            return
        ch = self.channel
        with self._lock:
            if self._consumer is loop and ch is not None and not ch.closed and not self._attached:
                self._attached = True
                loop.add_reader(ch.res_fd, self._on_doorbell, loop)

    def _siblings(self, loop: asyncio.AbstractEventLoop) -> list[RingConsumer]:
        """This service and every other whose result ring ``loop`` consumes (open ones)."""
        if len(_LIVE) == 1:
            return [self]
        return [self, *(s for s in list(_LIVE) if s is not self and s._consumer is loop
                        and s.channel is not None and not s.channel.closed)]

    def _on_doorbell(self, loop: asyncio.AbstractEventLoop) -> None:
        """A service rang: this loop is awake, so it takes what every service it consumes has
        answered (one wake-up for all of them), and stays awake until its loop has run what
        was ready (``_doze``): no service need ring meanwhile (a ring would wake this process
        while it runs, and on a busy core preempt the service)."""
        ch = self.channel
        assert ch is not None
        if ch.closed:
            return
        ch.result_bell.clear()
        for s in self._siblings(loop):
            s.channel.results.set_sleeping(False)  # type: ignore[union-attr]
            s._drain()
        if not self._dozing:
            self._dozing = True
            loop.call_soon(self._doze, loop)

    def _doze(self, loop: asyncio.AbstractEventLoop) -> None:
        """Back to sleeping (the loop is about to block, or runs after what was ready): each ring
        it consumes says so, then is looked at once more (``_fmq``'s handshake); it stays awake
        if results came. (Staying awake longer, while the loop has callbacks ready, kept the
        loop from ever looking idle, so a lone request was never polled for.)"""
        self._dozing = False
        if self._consumer is not loop:
            return
        came = False
        for s in self._siblings(loop):
            ring = s.channel.results  # type: ignore[union-attr]
            if ring.set_sleeping(True):
                ring.set_sleeping(False)
                s._drain()
                came = True
        if came:
            self._dozing = True
            loop.call_soon(self._doze, loop)

    def _release_role(self, me: int) -> None:
        """A thread gives the consumer role back (if it holds it); a loop awaiting a ring
        result takes it."""
        ch = self.channel
        with self._lock:
            if self._consumer != me:
                return
            self._consumer = None
            handoff = [w for r, w in self._pending.items() if r in self._ring_ids and type(w) is tuple]
        if ch is not None:
            ch.results.set_sleeping(True)
        if handoff:
            with contextlib.suppress(RuntimeError):
                handoff[0][0].call_soon_threadsafe(self._adopt, handoff[0][0])

    def _consume(self, ch: Channel, fut: concurrent.futures.Future[Any], window: float, awake: bool, base: float,
                 since: float) -> None:
        """Drain the result ring until ``fut`` is done: poll for ``window`` (``_reply_window``),
        then block on the doorbell (bounded waits: a death or a closed channel ends it)."""
        if window:
            self._spin(fut.done, window, awake, base, since)
        while not fut.done() and not ch.closed:
            if not ch.results.set_sleeping(True):
                ch.result_bell.wait(0.05)
                ch.result_bell.clear()
            ch.results.set_sleeping(False)
            self._drain()
        ch.results.set_sleeping(True)

    def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._consumer is not loop and self._claimable():
                self._claim(loop)
        self._drain()
        self._settle(loop)

    def _take(self, rid: int) -> _Waiter | None:
        with self._lock:
            self._ring_ids.pop(rid, None)
            return self._pending.pop(rid, None)

    def _drain(self) -> None:
        """Read every result on the result ring and complete its waiter (one drainer at a time;
        a caller that finds another draining leaves it to that one, which looks again after it
        let go, so a result that came meanwhile is not left behind)."""
        ch = self.channel
        while ch is not None and self._drain_lock.acquire(blocking=False):
            self._drain_once(ch)
            if ch.closed or not ch.results.readable():
                return

    def _drain_once(self, ch: Channel) -> None:
        done: list[tuple[int, bool, Any]] = []
        try:
            if ch.closed:
                return
            ring = ch.results
            while True:
                try:
                    pkt = ring.peek()
                except ValueError as err:
                    ring.reset()
                    done += self._lose_ring(f"the result ring's framing was lost ({err})")
                    break
                if pkt is None:
                    break
                rid = packet_id(pkt)
                try:
                    expect = self._ring_ids.get(rid)  # one dict read: atomic, no lock needed
                    if expect is not None:
                        done.append(read_result(pkt, expect))
                except MalformedPacketError as err:
                    done.append((rid, False, err))
                finally:
                    pkt.release()
                    ring.advance()
            self._last_drain = time.monotonic()
            if done:
                self._last_rx = self._last_drain
        finally:
            self._drain_lock.release()
        here = asyncio._get_running_loop()
        for rid, ok, payload in done:
            waiter = self._take(rid)
            if waiter is None:
                continue
            if type(waiter) is tuple and waiter[0] is here:
                _resolve(waiter[1], ok, payload)
            else:
                self._complete(waiter, ok, payload)

    def _lose_ring(self, reason: str) -> list[tuple[int, bool, Any]]:
        """Every execution outstanding on the rings fails (their packets are lost)."""
        with self._lock:
            ids = list(self._ring_ids)
        _log.warning("driver.ring_lost", pid=self.pid, reason=reason, failed=len(ids))
        return [(rid, False, GeneralFailureError(f"{reason}; the execution was lost")) for rid in ids]

    @staticmethod
    def _complete(waiter: _Waiter, ok: bool, payload: Any) -> None:
        if isinstance(waiter, concurrent.futures.Future):
            if not waiter.done():
                waiter.set_result((ok, payload))
            return
        loop, fut = waiter
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, fut, ok, payload)
