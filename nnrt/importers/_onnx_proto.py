"""The part of the ONNX protobuf schema the importer reads, decoded with ``_protobuf``.

Field numbers are those of ``onnx/onnx.proto`` (IR version 3 to 10). Only what the importer
uses is decoded: ModelProto (opset_import, graph), GraphProto (node, initializer, input,
output, value_info), NodeProto, AttributeProto, TensorProto (dims, data_type, raw_data and the
typed ``*_data`` fields, external data) and ValueInfoProto / TypeProto / TensorShapeProto.
Other fields are skipped, as a protobuf reader must. Repeated scalars are accepted both packed
and unpacked.

Tensor data stays in the loaded buffer: ``tensor_array`` returns a read-only numpy view of
``raw_data`` (little-endian, as ONNX stores it) without copying (slid back over its field
header to a 4-byte boundary if misaligned, copied only where it cannot be); only the typed
fields, which protobuf encodes as varints, are decoded into new arrays. Tensors stored outside the file
(``data_location = EXTERNAL``) are read from the named file beside the model, when the model
was loaded from a path, and must stay inside that directory.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from nnrt.importers._protobuf import MAX_DEPTH, ProtobufError, fields, packed_fixed, packed_varints, signed64

__all__ = [
    "ONNX_DTYPES",
    "Attribute",
    "Graph",
    "ModelProto",
    "Node",
    "TensorProto",
    "ValueInfo",
    "parse_model",
    "parse_tensor",
    "tensor_array",
]

#: ONNX TensorProto.DataType → numpy dtype (little-endian), for the types nnrt can hold.
ONNX_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("<f4"),
    2: np.dtype("u1"),
    3: np.dtype("i1"),
    4: np.dtype("<u2"),
    5: np.dtype("<i2"),
    6: np.dtype("<i4"),
    7: np.dtype("<i8"),
    9: np.dtype("bool"),
    10: np.dtype("<f2"),
    11: np.dtype("<f8"),
    12: np.dtype("<u4"),
    13: np.dtype("<u8"),
}
ONNX_TYPE_NAMES = {
    0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
    8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64",
    15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2",
    20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1",
}  # fmt: skip


@dataclasses.dataclass
class TensorProto:
    name: str = ""
    dims: tuple[int, ...] = ()
    data_type: int = 0
    raw: memoryview | None = None
    typed: list[int] | np.ndarray | None = None  # int32/int64/uint64 varints or float/double views
    external: dict[str, str] = dataclasses.field(default_factory=dict)
    base_dir: str | None = None


@dataclasses.dataclass
class ValueInfo:
    name: str
    elem_type: int = 0
    #: Dimensions: an int (>= 0 known; -1 symbolic or unset); ``None`` = unknown rank.
    dims: tuple[int, ...] | None = None
    is_tensor: bool = True


@dataclasses.dataclass
class Attribute:
    name: str
    type: int = 0
    f: float = 0.0
    i: int = 0
    s: bytes = b""
    t: TensorProto | None = None
    g: Graph | None = None
    floats: list[float] = dataclasses.field(default_factory=list)
    ints: list[int] = dataclasses.field(default_factory=list)
    strings: list[bytes] = dataclasses.field(default_factory=list)
    graphs: list[Graph] = dataclasses.field(default_factory=list)

    def value(self) -> object:
        """The attribute's value by its declared type (FLOAT, INT, STRING, TENSOR, GRAPH, lists)."""
        by_type: dict[int, object] = {1: self.f, 2: self.i, 3: self.s, 4: self.t, 5: self.g, 6: self.floats,
                                      7: self.ints, 8: self.strings, 10: self.graphs}  # fmt: skip
        return by_type.get(self.type)


@dataclasses.dataclass
class Node:
    op_type: str = ""
    name: str = ""
    domain: str = ""
    inputs: list[str] = dataclasses.field(default_factory=list)
    outputs: list[str] = dataclasses.field(default_factory=list)
    attrs: dict[str, Attribute] = dataclasses.field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or (self.outputs[0] if self.outputs else "")


@dataclasses.dataclass
class Graph:
    name: str = ""
    nodes: list[Node] = dataclasses.field(default_factory=list)
    initializers: list[TensorProto] = dataclasses.field(default_factory=list)
    inputs: list[ValueInfo] = dataclasses.field(default_factory=list)
    outputs: list[ValueInfo] = dataclasses.field(default_factory=list)
    value_info: list[ValueInfo] = dataclasses.field(default_factory=list)
    has_sparse_initializers: bool = False


@dataclasses.dataclass
class ModelProto:
    ir_version: int = 0
    opsets: dict[str, int] = dataclasses.field(default_factory=dict)
    graph: Graph | None = None
    has_functions: bool = False


