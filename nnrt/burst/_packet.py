"""Burst packets: what travels on a burst's request and result channels, and how it is checked.

NNAPI's HIDL burst (digest section 4) sends flat packets of 32-bit datums over two fast
message queues. nnrt keeps the same content in frozen dataclasses, which is what the in-process
channels carry, and a flat datum form (``encode_request`` / ``decode_request``) for transports
that carry integers only and for the fuzz tests. A request names its data by *memory slot*,
offset, length and dimensions, never by pointer or array:

* ``RequestPacket``: one ``Location`` per model input (``None`` for an omitted optional
  input) and per output, ``measure_timing``, ``deadline`` (absolute seconds on the device
  clock, or ``None``) and ``loop_timeout`` (seconds, or ``None`` for NNAPI's 2 s default);
* ``ResultPacket``: ``status``, one ``OutputShape`` per output (only for NONE and
  OUTPUT_INSUFFICIENT_SIZE), ``timing`` (only for NONE with timing asked for), and a message.

Checking is split the way NNAPI's server splits it. ``check_request`` looks at the packet's
*form* (types, counts, non-negative integers): a packet that fails it is malformed, and the
server answers GENERAL_FAILURE. A packet the client builds from a caller's arguments is never
malformed: ``client_args`` and ``client_times`` check those arguments first and refuse them as
``execute`` does, with INVALID_ARGUMENT (a list of arguments, a real deadline, a non-negative
loop timeout). Whether the values make sense for this model and these pools (known slot,
range inside the pool, dimensions that match the model) is the server's request validation,
and fails with INVALID_ARGUMENT.

Flat form: a header ``[size, n_inputs, n_outputs, measure_timing, deadline_ns, loop_timeout_ns]``
(``size`` counts every datum including itself; -1 for "no deadline" / "default timeout"), then
per input and per output ``[has_value, slot, offset, length, n_dims, *dims]``, where ``n_dims`` is
-1 for "no dimensions given" (``Location.dimensions`` None) and 0 for rank 0 (``()``).
A result's flat form is ``[size, status, n_outputs, *per output [is_sufficient, n_dims, *dims],
on_device_ns, in_driver_ns]`` (-1: timing unavailable).

Binary form (the shared-memory rings of a ``ProcessDevice``, ``nnrt.process._fmq``): little-endian
int64 datums, then bytes. A request is ``[id, handle, app_bytes, n_pools, *pool_name_bytes,
*flat request]``, the app's name and the pools' names (UTF-8), padding to 8 bytes, then a data
section: a location whose slot is ``INLINE_SLOT`` names bytes of that section (offset from its
start); slot ``k >= 0`` names the k-th pool (by name: a shared-memory segment, or a
mapped file spelled out, ``nnrt.process._pools.ring_name``). An output location is
``INLINE_SLOT`` (the result carries its bytes) or in a pool (the service writes it there; the
result carries its shape alone). A result is ``[id,
message_bytes, *flat result]``, the message, padding, then each output's bytes padded to 8
(its dtype is the model's). ``unpack_request`` checks every count and length against the
packet's size (``MalformedPacketError`` otherwise); ``packet_id`` reads the id alone, so a
request that does not parse is still answered under its id.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from nnrt.clock import check_deadline
from nnrt.errors import GeneralFailureError
from nnrt.execution._prepared import resolve_loop_timeout
from nnrt.execution._request import request_args
from nnrt.types import TIMING_UNAVAILABLE, ErrorStatus, OutputShape, Timing

__all__ = [
    "HEADER_DATUMS",
    "INLINE_SLOT",
    "Location",
    "MalformedPacketError",
    "RequestPacket",
    "ResultPacket",
    "check_header",
    "check_location",
    "check_request",
    "client_args",
    "client_times",
    "decode_request",
    "decode_result",
    "encode_request",
    "encode_result",
    "parse_request",
    "parse_result",
    "request_datums",
    "result_datums",
    "pack_request",
    "seconds_to_ns",
    "pack_result",
    "packet_id",
    "RingRequest",
    "shaped_outputs",
    "unpack_request",
    "unpack_result",
]

#: Datums in a request header: size, n_inputs, n_outputs, measure_timing, deadline_ns, loop_timeout_ns.
HEADER_DATUMS = 6
_OPERAND_DATUMS = 5  # has_value, slot, offset, length, n_dims (then the dims)
_MAX_RANK = 16  # NNAPI has no limit; a bound keeps a corrupt n_dims from allocating a huge tuple
_MAX_OPERANDS = 1 << 16
_STATUSES = {int(s): s for s in ErrorStatus}
#: The slot of a location whose bytes travel inside the packet (binary form).
INLINE_SLOT = -1
_MAX_POOLS = 1 << 10
_MAX_NAME = 1 << 12


class MalformedPacketError(GeneralFailureError):
    """A packet whose form is wrong (GENERAL_FAILURE, as NNAPI's burst server answers)."""


@dataclass(frozen=True, slots=True)
class Location:
    """Where one operand's data lives: ``length`` bytes at ``offset`` in the pool in ``slot``.

    ``dimensions`` are the operand's dimensions for this request; ``None`` means "as the model
    says" (the model's dimensions must then be fully specified). For an input, a tuple is its
    shape, as a numpy input's shape is for ``execute``: ``()`` is rank 0 (one element), valid
    for an operand of unknown rank. For an output, ``None`` or ``()`` lets the output take any
    shape that fits in ``length`` bytes; other dimensions shape the region the result fills.
    """

    slot: int
    offset: int
    length: int
    dimensions: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RequestPacket:
    """One execution request as it travels on the request channel."""

    inputs: tuple[Location | None, ...]
    outputs: tuple[Location, ...]
    measure_timing: bool = False
    deadline: float | None = None
    loop_timeout: float | None = None


@dataclass(frozen=True, slots=True)
class ResultPacket:
    """One execution result as it travels on the result channel."""

    status: ErrorStatus
    output_shapes: tuple[OutputShape, ...] = ()
    timing: Timing = TIMING_UNAVAILABLE
    message: str = field(default="", compare=False)


def shaped_outputs(arrays: list[np.ndarray], shapes: Sequence[OutputShape]) -> list[np.ndarray]:
    """The output arrays a result packet's shapes describe: each region, or the front of a flat
    region reshaped to the result's dimensions (an output location without dimensions)."""
    outs = []
    for arr, shape in zip(arrays, shapes):
        dims = shape.dimensions
        if arr.shape != dims:
            arr = arr.reshape(-1)[: math.prod(dims)].reshape(dims)
        outs.append(arr)
    return outs


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_int(value: Any) -> bool:
    return type(value) is int


def check_location(where: str, loc: Any) -> None:
    """Check one ``Location``'s form; ``where`` names it in the error."""
    if type(loc) is not Location:
        raise MalformedPacketError(f"{where}: expected a Location, got {type(loc).__name__}")
    if not (_is_int(loc.slot) and _is_int(loc.offset) and _is_int(loc.length)):
        raise MalformedPacketError(f"{where}: slot, offset and length must be integers")
    dims = loc.dimensions
    if dims is not None and (type(dims) is not tuple or len(dims) > _MAX_RANK or not all(_is_count(d) for d in dims)):
        raise MalformedPacketError(f"{where}: dimensions must be None or a tuple of at most {_MAX_RANK} non-negative integers")


def check_header(packet: Any) -> RequestPacket:
    """Check a request packet's form except its locations (the server checks each location
    object once, when it first resolves it)."""
    if type(packet) is not RequestPacket:
        raise MalformedPacketError(f"a request packet must be a RequestPacket, got {type(packet).__name__}")
    if type(packet.inputs) is not tuple or type(packet.outputs) is not tuple:
        raise MalformedPacketError("request packet: inputs and outputs must be tuples")
    if type(packet.measure_timing) is not bool:
        raise MalformedPacketError("request packet: measure_timing must be a bool")
    numbers = (int, float, type(None))
    if type(packet.deadline) not in numbers or type(packet.loop_timeout) not in numbers:
        raise MalformedPacketError("request packet: deadline and loop_timeout must be numbers of seconds or None")
    return packet


def check_request(packet: Any) -> RequestPacket:
    """Check a request packet's form; raise ``MalformedPacketError`` (GENERAL_FAILURE) if wrong.

    Only the form: slots, offsets and lengths may still be out of range (INVALID_ARGUMENT,
    decided by the server, which knows its pools and the model).
    """
    checked = check_header(packet)
    for k, loc in enumerate(checked.inputs):
        if loc is not None:
            check_location(f"input {k}", loc)
    for j, loc in enumerate(checked.outputs):
        check_location(f"output {j}", loc)
    return checked


def client_args(inputs: Any, outputs: Any) -> tuple[Any, Any]:
    """A burst client's ``inputs``/``outputs`` checked like ``PreparedModel.execute``'s: other
    sequences become lists, anything else is INVALID_ARGUMENT (never a malformed packet)."""
    if type(inputs) is not list and type(inputs) is not tuple:
        inputs = request_args(inputs, "inputs")
    if outputs is not None and type(outputs) is not list and type(outputs) is not tuple:
        outputs = request_args(outputs, "outputs")
    return inputs, outputs


def client_times(deadline: Any, loop_timeout: Any) -> None:
    """A client's ``deadline`` and ``loop_timeout`` checked as ``execute`` checks them
    (INVALID_ARGUMENT), before the client packs anything."""
    if deadline is not None:
        check_deadline(deadline, "burst request")
    if loop_timeout is not None:
        resolve_loop_timeout(loop_timeout)


# -- flat datum form ---------------------------------------------------------------------------


#: A location in raw form: ``(slot, offset, length, dimensions or None)``; None for no value.
RawLocation = tuple[int, int, int, "tuple[int, ...] | None"]


#: Seconds from which a deadline or timeout no longer fits in an int64 of nanoseconds: it is
#: "never" (``+inf`` included), the datum's -1.
_NEVER_S = ((1 << 63) - 1) / 1e9


def seconds_to_ns(seconds: float | None) -> int:
    """A deadline or loop timeout as a datum: nanoseconds, or -1 for None and for times too far
    to count in an int64 (``+inf``: never)."""
    return -1 if seconds is None or seconds >= _NEVER_S else round(seconds * 1e9)


def request_datums(inputs: Sequence[RawLocation | None], outputs: Sequence[RawLocation], measure_timing: bool,
                   deadline: float | None, loop_timeout: float | None) -> list[int]:
    """The flat datum form from raw locations (no checks: for a client that built them)."""
    body: list[int] = [0, len(inputs), len(outputs), int(measure_timing), seconds_to_ns(deadline),
                       seconds_to_ns(loop_timeout)]
    for loc in (*inputs, *outputs):
        if loc is None:
            body.extend((0, 0, 0, 0, 0))
            continue
        slot, offset, length, dims = loc
        if dims is None:
            body.extend((1, slot, offset, length, -1))
        else:
            body.extend((1, slot, offset, length, len(dims), *dims))
    body[0] = len(body)
    return body


def encode_request(packet: RequestPacket) -> tuple[int, ...]:
    """The flat datum form of a (well-formed) request packet."""
    check_request(packet)
    raw = [None if loc is None else (loc.slot, loc.offset, loc.length, loc.dimensions) for loc in packet.inputs]
    outs = [(loc.slot, loc.offset, loc.length, loc.dimensions) for loc in packet.outputs]
    return tuple(request_datums(raw, outs, packet.measure_timing, packet.deadline, packet.loop_timeout))


def parse_request(datums: Sequence[int]) -> tuple[list[RawLocation | None], list[RawLocation], bool, float | None, float | None]:
    """Parse the flat datum form (integers) into raw locations, checking every count, length
    and discriminator: ``(inputs, outputs, measure_timing, deadline, loop_timeout)``."""
    if len(datums) < HEADER_DATUMS or datums[0] != len(datums):
        got = datums[0] if datums else "nothing"
        raise MalformedPacketError(f"request packet: size datum says {got}, the packet has {len(datums)} datums")
    _, n_in, n_out, measure, deadline_ns, timeout_ns = datums[:HEADER_DATUMS]
    if not (_is_count(n_in) and _is_count(n_out)) or n_in + n_out > _MAX_OPERANDS:
        raise MalformedPacketError(f"request packet: bad operand counts ({n_in} inputs, {n_out} outputs)")
    if measure not in (0, 1) or deadline_ns < -1 or timeout_ns < -1:
        raise MalformedPacketError("request packet: bad measure_timing, deadline or loop timeout datum")
    pos = HEADER_DATUMS
    end = len(datums)
    locations: list[RawLocation | None] = []
    for k in range(n_in + n_out):
        if pos + _OPERAND_DATUMS > end:
            raise MalformedPacketError(f"request packet: truncated at {_where(k, n_in)}")
        has_value, slot, offset, length, n_dims = datums[pos : pos + _OPERAND_DATUMS]
        pos += _OPERAND_DATUMS
        if has_value not in (0, 1) or n_dims < -1 or n_dims > _MAX_RANK or pos + n_dims > end:
            raise MalformedPacketError(f"request packet: bad operand header for {_where(k, n_in)}")
        dims: tuple[int, ...] | None = None
        if n_dims >= 0:
            dims = tuple(datums[pos : pos + n_dims])
            pos += n_dims
            if dims and min(dims) < 0:
                raise MalformedPacketError(f"request packet: negative dimension for {_where(k, n_in)}")
        if has_value == 0:
            if k >= n_in:
                raise MalformedPacketError(f"request packet: {_where(k, n_in)} has no value; outputs always have one")
            locations.append(None)
        else:
            locations.append((slot, offset, length, dims))
    if pos != end:
        raise MalformedPacketError(f"request packet: {end - pos} datums left over after the operands")
    outputs = [loc for loc in locations[n_in:] if loc is not None]
    deadline = None if deadline_ns == -1 else deadline_ns / 1e9
    return locations[:n_in], outputs, bool(measure), deadline, None if timeout_ns == -1 else timeout_ns / 1e9


def _where(k: int, n_in: int) -> str:
    return f"input {k}" if k < n_in else f"output {k - n_in}"


def decode_request(datums: Sequence[Any]) -> RequestPacket:
    """Parse the flat datum form; any inconsistency is ``MalformedPacketError`` (GENERAL_FAILURE)."""
    if not isinstance(datums, (tuple, list)) or not all(_is_int(d) for d in datums):
        raise MalformedPacketError("a flat request packet must be a sequence of integers")
    inputs, outputs, measure, deadline, loop_timeout = parse_request(datums)
    return check_request(
        RequestPacket(
            tuple(None if loc is None else Location(*loc) for loc in inputs),
            tuple(Location(*loc) for loc in outputs),
            measure,
            deadline,
            loop_timeout,
        )
    )


def _ns_or_none(ns: int) -> int | None:
    return None if ns == -1 else ns


def result_datums(status: int, shapes: Sequence[tuple[int, ...]], on_device_ns: int | None,
                  in_driver_ns: int | None, sufficient: Sequence[bool] | None = None) -> list[int]:
    """A result's flat form from raw parts (every output sufficient unless told otherwise)."""
    body: list[int] = [0, int(status), len(shapes)]
    for j, dims in enumerate(shapes):
        body.extend((1 if sufficient is None else int(sufficient[j]), len(dims), *dims))
    body.extend((-1 if on_device_ns is None else on_device_ns, -1 if in_driver_ns is None else in_driver_ns))
    body[0] = len(body)
    return body


def encode_result(result: ResultPacket) -> tuple[int, ...]:
    """The flat datum form of a result packet."""
    shapes = [s.dimensions for s in result.output_shapes]
    sufficient = [s.is_sufficient for s in result.output_shapes]
    timing = result.timing
    return tuple(result_datums(result.status, shapes, timing.time_on_device_ns, timing.time_in_driver_ns, sufficient))


def parse_result(datums: Sequence[int]) -> tuple[ErrorStatus, list[tuple[tuple[int, ...], bool]], int | None, int | None]:
    """Parse a result's flat form: ``(status, [(dims, is_sufficient)], on_device_ns,
    in_driver_ns)``; any inconsistency is ``MalformedPacketError``."""
    if len(datums) < 5 or datums[0] != len(datums):
        raise MalformedPacketError(f"result packet: size datum says {datums[0] if datums else 'nothing'}, "
                                   f"the packet has {len(datums)} datums")
    status = _STATUSES.get(datums[1])
    if status is None:
        raise MalformedPacketError(f"result packet: unknown status {datums[1]}")
    n_out, pos, end = datums[2], 3, len(datums) - 2
    if not 0 <= n_out <= _MAX_OPERANDS:
        raise MalformedPacketError(f"result packet: bad output count {n_out}")
    shapes = []
    for j in range(n_out):
        if pos + 2 > end:
            raise MalformedPacketError(f"result packet: truncated at output {j}")
        sufficient, n_dims = datums[pos], datums[pos + 1]
        if sufficient not in (0, 1) or not 0 <= n_dims <= _MAX_RANK or pos + 2 + n_dims > end:
            raise MalformedPacketError(f"result packet: bad shape for output {j}")
        dims = tuple(datums[pos + 2 : pos + 2 + n_dims])
        if dims and min(dims) < 0:
            raise MalformedPacketError(f"result packet: negative dimension for output {j}")
        shapes.append((dims, bool(sufficient)))
        pos += 2 + n_dims
    if pos != end:
        raise MalformedPacketError("result packet: datums left over after the outputs")
    on, drv = _ns_or_none(datums[pos]), _ns_or_none(datums[pos + 1])
    if (on is not None and on < 0) or (drv is not None and drv < 0) or (on is not None and drv is not None and on > drv):
        raise MalformedPacketError("result packet: bad timing")
    return status, shapes, on, drv


def decode_result(datums: Sequence[int], message: str = "") -> ResultPacket:
    """Parse a result's flat form into a ``ResultPacket`` (``MalformedPacketError`` if wrong)."""
    status, shapes, on, drv = parse_result(datums)
    timing = TIMING_UNAVAILABLE if on is None and drv is None else Timing(on, drv)
    return ResultPacket(status, tuple(OutputShape(d, ok) for d, ok in shapes), timing, message)


# -- binary form (module docstring) -----------------------------------------------------------


def _datums(buf: memoryview, pos: int, n: int) -> tuple[int, ...]:
    if n < 0 or pos + 8 * n > len(buf):
        raise MalformedPacketError(f"packet of {len(buf)} bytes: {n} datums at byte {pos} run past its end")
    return struct.unpack_from(f"<{n}q", buf, pos)


def _text(buf: memoryview, pos: int, n: int, what: str) -> str:
    try:
        return str(buf[pos : pos + n], "utf-8")
    except UnicodeDecodeError:
        raise MalformedPacketError(f"request packet: {what} is not UTF-8") from None


def packet_id(buf: memoryview) -> int:
    """The id a binary packet starts with (0 when it is too short to have one)."""
    return struct.unpack_from("<q", buf)[0] if len(buf) >= 8 else 0


class RingRequest(NamedTuple):
    """A parsed binary request: its id, the prepared model's handle, the app, the raw input
    and output locations, timing asked for, deadline, loop timeout, the pools' names, and the
    data section its inline locations point into."""

    rid: int
    handle: int
    app: str
    inputs: list[RawLocation | None]
    outputs: list[RawLocation]
    measure_timing: bool
    deadline: float | None
    loop_timeout: float | None
    pools: tuple[str, ...]
    data: memoryview


def pack_request(rid: int, handle: int, app: str, datums: Sequence[int], pools: Sequence[str],
                 data: Sequence[Any], data_bytes: int) -> tuple[list[Any], int]:
    """A request's binary form as parts to write one after another, and its size: ``datums``
    is its flat form (``request_datums``), ``data`` the data section's parts (bytes-like, each
    already padded to 8 bytes)."""
    app_b = app.encode()
    if pools:
        names = [p.encode() for p in pools]
        text = app_b + b"".join(names)
        head = struct.pack(f"<{4 + len(pools) + len(datums)}q", rid, handle, len(app_b), len(pools),
                           *(len(n) for n in names), *datums)
    else:
        text = app_b
        head = struct.pack(f"<{4 + len(datums)}q", rid, handle, len(app_b), 0, *datums)
    text += bytes(-len(text) & 7)
    return [head, text, *data], len(head) + len(text) + data_bytes


def unpack_request(buf: memoryview) -> RingRequest:
    """Parse a binary request (``MalformedPacketError`` for any inconsistency)."""
    rid, handle, n_app, n_pools = _datums(buf, 0, 4)
    if not 0 <= n_pools <= _MAX_POOLS or not 0 <= n_app <= _MAX_NAME:
        raise MalformedPacketError(f"request packet: bad pool count {n_pools} or app name length {n_app}")
    pool_lens = _datums(buf, 32, n_pools) if n_pools else ()
    if not all(0 < n <= _MAX_NAME for n in pool_lens):
        raise MalformedPacketError("request packet: bad pool name length")
    pos = 32 + 8 * n_pools
    (size,) = _datums(buf, pos, 1)
    inputs, outputs, measure, deadline, loop_timeout = parse_request(_datums(buf, pos, size))
    pos += 8 * size
    app = _text(buf, pos, n_app, "the app's name")
    pos += n_app
    pools = []
    for n in pool_lens:
        pools.append(_text(buf, pos, n, "a pool's name"))
        pos += n
    pos = (pos + 7) & ~7
    if pos > len(buf):
        raise MalformedPacketError(f"request packet of {len(buf)} bytes: its names run past its end")
    return RingRequest(rid, handle, app, inputs, outputs, measure, deadline, loop_timeout, tuple(pools), buf[pos:])


def pack_result(rid: int, datums: Sequence[int], message: str, data: Sequence[Any], data_bytes: int) -> tuple[list[Any], int]:
    """A result's binary form as parts, and its size (``datums``: its flat form,
    ``result_datums``; ``data``: each output's bytes, padded)."""
    msg = message.encode()
    head = struct.pack(f"<{2 + len(datums)}q", rid, len(msg), *datums)
    if msg:
        msg += bytes(-len(msg) & 7)
    return [head, msg, *data], len(head) + len(msg) + data_bytes


def unpack_result(buf: memoryview) -> tuple[int, ErrorStatus, list[tuple[tuple[int, ...], bool]], int | None, str, memoryview]:
    """Parse a binary result: its id, status, output shapes, time on device, message, and the
    outputs' data section (``MalformedPacketError`` for any inconsistency)."""
    rid, n_msg, size = _datums(buf, 0, 3)
    status, shapes, on, _drv = parse_result(_datums(buf, 16, size))
    pos = 16 + 8 * size
    if not 0 <= n_msg <= len(buf) - pos:
        raise MalformedPacketError(f"result packet: a message of {n_msg} bytes runs past its end")
    message = str(buf[pos : pos + n_msg], "utf-8", "replace") if n_msg else ""
    return rid, status, shapes, on, message, buf[(pos + n_msg + 7) & ~7 :]
