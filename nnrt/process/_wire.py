"""What crosses the boundary between a ``ProcessDevice`` and its service, and how.

Both halves speak over one Unix stream socket (a ``socketpair``; the child gets its end as an
inherited file descriptor). A frame is an 8-byte little-endian length and a pickled tuple
(protocol 5: numpy arrays travel as their raw bytes, one copy each way). Requests are
``(kind, request id, app, *arguments)``; every reply is ``(request id, ok, payload)``, where a
failure's payload is ``(ErrorStatus number, message)`` and becomes the same ``NnrtError`` on
the app side (``error_from``).

Data rules (issue 18):

* a model crosses once, at preparation, as the serializer's description plus its constant
  tensors (``model_to_wire`` / ``model_from_wire``, the ``Model.save`` format's pieces);
* an execution argument that is a view of a named shared-memory segment
  (``Memory.from_shared_memory``) crosses as ``ShmRef`` (segment name, offset, dtype, shape):
  no bytes copied, whatever its size; the service maps the segment once and keeps the mapping;
* a plain array of at least ``ARENA_MIN_BYTES`` is copied once into the device's arena (one
  shared segment) and crosses as a ``ShmRef`` to it;
* any other array crosses by value, pickled.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from nnrt.errors import GeneralFailureError, NnrtError, error_for
from nnrt.memory._memory import shared_segment
from nnrt.model._serialize import model_from_dict, model_to_dict
from nnrt.types import ErrorStatus

if TYPE_CHECKING:
    from nnrt.model import Model
    from nnrt.process._arena import Arena

__all__ = [
    "ARENA_MIN_BYTES", "ShmRef", "decode_args", "encode_args", "encode_frame", "error_from", "error_payload", "model_from_wire",
    "model_to_wire", "recv_frame", "send_frame", "write_frame",
]

_HEADER = struct.Struct("<Q")
#: A frame longer than this is refused by the reader as malformed (the peer is broken).
MAX_FRAME = 1 << 34


class ShmRef(NamedTuple):
    """An array argument that lives in a named shared-memory segment: sent by name."""

    name: str
    offset: int
    dtype: str
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


def recv_frame(sock: socket.socket) -> Any:
    """Read one frame and unpickle it; EOFError when the peer closed or died."""
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if n > MAX_FRAME:
        raise EOFError(f"malformed frame of {n} bytes")
    return pickle.loads(_recv_exact(sock, n))


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


# -- models -------------------------------------------------------------------------------------


def model_to_wire(model: Model) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A finished model as (description, constant tensors): what preparation sends once."""
    arrays: list[np.ndarray] = []

    def add(arr: np.ndarray) -> dict[str, int]:
        arrays.append(np.ascontiguousarray(arr))
        return {"offset": len(arrays) - 1, "nbytes": int(arr.nbytes)}

    return model_to_dict(model, add), arrays


def model_from_wire(doc: dict[str, Any], arrays: list[np.ndarray]) -> Model:
    """Rebuild the model through the public ``Model`` calls (so every validation rule applies)."""

    def get(d: dict[str, Any], dtype: np.dtype[Any], dims: tuple[int, ...]) -> np.ndarray:
        arr = arrays[int(d["offset"])]
        if arr.dtype != dtype or int(arr.nbytes) != int(d["nbytes"]):
            arr = arr.reshape(-1).view(np.uint8).view(dtype)
        return arr.reshape(dims)

    return model_from_dict(doc, get)


# -- execution arguments --------------------------------------------------------------------------


#: Plain arrays at least this large go through the device's arena (``nnrt.process._arena``)
#: rather than the socket.
ARENA_MIN_BYTES = 64 * 1024


def encode_args(args: list[Any], arena: Arena | None = None) -> tuple[list[Any], list[tuple[int, int]]]:
    """The interpreter's input values for the wire, and the arena blocks they took
    (``(offset, nbytes)``, to free when the reply arrives): shared-memory views become
    ``ShmRef``; large plain arrays are copied into ``arena`` and become ``ShmRef`` too."""
    out: list[Any] = []
    blocks: list[tuple[int, int]] = []
    for a in args:
        if type(a) is np.ndarray and a.nbytes >= 4096:
            where = shared_segment(a) if a.flags.c_contiguous else None
            if where is None and arena is not None and a.nbytes >= ARENA_MIN_BYTES:
                where = arena.put(a)
                if where is not None:
                    blocks.append((where[1], a.nbytes))
            if where is not None:
                out.append(ShmRef(where[0], where[1], a.dtype.str, a.shape))
                continue
        out.append(a)
    return out, blocks


def decode_args(args: list[Any], attach: Any) -> list[Any]:
    """The values the service executes on: ``attach(name)`` maps a segment (a flat uint8 array)."""
    out: list[Any] = []
    for a in args:
        if type(a) is ShmRef:
            raw = attach(a.name)
            dtype = np.dtype(a.dtype)
            n = int(np.prod(a.shape, dtype=np.int64)) * dtype.itemsize
            if a.offset < 0 or a.offset + n > raw.size:
                raise GeneralFailureError(f"shared memory {a.name!r}: {n} bytes at {a.offset} are outside the segment")
            a = raw[a.offset : a.offset + n].view(dtype).reshape(a.shape)
        out.append(a)
    return out


# -- errors ---------------------------------------------------------------------------------------


def error_payload(err: BaseException) -> tuple[int, str]:
    """A failure for the wire: an ``NnrtError`` keeps its status; anything else is GENERAL_FAILURE."""
    if isinstance(err, NnrtError):
        return int(err.status), err.message
    return int(ErrorStatus.GENERAL_FAILURE), f"the service failed: {type(err).__name__}: {err}"


def error_from(payload: Any) -> NnrtError:
    """The app-side exception for a failure reply."""
    try:
        status, message = payload
        return error_for(ErrorStatus(status), str(message))
    except (TypeError, ValueError):
        return GeneralFailureError(f"the service sent a malformed failure: {payload!r}")