class _Ctx:
    __slots__ = ("base_dir", "depth")

    def __init__(self, base_dir: str | None) -> None:
        self.base_dir = base_dir
        self.depth = 0


T = TypeVar("T")


def _sub(ctx: _Ctx, value: int | memoryview, where: str, parse: Callable[[memoryview, _Ctx, str], T]) -> T:
    if not isinstance(value, memoryview):
        raise ProtobufError(f"load: {where}: expected a message, found a scalar field")
    ctx.depth += 1
    if ctx.depth > MAX_DEPTH:
        raise ProtobufError(f"load: {where}: messages nested deeper than {MAX_DEPTH} levels")
    try:
        return parse(value, ctx, where)
    finally:
        ctx.depth -= 1


def _str(value: int | memoryview, where: str) -> str:
    if not isinstance(value, memoryview):
        raise ProtobufError(f"load: {where}: expected a string, found a scalar field")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise ProtobufError(f"load: {where}: string is not valid UTF-8") from None


def _ints(value: int | memoryview, where: str, out: list[int]) -> None:
    if isinstance(value, memoryview):
        out.extend(signed64(v) for v in packed_varints(value, where))
    else:
        out.append(signed64(value))


def _int(value: int | memoryview, where: str) -> int:
    if isinstance(value, memoryview):
        raise ProtobufError(f"load: {where}: expected an integer, found a length-delimited field")
    return signed64(value)


def _float_bits(value: int | memoryview, where: str, double: bool = False) -> float:
    if isinstance(value, memoryview):
        raise ProtobufError(f"load: {where}: expected a number, found a length-delimited field")
    return float(np.array([value], dtype="<u8" if double else "<u4").view("<f8" if double else "<f4")[0])


def _floats(value: int | memoryview, where: str, out: list[float]) -> None:
    if isinstance(value, memoryview):
        out.extend(float(v) for v in packed_fixed(value, "<f4", where))
    else:
        out.append(_float_bits(value, where))


def _aligned_in_place(raw: memoryview) -> memoryview:
    """``raw_data`` moved back over its own field key and length, to a 4-byte boundary.

    Protobuf places ``raw_data`` at any byte offset, and numpy runs a misaligned float32 array
    through its slow generic loops: ``matmul`` cannot hand it to BLAS (an LSTM's 512x2048
    weights were 10x slower). The key and length just before the data (at least 3 bytes when
    the data is 128 bytes or more) are parsed already, so in a writable buffer the data can
    slide back over them: aligned without a second copy. Smaller or read-only data stays where
    it is (``tensor_array`` copies it if it is misaligned for its type).
    """
    if raw.readonly or len(raw) < 128 or not isinstance(raw.obj, bytearray):
        return raw
    shift = np.frombuffer(raw, np.uint8).ctypes.data % 4
    if not shift:
        return raw
    root = memoryview(raw.obj)
    start = np.frombuffer(raw, np.uint8).ctypes.data - np.frombuffer(root, np.uint8).ctypes.data
    root[start - shift:start - shift + len(raw)] = raw  # memmove: the ranges overlap
    return root[start - shift:start - shift + len(raw)]


def _tensor(buf: memoryview, ctx: _Ctx, where: str) -> TensorProto:
    t = TensorProto(base_dir=ctx.base_dir)
    dims: list[int] = []
    ints: list[int] = []
    floats: list[np.ndarray] = []
    location = 0
    for num, _wire, v in fields(buf, where):
        w = f"{where} field {num}"
        if num == 1:
            _ints(v, w, dims)
        elif num == 2:
            t.data_type = _int(v, w)
        elif num == 8:
            t.name = _str(v, w)
        elif num == 9:
            if not isinstance(v, memoryview):
                raise ProtobufError(f"load: {where}: raw_data is not bytes")
            t.raw = _aligned_in_place(v)
        elif num in (5, 7, 11):  # int32_data, int64_data, uint64_data (varints)
            if isinstance(v, memoryview):
                ints.extend(packed_varints(v, w))
            else:
                ints.append(v)
        elif num in (4, 10):  # float_data, double_data
            dt = "<f4" if num == 4 else "<f8"
            if isinstance(v, memoryview):
                floats.append(packed_fixed(v, dt, w))
            else:
                floats.append(np.array([_float_bits(v, w, num == 10)], dtype=dt))
        elif num == 13:
            key, val = _sub(ctx, v, f"{where} external_data", _string_entry)
            t.external[key] = val
        elif num == 14:
            location = _int(v, w)
        elif num == 3:
            raise ProtobufError(f"load: {where}: segmented tensors are not supported")
    t.dims = tuple(dims)
    if any(d < 0 for d in t.dims):
        raise ProtobufError(f"load: {where} ({t.name!r}): negative dimension in {list(t.dims)}")
    if location == 1 and not t.external:
        raise ProtobufError(f"load: {where} ({t.name!r}): data_location is EXTERNAL but external_data is empty")
    if location != 1:
        t.external = {}
    if floats:
        t.typed = np.concatenate(floats) if len(floats) > 1 else floats[0]
    elif ints:
        t.typed = ints
    return t


