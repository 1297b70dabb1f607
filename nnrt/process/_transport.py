"""What an execution request and its result look like on a ``ProcessDevice``'s rings.

The rings (``nnrt.process._fmq``) carry the burst packets' binary form
(``nnrt.burst._packet``: ``pack_request`` / ``unpack_request``, ``pack_result`` /
``unpack_result``). This module turns the interpreter's input values into such a request
and the service's outputs into such a result, and back:

* an input that is a view of a named shared-memory segment (a ``Memory.from_shared_memory``
  location, or a large array the device copied into its arena: ``_wire.encode_args``'s rule)
  is a location in a *pool* named by the segment's name (a mapped file's pool, or a device
  buffer, has no name here: that request goes over the socket); any other array's bytes go inline,
  in the packet's data section; an omitted optional input is a location-less input;
* outputs come back inline in the result, each as its shape and bytes; the dtype of every
  operand is the model's, which both sides hold (an array of another dtype, or a value that
  is not an array, makes ``encode_execute`` answer None: that request goes over the socket);
* a failure is a result with its status and message, no shapes, timing unavailable.
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
from nnrt.process._wire import PoolRef, encode_args
from nnrt.types import ErrorStatus

if TYPE_CHECKING:
    from nnrt.model import Model
    from nnrt.process._arena import Arena

__all__ = ["decode_execute", "decode_outputs", "encode_execute", "encode_outputs", "io_dtypes"]

_PAD = bytes(8)


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
                   arena: Arena | None) -> tuple[list[Any], int, list[tuple[int, int]]] | None:
    """An execute request's binary packet: (parts, size, arena blocks to free afterwards), or
    None when a value cannot travel this way (then nothing was taken from the arena)."""
    big = False
    for v, dtype in zip(values, dtypes):
        if v is not None and (type(v) is not np.ndarray or v.dtype != dtype):
            return None
        big = big or (v is not None and v.nbytes >= 4096)
    wire, blocks = encode_args(list(values), arena) if big else (values, [])
    inputs: list[RawLocation | None] = []
    pools: list[str] = []
    data: list[Any] = []
    size = 0
    for v, w in zip(values, wire):
        if v is None:
            inputs.append(None)
        elif type(w) is PoolRef:
            if type(w.pool) is not str:  # a mapped file (by path): the socket's form only
                for offset, nbytes in blocks:
                    arena.free(offset, nbytes)  # type: ignore[union-attr]
                return None
            if w.pool not in pools:
                pools.append(w.pool)
            inputs.append((pools.index(w.pool), w.offset, v.nbytes, v.shape))
        else:
            arr = v if v.flags.c_contiguous else np.ascontiguousarray(v)
            inputs.append((INLINE_SLOT, size, arr.nbytes, arr.shape))
            size += _bytes_of(arr, data)
    datums = request_datums(inputs, [_INLINE_OUT] * n_outputs, True, deadline, loop_timeout)
    parts, nbytes = pack_request(rid, handle, app, datums, pools, data, size)
    return parts, nbytes, blocks


_INLINE_OUT: RawLocation = (INLINE_SLOT, 0, 0, None)


def decode_execute(req: RingRequest, dtypes: Sequence[np.dtype[Any]], n_outputs: int,
                   attach: Callable[[str, str], np.ndarray]) -> list[Any]:
    """The service's input values of a request (views of the packet or of the pools: copy them
    before the packet is freed if they must outlive it). A location outside its data, or
    counts that do not match the model, are INVALID_ARGUMENT."""
    if len(req.inputs) != len(dtypes) or len(req.outputs) != n_outputs:
        raise InvalidArgumentError(f"request: the model has {len(dtypes)} inputs and {n_outputs} outputs, the packet "
                                   f"{len(req.inputs)} and {len(req.outputs)}")
    values: list[Any] = []
    for k, (loc, dtype) in enumerate(zip(req.inputs, dtypes)):
        if loc is None:
            values.append(None)
            continue
        slot, offset, length, dims = loc
        if dims is None:
            dims = ()
        count = math.prod(dims)
        n = count * dtype.itemsize
        if slot == INLINE_SLOT:
            raw: Any = req.data
        elif 0 <= slot < len(req.pools):
            raw = attach(req.pools[slot], f"input {k}")
        else:
            raise InvalidArgumentError(f"request: input {k} names pool {slot}; the packet has {len(req.pools)}")
        if length != n or offset < 0 or offset + n > len(raw):
            raise InvalidArgumentError(f"request: input {k}'s {length} bytes at {offset} do not hold dimensions "
                                       f"{dims} of {dtype} inside its {len(raw)}-byte pool")
        values.append(np.frombuffer(raw, dtype, count, offset).reshape(dims))
    return values


def encode_outputs(rid: int, ok: bool, payload: Any) -> tuple[list[Any], int]:
    """A reply (``(outputs, device_ns)`` when ``ok``, else ``(status, message)``) as a result packet."""
    if not ok:
        status, message = payload
        return pack_result(rid, result_datums(ErrorStatus(status), (), None, None), str(message), [], 0)
    outputs, device_ns = payload
    data: list[Any] = []
    size = 0
    shapes = []
    for out in outputs:
        arr = out if type(out) is np.ndarray and out.flags.c_contiguous else np.ascontiguousarray(out)
        shapes.append(arr.shape)
        size += _bytes_of(arr, data)
    return pack_result(rid, result_datums(ErrorStatus.NONE, shapes, device_ns, device_ns), "", data, size)


def decode_outputs(buf: memoryview, dtypes: Sequence[np.dtype[Any]]) -> tuple[int, bool, Any]:
    """A result packet as ``(id, ok, payload)``: the outputs copied out of the ring and the time
    on device, or the error to raise."""
    rid, status, shapes, on_device_ns, message, data = unpack_result(buf)
    if status != ErrorStatus.NONE:
        return rid, False, error_for(status, message)
    if len(shapes) != len(dtypes):
        return rid, False, error_for(ErrorStatus.GENERAL_FAILURE, "result packet: wrong number of outputs")
    outputs = []
    pos = 0
    for (dims, _ok), dtype in zip(shapes, dtypes):
        count = math.prod(dims)
        n = count * dtype.itemsize
        if pos + n > len(data):
            return rid, False, error_for(ErrorStatus.GENERAL_FAILURE, "result packet: outputs run past its end")
        outputs.append(np.frombuffer(data, dtype, count, pos).reshape(dims).copy())
        pos += n + (-n & 7)
    return rid, True, (outputs, on_device_ns or 0)
