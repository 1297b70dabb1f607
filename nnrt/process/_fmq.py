"""Fast message queues: single-producer single-consumer rings in shared memory (issue 18).

NNAPI's HIDL bursts travel over two FMQs (libfmq's synchronized flavour): one request queue
from the app to the driver, one result queue back. ``Channel`` is that pair for one
``ProcessDevice`` connection: one anonymous shared-memory file (``os.memfd_create``) holding
both rings, and one doorbell (an ``eventfd``) per ring. The service inherits the three file
descriptors when it starts (``pass_fds``). A ``memfd`` has no name in ``/dev/shm``: there is
nothing to unlink and nothing to leak; the kernel frees the memory when the last descriptor
and mapping close, which a dead process does by dying. So the rings can never outlive both
processes, whatever kills them.

**A ring** (``Ring``) is a control block and a power-of-two data area. The control block
holds, each on its own 64-byte cache line, the producer's *write position*, the consumer's
*read position* (monotonic 64-bit byte counts, as libfmq's; offset = position mod capacity)
and the consumer's *sleeping* word; beside the write position, the producer's *polling* word
(it polls for the answers to what it writes: the consumer may poll for its next packet,
``nnrt.process._poll``). A packet is an 8-byte length then its bytes, padded to 8;
a packet never wraps: when it does not fit before the end, the producer writes a *skip*
marker and starts it at offset 0 (so the consumer reads every packet as one contiguous view,
without a copy). A packet may be at most ``capacity // 2`` bytes, which guarantees that it
fits once the ring has drained; ``try_write`` answers False when there is no room now (the
caller decides: the app and the service send that message over the socket instead, never
wait on a wedged peer).

**Memory ordering.** The producer copies the packet, *then* stores the new write position;
the consumer loads the write position, *then* reads the packet, and stores the new read
position only after it is done with the bytes. Positions are stored and loaded as one
aligned 8-byte access (``memoryview.cast("Q")`` item access is one ``memcpy`` of 8 bytes,
compiled to one move), so they are never torn. On x86 (total store order) stores become
visible in program order and loads are not reordered with older loads, which is exactly the
publish/consume pairing above: the two stores of the producer cannot be seen out of order.
The one reordering x86 does allow, a load passing an older store, matters for the sleep
handshake (the consumer stores *sleeping* then loads the write position; the producer stores
the write position then loads *sleeping*: both could read stale values and the wake-up
would be lost). Both sides put a full fence between that store and that load:
``full_fence()`` takes and releases a private lock, a locked read-modify-write instruction,
which is a full barrier on x86. Weakly ordered CPUs (Arm, POWER) may make the write position
visible before the payload, and Python has no fence instruction: there ``STRONGLY_ORDERED``
is False and the rings run *signalled*: no polling window, the producer rings the doorbell
after every packet and the consumer reads the ring only after it has read the doorbell. An
``eventfd`` write and read take the same kernel lock, so the reader's loads come after the
writer's stores (release/acquire through the kernel).

**Waiting** (``Doorbell``): the consumer polls the ring for a window (while polling pays:
``nnrt.process._poll``), then sets *sleeping*,
fences, looks once more, and blocks on the doorbell (``select`` / the event loop's
``add_reader``). The producer rings the doorbell (one ``eventfd`` write) only when it sees
*sleeping* set. Measured with ``benchmarks/fmq.py`` (ping-pong of 16-byte packets between two
processes, load average ~5 on 2 cores): always an eventfd p50 18 us / p99 1.5 ms, 14 us CPU per
round trip on each side; always a pipe 45 us / 7.3 ms, 30 us; the sleeping flag with an eventfd
13.5 us / 65 us, 7.5 us (the best: chosen); with a 50 us poll window p50 3.2 us when both sides
had a core, but p99 3.8 ms and 27 us CPU under that load (hence polling only while it pays:
``nnrt.process._poll``).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import platform
import select
import threading
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["Channel", "Doorbell", "Ring", "STRONGLY_ORDERED", "full_fence"]

#: True on CPUs whose stores are seen in program order (x86): the rings may be polled.
STRONGLY_ORDERED = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686", "x86"}

_WRITE, _READ, _SLEEP = 0, 8, 16  # 8-byte word indexes of the control block's cache lines
_POLLING = 1  # on the producer's line: it polls for the answers to what it writes
CONTROL_BYTES = 192
_HEADER = 8
_SKIP = (1 << 64) - 1
_fence_lock = threading.Lock()


def full_fence() -> None:
    """A full memory barrier (a locked instruction on x86; see the module docstring)."""
    _fence_lock.acquire()
    _fence_lock.release()


def _pad(n: int) -> int:
    return (n + 7) & ~7


class Ring:
    """One SPSC ring over ``buf`` (``CONTROL_BYTES`` + ``capacity`` bytes of shared memory).

    One producer calls ``try_write``; one consumer calls ``peek`` then ``advance`` (callers
    make sure there is one of each at a time, across threads too).
    """

    def __init__(self, buf: memoryview, capacity: int) -> None:
        if capacity < 64 or capacity & (capacity - 1):
            raise ValueError(f"ring capacity must be a power of two >= 64, got {capacity}")
        self.capacity = capacity
        self.max_packet = capacity // 2 - _HEADER
        self._ctl = buf[:CONTROL_BYTES].cast("Q")
        #: The data area (a producer writes a packet's bytes here at ``begin_write``'s offset).
        self.data = buf[CONTROL_BYTES : CONTROL_BYTES + capacity]
        self._words = self.data.cast("Q")
        self._mask = capacity - 1
        self._next = 0  # the consumer's read position after the packet ``peek`` returned
        self._size = 8  # the ring bytes of the packet ``peek`` returned (header and padding included)
        self._pending = 0  # the producer's write position after the packet ``begin_write`` reserved

    def release(self) -> None:
        """Drop the views (so the mapping can be closed)."""
        self._ctl.release()
        self._words.release()
        self.data.release()

    # -- producer ---------------------------------------------------------------------------

    def begin_write(self, nbytes: int) -> int:
        """Reserve room for one packet of ``nbytes``: the offset in ``data`` where its bytes go
        (write them there, then ``commit_write``), or -1 when the ring has no room now or the
        packet is too large (libfmq's ``beginWrite``: the packet is built in place, no copy)."""
        if nbytes > self.max_packet:
            return -1
        ctl = self._ctl
        write = ctl[_WRITE]
        off = write & self._mask
        need = _HEADER + _pad(nbytes)
        skip = self.capacity - off if off + need > self.capacity else 0
        if write + skip + need - ctl[_READ] > self.capacity:
            return -1
        if skip:
            self._words[off >> 3] = _SKIP
            off = 0
        self._words[off >> 3] = nbytes
        self._pending = write + skip + need
        return off + _HEADER

    def commit_write(self) -> None:
        """Publish the packet ``begin_write`` reserved (after its bytes: module docstring)."""
        self._ctl[_WRITE] = self._pending

    def try_write(self, parts: Sequence[Any], nbytes: int) -> bool:
        """Write one packet made of ``parts`` (bytes-like, ``nbytes`` in all) and publish it;
        False (nothing written) when the ring has no room now or the packet is too large."""
        pos = self.begin_write(nbytes)
        if pos < 0:
            return False
        data = self.data
        for part in parts:
            n = len(part)
            data[pos : pos + n] = part
            pos += n
        self.commit_write()
        return True

    def set_producer_polling(self, polling: bool) -> None:
        """Say whether this producer polls for the answers to what it writes (its consumer
        then polls for the next packet: the joint policy of ``nnrt.process._poll``)."""
        with contextlib.suppress(ValueError):  # released (see ``readable``)
            self._ctl[_POLLING] = int(polling)

    @property
    def producer_polling(self) -> bool:
        try:
            return bool(self._ctl[_POLLING])
        except ValueError:
            return False

    @property
    def consumer_sleeping(self) -> bool:
        try:
            return bool(self._ctl[_SLEEP])
        except ValueError:  # released: the channel closed under a waiter (no one to wake)
            return False

    # -- consumer ---------------------------------------------------------------------------

    def readable(self) -> bool:
        """Whether a packet waits (False once the channel closed: a waiter may race ``close``)."""
        try:
            ctl = self._ctl
            return bool(ctl[_WRITE] != ctl[_READ])
        except ValueError:
            return False

    def peek(self) -> memoryview | None:
        """The next packet's bytes (a view into the ring, valid until ``advance``), or None.
        A length that cannot be right raises ``ValueError`` (the ring's framing is lost)."""
        ctl = self._ctl
        read, write = ctl[_READ], ctl[_WRITE]
        if read == write:
            return None
        off = read & self._mask
        n = self._words[off >> 3]
        if n == _SKIP:
            read += self.capacity - off
            ctl[_READ] = read
            if read == write:
                return None
            off = 0
            n = self._words[0]
        end = read + _HEADER + _pad(n)
        if n > self.max_packet or end > write:
            raise ValueError(f"ring packet of {n} bytes at {read} runs past the written data ({write})")
        self._next = end
        self._size = end - read
        return self.data[off + _HEADER : off + _HEADER + n]

    def is_last(self) -> bool:
        """Whether the packet ``peek`` returned is the last one written so far."""
        return bool(self._ctl[_WRITE] == self._next)

    def packets_after(self) -> int:
        """About how many packets were written after the one ``peek`` returned (the bytes
        written since, counted in that packet's size: exact when they are all of one form)."""
        return (self._ctl[_WRITE] - self._next) // self._size

    def advance(self) -> None:
        """Free the packet ``peek`` returned (its bytes may be overwritten from now on)."""
        self._ctl[_READ] = self._next

    def reset(self) -> None:
        """Drop everything written so far (the consumer's recovery from a lost framing)."""
        self._ctl[_READ] = self._ctl[_WRITE]

    def set_sleeping(self, sleeping: bool) -> bool:
        """Set the consumer's *sleeping* word; when setting it, fence and answer whether a
        packet arrived meanwhile (then do not sleep)."""
        try:
            self._ctl[_SLEEP] = int(sleeping)
        except ValueError:  # released (see ``readable``)
            return False
        if not sleeping:
            return False
        full_fence()
        return self.readable()

    def poll(self, window: float) -> bool:
        """Spin up to ``window`` seconds for a packet (True when one is there)."""
        if self.readable():
            return True
        if window <= 0:
            return False
        end = time.perf_counter() + window
        while time.perf_counter() < end:
            if self.readable():
                return True
        return False


class Doorbell:
    """A ring's wake-up: an ``eventfd`` (or, for the benchmark, a pipe) the consumer blocks on.

    ``always=True`` rings after every packet (the weakly ordered mode, and a benchmark
    baseline); otherwise only when the consumer said it sleeps.
    """

    def __init__(self, rfd: int, wfd: int, *, always: bool = False) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.always = always or not STRONGLY_ORDERED
        self._pipe = rfd != wfd
        #: Times it rang (woke a sleeping consumer) and times the consumer was awake.
        self.rung = self.spared = 0

    def ring(self, ring: Ring) -> bool:
        """Wake the consumer of ``ring`` if it sleeps (call after publishing a packet); True
        when it rang (the consumer slept), False when the consumer was awake."""
        if not self.always:
            full_fence()
            if not ring.consumer_sleeping:
                self.spared += 1
                return False
        self.rung += 1
        with contextlib.suppress(BlockingIOError, OSError):  # full: the consumer wakes anyway; closed: dead
            if self._pipe:
                os.write(self.wfd, b"\1")
            else:
                os.eventfd_write(self.wfd, 1)
        return True

    def clear(self) -> None:
        """Consume pending rings (non-blocking)."""
        with contextlib.suppress(BlockingIOError, OSError):
            if self._pipe:
                os.read(self.rfd, 4096)
            else:
                os.eventfd_read(self.rfd)

    def wait(self, timeout: float) -> bool:
        """Block until rung or ``timeout`` seconds; True when rung."""
        try:
            r, _, _ = select.select([self.rfd], [], [], timeout)
        except (OSError, ValueError):  # closed under us: the connection is ending
            return False
        return bool(r)


def _eventfd() -> int:
    return os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)


