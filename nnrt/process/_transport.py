"""What an execution request and its result look like on a ``ProcessDevice``'s rings.

The rings (``nnrt.process._fmq``) carry the burst packets' binary form
(``nnrt.burst._packet``: ``pack_request`` / ``unpack_request``, ``pack_result`` /
``unpack_result``). This module turns the interpreter's input values into such a request
and the service's outputs into such a result, and back:

* an input of 4 KB or more that is a view of a pool both processes map (a
  ``Memory.from_shared_memory`` or ``Memory.from_file`` location, or a large array the device
  copied into its arena: ``_wire.encode_args``'s rule) is a location in a *pool* named by its
  ring name (``_pools.ring_name``: a segment's name, a file's key spelled out; a device buffer
  has no name here: that request goes over the socket); the service reads it in place, never
  copied; any other array's bytes go inline, in the packet's data section; an omitted optional
  input is a location-less input;
* outputs come back inline in the result, each as its shape and bytes, or are written in
  place into a pool (their result carries the shape alone); the dtype of every operand is the
  model's, which both sides hold (an array of another dtype, or a value that is not an array,
  makes ``encode_execute`` answer None: that request goes over the socket);
* a failure is a result with its status and message, no shapes, timing unavailable.

The lean path that builds and reads the same packets without parsing them (*forms*) is
``nnrt.process._forms``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.burst._packet import (
    INLINE_SLOT,
    RawLocation,
    RingRequest,
    pack_request,
    pack_result,
    request_datums,
    result_datums,
    unpack_result,
)
from nnrt.errors import InvalidArgumentError, error_for
from nnrt.process._pools import ring_name
from nnrt.process._wire import InPlace, PoolRef, encode_args
from nnrt.types import ErrorStatus, OutputShape

if TYPE_CHECKING:
    from nnrt.model import Model
    from nnrt.process._arena import Arena

__all__ = [
    "ARENA_INPUT_BYTES",
    "INLINE_OUT",
    "decode_execute",
    "decode_outputs",
    "encode_execute",
    "encode_outputs",
    "inline_inputs",
    "io_dtypes",
    "output_locations",
    "pool_view",
]

_PAD = bytes(8)
#: An input of at least this many bytes is not copied into the packet: ``_wire.encode_args``
#: decides (it may go through the device's arena).
ARENA_INPUT_BYTES = 4096


def io_dtypes(model: Model) -> tuple[list[np.dtype[Any]], list[np.dtype[Any]]]:
    """The numpy dtypes of a model's inputs and outputs (what the packets do not carry)."""
    ops = model.operands
    return [ops[i].type.dtype for i in model.input_indexes], [ops[i].type.dtype for i in model.output_indexes]


def _bytes_of(arr: np.ndarray, parts: list[Any]) -> int:
    """Append ``arr``'s bytes (and padding to 8) to ``parts``; the padded size."""
    n = arr.nbytes
    if n:
        parts.append(arr.reshape(-1).view(np.uint8).data)
    pad = -n & 7
    if pad:
        parts.append(_PAD[:pad])
    return n + pad


