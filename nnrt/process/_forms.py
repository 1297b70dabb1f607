"""The lean path of a ``ProcessDevice``'s rings: the same burst packets, built and read without parsing.

Every request of one prepared model with one signature (its inputs' shapes, and the pools and
offsets of the arguments that lie in pools both processes map: ``nnrt.process._transport``)
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

A request whose arguments lie in a shared pool is a form too, whatever their size: the pools'
names and the locations are part of its header, and neither side touches their bytes (the app
remembers where an array lies per array object; the service finds its mapping by name). So a
1 MB input in a ``Memory`` costs what a 1 KB one does (``benchmarks/process.py`` (b)).
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
)
from nnrt.process._transport import ARENA_INPUT_BYTES, INLINE_OUT, decode_outputs, pool_view
from nnrt.process._wire import InPlace
from nnrt.types import ErrorStatus

if TYPE_CHECKING:
    from nnrt.process._fmq import Ring

__all__ = [
    "MAX_FORMS",
    "MAX_FORM_POOLS",
    "Expect",
    "FormCache",
    "Origin",
    "RequestForm",
    "ResultForm",
    "ServiceForm",
    "read_result",
    "request_form",
    "write_result",
]


_Q = struct.Struct("<q")
_QQ = struct.Struct("<2q")
#: Where a request's flat header puts the deadline and loop timeout (no pools: 4 datums before it).
_HEAD = struct.Struct("<4q")  # a request's id, handle, app name length, pool count


def _times_at(n_pools: int) -> int:
    """Where a request's deadline datum is: after the 4-datum header, the pools' name lengths
    and 4 datums of the flat request (size, counts, measure_timing)."""
    return 8 * (4 + n_pools + 4)


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
    """The result packet of a success whose outputs have these shapes and dtypes; an output
    written in place (``in_place``: into a shared pool) is its shape alone (``InPlace``)."""

    __slots__ = ("data_end", "dtypes", "head", "key", "nbytes", "outputs", "shapes")

    def __init__(self, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype[Any] | None],
                 in_place: Sequence[bool] | None = None) -> None:
        parts, n_head = pack_result(0, result_datums(ErrorStatus.NONE, shapes, 0, 0), "", [], 0)
        self.head = b"".join(bytes(p) for p in parts)
        self.key = self.head[8:-16]  # all but the id and the two times
        self.shapes = tuple(tuple(s) for s in shapes)
        #: Per output its dtype, None for one written in place.
        self.dtypes = [None if in_place is not None and in_place[j] else d for j, d in enumerate(dtypes)]
        outputs = []
        pos = n_head
        for dims, dtype in zip(self.shapes, self.dtypes):
            count = math.prod(dims)
            n = 0 if dtype is None else count * dtype.itemsize
            outputs.append((pos, count, n, dtype, dims))
            pos += n + (-n & 7)
        self.outputs = tuple(outputs)
        self.nbytes = pos
        self.data_end = len(self.head)

    def matches(self, outputs: Sequence[Any]) -> bool:
        """Whether ``outputs`` (the service's) are arrays of this form's shapes and dtypes (and
        ``InPlace`` of its shape where it has an output written in place)."""
        if len(outputs) != len(self.outputs):
            return False
        for out, (_pos, _count, _n, dtype, dims) in zip(outputs, self.outputs):
            if dtype is None:
                if type(out) is not InPlace or tuple(out.shape) != dims:
                    return False
            elif type(out) is not np.ndarray or out.shape != dims or out.dtype != dtype:
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
            if dtype is None:
                outs.append(InPlace(dims))
                continue
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


def write_result(ring: Ring, form: ResultForm, rid: int, outputs: Sequence[Any], device_ns: int) -> bool:
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


#: Where an argument lives in a shared-memory segment: (the segment's name, byte offset).
Origin = tuple[str, int]


class RequestForm:
    """The request packets of one prepared model (``handle``, ``app``) for one signature: its
    inputs' shapes, and where each input and output lives when it is in a shared-memory
    segment (``origins``, ``outs``; the module docstring): ``write`` puts one in the ring, the
    bytes of the inline inputs copied in, nothing of a pool's. ``result`` is the form of its
    success when the model's outputs are fully specified (None: its results are parsed in full)."""

    __slots__ = ("data_end", "expect", "head", "inputs", "nbytes", "times_at")

    def __init__(self, handle: int, app: str, shapes: Sequence[tuple[int, ...] | None],
                 dtypes: Sequence[np.dtype[Any]], out_dtypes: Sequence[np.dtype[Any]], result: ResultForm | None,
                 origins: Sequence[Origin | None] | None = None,
                 outs: Sequence[tuple[str, int, tuple[int, ...]] | None] | None = None) -> None:
        pools: list[str] = []

        def slot(name: str) -> int:  # outputs' pools first, as ``encode_execute`` numbers them
            if name not in pools:
                pools.append(name)
            return pools.index(name)

        outputs = [INLINE_OUT] * len(out_dtypes)
        for j, out in enumerate(outs or ()):
            if out is not None:
                outputs[j] = (slot(out[0]), out[1], math.prod(out[2]) * out_dtypes[j].itemsize, tuple(out[2]))
        locs: list[RawLocation | None] = []
        inputs = []
        size = 0
        for k, (dims, dtype) in enumerate(zip(shapes, dtypes)):
            if dims is None:
                locs.append(None)
                continue
            n = math.prod(dims) * dtype.itemsize
            where = origins[k] if origins is not None else None
            if where is not None:
                locs.append((slot(where[0]), where[1], n, dims))
                inputs.append((-1, 0))  # nothing to copy
                continue
            locs.append((INLINE_SLOT, size, n, dims))
            inputs.append((size, n))
            size += n + (-n & 7)
        datums = request_datums(locs, outputs, True, None, None)
        parts, n_head = pack_request(0, handle, app, datums, pools, [], 0)
        self.head = b"".join(bytes(p) for p in parts)
        self.data_end = n_head
        #: Where the deadline and loop timeout datums are (after the pools' name lengths).
        self.times_at = _times_at(len(pools))
        #: Per input with a value: (offset of its bytes in the packet, byte count; 0 in a pool).
        self.inputs = tuple((n_head + off, n) for off, n in inputs)
        self.nbytes = n_head + size
        #: How its results are read when the caller gives no output buffers.
        in_place = None if outs is None else [o is not None for o in outs]
        if in_place is not None and result is not None:
            result = ResultForm(result.shapes, out_dtypes, in_place)
        self.expect = Expect(out_dtypes, result, in_place=in_place)

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
            _QQ.pack_into(data, pos + self.times_at, seconds_to_ns(deadline), seconds_to_ns(loop_timeout))
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
                 out_dtypes: Sequence[np.dtype[Any]], result: ResultForm | None,
                 origins: Sequence[Origin | None] | None = None,
                 outs: Sequence[tuple[str, int, tuple[int, ...]] | None] | None = None) -> RequestForm | None:
    """The form of a request of these values, or None when they cannot travel this way (not
    plain arrays of the model's dtypes, or large enough for the arena and in no shared-memory
    segment). ``origins`` (per input) and ``outs`` (per output: name, offset, shape) say which
    are in shared-memory segments (``RequestForm``); ``encode_execute`` packs the same bytes."""
    shapes: list[tuple[int, ...] | None] = []
    for k, (v, dtype) in enumerate(zip(values, dtypes)):
        if v is None:
            shapes.append(None)
        elif (type(v) is not np.ndarray or v.dtype != dtype
              or (v.nbytes >= ARENA_INPUT_BYTES and (origins is None or origins[k] is None))):
            return None
        else:
            shapes.append(v.shape)
    return RequestForm(handle, app, shapes, dtypes, out_dtypes, result, origins, outs)