class Channel:
    """The two rings of one connection (request: app -> service; result: service -> app) and
    their doorbells, in one ``memfd`` (see the module docstring).

    ``Channel.create(capacity)`` on the app side makes the memory and the eventfds;
    ``fds()`` are what the service inherits; ``Channel(fds, capacity)`` there maps them.
    """

    def __init__(self, mem_fd: int, req_fd: int, res_fd: int, capacity: int, *, owns: bool = True) -> None:
        self.capacity = capacity
        self.mem_fd, self.req_fd, self.res_fd = mem_fd, req_fd, res_fd
        size = 2 * (CONTROL_BYTES + capacity)
        self._map = mmap.mmap(mem_fd, size)
        view = memoryview(self._map)
        half = CONTROL_BYTES + capacity
        self.requests = Ring(view[:half], capacity)
        self.results = Ring(view[half:], capacity)
        view.release()
        self.request_bell = Doorbell(req_fd, req_fd)
        self.result_bell = Doorbell(res_fd, res_fd)
        self._owns = owns
        self.closed = False

    @classmethod
    def create(cls, capacity: int) -> Channel:
        """Make a channel with two rings of ``capacity`` bytes (a power of two)."""
        size = 2 * (CONTROL_BYTES + capacity)
        mem_fd = os.memfd_create("nnrt-fmq", os.MFD_CLOEXEC)
        fds = [mem_fd]
        try:
            os.ftruncate(mem_fd, size)
            fds.append(_eventfd())
            fds.append(_eventfd())
            return cls(fds[0], fds[1], fds[2], capacity)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def fds(self) -> tuple[int, int, int]:
        return self.mem_fd, self.req_fd, self.res_fd

    def wake_all(self) -> None:
        """Ring both doorbells unconditionally (a death or close: blocked waiters look again)."""
        if self.closed:  # the descriptors may be another file's by now
            return
        for fd in (self.req_fd, self.res_fd):
            with contextlib.suppress(OSError):
                os.eventfd_write(fd, 1)

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmap the rings and close the descriptors (the memory goes when the peer's go too)."""
        if self.closed:
            return
        self.closed = True
        self.requests.release()
        self.results.release()
        with contextlib.suppress(BufferError):  # a view still exported: the GC unmaps it later
            self._map.close()
        if self._owns:
            for fd in (self.mem_fd, self.req_fd, self.res_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