def encode_execute(rid: int, handle: int, app: str, values: Sequence[Any], deadline: float | None,
                   loop_timeout: float | None, dtypes: Sequence[np.dtype[Any]], n_outputs: int,
                   arena: Arena | None, out_refs: Sequence[Any] | None = None
                   ) -> tuple[list[Any], int, list[tuple[int, int]]] | None:
    """An execute request's binary packet: (parts, size, arena blocks to free afterwards), or
    None when a value cannot travel this way (then nothing was taken from the arena).
    ``out_refs`` (``_wire.encode_outputs``: a ``PoolRef`` per output the service writes in place
    into a shared-memory segment, None for one that comes back by value) become output
    locations in the packet's pools; a device buffer or a mapped file's pool cannot travel
    this way."""
    outputs: list[RawLocation] = [INLINE_OUT] * n_outputs
    pools: list[str] = []
    if out_refs is not None:
        for j, ref in enumerate(out_refs):
            if ref is None:
                continue
            name = ring_name(ref.pool) if type(ref) is PoolRef else None
            if name is None:
                return None
            if name not in pools:
                pools.append(name)
            n = math.prod(ref.shape) * np.dtype(ref.dtype).itemsize
            outputs[j] = (pools.index(name), ref.offset, n, tuple(ref.shape))
    big = False
    for v, dtype in zip(values, dtypes):
        if v is not None and (type(v) is not np.ndarray or v.dtype != dtype):
            return None
        big = big or (v is not None and v.nbytes >= ARENA_INPUT_BYTES)
    wire, blocks = encode_args(list(values), arena) if big else (values, [])
    inputs: list[RawLocation | None] = []
    data: list[Any] = []
    size = 0
    for v, w in zip(values, wire):
        if v is None:
            inputs.append(None)
        elif type(w) is PoolRef:
            name = ring_name(w.pool)
            if name is None:  # a file pool the rings cannot name: the socket's form only
                for offset, nbytes in blocks:
                    arena.free(offset, nbytes)  # type: ignore[union-attr]
                return None
            if name not in pools:
                pools.append(name)
            inputs.append((pools.index(name), w.offset, v.nbytes, v.shape))
        else:
            arr = v if v.flags.c_contiguous else np.ascontiguousarray(v)
            inputs.append((INLINE_SLOT, size, arr.nbytes, arr.shape))
            size += _bytes_of(arr, data)
    datums = request_datums(inputs, outputs, True, deadline, loop_timeout)
    parts, nbytes = pack_request(rid, handle, app, datums, pools, data, size)
    return parts, nbytes, blocks


#: The location of an output that comes back by value, in the result.
INLINE_OUT: RawLocation = (INLINE_SLOT, 0, 0, None)


def decode_execute(req: RingRequest, dtypes: Sequence[np.dtype[Any]], n_outputs: int,
                   attach: Callable[[str, str], np.ndarray]) -> list[Any]:
    """The service's input values of a request (views of the packet or of the pools: copy the
    packet's before it is freed if they must outlive it: ``inline_inputs``). A location outside
    its data, or counts that do not match the model, are INVALID_ARGUMENT."""
    if len(req.inputs) != len(dtypes) or len(req.outputs) != n_outputs:
        raise InvalidArgumentError(f"request: the model has {len(dtypes)} inputs and {n_outputs} outputs, the packet "
                                   f"{len(req.inputs)} and {len(req.outputs)}")
    values: list[Any] = []
    for k, (loc, dtype) in enumerate(zip(req.inputs, dtypes)):
        if loc is None:
            values.append(None)
            continue
        slot, offset, length, dims = loc
        dims = dims or ()
        count = math.prod(dims)
        if slot == INLINE_SLOT:
            _check_range(req.data, offset, length, count, dtype, dims, f"input {k}")
            values.append(np.frombuffer(req.data, dtype, count, offset).reshape(dims))
        elif 0 <= slot < len(req.pools):
            values.append(pool_view(attach(req.pools[slot], f"input {k}"), offset, length, count, dtype, dims, f"input {k}"))
        else:
            raise InvalidArgumentError(f"request: input {k} names pool {slot}; the packet has {len(req.pools)}")
    return values


def inline_inputs(req: RingRequest) -> list[bool]:
    """Per input, whether its value is a view of the packet (to copy before the packet is freed;
    a pool's view stays valid)."""
    return [loc is not None and loc[0] == INLINE_SLOT for loc in req.inputs]


#: The largest array numpy can shape (its dimensions without the zeros, in bytes): an empty
#: tensor whose other dimensions are larger cannot be made either. (A non-empty one is bounded
#: by its bytes in the packet, so only an empty one needs ``_unshapeable``.)
_MAX_BYTES = np.iinfo(np.intp).max


def _unshapeable(count: int, dims: tuple[int, ...], dtype: np.dtype[Any]) -> bool:
    return count == 0 and math.prod(d for d in dims if d) * dtype.itemsize > _MAX_BYTES


def _check_range(raw: Any, offset: int, length: int, count: int, dtype: np.dtype[Any], dims: tuple[int, ...],
                 what: str) -> None:
    if (length != count * dtype.itemsize or offset < 0 or offset + length > len(raw)
            or _unshapeable(count, dims, dtype)):  # (0 x 2^40 x 2^40: no array)
        raise InvalidArgumentError(f"request: {what}'s {length} bytes at {offset} do not hold dimensions "
                                   f"{dims} of {dtype} inside its {len(raw)}-byte pool")