def _string_entry(buf: memoryview, ctx: _Ctx, where: str) -> tuple[str, str]:
    key = value = ""
    for num, _w, v in fields(buf, where):
        if num == 1:
            key = _str(v, where)
        elif num == 2:
            value = _str(v, where)
    return key, value


def _value_info(buf: memoryview, ctx: _Ctx, where: str) -> ValueInfo:
    vi = ValueInfo(name="")
    for num, _w, v in fields(buf, where):
        if num == 1:
            vi.name = _str(v, where)
        elif num == 2:
            _sub(ctx, v, f"{where} type", lambda b, c, w: _type(b, c, w, vi))
    return vi


def _type(buf: memoryview, ctx: _Ctx, where: str, vi: ValueInfo) -> None:
    seen_tensor = False
    for num, _w, v in fields(buf, where):
        if num == 1:
            seen_tensor = True
            _sub(ctx, v, f"{where} tensor_type", lambda b, c, w: _tensor_type(b, c, w, vi))
        elif num in (4, 5, 8, 9):
            vi.is_tensor = False
    if not seen_tensor:
        vi.is_tensor = False


def _tensor_type(buf: memoryview, ctx: _Ctx, where: str, vi: ValueInfo) -> None:
    for num, _w, v in fields(buf, where):
        if num == 1:
            vi.elem_type = _int(v, where)
        elif num == 2:
            vi.dims = tuple(_sub(ctx, v, f"{where} shape", _shape))


def _shape(buf: memoryview, ctx: _Ctx, where: str) -> list[int]:
    dims: list[int] = []
    for num, _w, v in fields(buf, where):
        if num == 1:
            dims.append(_sub(ctx, v, f"{where} dim", _dim))
    return dims


def _dim(buf: memoryview, ctx: _Ctx, where: str) -> int:
    value = -1
    for num, _w, v in fields(buf, where):
        if num == 1:
            value = max(_int(v, where), -1)  # some exporters write -1 for a dynamic dim: unknown
    return value


def _attribute(buf: memoryview, ctx: _Ctx, where: str) -> Attribute:
    a = Attribute(name="")
    for num, _w, v in fields(buf, where):
        w = f"{where} field {num}"
        if num == 1:
            a.name = _str(v, w)
        elif num == 20:
            a.type = _int(v, w)
        elif num == 2:
            a.f = _float_bits(v, w)
        elif num == 3:
            a.i = _int(v, w)
        elif num == 4:
            if not isinstance(v, memoryview):
                raise ProtobufError(f"load: {w}: expected bytes")
            a.s = bytes(v)
        elif num == 5:
            a.t = _sub(ctx, v, f"{where} t", _tensor)
        elif num == 6:
            a.g = _sub(ctx, v, f"{where} g", _graph)
        elif num == 7:
            _floats(v, w, a.floats)
        elif num == 8:
            _ints(v, w, a.ints)
        elif num == 9:
            if not isinstance(v, memoryview):
                raise ProtobufError(f"load: {w}: expected bytes")
            a.strings.append(bytes(v))
        elif num == 11:
            a.graphs.append(_sub(ctx, v, f"{where} graphs", _graph))
        elif num == 21:
            raise ProtobufError(f"load: {where}: ref_attr_name is only valid inside functions")
    return a


def _node(buf: memoryview, ctx: _Ctx, where: str) -> Node:
    n = Node()
    for num, _w, v in fields(buf, where):
        if num == 1:
            n.inputs.append(_str(v, where))
        elif num == 2:
            n.outputs.append(_str(v, where))
        elif num == 3:
            n.name = _str(v, where)
        elif num == 4:
            n.op_type = _str(v, where)
        elif num == 7:
            n.domain = _str(v, where)
        elif num == 5:
            a = _sub(ctx, v, f"{where} attribute", _attribute)
            n.attrs[a.name] = a
    return n


def _graph(buf: memoryview, ctx: _Ctx, where: str) -> Graph:
    g = Graph()
    for num, _w, v in fields(buf, where):
        if num == 1:
            g.nodes.append(_sub(ctx, v, f"{where} node {len(g.nodes)}", _node))
        elif num == 2:
            g.name = _str(v, where)
        elif num == 5:
            g.initializers.append(_sub(ctx, v, f"{where} initializer {len(g.initializers)}", _tensor))
        elif num == 11:
            g.inputs.append(_sub(ctx, v, f"{where} input", _value_info))
        elif num == 12:
            g.outputs.append(_sub(ctx, v, f"{where} output", _value_info))
        elif num == 13:
            g.value_info.append(_sub(ctx, v, f"{where} value_info", _value_info))
        elif num == 15:
            g.has_sparse_initializers = True
    return g


