"""``Memory``: a pool of bytes that constants and execution data live in, and locations in it.

A pool is one of NNAPI's memory kinds, made Pythonic:

* an existing numpy array or bytes-like object (``Memory(x)``, ``Memory.from_array``), no copy;
* named shared memory (``Memory.from_shared_memory``, the ``ashmem`` analogue), usable from
  another process that attaches by name;
* a file mapped with mmap (``Memory.from_file``, the ``mmap_fd`` analogue).

``buffer`` is always a flat uint8 numpy view of the pool. Model constants set with
``set_operand_value_from_memory`` and execution arguments given as ``MemoryLocation`` are views
of it, never copies.

Lifecycle of the mapped kinds. ``close()`` releases this object's mapping; views still alive
(a model constant, an input view, a result) keep the pages mapped until they are
garbage-collected, so closing never invalidates data someone still reads. A shared-memory
segment has one *owner*, the process that created it: ``unlink()`` (or leaving the ``with``
block of an owner) removes its name, after which nobody new can attach; the pages live on until
the last mapping goes. Attaching processes never unlink and are not tracked by Python's
resource tracker, so their exit does not destroy the owner's segment.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import sys
import weakref
from dataclasses import dataclass
from multiprocessing import shared_memory
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np

from nnrt.errors import InvalidArgumentError, ResourceExhaustedError
from nnrt.types import ErrorStatus

__all__ = ["FileKey", "Memory", "MemoryLocation", "open_regular_file", "pool_origin", "read_regular_file"]


class FileKey(NamedTuple):
    """What another process needs to map the same bytes of a ``Memory.from_file`` pool: the
    file's absolute path, the mapped range (``start`` is a multiple of the allocation
    granularity), the access mode, and the file's identity (device, inode) when it was mapped,
    so that a file replaced or removed since is refused rather than read."""

    path: str
    start: int
    length: int
    writable: bool
    dev: int
    ino: int


#: The mapping of every shared-memory segment this process created or attached -> its name,
#: and of every mapped file -> its ``FileKey`` (``pool_origin``: an out-of-process driver
#: passes arrays in such pools by name, not by value).
_pool_keys: weakref.WeakKeyDictionary[Any, str | FileKey] = weakref.WeakKeyDictionary()


def pool_origin(array: np.ndarray) -> tuple[str | FileKey, int] | None:
    """``(segment name or FileKey, byte offset in that mapping)`` when ``array`` is a view of a
    named shared-memory segment (``Memory.from_shared_memory``) or of a mapped file
    (``Memory.from_file``), else None."""
    root: Any = array
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    mapped = root.obj if isinstance(root, memoryview) else root
    try:
        key = _pool_keys.get(mapped)
    except TypeError:  # not weak-referenceable: not a pool's mapping
        return None
    if key is None:
        return None
    start = np.frombuffer(mapped, np.uint8, count=1).ctypes.data  # type: ignore[arg-type]
    return key, int(array.ctypes.data - start)


class _Segment(shared_memory.SharedMemory):
    """``SharedMemory`` whose finalizer tolerates views that outlive it (see the module doc)."""

    _mmap: mmap.mmap | None  # the base class's mapping (None once closed or handed to the views)

    def release(self) -> None:
        try:
            self.close()
        except BufferError:
            # numpy views still export the mapping: it is unmapped when they die; the file
            # descriptor is not needed by the mapping, so release it now. Drop our reference
            # to the mmap too: the views hold it, and it closes its own (duplicated) file
            # descriptor and unmaps when the last of them dies, not when this object does.
            fd = getattr(self, "_fd", -1)
            if fd >= 0:
                os.close(fd)
                self._fd = -1
            self._mmap = None

    def __del__(self) -> None:
        self.release()


def _attach(name: str) -> _Segment:
    if sys.version_info >= (3, 13):  # pragma: no cover - newer Pythons
        return _Segment(name=name, create=False, track=False)  # type: ignore[call-arg]
    seg = _Segment(name=name, create=False)
    # Before 3.13 attaching registers the segment with this process's resource tracker, which
    # would unlink the owner's segment (and warn) when this process exits.
    from multiprocessing import resource_tracker

    resource_tracker.unregister(seg._name, "shared_memory")  # type: ignore[attr-defined]
    return seg


class Memory:
    """A memory pool: an array, bytes, a shared-memory segment or a mapped file (no copy).

    Make one with ``Memory(array_or_bytes)``, ``Memory.from_array``,
    ``Memory.from_shared_memory`` or ``Memory.from_file``; use it for constants
    (``Model.set_operand_value_from_memory``, kept by reference) and for execution inputs
    and outputs (``MemoryLocation(memory, offset, length)``, or ``Burst.register_memory``).
    An execution reads an input location while it runs and writes an output location before
    it completes (for ``execute_fenced``: after its fences signal); the views it takes keep
    the pages mapped even if the pool is closed meanwhile. Every bad argument (a
    non-contiguous array, a size outside the pool or file, an unknown segment) raises
    ``InvalidArgumentError`` naming the call, and so does a location in a pool already
    closed (it has no bytes left). ``close()`` releases the mapping
    (``with Memory.from_file(...) as m:`` closes it on exit); the creator of a shared-memory
    segment also ``unlink()``s its name.
    """

    __slots__ = ("__weakref__", "_buffer", "_kind", "_map", "_owner", "_segment", "_unlinked", "_views")

    def __init__(self, source: np.ndarray | bytes | bytearray | memoryview) -> None:
        if isinstance(source, np.ndarray):
            if source.dtype.hasobject:
                raise InvalidArgumentError(f"Memory: an array of {source.dtype} holds Python objects, not bytes")
            if not source.flags.c_contiguous:
                raise InvalidArgumentError("Memory: the array must be C-contiguous")
            buf = source.reshape(-1).view(np.uint8)
            kind = "array"
        elif isinstance(source, (bytes, bytearray, memoryview)):
            buf = np.frombuffer(source, dtype=np.uint8)
            kind = "bytes"
        else:
            raise InvalidArgumentError(f"Memory: cannot wrap {type(source).__name__}")
        self._owner: Any = source
        self._buffer = buf
        self._kind = kind
        self._segment: _Segment | None = None
        self._map: mmap.mmap | None = None
        self._unlinked = False
        #: Execution views of locations in this pool, kept for reuse by ``nnrt.execution``
        #: (key -> view); ``close`` drops them, so they never keep a closed pool mapped.
        self._views: dict[tuple[Any, ...], np.ndarray] = {}

    # -- factories --------------------------------------------------------------------------

    @classmethod
    def from_array(cls, array: np.ndarray) -> Memory:
        """A pool over ``array``'s bytes (C-contiguous; no copy: writes show through)."""
        if not isinstance(array, np.ndarray):
            raise InvalidArgumentError(f"Memory.from_array: {type(array).__name__} is not a numpy array")
        return cls(array)

    @classmethod
    def from_shared_memory(cls, name: str | None = None, size: int | None = None) -> Memory:
        """Create a shared-memory segment of ``size`` bytes (``name=None``: a fresh name), or
        attach to the existing segment ``name`` (``size``, if given, limits the view).

        The creating call owns the segment (see ``unlink``); ``memory.name`` is what another
        process passes here to attach.
        """
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
            raise InvalidArgumentError(f"Memory.from_shared_memory: size must be a positive int, got {size!r}")
        if name is not None and not isinstance(name, str):
            raise InvalidArgumentError(f"Memory.from_shared_memory: name must be a str, got {type(name).__name__}")
        if name is None:
            if size is None:
                raise InvalidArgumentError("Memory.from_shared_memory: creating a segment needs a size")
            _check_shared_memory_room(size)
            try:
                seg = _Segment(create=True, size=size)
            except OSError as err:
                raise ResourceExhaustedError(
                    f"Memory.from_shared_memory: cannot create a segment of {size} bytes: {err.strerror}",
                    status=ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                ) from None
            owner = True
        else:
            try:
                seg = _attach(name)
            except (FileNotFoundError, ValueError, OSError) as err:
                raise InvalidArgumentError(f"Memory.from_shared_memory: cannot attach to {name!r}: {err}") from None
            owner = False
        mem = cls.__new__(cls)
        assert seg._mmap is not None
        buf = np.frombuffer(seg._mmap, dtype=np.uint8)
        _pool_keys[seg._mmap] = seg.name
        if size is not None:
            if size > buf.size:
                seg.release()
                raise InvalidArgumentError(f"Memory.from_shared_memory: {name!r} has {buf.size} bytes, {size} asked for")
            buf = buf[:size]
        mem._buffer, mem._kind, mem._owner, mem._segment, mem._map = buf, "shared_memory", owner, seg, None
        mem._unlinked, mem._views = False, {}
        return mem

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], offset: int = 0, size: int | None = None, *,
                  writable: bool = False) -> Memory:
        """Map ``size`` bytes of the file at ``path`` from ``offset`` (default: to the end).

        Read-only unless ``writable``; a writable mapping writes through to the file.
        """
        where = f"Memory.from_file({_shown(path)})"
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"{where}: offset must be a non-negative int, got {offset!r}")
        fd = open_regular_file(path, where, writable=writable)
        try:
            total = os.fstat(fd).st_size
            if size is None:
                size = total - offset
            if not isinstance(size, int) or isinstance(size, bool) or size <= 0 or offset + size > total:
                raise InvalidArgumentError(f"{where}: offset {offset} + size {size} is outside the file of {total} bytes")
            start = offset - offset % mmap.ALLOCATIONGRANULARITY
            try:
                mapped = mmap.mmap(fd, offset + size - start, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ,
                                   offset=start)
            except OSError as err:
                raise InvalidArgumentError(f"{where}: cannot map the file: {err.strerror}") from None
            st = os.fstat(fd)
            _pool_keys[mapped] = FileKey(os.path.abspath(os.fsdecode(path)), start, offset + size - start, bool(writable),
                                         st.st_dev, st.st_ino)
        finally:
            os.close(fd)
        mem = cls.__new__(cls)
        mem._buffer = np.frombuffer(mapped, dtype=np.uint8)[offset - start : offset - start + size]
        mem._kind, mem._owner, mem._segment, mem._map, mem._unlinked = "file", None, None, mapped, False
        mem._views = {}
        return mem

    # -- properties ---------------------------------------------------------------------------

    @property
    def buffer(self) -> np.ndarray:
        """The pool's bytes as a flat uint8 array (a view)."""
        return self._buffer

    @property
    def size(self) -> int:
        return int(self._buffer.nbytes)

    @property
    def kind(self) -> str:
        """``"array"``, ``"bytes"``, ``"shared_memory"`` or ``"file"``."""
        return self._kind

    @property
    def writable(self) -> bool:
        return bool(self._buffer.flags.writeable)

    @property
    def name(self) -> str | None:
        """The shared-memory segment's name (what another process attaches with), else None."""
        return None if self._segment is None else str(self._segment.name)

    @property
    def owner(self) -> bool:
        """True for the creator of a shared-memory segment."""
        return self._segment is not None and self._owner is True

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Release this object's mapping (views still alive keep their pages; see the module doc)."""
        self._buffer = np.empty(0, np.uint8)
        self._views.clear()  # the cached execution views are ours, not the caller's: they go too
        if self._segment is not None:
            self._segment.release()
        elif self._map is not None:
            with contextlib.suppress(BufferError):  # else unmapped when the last view dies
                self._map.close()
            self._map = None

    def unlink(self) -> None:
        """Remove a shared-memory segment's name (owner only; idempotent)."""
        if self._segment is None:
            raise InvalidArgumentError(f"Memory.unlink: a {self._kind} memory has no name to unlink")
        if not self.owner:
            raise InvalidArgumentError(f"Memory.unlink: this process attached to {self.name!r}; only its owner unlinks it")
        if not self._unlinked:
            self._unlinked = True
            self._segment.unlink()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
        if self.owner:
            self.unlink()

    def __repr__(self) -> str:
        extra = f" {self.name!r}" if self._segment is not None else ""
        return f"<Memory {self._kind}{extra} {self.size} bytes>"


