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

**Forms: the same packets, built and read without parsing** (the ring's fast path). Every
request of one prepared model whose inputs have one signature (shapes, all inline, no pools)
has the same bytes but for its id, deadline, loop timeout and data: its *form*. The app
packs a form once with ``pack_request`` (``RequestForm``: the header bytes, the offset of
each input's data) and then writes a request straight into the ring slot (``Ring.begin_write``):
the header copied, three integers patched, each input's bytes copied in place. The service
parses the first packet of a form in full (``unpack_request``, ``decode_execute``: every
check) and keeps what it learnt under the packet's bytes (``FormCache``); a later packet whose
header bytes are the same but for those three integers parses the same way, so it is read
with two ``struct`` calls and one ``np.frombuffer`` view per input. Results mirror it: a
``ResultForm`` is the result header of outputs of given shapes (``pack_result``), written in
place by the service and recognised by the app with one bytes comparison; any other packet
(an error, other shapes, a malformed or foreign one) takes the full parse. One encoder and one
parser: a form is their output, kept.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from nnrt.burst._packet import (
    HEADER_DATUMS,
    INLINE_SLOT,
    RawLocation,
    RingRequest,
    pack_request,
    pack_result,
    request_datums,
    result_datums,
    seconds_to_ns,
    unpack_result,
)
from nnrt.errors import InvalidArgumentError, error_for
from nnrt.process._wire import InPlace, PoolRef, encode_args
from nnrt.types import ErrorStatus, OutputShape

if TYPE_CHECKING:
    from nnrt.model import Model
    from nnrt.process._arena import Arena
    from nnrt.process._fmq import Ring

__all__ = [
    "Expect",
    "FormCache",
    "RequestForm",
    "ResultForm",
    "ServiceForm",
    "decode_execute",
    "decode_outputs",
    "encode_execute",
    "encode_outputs",
    "io_dtypes",
    "output_locations",
    "read_result",
    "request_form",
    "write_result",
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
    outputs: list[RawLocation] = [_INLINE_OUT] * n_outputs
    pools: list[str] = []
    if out_refs is not None:
        for j, ref in enumerate(out_refs):
            if ref is None:
                continue
            if type(ref) is not PoolRef or type(ref.pool) is not str:
                return None
            if ref.pool not in pools:
                pools.append(ref.pool)
            n = math.prod(ref.shape) * np.dtype(ref.dtype).itemsize
            outputs[j] = (pools.index(ref.pool), ref.offset, n, tuple(ref.shape))
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
    datums = request_datums(inputs, outputs, True, deadline, loop_timeout)
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
        raw = attach(req.pools[slot], f"output {j}")
        dims = dims or ()
        count = math.prod(dims)
        if length != count * dtype.itemsize or offset < 0 or offset + length > len(raw):
            raise InvalidArgumentError(f"request: output {j}'s {length} bytes at {offset} do not hold dimensions "
                                       f"{dims} of {dtype} inside its {len(raw)}-byte pool")
        outs.append(raw[offset : offset + length].view(dtype).reshape(dims))
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
        if pos + n > len(data):
            return rid, False, error_for(ErrorStatus.GENERAL_FAILURE, "result packet: outputs run past its end")
        outputs.append(np.frombuffer(data, dtype, count, pos).reshape(dims).copy())
        pos += n + (-n & 7)
    return rid, True, (outputs, on_device_ns or 0)


# -- forms (module docstring) ------------------------------------------------------------------

_Q = struct.Struct("<q")
_QQ = struct.Struct("<2q")
_HEAD = struct.Struct("<5q")  # a request's id, handle, app name length, pool count, flat size
#: Where a request's flat header puts the deadline and loop timeout (no pools: 4 datums before it).
_TIMES_AT = 8 * (4 + 4)
_KEY_END = _TIMES_AT + 16  # the form's bytes resume after the two times
_SMALL = 1024  # up to this many bytes, ``tobytes()`` copies faster than a cast view (~200 vs ~330 ns)
#: Forms a service keeps (each a few hundred bytes); the oldest goes first.
MAX_FORMS = 256


def _copy_in(data: memoryview, pos: int, arr: np.ndarray, n: int) -> None:
    """Copy ``arr``'s ``n`` bytes to ``data[pos:]`` (C order)."""
    if n <= _SMALL or not arr.flags.c_contiguous:
        data[pos : pos + n] = arr.tobytes()
    else:
        data[pos : pos + n] = arr.data.cast("B")


class ResultForm:
    """The result packet of a success whose outputs have these shapes and dtypes."""

    __slots__ = ("data_end", "dtypes", "head", "key", "nbytes", "outputs", "shapes")

    def __init__(self, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype[Any]]) -> None:
        parts, n_head = pack_result(0, result_datums(ErrorStatus.NONE, shapes, 0, 0), "", [], 0)
        self.head = b"".join(bytes(p) for p in parts)
        self.key = self.head[8:-16]  # all but the id and the two times
        self.shapes = tuple(tuple(s) for s in shapes)
        self.dtypes = list(dtypes)
        outputs = []
        pos = n_head
        for dims, dtype in zip(self.shapes, self.dtypes):
            count = math.prod(dims)
            n = count * dtype.itemsize
            outputs.append((pos, count, n, dtype, dims))
            pos += n + (-n & 7)
        self.outputs = tuple(outputs)
        self.nbytes = pos
        self.data_end = len(self.head)

    def matches(self, outputs: Sequence[Any]) -> bool:
        """Whether ``outputs`` (the service's) are arrays of this form's shapes and dtypes."""
        if len(outputs) != len(self.outputs):
            return False
        for out, (_pos, _count, _n, dtype, dims) in zip(outputs, self.outputs):
            if type(out) is not np.ndarray or out.shape != dims or out.dtype != dtype:
                return False
        return True

    def read(self, pkt: memoryview, into: Sequence[np.ndarray | None] | None) -> tuple[list[Any], int] | None:
        """The outputs and time on device of a result packet of this form, copied out of the
        ring (into the caller's buffers ``into`` where they have exactly the output's shape and
        dtype); None when ``pkt`` is not of this form (then parse it in full)."""
        end = self.data_end
        if len(pkt) != self.nbytes or pkt[8 : end - 16] != self.key:
            return None
        on, drv = _QQ.unpack_from(pkt, end - 16)
        if not 0 <= on <= drv:
            return None  # the full parse says why (a malformed timing)
        outs: list[Any] = []
        for j, (pos, count, _n, dtype, dims) in enumerate(self.outputs):
            view = np.frombuffer(pkt, dtype, count, pos).reshape(dims)
            buf = into[j] if into is not None else None
            if buf is not None and buf.shape == dims and buf.dtype == dtype:
                buf[...] = view
                outs.append(buf)
            else:
                outs.append(view.copy())
        return outs, on


class Expect(NamedTuple):
    """What the app reads a ring result with: the outputs' dtypes, the result form a success
    has when known (``ResultForm``), and the caller's output buffers it may fill directly."""

    dtypes: Sequence[np.dtype[Any]]
    form: ResultForm | None = None
    into: Sequence[np.ndarray | None] | None = None
    #: Per output, whether the service writes it in place (its result carries only the shape).
    in_place: Sequence[bool] | None = None


def read_result(pkt: memoryview, expect: Expect) -> tuple[int, bool, Any]:
    """A result packet as ``(id, ok, payload)`` (``decode_outputs``'s answer), read through
    ``expect.form`` when the packet has it."""
    form = expect.form
    if form is not None:
        got = form.read(pkt, expect.into)
        if got is not None:
            return _Q.unpack_from(pkt)[0], True, got
    return decode_outputs(pkt, expect.dtypes, expect.in_place)


def write_result(ring: Ring, form: ResultForm, rid: int, outputs: Sequence[np.ndarray], device_ns: int) -> bool:
    """Write a success of ``form`` (``form.matches(outputs)``) straight into the ring; False
    when there is no room now (nothing written)."""
    pos = ring.begin_write(form.nbytes)
    if pos < 0:
        return False
    data = ring.data
    end = form.data_end
    data[pos : pos + end] = form.head
    _Q.pack_into(data, pos, rid)
    _QQ.pack_into(data, pos + end - 16, device_ns, device_ns)
    for out, (off, _count, n, _dtype, _dims) in zip(outputs, form.outputs):
        if n:
            _copy_in(data, pos + off, out, n)
    ring.commit_write()
    return True


class RequestForm:
    """The request packets of one prepared model (``handle``, ``app``) for one input signature
    (module docstring): ``write`` puts one in the ring; ``result`` is the form of its success
    when the model's outputs are fully specified (None: its results are parsed in full)."""

    __slots__ = ("data_end", "expect", "head", "inputs", "nbytes")

    def __init__(self, handle: int, app: str, shapes: Sequence[tuple[int, ...] | None],
                 dtypes: Sequence[np.dtype[Any]], out_dtypes: Sequence[np.dtype[Any]], result: ResultForm | None) -> None:
        locs: list[RawLocation | None] = []
        inputs = []
        size = 0
        for dims, dtype in zip(shapes, dtypes):
            if dims is None:
                locs.append(None)
                continue
            n = math.prod(dims) * dtype.itemsize
            locs.append((INLINE_SLOT, size, n, dims))
            inputs.append((size, n))
            size += n + (-n & 7)
        datums = request_datums(locs, [_INLINE_OUT] * len(out_dtypes), True, None, None)
        parts, n_head = pack_request(0, handle, app, datums, [], [], 0)
        self.head = b"".join(bytes(p) for p in parts)
        self.data_end = n_head
        #: Per input with a value: (offset of its bytes in the packet, byte count).
        self.inputs = tuple((n_head + off, n) for off, n in inputs)
        self.nbytes = n_head + size
        #: How its results are read when the caller gives no output buffers.
        self.expect = Expect(out_dtypes, result)

    def write(self, ring: Ring, rid: int, values: Sequence[Any], deadline: float | None,
              loop_timeout: float | None) -> bool:
        """Write one request of this form into ``ring`` (under the producer's lock); False when
        there is no room now (nothing written)."""
        pos = ring.begin_write(self.nbytes)
        if pos < 0:
            return False
        data = ring.data
        data[pos : pos + self.data_end] = self.head
        _Q.pack_into(data, pos, rid)
        if deadline is not None or loop_timeout is not None:
            _QQ.pack_into(data, pos + _TIMES_AT, seconds_to_ns(deadline), seconds_to_ns(loop_timeout))
        k = 0
        inputs = self.inputs
        for v in values:
            if v is not None:
                off, n = inputs[k]
                k += 1
                if n:
                    _copy_in(data, pos + off, v, n)
        ring.commit_write()
        return True


def request_form(handle: int, app: str, values: Sequence[Any], dtypes: Sequence[np.dtype[Any]],
                 out_dtypes: Sequence[np.dtype[Any]], result: ResultForm | None) -> RequestForm | None:
    """The form of a request of these values, or None when they cannot travel inline in the
    ring this way (not plain arrays of the model's dtypes, or large enough for the arena)."""
    shapes: list[tuple[int, ...] | None] = []
    for v, dtype in zip(values, dtypes):
        if v is None:
            shapes.append(None)
        elif type(v) is not np.ndarray or v.dtype != dtype or v.nbytes >= ARENA_INPUT_BYTES:
            return None
        else:
            shapes.append(v.shape)
    return RequestForm(handle, app, shapes, dtypes, out_dtypes, result)


class ServiceForm:
    """What the service learnt from the first packet of a form: whose request it is, and
    where each input's data lies in the packet (``None``: an omitted input)."""

    __slots__ = ("app", "handle", "inputs", "min_bytes", "result")

    def __init__(self, app: str, handle: int, inputs: list[tuple[int, int, np.dtype[Any], tuple[int, ...]] | None],
                 min_bytes: int) -> None:
        self.app, self.handle, self.inputs, self.min_bytes = app, handle, inputs, min_bytes
        self.result: ResultForm | None = None  # learnt from the first success

    def values(self, pkt: memoryview) -> list[Any]:
        """The input values of a packet of this form (views into it)."""
        return [None if loc is None else np.frombuffer(pkt, loc[2], loc[1], loc[0]).reshape(loc[3])
                for loc in self.inputs]


class FormCache:
    """The service's forms, keyed by a packet's header bytes but for its id and times."""

    def __init__(self) -> None:
        self._forms: dict[bytes, ServiceForm] = {}
        #: Packets read through a known form (tests check the fast path is taken).
        self.hits = 0

    @staticmethod
    def _key(pkt: memoryview) -> bytes | None:
        if len(pkt) < _KEY_END:
            return None
        _rid, _handle, n_app, n_pools, size = _HEAD.unpack_from(pkt)
        if n_pools or not 0 <= n_app <= 4096 or not HEADER_DATUMS <= size <= len(pkt) >> 3:
            return None
        end = 32 + 8 * size + n_app
        if end > len(pkt):
            return None
        return pkt[8:_TIMES_AT].tobytes() + pkt[_KEY_END:end].tobytes()

    def match(self, pkt: memoryview) -> tuple[ServiceForm, float | None, float | None] | None:
        """A packet's form and its deadline and loop timeout, when its form is known."""
        key = self._key(pkt)
        form = None if key is None else self._forms.get(key)
        if form is None or len(pkt) < form.min_bytes:
            return None
        dl, to = _QQ.unpack_from(pkt, _TIMES_AT)
        if dl < -1 or to < -1:
            return None  # the full parse refuses it
        self.hits += 1
        return form, None if dl == -1 else dl / 1e9, None if to == -1 else to / 1e9

    def learn(self, pkt: memoryview, req: RingRequest, dtypes: Sequence[np.dtype[Any]]) -> ServiceForm | None:
        """Keep (and answer) the form of a packet that parsed and decoded in full (``req``), if
        it has one (no pools; every input inline or omitted)."""
        if req.pools:
            return None
        key = self._key(pkt)
        if key is None:
            return None
        base = len(pkt) - len(req.data)
        inputs: list[tuple[int, int, np.dtype[Any], tuple[int, ...]] | None] = []
        end = base
        for loc, dtype in zip(req.inputs, dtypes):
            if loc is None:
                inputs.append(None)
                continue
            slot, offset, length, dims = loc
            if slot != INLINE_SLOT:
                return None
            dims = dims or ()
            inputs.append((base + offset, math.prod(dims), dtype, dims))
            end = max(end, base + offset + length)
        if len(self._forms) >= MAX_FORMS:
            del self._forms[next(iter(self._forms))]
        form = self._forms[key] = ServiceForm(req.app, req.handle, inputs, end)
        return form

    def forget(self, app: str, handle: int) -> None:
        """Drop the forms of a released prepared model."""
        for key in [k for k, f in self._forms.items() if f.app == app and f.handle == handle]:
            del self._forms[key]

    def __len__(self) -> int:
        return len(self._forms)
