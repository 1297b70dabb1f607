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
from nnrt.process._wire import encode_frame, error_from, recv_frame, send_frame, write_frame

__all__ = ["ServiceProcess"]

_log = get_logger("driver")

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]"] | concurrent.futures.Future[Any]


def _resolve(fut: asyncio.Future[Any], ok: bool, payload: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(payload)
    else:
        fut.set_exception(payload if isinstance(payload, NnrtError) else error_from(payload))


class ServiceProcess:
    """One running service (see the module docstring). ``on_death(reason)`` is called once,
    from the reader thread, when the service dies (not when it is closed)."""

    def __init__(self, kind: str, options: dict[str, Any], *, hang_timeout: float, start_timeout: float,
                 on_death: Callable[[str], None] | None = None) -> None:
        self.hang_timeout = hang_timeout
        self._on_death = on_death
        self._pending: dict[int, _Waiter] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._releases: collections.deque[tuple[str, int]] = collections.deque()
        self.dead_reason = ""
        self._closing = False
        self._last_rx = time.monotonic()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(nnrt.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-m", "nnrt.process._service", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            )
        except OSError as err:
            mine.close()
            theirs.close()
            raise DeadObjectError(f"cannot start the service process: {err}") from None
        finally:
            theirs.close()  # the child has its copy; ours would keep its end open after it died
        self._sock = mine
        self.pid = self._popen.pid
        try:
            send_frame(mine, (kind, options))
            mine.settimeout(start_timeout)
            _, ok, payload = recv_frame(mine)
            mine.settimeout(None)
        except (OSError, EOFError, pickle.UnpicklingError) as err:
            self._reap(kill=True)
            mine.close()
            raise DeadObjectError(f"the service process {self.pid} did not start: {err}") from None
        if not ok:
            self._reap(kill=True)
            mine.close()
            raise error_from(payload)
        self.info: tuple[int, str, str, int, int] = payload
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
                if self.hang_timeout > 0:
                    ready = self._wait_readable(self.hang_timeout / 4)
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
                with self._lock:
                    waiter = self._pending.pop(rid, None)
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

    @staticmethod
    def _complete(waiter: _Waiter, ok: bool, payload: Any) -> None:
        if isinstance(waiter, concurrent.futures.Future):
            if not waiter.done():
                waiter.set_result((ok, payload))
            return
        loop, fut = waiter
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, fut, ok, payload)

    def _fail_all(self, reason: str) -> None:
        code = self._reap(kill=False)
        with self._lock:
            closing = self._closing and not self.dead_reason
            if not closing:
                self.dead_reason = f"{self.dead_reason or reason}; exit code {code}"
            pending, self._pending = self._pending, {}
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
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._reader.ident != threading.get_ident():
            self._reader.join()
        self._reap(kill=False)
        self._sock.close()
