"""``Arena``: one shared-memory segment that large plain-array inputs are copied into, once.

An input array that is not already in a named segment would otherwise be pickled into the
socket and out again (two copies and a pickle, measured at about 1 ms for 1 MB on the
reference machine); copying it into the arena costs one ``memcpy``, and the service reads it
in place by name (``PoolRef``; it maps the arena once). Allocation is first fit over a free
list kept sorted by offset, freed blocks coalesce with their neighbours; an array that does
not fit (arena full, or larger than the arena) falls back to the socket. The arena is the
device's: it survives service restarts (a new service maps it by name again) and is unlinked
by ``close``. Blocks are freed when the request's reply arrives or the service dies.

Large outputs that come back to plain arrays (the caller's, or allocated for the result) go
through it too: the service writes the result into a block and the app copies it out once
(``reserve``), instead of a pickle, two socket copies and a copy into the caller's array.
"""

from __future__ import annotations

import bisect
import threading

import numpy as np

from nnrt.memory import Memory

__all__ = ["ALIGN", "Arena"]

#: Blocks start at multiples of this many bytes (a cache line, and every dtype's alignment).
ALIGN = 64


class Arena:
    """A first-fit allocator over one shared segment of ``size`` bytes, made on first use."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._memory: Memory | None = None
        self._lock = threading.Lock()
        self._free: list[tuple[int, int]] = [(0, size)]  # (offset, length), sorted by offset

    @property
    def name(self) -> str | None:
        return None if self._memory is None else self._memory.name

    def put(self, array: np.ndarray) -> tuple[str, int] | None:
        """Copy ``array`` into a new block; ``(segment name, offset)``, or None when it does not fit."""
        block = self.reserve(array.nbytes)
        if block is None:
            return None
        dst = block[2][: array.nbytes]
        np.copyto(dst.view(array.dtype).reshape(array.shape), array)
        return block[0], block[1]

    def reserve(self, nbytes: int) -> tuple[str, int, np.ndarray] | None:
        """A new block of ``nbytes``: ``(segment name, offset, its bytes)``, or None when it
        does not fit (an output the service writes into, ``nnrt.process._device``)."""
        n = -(-nbytes // ALIGN) * ALIGN
        with self._lock:
            for k, (offset, length) in enumerate(self._free):
                if length >= n:
                    if length == n:
                        del self._free[k]
                    else:
                        self._free[k] = (offset + n, length - n)
                    break
            else:
                return None
            if self._memory is None:
                self._memory = Memory.from_shared_memory(size=self.size)
            memory = self._memory
        return str(memory.name), offset, memory.buffer[offset : offset + nbytes]

    def free(self, offset: int, nbytes: int) -> None:
        """Return the block at ``offset`` (``nbytes`` as given to ``put``)."""
        n = -(-nbytes // ALIGN) * ALIGN
        with self._lock:
            k = bisect.bisect(self._free, (offset, n))
            start, end = offset, offset + n
            if k < len(self._free) and self._free[k][0] == end:  # merge with the next block
                end += self._free.pop(k)[1]
            if k > 0 and sum(self._free[k - 1]) == start:  # and with the previous one
                start = self._free[k - 1][0]
                self._free[k - 1] = (start, end - start)
            else:
                self._free.insert(k, (start, end - start))

    @property
    def free_bytes(self) -> int:
        with self._lock:
            return sum(length for _, length in self._free)

    def close(self) -> None:
        """Unmap and unlink the segment (the device is closing)."""
        memory, self._memory = self._memory, None
        if memory is not None:
            memory.close()
            memory.unlink()