def _opset(buf: memoryview, ctx: _Ctx, where: str) -> tuple[str, int]:
    domain, version = "", 0
    for num, _w, v in fields(buf, where):
        if num == 1:
            domain = _str(v, where)
        elif num == 2:
            version = _int(v, where)
    return domain, version


def parse_model(data: memoryview, base_dir: str | None = None) -> ModelProto:
    """Decode a ModelProto; raises ``ProtobufError`` (INVALID_ARGUMENT) on malformed input."""
    ctx = _Ctx(base_dir)
    m = ModelProto()
    for num, _w, v in fields(data, "ModelProto"):
        if num == 1:
            m.ir_version = _int(v, "ModelProto ir_version")
        elif num == 8:
            domain, version = _sub(ctx, v, "ModelProto opset_import", _opset)
            m.opsets[domain] = version
        elif num == 7:
            m.graph = _sub(ctx, v, "ModelProto graph", _graph)
        elif num == 25:
            m.has_functions = True
    if m.graph is None:
        raise ProtobufError("load: the file is not an ONNX model: ModelProto has no graph")
    if m.ir_version <= 0:
        raise ProtobufError("load: the file is not an ONNX model: ModelProto has no ir_version")
    return m


def parse_tensor(data: memoryview) -> TensorProto:
    """Decode one TensorProto (as in the onnx test data ``.pb`` files)."""
    return _tensor(data, _Ctx(None), "TensorProto")


def tensor_array(t: TensorProto, where: str) -> np.ndarray:
    """The tensor's value: a read-only view of ``raw_data`` (no copy) or the decoded typed field."""
    dtype = ONNX_DTYPES.get(t.data_type)
    if dtype is None:
        raise ProtobufError(
            f"load: {where} {t.name!r}: data type {ONNX_TYPE_NAMES.get(t.data_type, t.data_type)} is not supported"
        )
    count = int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
    if t.external:
        arr = _external(t, dtype, count, where)
    elif t.raw is not None:
        if len(t.raw) != count * dtype.itemsize:
            raise ProtobufError(
                f"load: {where} {t.name!r}: raw_data has {len(t.raw)} bytes, dims {list(t.dims)} of "
                f"{ONNX_TYPE_NAMES[t.data_type]} need {count * dtype.itemsize}"
            )
        arr = np.frombuffer(t.raw, dtype=dtype)
    elif isinstance(t.typed, np.ndarray):
        arr = t.typed.astype(dtype, copy=False)
    else:
        ints = t.typed or []
        if t.data_type == 10:  # float16 bit patterns in int32_data
            arr = np.array(ints, dtype=np.uint16).view(np.float16)
        elif t.data_type in (7,):
            arr = np.array([signed64(v) for v in ints], dtype=np.int64)
        elif t.data_type in (13,):
            arr = np.array(ints, dtype=np.uint64)
        else:
            arr = np.array([signed64(v) for v in ints], dtype=np.int64).astype(dtype)
    if arr.size != count:
        raise ProtobufError(f"load: {where} {t.name!r}: {arr.size} values for dims {list(t.dims)}")
    if not arr.flags.aligned:  # a small tensor or 8-byte values (see _aligned_in_place)
        arr = arr.copy()
    arr = arr.reshape(t.dims)
    arr.flags.writeable = False
    return arr


def _external(t: TensorProto, dtype: np.dtype, count: int, where: str) -> np.ndarray:
    loc = t.external.get("location", "")
    if t.base_dir is None:
        raise ProtobufError(f"load: {where} {t.name!r}: external data {loc!r} needs the model's directory")
    base = os.path.realpath(t.base_dir)
    path = os.path.realpath(os.path.join(base, loc))
    if not loc or os.path.commonpath([base, path]) != base:
        raise ProtobufError(f"load: {where} {t.name!r}: external data location {loc!r} is outside the model's directory")
    try:
        offset = int(t.external.get("offset", "0"))
        length = int(t.external.get("length", str(count * dtype.itemsize)))
    except ValueError:
        raise ProtobufError(f"load: {where} {t.name!r}: external data offset/length are not integers") from None
    if length != count * dtype.itemsize or offset < 0:
        raise ProtobufError(f"load: {where} {t.name!r}: external data length {length} does not match dims {list(t.dims)}")
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
    except OSError as err:
        raise ProtobufError(f"load: {where} {t.name!r}: cannot read external data {loc!r}: {err}") from None
    if len(data) != length:
        raise ProtobufError(f"load: {where} {t.name!r}: external data {loc!r} is truncated")
    return np.frombuffer(data, dtype=dtype)

