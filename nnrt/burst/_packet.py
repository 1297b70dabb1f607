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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnrt.clock import check_deadline
from nnrt.errors import GeneralFailureError
from nnrt.execution._prepared import resolve_loop_timeout
from nnrt.execution._request import request_args
from nnrt.types import TIMING_UNAVAILABLE, ErrorStatus, OutputShape, Timing

__all__ = [
    "HEADER_DATUMS",
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
    "encode_request",
    "shaped_outputs",
]

#: Datums in a request header: size, n_inputs, n_outputs, measure_timing, deadline_ns, loop_timeout_ns.
HEADER_DATUMS = 6
_OPERAND_DATUMS = 5  # has_value, slot, offset, length, n_dims (then the dims)
_MAX_RANK = 16  # NNAPI has no limit; a bound keeps a corrupt n_dims from allocating a huge tuple
_MAX_OPERANDS = 1 << 16


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


def _encode_location(loc: Location | None, out: list[int]) -> None:
    if loc is None:
        out.extend((0, 0, 0, 0, 0))
        return
    if loc.dimensions is None:
        out.extend((1, loc.slot, loc.offset, loc.length, -1))
        return
    out.extend((1, loc.slot, loc.offset, loc.length, len(loc.dimensions)))
    out.extend(loc.dimensions)


def _to_ns(seconds: float | None) -> int:
    return -1 if seconds is None else round(seconds * 1e9)


def encode_request(packet: RequestPacket) -> tuple[int, ...]:
    """The flat datum form of a (well-formed) request packet."""
    check_request(packet)
    body: list[int] = [len(packet.inputs), len(packet.outputs), int(packet.measure_timing),
                       _to_ns(packet.deadline), _to_ns(packet.loop_timeout)]
    for loc in packet.inputs:
        _encode_location(loc, body)
    for loc in packet.outputs:
        _encode_location(loc, body)
    return (len(body) + 1, *body)


def decode_request(datums: Sequence[Any]) -> RequestPacket:
    """Parse the flat datum form; any inconsistency is ``MalformedPacketError`` (GENERAL_FAILURE)."""
    if not isinstance(datums, (tuple, list)) or not all(_is_int(d) for d in datums):
        raise MalformedPacketError("a flat request packet must be a sequence of integers")
    if len(datums) < HEADER_DATUMS or datums[0] != len(datums):
        got = datums[0] if datums else "nothing"
        raise MalformedPacketError(f"request packet: size datum says {got}, the packet has {len(datums)} datums")
    _, n_in, n_out, measure, deadline_ns, timeout_ns = datums[:HEADER_DATUMS]
    if not (_is_count(n_in) and _is_count(n_out)) or n_in + n_out > _MAX_OPERANDS:
        raise MalformedPacketError(f"request packet: bad operand counts ({n_in} inputs, {n_out} outputs)")
    if measure not in (0, 1) or deadline_ns < -1 or timeout_ns < -1:
        raise MalformedPacketError("request packet: bad measure_timing, deadline or loop timeout datum")
    pos = HEADER_DATUMS
    locations: list[Location | None] = []
    for k in range(n_in + n_out):
        where = f"input {k}" if k < n_in else f"output {k - n_in}"
        if pos + _OPERAND_DATUMS > len(datums):
            raise MalformedPacketError(f"request packet: truncated at {where}")
        has_value, slot, offset, length, n_dims = datums[pos : pos + _OPERAND_DATUMS]
        pos += _OPERAND_DATUMS
        if has_value not in (0, 1) or n_dims < -1 or n_dims > _MAX_RANK or pos + n_dims > len(datums):
            raise MalformedPacketError(f"request packet: bad operand header for {where}")
        dims: tuple[int, ...] | None = None
        if n_dims >= 0:
            dims = tuple(datums[pos : pos + n_dims])
            pos += n_dims
        if has_value == 0:
            if k >= n_in:
                raise MalformedPacketError(f"request packet: {where} has no value; outputs always have one")
            locations.append(None)
        else:
            locations.append(Location(slot, offset, length, dims))
    if pos != len(datums):
        raise MalformedPacketError(f"request packet: {len(datums) - pos} datums left over after the operands")
    outputs = tuple(loc for loc in locations[n_in:] if loc is not None)
    return check_request(
        RequestPacket(
            tuple(locations[:n_in]),
            outputs,
            bool(measure),
            None if deadline_ns == -1 else deadline_ns / 1e9,
            None if timeout_ns == -1 else timeout_ns / 1e9,
        )
    )
