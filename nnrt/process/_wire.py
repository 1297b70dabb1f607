"""What crosses the boundary between a ``ProcessDevice`` and its service, and how.

Both halves speak over one Unix stream socket (a ``socketpair``; the child gets its end as an
inherited file descriptor). A frame is an 8-byte little-endian length and a pickled tuple
(protocol 5: numpy arrays travel as their raw bytes, one copy each way). Requests are
``(kind, request id, app, *arguments)``; every reply is ``(request id, ok, payload)``, where a
failure's payload is ``(ErrorStatus number, message[, output shapes])`` and becomes the same
``NnrtError`` on the app side (``error_from``). The service unpickles requests with
``loads_request``, which admits only the classes requests are made of.

Data rules (issue 18):

* a model crosses once, at preparation, as the serializer's description plus its constant
  tensors (``model_to_wire`` / ``model_from_wire``, the ``Model.save`` format's pieces);
* an execution input that is a view of a named shared-memory segment
  (``Memory.from_shared_memory``) or of a mapped file (``Memory.from_file``) crosses as
  ``PoolRef`` (segment name or ``FileKey``, offset, dtype, shape): no bytes copied, whatever
  its size; the service maps the pool once and keeps the mapping (``nnrt.process._pools``);
* a plain array of at least ``ARENA_MIN_BYTES`` is copied once into the device's arena (one
  shared segment) and crosses as a ``PoolRef`` to it;
* any other array crosses by value, pickled;
* a device buffer of the device (``ProcessDevice.allocate``) lives in the service and crosses
  as ``BufRef`` (its handle there), as an input or an output;
* an output whose buffer is a view of such a pool (a ``MemoryLocation`` in it) crosses as a
  ``PoolRef`` too: the service's execution writes it in place and the reply carries only its
  shape (``InPlace``); other outputs come back by value.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import math
import pickle
import socket
import struct
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from nnrt.errors import GeneralFailureError, InvalidArgumentError, NnrtError, error_for
from nnrt.memory._memory import FileKey, pool_origin
from nnrt.model._serialize import model_from_dict, model_to_dict
from nnrt.sched import ClassStatistics, SchedulerStatistics
from nnrt.types import ErrorStatus, OutputShape

if TYPE_CHECKING:
    from nnrt.model import Model
    from nnrt.process._arena import Arena

__all__ = [
    "ARENA_MIN_BYTES",
    "BufRef",
    "InPlace",
    "PREPARE_OPTIONS",
    "PoolRef",
    "RemoteInput",
    "check_request",
    "decode_args",
    "encode_args",
    "encode_frame",
    "encode_outputs",
    "error_from",
    "error_payload",
    "model_from_wire",
    "model_to_wire",
    "loads_request",
    "output_views",
    "recv_frame",
    "send_frame",
    "statistics_from_wire",
    "statistics_to_wire",
    "write_frame",
]

_HEADER = struct.Struct("<Q")
#: A frame longer than this is refused by the reader as malformed (the peer is broken).
MAX_FRAME = 1 << 34


class PoolRef(NamedTuple):
    """An array argument that lives in a pool both processes map: sent by name. ``pool`` is a
    shared-memory segment's name (``str``) or a mapped file's ``FileKey``; ``offset`` is in
    bytes from the start of that mapping."""

    pool: str | FileKey
    offset: int
    dtype: str
    shape: tuple[int, ...]


class BufRef(NamedTuple):
    """An execution argument that is a device buffer living in the service (its handle there)."""

    handle: int


class RemoteInput(np.ndarray):
    """What request validation sees for an input device buffer of a ``ProcessDevice``: an
    array of the buffer's type and shape that allocates nothing (its data is in the service);
    ``encode_args`` sends it as the ``BufRef`` of ``handle``."""

    handle: int


class InPlace(NamedTuple):
    """In a reply: the output was written where its ``PoolRef`` said; ``shape`` is the result's."""

    shape: tuple[int, ...]


def encode_frame(message: Any) -> tuple[bytes, ...]:
    """``message`` pickled as a frame's parts (done outside any lock: pickling may run the GC)."""
    data = pickle.dumps(message, protocol=5)
    if len(data) < 65536:  # one system call for the common small frame
        return (_HEADER.pack(len(data)) + data,)
    return _HEADER.pack(len(data)), data  # no copy of a large one


