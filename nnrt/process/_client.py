"""The app half of one service process: start it, talk to it, notice when it dies or wedges.

``ServiceProcess`` starts ``python -m nnrt.process._service`` with ``subprocess.Popen`` (a
fresh interpreter through fork+exec: safe in a process that already runs threads and an event
loop, unlike a bare ``fork``; and, unlike multiprocessing's ``spawn``, it does not re-import
the app's ``__main__``), hands it one end of a ``socketpair`` and keeps the other.

Replies are read by one reader thread, so a reply completes the caller's wait whatever it
is: an asyncio future (``call``: the event loop never blocks) or a thread waiting in
``call_sync`` (``execute_sync``, ``supported_operations``). The same thread is the death and
hang detector:

* **death**: the service's end of the socket closes when its process exits, however it
  exits (``kill -9`` included); the reader sees EOF, marks the service dead and fails every
  request in flight or queued in the service with DEAD_OBJECT; later requests fail with
  DEAD_OBJECT at once;
* **hang (watchdog)**: while requests are outstanding and nothing has arrived for
  ``hang_timeout`` seconds, it sends a ``ping``; the service's event loop answers it even
  while kernels run on its worker threads, so a second ``hang_timeout`` without any frame
  means the service is wedged: it is killed, and the death path above fails the requests with
  DEAD_OBJECT (the message says it was wedged).

**The rings.** Executions whose outputs come back by value do not take the socket: they
travel as burst packets (``nnrt.process._transport``) on the connection's shared-memory rings
(``nnrt.process._fmq``); ``_driver.RemoteDriver`` decides which path a request takes.
Any thread may produce requests (one at a time, under the lock). One *consumer* at a time
reads the result ring, and completes every waiter whose result it finds:

* an event loop awaiting an execution takes the role; when its request is the only one
  outstanding in the process it first polls the result ring while that pays
  (``nnrt.process._poll``: the service answers a cheap request in tens of microseconds: the
  coroutine then never sleeps), then watches the doorbell with ``loop.add_reader`` (no
  thread hop: the callback drains the ring and resolves the futures of its own loop
  directly); it keeps the role
  between executions until it stops running (then anyone may take it);
* a thread in ``execute_sync`` takes the role when it is free, polls, then blocks on the
  doorbell (bounded waits, so it sees a death or a handed-back role promptly); called in the
  consumer loop's own thread (blocking it), it drains the ring itself;
* the reader thread is the consumer of last resort: it drains a ring nobody drained for
  ``RESCUE_S`` (a consumer's loop that stopped running, a lost wake-up).

A request that does not fit in the request ring now (full, or larger than half the ring) and
a request whose values cannot be packed take the socket instead (NNAPI's burst client falls
back to ``IPreparedModel::execute`` the same way); so does a result that does not fit in the
result ring (the service decides). A result ring whose framing is lost fails every execution
outstanding on the rings with GENERAL_FAILURE (the service reports a lost request ring the same
way, over the socket).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import itertools
import os
import pickle
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import nnrt
from nnrt._log import get_logger
from nnrt.errors import DeadObjectError, NnrtError
from nnrt.process._consumer import _LIVE, RingConsumer, _outstanding, _Waiter
from nnrt.process._fmq import Channel, Ring
from nnrt.process._forms import Expect
from nnrt.process._poll import ReplyPoller
from nnrt.process._wire import encode_frame, error_from, recv_frame, send_frame, write_frame

__all__ = ["ServiceProcess"]

_log = get_logger("driver")

#: Seconds after which the reader thread drains a result ring nobody else drained.
RESCUE_S = 0.05
#: A request id the service uses to say it lost the request ring's framing.
RING_LOST = -1


class ServiceProcess(RingConsumer):
    """One running service (see the module docstring). ``on_death(reason)`` is called once,
    from the reader thread, when the service dies (not when it is closed)."""

    def __init__(self, kind: str, options: dict[str, Any], *, hang_timeout: float, start_timeout: float,
                 on_death: Callable[[str], None] | None = None, ring_bytes: int = 0, poll_us: float = 0.0) -> None:
        self.hang_timeout = hang_timeout
        self.poller = ReplyPoller(poll_us * 1e-6)  # whether and how long the consumer polls for a reply
        self._ring_ids: dict[int, Expect] = {}  # request id -> what its result is read with, for executions on the rings
        self._consumer: Any = None  # who reads the result ring now: an event loop, a thread id, or None
        self._attached = False  # the consumer loop watches the doorbell with add_reader
        self._drain_lock = threading.Lock()
        self._last_drain = time.monotonic()
        #: Executions sent on the rings and over the socket; drains the reader thread had to do.
        self.ring_sent = self.socket_sent = self.rescues = 0
        self.bells_batched = 0  # doorbells rung once for several requests (``_ring_later``)
        self._bell_due: asyncio.AbstractEventLoop | None = None  # the loop a batched ring is due on
        self._on_death = on_death
        self._pending: dict[int, _Waiter] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._releases: collections.deque[tuple[str, int]] = collections.deque()
        self.dead_reason = ""
        self._closing = False
        self._last_rx = time.monotonic()
        self.channel = Channel.create(ring_bytes) if ring_bytes else None
        if self.channel is not None:
            self.channel.results.set_sleeping(True)  # no consumer polls yet: ring the doorbell
        ring = None if self.channel is None else (*self.channel.fds(), ring_bytes, poll_us)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(nnrt.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-m", "nnrt.process._service", str(theirs.fileno())],
                pass_fds=(theirs.fileno(), *(self.channel.fds() if self.channel else ())), env=env,
                stdin=subprocess.DEVNULL,
            )
        except OSError as err:
            mine.close()
            theirs.close()
            self._close_channel()
            raise DeadObjectError(f"cannot start the service process: {err}") from None
        finally:
            theirs.close()  # the child has its copy; ours would keep its end open after it died
        self._sock = mine
        self.pid = self._popen.pid
        try:
            send_frame(mine, (kind, options, ring))
            mine.settimeout(start_timeout)
            _, ok, payload = recv_frame(mine)
            mine.settimeout(None)
        except (OSError, EOFError, pickle.UnpicklingError) as err:
            self._reap(kill=True)
            mine.close()
            self._close_channel()
            raise DeadObjectError(f"the service process {self.pid} did not start: {err}") from None
        if not ok:
            self._reap(kill=True)
            mine.close()
            self._close_channel()
            raise error_from(payload)
        self.info: tuple[int, str, str, int, int] = payload
        if self.channel is not None:
            _LIVE.add(self)
        self._reader = threading.Thread(target=self._read, name=f"nnrt-service-{self.pid}", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return not self.dead_reason and not self._closing

    # -- requests ------------------------------------------------------------------------------

    def _submit(self, waiter: _Waiter, kind: str, args: tuple[Any, ...]) -> int:
        rid = next(self._ids)
        parts = encode_frame((kind, rid, *args))
        with self._lock:
            if self.dead_reason or self._closing:
                raise DeadObjectError(self._dead_message())
            self._pending[rid] = waiter
            if kind == "execute":
                self.socket_sent += 1
        try:
            with self._send_lock:
                write_frame(self._sock, parts)
        except OSError as err:
            with self._lock:
                self._pending.pop(rid, None)
                if not self.dead_reason and not self._closing:  # the reader will add the exit code
                    self.dead_reason = f"the service process {self.pid} is gone ({type(err).__name__} sending {kind})"
            raise DeadObjectError(self._dead_message()) from None
        if self._releases:
            self._flush_releases()
        return rid

    async def call(self, kind: str, *args: Any) -> Any:
        """Send a request and await its reply without blocking the event loop; a cancelled
        caller cancels the request in the service."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        rid = self._submit((loop, fut), kind, args)
        try:
            return await fut
        except asyncio.CancelledError:
            with self._lock:
                self._pending.pop(rid, None)
            self.notify("cancel", "", rid)
            raise

    def call_sync(self, kind: str, *args: Any) -> Any:
        """Send a request and block this thread until its reply."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._submit(fut, kind, args)
        ok, payload = fut.result()
        if not ok:
            raise payload if isinstance(payload, NnrtError) else error_from(payload)
        return payload

    # -- executions on the rings (module docstring) ----------------------------------------------

    def new_id(self) -> int:
        return next(self._ids)

    def _ring_submit(self, waiter: _Waiter, rid: int, write: Callable[[Ring], bool], expect: Expect,
                     loop: asyncio.AbstractEventLoop | None = None, *, defer_bell: bool = False) -> bool | None:
        """Put a request on the request ring (``write`` writes it, under the producer's lock)
        and ring the doorbell if the service sleeps; None (nothing sent) when it does not fit
        now. ``defer_bell``: the caller rings it (``_ring_now``; True is returned), after it
        said whether it polls for the reply, so that a service woken at once sees that. From
        an event loop with other requests outstanding, the doorbell is rung once for all the
        requests this pass of the loop makes (``_ring_later``): each ring of a sleeping
        service costs the app tens of microseconds (the kernel wakes it on the caller's time)."""
        ch = self.channel
        with self._lock:
            if self.dead_reason or self._closing:
                raise DeadObjectError(self._dead_message())
            if ch is None or ch.closed:
                return None
            self._pending[rid] = waiter
            self._ring_ids[rid] = expect
            try:
                written = write(ch.requests)  # under the lock: one producer at a time
            except BaseException:  # nothing was published: nobody will answer it
                del self._pending[rid], self._ring_ids[rid]
                raise
            if not written:
                del self._pending[rid], self._ring_ids[rid]
                return None
            self.ring_sent += 1
            later = loop is not None and len(self._ring_ids) > 1
            if later:  # (a ring due on another loop may never run: that loop may have closed)
                due, self._bell_due = self._bell_due is loop, loop
        if later and not due:
            loop.call_soon(self._ring_later)  # type: ignore[union-attr]
        elif not later and not defer_bell:
            self._ring_now()
        if self._releases:
            self._flush_releases()
        return defer_bell and not later

    def _ring_now(self) -> None:
        """Ring the request doorbell if the service sleeps (after ``_ring_submit`` said so)."""
        ch = self.channel
        if ch is not None and not ch.closed:
            ch.request_bell.ring(ch.requests)

    def _ring_later(self) -> None:
        """Ring the request doorbell for the requests a pass of the event loop made."""
        self._bell_due = None
        ch = self.channel
        if ch is not None and not ch.closed:
            self.bells_batched += 1
            ch.request_bell.ring(ch.requests)

    def ring_call(self, rid: int, write: Callable[[Ring], bool], expect: Expect,
                  base: float = 0.0) -> asyncio.Future[Any] | None:
        """Execute through the rings: the future of ``(outputs, device_ns)``, or None when the
        request did not fit (send it over the socket). ``base`` is the seconds the request is
        expected to take on the device (the model's recent time: ``_reply_window``). A plain
        function, not a coroutine: the caller awaits the future itself (one coroutine frame less
        per call), and on cancellation calls ``ring_cancelled``. Never blocks the loop beyond
        the polling window."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        ring = self._ring_submit((loop, fut), rid, write, expect, loop, defer_bell=True)
        if ring is None:
            return None
        since = time.perf_counter()
        if self._consumer is not loop:  # (the loop keeps the role: usually no lock needed here)
            with self._lock:
                if self._consumer is not loop and self._claimable():
                    self._claim(loop)
        mine = self._consumer is loop
        awake, window = self._reply_window(base, mine, loop)
        if ring:
            self._ring_now()
        if mine:
            if window and not hasattr(loop, "_ready"):  # a loop that does not say what is ready (uvloop)
                loop.call_soon(self._spin_soon, loop, fut, window, awake, base, since)
                return fut
            self._watch(loop, fut, window, awake, base, since)
        return fut

    def _spin_soon(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], window: float, awake: bool,
                   base: float, since: float) -> None:
        """``ring_call``'s poll on a loop that does not say whether other callbacks are ready:
        after those that were (tasks that send more requests in the same pass), and only if the
        request is still the one outstanding; otherwise it takes back what it announced."""
        ch = self.channel
        if ch is None or ch.closed:
            return
        if len(self._ring_ids) != 1 or not (len(_LIVE) == 1 or _outstanding() == 1):
            window = 0.0
            ch.requests.set_producer_polling(False)
            if ch.results.set_sleeping(True):
                self._drain()
        self._watch(loop, fut, window, awake, base, since)

    def _watch(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], window: float, awake: bool,
               base: float, since: float) -> None:
        """The consumer loop polls for the reply for ``window`` seconds, then watches the doorbell;
        not polling, it is awake until its loop has run what is ready (``_doze``): a result that
        comes meanwhile, such as while it writes the next requests, needs no doorbell."""
        if window:
            self._spin(fut.done, window, awake, base, since)
        elif not self._dozing and self.channel is not None:
            self.channel.results.set_sleeping(False)
            self._dozing = True
            loop.call_soon(self._doze, loop)
        if not fut.done():
            self._settle(loop)
            if self.channel is not None and self.channel.results.readable():
                self._drain()  # results that came before this consumer watched the doorbell

    def ring_cancelled(self, rid: int) -> None:
        """The caller of ``ring_call`` was cancelled: forget the request and cancel it in the service."""
        self._take(rid)
        self.notify("cancel", "", rid)

    def ring_call_sync(self, rid: int, write: Callable[[Ring], bool], expect: Expect,
                       base: float = 0.0) -> tuple[bool, Any]:
        """``ring_call`` for a thread that may block (``execute_sync``)."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        ring = self._ring_submit(fut, rid, write, expect, defer_bell=True)
        if ring is None:
            return False, None
        since = time.perf_counter()
        me = threading.get_ident()
        ch = self.channel
        assert ch is not None
        with self._lock:
            if self._consumer != me and self._claimable():
                self._claim(me)
            mine = self._consumer == me
        awake, window = self._reply_window(base, mine)
        if ring:
            self._ring_now()
        try:
            while not fut.done():
                with self._lock:
                    if self._consumer != me and self._claimable():
                        self._claim(me)
                    own_loop = self._consumer is not None and self._consumer is asyncio._get_running_loop()
                if own_loop:  # called from the consumer loop's own thread: it cannot drain while we block it
                    self._consume(ch, fut, 0.0, awake, base, since)
                    continue
                if self._consumer != me:
                    with contextlib.suppress(concurrent.futures.TimeoutError):
                        fut.result(timeout=0.01)  # another consumer drains; look at the role again soon
                    continue
                self._consume(ch, fut, window, awake, base, since)
        finally:
            self._release_role(me)
        ok, payload = fut.result()
        if not ok:
            raise payload if isinstance(payload, NnrtError) else error_from(payload)
        return True, payload

    def notify(self, kind: str, *args: Any) -> None:
        """Send a message that has no reply (release, cancel, test hooks); a dead service is ignored.
        Never call it from a finalizer (a garbage collection inside a send would deadlock):
        ``release_later`` is for those."""
        parts = encode_frame((kind, 0, *args))
        with contextlib.suppress(OSError), self._send_lock:
            write_frame(self._sock, parts)

    def release_later(self, app: str, handle: int) -> None:
        """Queue the release of a prepared model (from a finalizer: no lock, no I/O); the
        next request carries it."""
        self._releases.append((app, handle))

    def _flush_releases(self) -> None:
        while self._releases:
            try:
                app, handle = self._releases.popleft()
            except IndexError:
                return
            self.notify("release", app, handle)

    # -- the reader thread ------------------------------------------------------------------------

    def _read(self) -> None:
        sock = self._sock
        reason = ""
        ping_at = 0.0
        try:
            while True:
                if self.hang_timeout > 0 or self.channel is not None:
                    timeout = min(self.hang_timeout / 4 if self.hang_timeout > 0 else RESCUE_S, RESCUE_S)
                    ready = self._wait_readable(timeout if self.channel is not None else self.hang_timeout / 4)
                    if self._ring_ids and time.monotonic() - self._last_drain > RESCUE_S:
                        self.rescues += 1
                        self._drain()  # nobody drained the result ring for a while: the last resort
                    if not ready and self.hang_timeout <= 0:
                        continue
                    if not ready:
                        now = time.monotonic()
                        if not self._pending or now - self._last_rx < self.hang_timeout:
                            ping_at = 0.0
                            continue
                        if not ping_at:
                            ping_at = now
                            self.notify("ping", "")
                        elif now - ping_at > self.hang_timeout:
                            reason = (f"the service process {self.pid} was wedged (no answer for "
                                      f"{now - self._last_rx:.2f} s) and was killed")
                            self._popen.kill()
                            break
                        continue
                rid, ok, payload = recv_frame(sock)
                self._last_rx = time.monotonic()
                ping_at = 0.0
                if rid == RING_LOST:
                    for lost in self._lose_ring(str(payload)):
                        waiter = self._take(lost[0])
                        if waiter is not None:
                            self._complete(waiter, *lost[1:])
                    continue
                waiter = self._take(rid)
                if waiter is None:
                    continue
                self._complete(waiter, ok, payload)
        except (EOFError, OSError, pickle.UnpicklingError, ValueError) as err:
            if not reason:
                reason = f"the service process {self.pid} died ({type(err).__name__}: {err})"
        self._fail_all(reason)

    def _wait_readable(self, timeout: float) -> bool:
        r, _, _ = select.select([self._sock], [], [], timeout)
        return bool(r)

    def _fail_all(self, reason: str) -> None:
        _LIVE.discard(self)
        code = self._reap(kill=False)
        with self._lock:
            closing = self._closing and not self.dead_reason
            if not closing:
                self.dead_reason = f"{self.dead_reason or reason}; exit code {code}"
            pending, self._pending = self._pending, {}
            self._ring_ids.clear()
        if self.channel is not None:
            self.channel.wake_all()  # a consumer blocked on the doorbell looks again
        err_text = self._dead_message()
        for waiter in pending.values():
            self._complete(waiter, False, DeadObjectError(err_text))
        if not closing:
            _log.warning("driver.service_died", pid=self.pid, reason=self.dead_reason, failed=len(pending))
            if self._on_death is not None:
                self._on_death(self.dead_reason)

    def _dead_message(self) -> str:
        if self.dead_reason:
            return self.dead_reason
        return f"the service process {self.pid} was closed"

    # -- ending ------------------------------------------------------------------------------------

    def _reap(self, *, kill: bool, timeout: float = 2.0) -> int | None:
        if kill:
            with contextlib.suppress(ProcessLookupError):
                self._popen.kill()
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            return self._popen.wait()

    def kill(self) -> None:
        """SIGKILL the service (tests and the watchdog); the reader notices the death."""
        with contextlib.suppress(ProcessLookupError):
            self._popen.kill()

    def close(self) -> None:
        """Stop the service and wait for its process; requests still pending fail with DEAD_OBJECT."""
        with self._lock:
            self._closing = True
        _LIVE.discard(self)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._reader.ident != threading.get_ident():
            self._reader.join()
        self._reap(kill=False)
        self._sock.close()
        self._close_channel()

    def _close_channel(self) -> None:
        ch = self.channel
        if ch is None:
            return
        loop: Any
        with self._lock:
            loop, attached = self._consumer, self._attached
            self._consumer, self._attached = None, False
        if attached:  # the consumer loop stops watching the doorbell before it is closed
            here = asyncio._get_running_loop() is loop or not loop.is_running()
            with contextlib.suppress(Exception):
                if here:
                    loop.remove_reader(ch.res_fd)
                else:
                    loop.call_soon_threadsafe(loop.remove_reader, ch.res_fd)
        with self._drain_lock, self._lock:  # not while a drainer reads or a producer writes the rings
            ch.close()
