"""The service's mappings of the app's memory pools: shared-memory segments and mapped files.

An execution argument in a pool the app shares (``Memory.from_shared_memory``, a
``Memory.from_file`` pool, the device's arena) crosses as a ``PoolRef`` naming the pool
(``nnrt.process._wire``), and the service reads inputs from, and writes outputs to, its own
mapping of the same pages: no bytes are copied either way. ``Pools`` keeps those mappings,
the most recently used ``MAX_POOLS`` of them (a mapping still viewed by an execution in flight
stays mapped until its views go: see ``Memory.close``).

A file pool is mapped by path with the app's access mode (read-only when the app's pool is)
and each use checks it:

* the file at that path must be the one the app mapped (same device and inode): a file removed
  or replaced since is GENERAL_FAILURE naming the argument and the path, never another file's
  bytes;
* the file must still hold the mapped range (``fstat`` before each use): a file truncated
  since is GENERAL_FAILURE too, not a SIGBUS in the service. (A truncation *during* an
  execution can still fault the service, which is then a death: DEAD_OBJECT.)

On the rings (``nnrt.process._transport``) a request names its pools by strings: a segment by
its name, a file pool by its ``FileKey`` spelled out (``ring_name``: a NUL, which no segment
name holds, then the key's fields and the path). The service maps such a name as that file,
with the same checks, and keeps the mapping under the name: a request of a known form finds it
with one dictionary look-up and one ``fstat``, whatever the pool's size.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import stat
from typing import Any

import numpy as np

from nnrt.errors import GeneralFailureError
from nnrt.memory import Memory
from nnrt.memory._memory import FileKey

__all__ = ["MAX_POOLS", "Pools", "ring_name"]

#: The service keeps at most this many pools mapped (least recently used go first).
MAX_POOLS = 64
#: How a file pool's name on the rings starts (no shared-memory segment's name holds a NUL).
_FILE = "\0file:"
#: The longest pool name a ring packet carries (``nnrt.burst._packet``'s bound).
_MAX_NAME = 4096


def ring_name(key: str | FileKey) -> str | None:
    """A pool's name in a ring packet: a segment's own name, or a file pool's ``FileKey``
    spelled out; None when it cannot be spelled (a path that is not UTF-8, or too long: the
    request takes the socket, where the key crosses pickled)."""
    if isinstance(key, str):
        return key
    name = f"{_FILE}{int(key.writable)}:{key.start}:{key.length}:{key.dev}:{key.ino}:{key.path}"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return None
    return name if size <= _MAX_NAME else None


def _file_key(name: str, where: str) -> FileKey:
    """The ``FileKey`` a ring name spells (``ring_name``); GENERAL_FAILURE when it spells none."""
    fields = name[len(_FILE):].split(":", 5)
    try:
        writable, start, length, dev, ino = (int(f) for f in fields[:5])
        path = fields[5]
    except (ValueError, IndexError):
        raise GeneralFailureError(f"{where}: malformed file pool name {name[1:]!r:.200}") from None
    if writable not in (0, 1) or start < 0 or length <= 0 or not os.path.isabs(path):
        raise GeneralFailureError(f"{where}: malformed file pool name {name[1:]!r:.200}")
    return FileKey(path, start, length, bool(writable), dev, ino)


class _FilePool:
    def __init__(self, key: FileKey, where: str) -> None:
        self.key = key
        try:  # O_NONBLOCK: a FIFO at that path must not block the service (refused below)
            fd = os.open(key.path, (os.O_RDWR if key.writable else os.O_RDONLY) | os.O_NONBLOCK)
        except (OSError, ValueError) as err:
            raise GeneralFailureError(
                f"{where}: the service cannot open the memory's file {key.path!r} ({getattr(err, 'strerror', err)}): removed or "
                "renamed since Memory.from_file mapped it?"
            ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (key.dev, key.ino):
                raise GeneralFailureError(
                    f"{where}: the file at {key.path!r} is not the one Memory.from_file mapped (it was replaced)"
                )
            self._check(st.st_size, key, where)
            try:
                self.map = mmap.mmap(fd, key.length, access=mmap.ACCESS_WRITE if key.writable else mmap.ACCESS_READ,
                                     offset=key.start)
            except (OSError, ValueError, OverflowError) as err:
                raise GeneralFailureError(f"{where}: the service cannot map {key.path!r}: {err}") from None
        finally:
            os.close(fd)  # the mapping keeps its own descriptor (``mmap.size`` fstats it)
        self.buffer = np.frombuffer(self.map, np.uint8)

    def check(self, where: str) -> None:
        self._check(self.map.size(), self.key, where)

    @staticmethod
    def _check(size: int, key: FileKey, where: str) -> None:
        if size < key.start + key.length:
            raise GeneralFailureError(
                f"{where}: the memory's file {key.path!r} was truncated to {size} bytes since it was mapped "
                f"({key.start + key.length} needed)"
            )

    def close(self) -> None:
        self.buffer = np.empty(0, np.uint8)
        with contextlib.suppress(BufferError):  # views in flight keep it mapped until they go
            self.map.close()


class Pools:
    """The service's mappings, by pool key (a segment name or a ``FileKey``)."""

    def __init__(self) -> None:
        self._open: collections.OrderedDict[Any, Memory | _FilePool] = collections.OrderedDict()
        #: Pools mapped so far (a pool stays mapped between requests: tests check it is mapped once).
        self.mapped = 0

    def attach(self, key: str | FileKey, where: str) -> np.ndarray:
        """The pool's bytes (a flat uint8 array), mapped on first use; GENERAL_FAILURE naming
        ``where`` when it cannot be mapped or a file changed (see the module docstring)."""
        pool = self._open.get(key)
        if pool is None:
            if type(key) is FileKey:
                pool = _FilePool(key, where)
            elif type(key) is str and key.startswith(_FILE):
                pool = _FilePool(_file_key(key, where), where)
            elif type(key) is str:
                try:
                    pool = Memory.from_shared_memory(key)
                except Exception as err:
                    raise GeneralFailureError(f"{where}: the service cannot map shared memory {key!r}: {err}") from None
            else:
                raise GeneralFailureError(f"{where}: {type(key).__name__} names no memory pool")
            self.mapped += 1
            self._open[key] = pool
            while len(self._open) > MAX_POOLS:
                self._open.popitem(last=False)[1].close()
        else:
            self._open.move_to_end(key)
            if type(pool) is _FilePool:
                pool.check(where)
        return pool.buffer

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()
