"""A small, zero-copy, bounds-checked FlatBuffers reader over a ``memoryview``.

``nnrt.load`` reads TFLite files with this instead of the ``flatbuffers`` package, so loading
needs only numpy at run time. It knows the wire format, not any schema: a ``Table`` answers
"field ``slot`` as a number / real / flag / text / sub-table / vector", where ``slot`` is the
field's position in the ``.fbs`` declaration (0, 1, 2, ...), and the caller supplies the type
and the default. Numeric vectors come back as numpy views of the buffer (never copied).

Every offset is checked against the buffer before it is followed, so a truncated or malformed
file is an ``InvalidArgumentError`` naming what was being read, never an ``IndexError`` or a
``struct.error``. Reads are bounded: a vector's length is checked against the bytes that
remain, and nothing here loops over an unchecked count, so a hostile file cannot hang it.
"""

from __future__ import annotations

import struct

import numpy as np

from nnrt.errors import InvalidArgumentError

__all__ = ["FlatbufferError", "Table", "root_table"]

_U8 = struct.Struct("<B")
_I8 = struct.Struct("<b")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F32 = struct.Struct("<f")

_SCALARS: dict[str, struct.Struct] = {
    "u8": _U8, "i8": _I8, "bool": _U8, "u16": _U16, "i32": _I32, "u32": _U32, "i64": _I64, "u64": _U64,
    "f32": _F32,
}


class FlatbufferError(InvalidArgumentError):
    """A malformed flatbuffer: an offset or length that points outside the file."""


class _Buf:
    """The bytes of one file with checked reads; ``what`` names the file in errors."""

    __slots__ = ("data", "size", "what")

    def __init__(self, data: memoryview, what: str) -> None:
        self.data = data
        self.size = len(data)
        self.what = what

    def fail(self, message: str) -> FlatbufferError:
        return FlatbufferError(f"load: {self.what}: malformed flatbuffer: {message}")

    def read(self, st: struct.Struct, pos: int, field: str) -> int | float:
        if pos < 0 or pos + st.size > self.size:
            raise self.fail(f"{field} at byte {pos} lies outside the {self.size}-byte file")
        value: int | float = st.unpack_from(self.data, pos)[0]
        return value

    def deref(self, pos: int, field: str) -> int:
        """The absolute position an unsigned offset stored at ``pos`` points to."""
        target = pos + int(self.read(_U32, pos, field))
        if target >= self.size:
            raise self.fail(f"{field} points to byte {target}, past the end of the {self.size}-byte file")
        return target

    def vector(self, pos: int, elem_size: int, field: str) -> tuple[int, int]:
        """(start of the elements, element count) of the vector whose offset is stored at ``pos``."""
        at = self.deref(pos, field)
        n = int(self.read(_U32, at, f"{field} length"))
        start = at + 4
        if n * elem_size > self.size - start:
            raise self.fail(f"{field} claims {n} elements of {elem_size} bytes, past the end of the file")
        return start, n


class Table:
    """One table of a flatbuffer: fields by slot, each read on demand and checked."""

    __slots__ = ("_buf", "_pos", "_vt", "_vt_size", "name")

    def __init__(self, buf: _Buf, pos: int, name: str) -> None:
        self._buf = buf
        self._pos = pos
        self.name = name
        vt = pos - int(buf.read(_I32, pos, f"{name} vtable offset"))
        vt_size = int(buf.read(_U16, vt, f"{name} vtable size"))
        if vt_size < 4 or vt_size % 2 or vt + vt_size > buf.size:
            raise buf.fail(f"{name} has a vtable of {vt_size} bytes at byte {vt}")
        self._vt = vt
        self._vt_size = vt_size

    def _field(self, slot: int) -> int:
        """Absolute position of field ``slot``, or 0 when the field is absent."""
        entry = 4 + 2 * slot
        if entry >= self._vt_size:
            return 0
        off = int(self._buf.read(_U16, self._vt + entry, f"{self.name} field {slot}"))
        return self._pos + off if off else 0

    def has(self, slot: int) -> bool:
        return self._field(slot) != 0

    def num(self, slot: int, kind: str = "i32", default: int = 0) -> int:
        p = self._field(slot)
        return default if not p else int(self._buf.read(_SCALARS[kind], p, f"{self.name} field {slot}"))

    def real(self, slot: int, default: float = 0.0) -> float:
        p = self._field(slot)
        return default if not p else float(self._buf.read(_F32, p, f"{self.name} field {slot}"))

    def flag(self, slot: int, default: bool = False) -> bool:
        return bool(self.num(slot, "u8", int(default)))

    def text(self, slot: int, default: str = "") -> str:
        p = self._field(slot)
        if not p:
            return default
        start, n = self._buf.vector(p, 1, f"{self.name} string field {slot}")
        try:
            return bytes(self._buf.data[start : start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise self._buf.fail(f"{self.name} string field {slot} is not UTF-8") from None

    def table(self, slot: int, name: str) -> Table | None:
        p = self._field(slot)
        return None if not p else Table(self._buf, self._buf.deref(p, f"{self.name}.{name}"), f"{self.name}.{name}")

    def tables(self, slot: int, name: str) -> list[Table]:
        """A vector of tables (empty when absent)."""
        p = self._field(slot)
        if not p:
            return []
        start, n = self._buf.vector(p, 4, f"{self.name}.{name}")
        return [Table(self._buf, self._buf.deref(start + 4 * i, f"{name}[{i}]"), f"{name}[{i}]") for i in range(n)]

    def array(self, slot: int, dtype: str, name: str) -> np.ndarray | None:
        """A vector of scalars as a read-only numpy view of the file (``None`` when absent)."""
        p = self._field(slot)
        if not p:
            return None
        dt = np.dtype(dtype).newbyteorder("<")
        start, n = self._buf.vector(p, dt.itemsize, f"{self.name}.{name}")
        arr = np.frombuffer(self._buf.data, dtype=dt, count=n, offset=start)
        arr.flags.writeable = False
        return arr

    def raw_vector(self, slot: int, name: str) -> tuple[int, int] | None:
        """(file offset, byte length) of a ``[ubyte]`` vector, ``None`` when absent."""
        p = self._field(slot)
        if not p:
            return None
        return self._buf.vector(p, 1, f"{self.name}.{name}")

    def union(self, type_slot: int, value_slot: int, name: str) -> tuple[int, Table | None]:
        """(union type, its table) of a union field (type 0 = NONE)."""
        kind = self.num(type_slot, "u8")
        return kind, (self.table(value_slot, name) if kind else None)

    def fail(self, message: str) -> FlatbufferError:
        return self._buf.fail(f"{self.name}: {message}")


def root_table(data: memoryview, what: str, identifier: bytes | None = None) -> Table:
    """The root table of the flatbuffer in ``data`` (checks the 4-byte file identifier)."""
    buf = _Buf(data, what)
    if buf.size < 8:
        raise buf.fail(f"the file has {buf.size} bytes, too few for a flatbuffer")
    if identifier is not None and bytes(data[4:8]) != identifier:
        raise buf.fail(f"file identifier {bytes(data[4:8])!r}, expected {identifier!r}")
    return Table(buf, buf.deref(0, "root offset"), "Model")