#: Where the service finds one argument of a form: (pool name, or None for the packet's data
#: section; byte offset; byte count; element count; dtype; dimensions; "input k" / "output j").
_Place = tuple[str | None, int, int, int, np.dtype[Any], tuple[int, ...], str]
#: A packet naming more pools than this is parsed in full every time.
MAX_FORM_POOLS = 16


def _place(loc: RawLocation, pools: Sequence[str], base: int, dtype: np.dtype[Any], what: str) -> _Place:
    slot, offset, length, dims = loc
    dims = dims or ()
    if slot == INLINE_SLOT:
        return None, base + offset, length, math.prod(dims), dtype, dims, what
    return pools[slot], offset, length, math.prod(dims), dtype, dims, what


class ServiceForm:
    """What the service learnt from the first packet of a form: whose request it is, where
    each input lies (``None``: an omitted input), in the packet or at a place in a pool, and
    where outputs written in place go (``outs``: None when all come back by value)."""

    __slots__ = ("app", "handle", "inline", "inputs", "min_bytes", "outs", "result")

    def __init__(self, app: str, handle: int, inputs: list[_Place | None], min_bytes: int,
                 outs: list[_Place | None] | None = None) -> None:
        self.app, self.handle, self.inputs, self.min_bytes, self.outs = app, handle, inputs, min_bytes, outs
        #: Per input, whether its value is a view of the packet (``inline_inputs``).
        self.inline = [p is not None and p[0] is None for p in inputs]
        self.result: ResultForm | None = None  # learnt from the first success

    def values(self, pkt: memoryview, attach: Callable[[str, str], np.ndarray]) -> list[Any]:
        """The input values of a packet of this form: views into it, or into the pools (mapped
        by ``attach``, each use checked as ``decode_execute`` checks it)."""
        out: list[Any] = []
        for p in self.inputs:
            if p is None:
                out.append(None)
            elif p[0] is None:
                out.append(np.frombuffer(pkt, p[4], p[3], p[1]).reshape(p[5]))
            else:
                out.append(pool_view(attach(p[0], p[6]), *p[1:]))
        return out

    def outputs(self, attach: Callable[[str, str], np.ndarray]) -> list[Any] | None:
        """The views of the outputs written in place (``output_locations``' answer)."""
        if self.outs is None:
            return None
        return [None if p is None else pool_view(attach(p[0], p[6]), *p[1:]) for p in self.outs]  # type: ignore[arg-type]