def pool_view(raw: np.ndarray, offset: int, length: int, count: int, dtype: np.dtype[Any], dims: tuple[int, ...],
              what: str) -> np.ndarray:
    """The service's view of ``length`` bytes at ``offset`` of a mapped pool (``raw``, flat
    uint8) as ``dims`` of ``dtype``, in place; INVALID_ARGUMENT naming ``what`` when they are
    outside the pool or are not that many elements."""
    _check_range(raw, offset, length, count, dtype, dims, what)
    return raw[offset : offset + length].view(dtype).reshape(dims)


def output_locations(req: RingRequest, dtypes: Sequence[np.dtype[Any]],
                     attach: Callable[[str, str], np.ndarray]) -> list[Any] | None:
    """The service's views of the outputs a request wants written in place (None for one that
    comes back by value; None when all do). A location outside its pool, or of a size its
    dimensions do not have, is INVALID_ARGUMENT."""
    if all(loc[0] == INLINE_SLOT for loc in req.outputs):
        return None
    outs: list[Any] = []
    for j, ((slot, offset, length, dims), dtype) in enumerate(zip(req.outputs, dtypes)):
        if slot == INLINE_SLOT:
            outs.append(None)
            continue
        if not 0 <= slot < len(req.pools):
            raise InvalidArgumentError(f"request: output {j} names pool {slot}; the packet has {len(req.pools)}")
        dims = dims or ()
        outs.append(pool_view(attach(req.pools[slot], f"output {j}"), offset, length, math.prod(dims), dtype, dims,
                              f"output {j}"))
    return outs


def encode_outputs(rid: int, ok: bool, payload: Any) -> tuple[list[Any], int]:
    """A reply (``(outputs, device_ns)`` when ``ok``, else ``_wire.error_payload``'s ``(status,
    message[, output shapes])``) as a result packet. An output written in place (``InPlace``)
    is its shape alone."""
    if not ok:
        status, message, *rest = payload
        shaped = list(rest[0]) if rest else []
        datums = result_datums(ErrorStatus(status), [d for d, _ in shaped], None, None, [s for _, s in shaped])
        return pack_result(rid, datums, str(message), [], 0)
    outputs, device_ns = payload
    data: list[Any] = []
    size = 0
    shapes = []
    for out in outputs:
        if type(out) is InPlace:
            shapes.append(tuple(out.shape))
            continue
        arr = out if type(out) is np.ndarray and out.flags.c_contiguous else np.ascontiguousarray(out)
        shapes.append(arr.shape)
        size += _bytes_of(arr, data)
    return pack_result(rid, result_datums(ErrorStatus.NONE, shapes, device_ns, device_ns), "", data, size)


def decode_outputs(buf: memoryview, dtypes: Sequence[np.dtype[Any]],
                   in_place: Sequence[bool] | None = None) -> tuple[int, bool, Any]:
    """A result packet as ``(id, ok, payload)``: the outputs copied out of the ring (``InPlace``
    with its shape for one the service wrote in place: ``in_place``) and the time on device,
    or the error to raise (with the output shapes it carries: OUTPUT_INSUFFICIENT_SIZE)."""
    rid, status, shapes, on_device_ns, message, data = unpack_result(buf)
    if status != ErrorStatus.NONE:
        return rid, False, error_for(status, message, output_shapes=[OutputShape(d, ok) for d, ok in shapes])
    if len(shapes) != len(dtypes):
        return rid, False, error_for(ErrorStatus.GENERAL_FAILURE, "result packet: wrong number of outputs")
    outputs: list[Any] = []
    pos = 0
    for j, ((dims, _ok), dtype) in enumerate(zip(shapes, dtypes)):
        if in_place is not None and in_place[j]:
            outputs.append(InPlace(dims))
            continue
        count = math.prod(dims)
        n = count * dtype.itemsize
        if pos + n > len(data) or _unshapeable(count, dims, dtype):
            return rid, False, error_for(ErrorStatus.GENERAL_FAILURE, "result packet: outputs run past its end")
        outputs.append(np.frombuffer(data, dtype, count, pos).reshape(dims).copy())
        pos += n + (-n & 7)
    return rid, True, (outputs, on_device_ns or 0)