def _shown(path: object) -> str:
    try:
        return repr(os.fspath(path))  # type: ignore[call-overload]
    except TypeError:
        return repr(path)


def open_regular_file(path: object, where: str, *, writable: bool = False) -> int:
    """A file descriptor on the regular file ``path``; INVALID_ARGUMENT naming ``where`` for
    anything else (a missing file, a directory, a device, a path that is not a path)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise InvalidArgumentError(f"{where}: {type(path).__name__} is not a path")
    try:
        fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    except (OSError, ValueError) as err:
        raise InvalidArgumentError(f"{where}: {_shown(path)}: {getattr(err, 'strerror', None) or err}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidArgumentError(f"{where}: {_shown(path)} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_file(path: object, where: str) -> np.ndarray:
    """The whole regular file ``path`` as a private, read-only uint8 array: a copy, so that the
    caller can verify it once and rely on it (later writes to the file, or its truncation, do
    not reach it; a mapping would change under the reader, or raise SIGBUS)."""
    fd = open_regular_file(path, where)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            size = os.fstat(fd).st_size
            out = np.empty(size, np.uint8)
            got = f.readinto(out.data)
    except OSError as err:
        raise InvalidArgumentError(f"{where}: {_shown(path)}: {err.strerror or err}") from None
    finally:
        os.close(fd)
    out = out[:got]  # a file that shrank while read: what was there
    out.flags.writeable = False
    return out


def _check_shared_memory_room(size: int) -> None:
    """RESOURCE_EXHAUSTED before creating a segment larger than the shared-memory file system
    can hold (Linux ``/dev/shm``): pages past its room would fault (SIGBUS) when first touched."""
    try:
        st = os.statvfs("/dev/shm")
    except (OSError, AttributeError):
        return  # no /dev/shm: creation itself reports a failure
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    if size > free:
        raise ResourceExhaustedError(
            f"Memory.from_shared_memory: {size} bytes asked for, {free} of {total} bytes of shared memory are free",
            status=ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT if size > total else ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
        )


@dataclass(frozen=True, slots=True)
class MemoryLocation:
    """``length`` bytes of ``memory`` from ``offset``: an execution input or output in a pool.

    ``dimensions`` gives the shape when the model leaves it unspecified. A plain tuple
    ``(memory, offset, length)`` is accepted wherever a location is.
    """

    memory: Memory
    offset: int
    length: int
    dimensions: tuple[int, ...] | None = None
