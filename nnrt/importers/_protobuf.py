"""A small zero-copy reader of the protobuf wire format, enough for ONNX files.

``nnrt.load`` must need only numpy at run time, so the ONNX importer does not use the
``protobuf`` or ``onnx`` packages: it walks the wire format itself. A message is a sequence of
``(field number, wire type, value)``; this module yields them with varints and fixed-width
values as ints and length-delimited values (strings, bytes, sub-messages, packed repeated
fields) as ``memoryview`` slices of the caller's buffer, so a tensor's ``raw_data`` is never
copied. Every read is bounds-checked: a truncated or malformed file raises
``InvalidArgumentError`` naming the message and field being read, never a bare
``IndexError``; groups (wire types 3/4, unused by ONNX) are refused, and the schema layer
bounds message nesting (``MAX_DEPTH``), so a hostile file cannot recurse without limit.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nnrt.errors import InvalidArgumentError

__all__ = ["MAX_DEPTH", "Field", "ProtobufError", "fields", "packed_varints", "signed64"]

#: Deepest nesting of messages the ONNX schema reader follows (graphs inside If/Loop bodies
#: inside attributes inside nodes ...). Real models stay far below it.
MAX_DEPTH = 64

VARINT, I64, LEN, I32 = 0, 1, 2, 5

Field = tuple[int, int, "int | memoryview"]


class ProtobufError(InvalidArgumentError):
    """INVALID_ARGUMENT: the file is not a well-formed protobuf message."""


def _varint(buf: memoryview, pos: int, end: int, where: str) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ProtobufError(f"load: {where}: truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError(f"load: {where}: varint longer than 10 bytes at byte {pos}")


def fields(buf: memoryview, where: str) -> Iterator[tuple[int, int, int | memoryview]]:
    """Yield ``(field_number, wire_type, value)`` for each field of the message in ``buf``.

    ``value`` is an int for VARINT/I64/I32 fields (fixed-width ones as unsigned raw bits) and
    a ``memoryview`` slice of ``buf`` for LEN fields. ``where`` names the message in errors.
    """
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos, end, where)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError(f"load: {where}: field number 0 at byte {pos}")
        if wire == VARINT:
            value, pos = _varint(buf, pos, end, f"{where} field {number}")
            yield number, wire, value
        elif wire == LEN:
            length, pos = _varint(buf, pos, end, f"{where} field {number}")
            if length > end - pos:
                raise ProtobufError(
                    f"load: {where} field {number}: length {length} runs past the end of the message "
                    f"({end - pos} bytes left): the file is truncated or corrupt"
                )
            yield number, wire, buf[pos : pos + length]
            pos += length
        elif wire in (I64, I32):
            size = 8 if wire == I64 else 4
            if size > end - pos:
                raise ProtobufError(f"load: {where} field {number}: truncated fixed-width value")
            yield number, wire, int.from_bytes(buf[pos : pos + size], "little")
            pos += size
        else:
            raise ProtobufError(f"load: {where} field {number}: unsupported wire type {wire}")


def packed_varints(buf: memoryview, where: str) -> list[int]:
    """The varints of a packed repeated field (unsigned; see ``signed64``)."""
    out: list[int] = []
    pos, end = 0, len(buf)
    while pos < end:
        value, pos = _varint(buf, pos, end, where)
        out.append(value)
    return out


def signed64(value: int) -> int:
    """A varint read as protobuf ``int64``/``int32`` (two's complement in 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def packed_fixed(buf: memoryview, dtype: str, where: str) -> np.ndarray:
    """A packed repeated fixed-width field (``float``, ``double``, ...) as a numpy view."""
    dt = np.dtype(dtype)
    if len(buf) % dt.itemsize:
        raise ProtobufError(f"load: {where}: packed field of {len(buf)} bytes is not a multiple of {dt.itemsize}")
    return np.frombuffer(buf, dtype=dt)