class FormCache:
    """The service's forms, keyed by a packet's header bytes but for its id and times."""

    def __init__(self) -> None:
        self._forms: dict[bytes, ServiceForm] = {}
        #: Packets read through a known form (tests check the fast path is taken).
        self.hits = 0

    @staticmethod
    def _key(pkt: memoryview) -> tuple[bytes, int] | None:
        """The packet's bytes but for its id and times (up to the end of the names), and where
        its times are."""
        if len(pkt) < 32:
            return None
        _rid, _handle, n_app, n_pools = _HEAD.unpack_from(pkt)
        if not 0 <= n_pools <= MAX_FORM_POOLS or not 0 <= n_app <= 4096:
            return None
        times = _times_at(n_pools)
        if len(pkt) < times + 16:
            return None
        size = _Q.unpack_from(pkt, 32 + 8 * n_pools)[0]
        names = sum(struct.unpack_from(f"<{n_pools}q", pkt, 32)) if n_pools else 0
        if not HEADER_DATUMS <= size <= len(pkt) >> 3:
            return None
        end = 32 + 8 * (n_pools + size) + n_app + names
        if not times + 16 <= end <= len(pkt):
            return None
        return pkt[8:times].tobytes() + pkt[times + 16 : end].tobytes(), times

    def match(self, pkt: memoryview) -> tuple[ServiceForm, float | None, float | None] | None:
        """A packet's form and its deadline and loop timeout, when its form is known."""
        key = self._key(pkt)
        form = None if key is None else self._forms.get(key[0])
        if form is None or len(pkt) < form.min_bytes:
            return None
        dl, to = _QQ.unpack_from(pkt, key[1])  # type: ignore[index]
        if dl < -1 or to < -1:
            return None  # the full parse refuses it
        self.hits += 1
        return form, None if dl == -1 else dl / 1e9, None if to == -1 else to / 1e9

    def learn(self, pkt: memoryview, req: RingRequest, dtypes: Sequence[np.dtype[Any]],
              out_dtypes: Sequence[np.dtype[Any]] | None = None) -> ServiceForm | None:
        """Keep (and answer) the form of a packet that parsed and decoded in full (``req``), if
        it has one (at most ``MAX_FORM_POOLS`` pools; ``out_dtypes`` are needed when it has
        outputs written in place)."""
        key = self._key(pkt)
        if key is None:
            return None
        base = len(pkt) - len(req.data)
        inputs: list[_Place | None] = []
        end = base
        for k, (loc, dtype) in enumerate(zip(req.inputs, dtypes)):
            if loc is None:
                inputs.append(None)
                continue
            inputs.append(_place(loc, req.pools, base, dtype, f"input {k}"))
            if loc[0] == INLINE_SLOT:
                end = max(end, base + loc[1] + loc[2])
        outs: list[_Place | None] | None = None
        if any(loc[0] != INLINE_SLOT for loc in req.outputs):
            if out_dtypes is None:
                return None
            outs = [None if loc[0] == INLINE_SLOT else _place(loc, req.pools, base, dtype, f"output {j}")
                    for j, (loc, dtype) in enumerate(zip(req.outputs, out_dtypes))]
        if len(self._forms) >= MAX_FORMS:
            del self._forms[next(iter(self._forms))]
        form = self._forms[key[0]] = ServiceForm(req.app, req.handle, inputs, end, outs)
        return form

    def forget(self, app: str, handle: int) -> None:
        """Drop the forms of a released prepared model."""
        for key in [k for k, f in self._forms.items() if f.app == app and f.handle == handle]:
            del self._forms[key]

    def __len__(self) -> int:
        return len(self._forms)