def write_frame(sock: socket.socket, parts: tuple[bytes, ...]) -> None:
    """Write an encoded frame (blocking; OSError when the peer is gone)."""
    for part in parts:
        sock.sendall(part)


def send_frame(sock: socket.socket, message: Any) -> None:
    """Pickle ``message`` and write it as one frame (one writer at a time)."""
    write_frame(sock, encode_frame(message))


def recv_frame(sock: socket.socket, loads: Callable[[Any], Any] = pickle.loads) -> Any:
    """Read one frame and unpickle it (the service passes ``loads_request``); EOFError when
    the peer closed or died."""
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if n > MAX_FRAME:
        raise EOFError(f"malformed frame of {n} bytes")
    body = _recv_exact(sock, n)
    try:
        return loads(body)
    except EOFError:  # a truncated pickle is a malformed frame, not the end of the connection
        raise pickle.UnpicklingError(f"a truncated frame body of {n} bytes") from None


#: What a request may hold besides plain containers, numbers, strings and bytes: numpy arrays
#: and scalars, this module's references, and nnrt's enums and value classes.
_ALLOWED = frozenset({
    ("numpy", "dtype"), ("numpy", "ndarray"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
    ("nnrt.process._wire", "PoolRef"), ("nnrt.process._wire", "BufRef"), ("nnrt.memory._memory", "FileKey"),
    ("nnrt.memory._domain", "BufferRole"), ("nnrt.memory._domain", "BufferDesc"),
    ("builtins", "bytearray"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "complex"),
})


class _RequestUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "nnrt.types":
            obj = super().find_class(module, name)
            if isinstance(obj, type) and (issubclass(obj, enum.Enum) or dataclasses.is_dataclass(obj)):
                return obj
        raise pickle.UnpicklingError(f"a request may not hold {module}.{name}")


def loads_request(data: Any) -> Any:
    """Unpickle a request in the service: only the classes a request is made of (``_ALLOWED``),
    so that a malformed or hostile frame is refused (UnpicklingError) rather than able to call
    any function of the service's interpreter."""
    return _RequestUnpickler(io.BytesIO(data)).load()


def _recv_exact(sock: socket.socket, n: int) -> bytearray | bytes:
    if n == 0:
        return b""
    first = sock.recv(n)
    if len(first) == n:
        return first
    if not first:
        raise EOFError("the peer closed the connection")
    buf = bytearray(n)
    view = memoryview(buf)
    view[: len(first)] = first
    got = len(first)
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError("the peer closed the connection")
        got += k
    return buf


# -- requests ---------------------------------------------------------------------------------------

_N = type(None)
_NUM = (int, float)
#: Per request kind: the types of its arguments after ``(kind, request id)``, and how many of
#: them may be left out at the end.
_SCHEMAS: dict[str, tuple[tuple[Any, ...], int]] = {
    "execute": ((str, int, list, (*_NUM, _N), (*_NUM, _N), (list, _N)), 1),
    "prepare": ((str, tuple, dict), 0),
    "prepare_cached": ((str, dict), 0),
    "support": ((str, tuple), 0),
    "release": ((str, int), 0),
    "cancel": ((str, int), 0),
    "allocate": ((str, (tuple, list), list, list, list), 0),
    "copy_from": ((str, int, list), 0),
    "copy_to": ((str, int, (PoolRef, _N)), 0),
    "ping": ((str,), 1), "capabilities": ((str,), 1), "statistics": ((str,), 1),
    "_hang": ((str,), 1), "_inline": ((str, int), 0), "_counts": ((), 0), "_rings": ((), 0),
    "_doorbell": ((_NUM, _NUM), 0),
}

#: The options ``prepare`` and ``prepare_cached`` pass on to the service's device.
PREPARE_OPTIONS = frozenset({"preference", "priority", "deadline", "cache_dir", "token"})


def check_request(kind: str, args: tuple[Any, ...]) -> None:
    """GENERAL_FAILURE ("malformed ... request") unless ``args`` fit ``kind``'s schema (a frame
    of the wrong shape is a malformed packet, as in NNAPI's burst server); INVALID_ARGUMENT for
    an unknown kind."""
    schema = _SCHEMAS.get(kind)
    if schema is None:
        raise InvalidArgumentError(f"unknown request {kind!r}")
    types, optional = schema
    if not len(types) - optional <= len(args) <= len(types):
        raise GeneralFailureError(f"malformed {kind} request: {len(args)} arguments")
    for k, (arg, t) in enumerate(zip(args, types)):
        if not isinstance(arg, t) or (type(arg) is bool and bool not in (t if isinstance(t, tuple) else (t,))):
            raise GeneralFailureError(f"malformed {kind} request: argument {k} is a {type(arg).__name__}")
    if kind in ("prepare", "prepare_cached"):
        options = args[-1]
        unknown = [key for key in options if key not in PREPARE_OPTIONS]
        if unknown:
            raise GeneralFailureError(f"malformed {kind} request: unknown options {unknown!r:.80}")
    if kind == "allocate" and not all(type(h) is int for h in args[2]):
        raise GeneralFailureError("malformed allocate request: a handle is not an int")


# -- models -------------------------------------------------------------------------------------


def model_to_wire(model: Model) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A finished model as (description, constant tensors): what preparation sends once."""
    arrays: list[np.ndarray] = []

    def add(arr: np.ndarray) -> dict[str, int]:
        arrays.append(np.ascontiguousarray(arr))
        return {"offset": len(arrays) - 1, "nbytes": int(arr.nbytes)}

    return model_to_dict(model, add), arrays


def model_from_wire(*wire: Any) -> Model:
    """Rebuild the model from ``(description, constant arrays)`` through the public ``Model``
    calls (so every validation rule applies); a description that does not parse is
    INVALID_ARGUMENT ("malformed model description")."""
    if len(wire) != 2 or type(wire[0]) is not dict or type(wire[1]) is not list:
        raise InvalidArgumentError("malformed model description: not (dict, list)")
    doc, arrays = wire

    def get(d: dict[str, Any], dtype: np.dtype[Any], dims: tuple[int, ...]) -> np.ndarray:
        arr = arrays[int(d["offset"])]
        if type(arr) is not np.ndarray or arr.dtype.hasobject:
            raise InvalidArgumentError("malformed model description: a constant is not an array of numbers")
        if arr.dtype != dtype or int(arr.nbytes) != int(d["nbytes"]):
            arr = arr.reshape(-1).view(np.uint8).view(dtype)
        return arr.reshape(dims)

    try:
        return model_from_dict(doc, get)
    except NnrtError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError) as err:
        raise InvalidArgumentError(f"malformed model description: {type(err).__name__}: {err}"[:300]) from None


# -- execution arguments --------------------------------------------------------------------------


#: Plain arrays at least this large go through the device's arena (``nnrt.process._arena``)
#: rather than the socket.
ARENA_MIN_BYTES = 64 * 1024


def encode_args(args: list[Any], arena: Arena | None = None) -> tuple[list[Any], list[tuple[int, int]]]:
    """The interpreter's input values for the wire, and the arena blocks they took
    (``(offset, nbytes)``, to free when the reply arrives): views of a shared segment or a
    mapped file become ``PoolRef``; large plain arrays are copied into ``arena`` and become
    ``PoolRef`` too."""
    out: list[Any] = []
    blocks: list[tuple[int, int]] = []
    for a in args:
        if type(a) is RemoteInput:
            out.append(BufRef(a.handle))
            continue
        if type(a) is np.ndarray and a.nbytes >= 4096:
            where = pool_origin(a) if a.flags.c_contiguous else None
            if where is None and arena is not None and a.nbytes >= ARENA_MIN_BYTES:
                put = arena.put(a)
                if put is not None:
                    blocks.append((put[1], a.nbytes))
                    where = put
            if where is not None:
                out.append(PoolRef(where[0], where[1], a.dtype.str, a.shape))
                continue
        out.append(a)
    return out, blocks


def encode_outputs(bufs: Any) -> list[PoolRef | BufRef | None] | None:
    """The caller's output buffers that the service may write in place (C-contiguous, writable
    views of a shared pool, 4 KB or more) as ``PoolRef``, its device buffers (``ResolvedOutputs``) as
    ``BufRef``; None where the output comes back by value (None when all do)."""
    if not bufs:
        return None
    refs: list[PoolRef | BufRef | None] = []
    for b in bufs:
        # (a small one comes back by value, as small inputs go: on a ring, the cheaper trip)
        where = (pool_origin(b) if type(b) is np.ndarray and b.nbytes >= 4096 and b.flags.c_contiguous
                 and b.flags.writeable else None)
        refs.append(None if where is None else PoolRef(where[0], where[1], b.dtype.str, b.shape))
    for j, buf in getattr(bufs, "device_buffers", ()):
        refs[j] = BufRef(buf.handle)
    return refs if any(r is not None for r in refs) else None


#: The service's resolvers: ``attach(pool, where)`` maps a pool (a flat uint8 array);
#: ``buffer(handle, where)`` is the service's device buffer of that handle.
Attach = Callable[[str | FileKey, str], np.ndarray]
FindBuffer = Callable[[int, str], Any]


def _arg(a: Any, attach: Attach, buffer: FindBuffer, where: str) -> Any:
    if type(a) is PoolRef:
        return _ref_view(a, attach, where)
    if type(a) is BufRef:
        if type(a.handle) is not int:
            raise GeneralFailureError(f"{where}: malformed buffer reference")
        return buffer(a.handle, where)
    return a


def _ref_view(ref: PoolRef, attach: Attach, where: str) -> np.ndarray:
    try:
        dtype = np.dtype(ref.dtype) if type(ref.dtype) is str else None
        shape = tuple(ref.shape) if type(ref.shape) is tuple else None
    except (TypeError, ValueError):
        dtype = None
    if (dtype is None or dtype.hasobject or shape is None or type(ref.offset) is not int
            or not all(type(d) is int and d >= 0 for d in shape) or not _pool_key_ok(ref.pool)):
        raise GeneralFailureError(f"{where}: malformed pool reference {ref!r:.200}")
    raw = attach(ref.pool, where)
    n = math.prod(shape) * dtype.itemsize
    if ref.offset < 0 or ref.offset + n > raw.size:
        raise GeneralFailureError(f"{where}: {n} bytes at {ref.offset} are outside the memory pool")
    return raw[ref.offset : ref.offset + n].view(dtype).reshape(shape)


def _pool_key_ok(key: Any) -> bool:
    if type(key) is str:
        return True
    return type(key) is FileKey and type(key.path) is str and all(
        type(v) is int for v in (key.start, key.length, key.dev, key.ino)) and type(key.writable) is bool


def decode_args(args: list[Any], attach: Attach, buffer: FindBuffer) -> list[Any]:
    """The values the service executes on (pool views, its device buffers, arrays)."""
    return [_arg(a, attach, buffer, f"input {k}") for k, a in enumerate(args)]


def output_views(refs: list[Any] | None, attach: Attach, buffer: FindBuffer) -> list[Any] | None:
    """The service's output arguments: views for in-place outputs, its device buffers, None
    where the output comes back by value."""
    if refs is None:
        return None
    return [None if r is None else _arg(r, attach, buffer, f"output {j}") for j, r in enumerate(refs)]


# -- statistics -----------------------------------------------------------------------------------


def statistics_to_wire(stats: SchedulerStatistics) -> tuple[Any, ...]:
    """A scheduler snapshot as plain values (its counters by status are read-only mappings,
    which do not pickle)."""
    classes = [
        {f: (dict(getattr(c, f)) if f in ("rejected", "failures") else getattr(c, f)) for f in c.__dataclass_fields__}
        for c in stats.classes
    ]
    return stats.units, stats.busy_units, stats.queued, stats.running, classes


def statistics_from_wire(wire: Any) -> SchedulerStatistics:
    units, busy, queued, running, classes = wire
    return SchedulerStatistics(units, busy, queued, running, tuple(
        ClassStatistics(**{**c, "rejected": MappingProxyType(c["rejected"]), "failures": MappingProxyType(c["failures"])})
        for c in classes
    ))


# -- errors ---------------------------------------------------------------------------------------


def error_payload(err: BaseException) -> tuple[Any, ...]:
    """A failure for the wire: an ``NnrtError`` keeps its status; anything else is GENERAL_FAILURE."""
    if isinstance(err, NnrtError):
        if err.output_shapes:
            return int(err.status), err.message, [(tuple(s.dimensions), bool(s.is_sufficient)) for s in err.output_shapes]
        return int(err.status), err.message
    return int(ErrorStatus.GENERAL_FAILURE), f"the service failed: {type(err).__name__}: {err}"


def error_from(payload: Any) -> NnrtError:
    """The app-side exception for a failure reply."""
    try:
        status, message, *rest = payload
        shapes = [OutputShape(tuple(d), bool(ok)) for d, ok in rest[0]] if rest else []
        return error_for(ErrorStatus(status), str(message), output_shapes=shapes)
    except (TypeError, ValueError):
        return GeneralFailureError(f"the service sent a malformed failure: {payload!r}")
