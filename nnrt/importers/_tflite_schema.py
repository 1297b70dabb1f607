"""The TFLite file as plain Python objects: what ``schema.fbs`` says, read with ``_flatbuf``.

``parse_tflite`` walks the root ``Model`` table once and returns ``TflFile``: operator codes,
subgraphs (tensors, operators, inputs, outputs), buffers as zero-copy numpy views of the file,
and signature defs. Field slots are the positions of the fields in TFLite's ``schema.fbs``
(``Tensor``: shape 0, type 1, buffer 2, name 3, quantization 4, is_variable 5, sparsity 6,
shape_signature 7, has_rank 8; ``Operator``: opcode_index 0, inputs 1, outputs 2,
builtin_options type 3 / value 4, custom_options 5, ...). Builtin options stay ``Table``\\ s,
read by the op mappers with the slots of their own options table.

Everything a mapper may index (tensor and buffer indexes, opcode indexes, subgraph indexes) is
checked here, so mappers can trust them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from nnrt.importers._flatbuf import Table, root_table

__all__ = ["OP_NAMES", "TT", "TflFile", "TflOp", "TflSubgraph", "TflTensor", "op_name", "parse_tflite"]

#: BuiltinOperator names by code (schema.fbs order).
_OP_NAMES_TEXT = """ADD AVERAGE_POOL_2D CONCATENATION CONV_2D DEPTHWISE_CONV_2D DEPTH_TO_SPACE DEQUANTIZE
    EMBEDDING_LOOKUP FLOOR FULLY_CONNECTED HASHTABLE_LOOKUP L2_NORMALIZATION L2_POOL_2D
    LOCAL_RESPONSE_NORMALIZATION LOGISTIC LSH_PROJECTION LSTM MAX_POOL_2D MUL RELU RELU_N1_TO_1 RELU6
    RESHAPE RESIZE_BILINEAR RNN SOFTMAX SPACE_TO_DEPTH SVDF TANH CONCAT_EMBEDDINGS SKIP_GRAM CALL CUSTOM
    EMBEDDING_LOOKUP_SPARSE PAD UNIDIRECTIONAL_SEQUENCE_RNN GATHER BATCH_TO_SPACE_ND SPACE_TO_BATCH_ND
    TRANSPOSE MEAN SUB DIV SQUEEZE UNIDIRECTIONAL_SEQUENCE_LSTM STRIDED_SLICE BIDIRECTIONAL_SEQUENCE_RNN
    EXP TOPK_V2 SPLIT LOG_SOFTMAX DELEGATE BIDIRECTIONAL_SEQUENCE_LSTM CAST PRELU MAXIMUM ARG_MAX
    MINIMUM LESS NEG PADV2 GREATER GREATER_EQUAL LESS_EQUAL SELECT SLICE SIN TRANSPOSE_CONV
    SPARSE_TO_DENSE TILE EXPAND_DIMS EQUAL NOT_EQUAL LOG SUM SQRT RSQRT SHAPE POW ARG_MIN FAKE_QUANT
    REDUCE_PROD REDUCE_MAX PACK LOGICAL_OR ONE_HOT LOGICAL_AND LOGICAL_NOT UNPACK REDUCE_MIN FLOOR_DIV
    REDUCE_ANY SQUARE ZEROS_LIKE FILL FLOOR_MOD RANGE RESIZE_NEAREST_NEIGHBOR LEAKY_RELU
    SQUARED_DIFFERENCE MIRROR_PAD ABS SPLIT_V UNIQUE CEIL REVERSE_V2 ADD_N GATHER_ND COS WHERE RANK ELU
    REVERSE_SEQUENCE MATRIX_DIAG QUANTIZE MATRIX_SET_DIAG ROUND HARD_SWISH IF WHILE
    NON_MAX_SUPPRESSION_V4 NON_MAX_SUPPRESSION_V5 SCATTER_ND SELECT_V2 DENSIFY SEGMENT_SUM BATCH_MATMUL
    PLACEHOLDER_FOR_GREATER_OP_CODES CUMSUM CALL_ONCE BROADCAST_TO RFFT2D CONV_3D IMAG REAL COMPLEX_ABS
    HASHTABLE HASHTABLE_FIND HASHTABLE_IMPORT HASHTABLE_SIZE REDUCE_ALL CONV_3D_TRANSPOSE VAR_HANDLE
    READ_VARIABLE ASSIGN_VARIABLE BROADCAST_ARGS RANDOM_STANDARD_NORMAL BUCKETIZE RANDOM_UNIFORM
    MULTINOMIAL GELU DYNAMIC_UPDATE_SLICE RELU_0_TO_1 UNSORTED_SEGMENT_PROD UNSORTED_SEGMENT_MAX
    UNSORTED_SEGMENT_SUM ATAN2 UNSORTED_SEGMENT_MIN SIGN BITCAST BITWISE_XOR RIGHT_SHIFT
    STABLEHLO_LOGISTIC STABLEHLO_ADD STABLEHLO_DIVIDE STABLEHLO_MULTIPLY STABLEHLO_MAXIMUM
    STABLEHLO_RESHAPE STABLEHLO_CLAMP STABLEHLO_CONCATENATE STABLEHLO_BROADCAST_IN_DIM
    STABLEHLO_CONVOLUTION STABLEHLO_SLICE STABLEHLO_CUSTOM_CALL STABLEHLO_REDUCE STABLEHLO_ABS
    STABLEHLO_AND STABLEHLO_COSINE STABLEHLO_EXPONENTIAL STABLEHLO_FLOOR STABLEHLO_LOG
    STABLEHLO_MINIMUM STABLEHLO_NEGATE STABLEHLO_OR STABLEHLO_POWER STABLEHLO_REMAINDER
    STABLEHLO_RSQRT STABLEHLO_SELECT STABLEHLO_SUBTRACT STABLEHLO_TANH STABLEHLO_SCATTER
    STABLEHLO_COMPARE STABLEHLO_CONVERT STABLEHLO_DYNAMIC_SLICE STABLEHLO_DYNAMIC_UPDATE_SLICE
    STABLEHLO_PAD STABLEHLO_IOTA STABLEHLO_DOT_GENERAL STABLEHLO_REDUCE_WINDOW STABLEHLO_SORT
    STABLEHLO_WHILE STABLEHLO_GATHER STABLEHLO_TRANSPOSE DILATE STABLEHLO_RNG_BIT_GENERATOR
    REDUCE_WINDOW STABLEHLO_COMPOSITE STABLEHLO_SHIFT_LEFT STABLEHLO_CBRT STABLEHLO_CASE"""
OP_NAMES: tuple[str, ...] = tuple(_OP_NAMES_TEXT.split())
_CUSTOM = 32
_PLACEHOLDER_FOR_GREATER_OP_CODES = 127


def op_name(code: int) -> str:
    return OP_NAMES[code] if 0 <= code < len(OP_NAMES) else f"BUILTIN_{code}"


class TT:
    """TFLite ``TensorType`` codes used by the importer."""

    FLOAT32, FLOAT16, INT32, UINT8, INT64, STRING, BOOL, INT16 = 0, 1, 2, 3, 4, 5, 6, 7
    INT8, FLOAT64, RESOURCE, VARIANT = 9, 10, 13, 14
    NAMES: ClassVar[dict[int, str]] = {
        0: "FLOAT32", 1: "FLOAT16", 2: "INT32", 3: "UINT8", 4: "INT64", 5: "STRING", 6: "BOOL", 7: "INT16",
             8: "COMPLEX64", 9: "INT8", 10: "FLOAT64", 11: "COMPLEX128", 12: "UINT64", 13: "RESOURCE", 14: "VARIANT",
             15: "UINT32", 16: "UINT16", 17: "INT4", 18: "BFLOAT16"}
    DTYPES: ClassVar[dict[int, str]] = {0: "<f4", 1: "<f2", 2: "<i4", 3: "u1", 4: "<i8", 6: "?", 7: "<i2", 9: "i1", 10: "<f8",
                              12: "<u8", 15: "<u4", 16: "<u2"}


@dataclasses.dataclass(slots=True)
class TflTensor:
    index: int
    name: str
    type: int
    shape: tuple[int, ...]
    #: shape_signature when present (-1 = dynamic), else ``shape``.
    signature: tuple[int, ...]
    buffer: int
    scales: np.ndarray | None
    zero_points: np.ndarray | None
    quantized_dimension: int
    is_variable: bool
    sparsity: Table | None
    #: The constant data (a read-only view of the file) or ``None``.
    data: np.ndarray | None

    @property
    def type_name(self) -> str:
        return TT.NAMES.get(self.type, f"type {self.type}")

    @property
    def quantized(self) -> bool:
        return self.scales is not None and self.scales.size > 0

    @property
    def per_channel(self) -> bool:
        return self.scales is not None and self.scales.size > 1

    @property
    def scale(self) -> float:
        return float(self.scales[0]) if self.scales is not None and self.scales.size else 0.0

    @property
    def zero_point(self) -> int:
        return int(self.zero_points[0]) if self.zero_points is not None and self.zero_points.size else 0

    def label(self) -> str:
        return f"tensor {self.index}" + (f" ({self.name})" if self.name else "")


@dataclasses.dataclass(slots=True)
class TflOp:
    index: int
    code: int
    custom_code: str
    version: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options_type: int
    options: Table | None
    intermediates: tuple[int, ...]
    #: ``builtin_options_2`` (StableHLO-era options, e.g. STABLEHLO_COMPOSITE's).
    options2: Table | None = None

    @property
    def name(self) -> str:
        return op_name(self.code) if self.code != _CUSTOM else f"CUSTOM({self.custom_code})"


@dataclasses.dataclass(slots=True)
class TflSubgraph:
    index: int
    name: str
    tensors: list[TflTensor]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    operators: list[TflOp]


@dataclasses.dataclass(slots=True)
class TflSignature:
    key: str
    subgraph: int
    inputs: list[tuple[str, int]]
    outputs: list[tuple[str, int]]


@dataclasses.dataclass(slots=True)
class TflFile:
    version: int
    subgraphs: list[TflSubgraph]
    signatures: list[TflSignature]
    root: Table


def _indexes(t: Table, slot: int, what: str, limit: int, *, optional: bool = False) -> tuple[int, ...]:
    arr = t.array(slot, "i4", what)
    if arr is None:
        return ()
    lo = -1 if optional else 0
    if arr.size and (int(arr.min()) < lo or int(arr.max()) >= limit):
        raise t.fail(f"{what} {arr.tolist()} has an index outside [{lo}, {limit})")
    return tuple(int(v) for v in arr)


def _buffer_views(data: memoryview, model: Table) -> list[np.ndarray | None]:
    """Each buffer's bytes as a uint8 view of the file (``None`` when empty)."""
    out: list[np.ndarray | None] = []
    whole = np.frombuffer(data, dtype=np.uint8)
    for b in model.tables(4, "buffers"):
        offset, size = b.num(1, "u64"), b.num(2, "u64")
        if offset > 1:  # data stored after the flatbuffer (files over 2 GB)
            if offset + size > whole.size:
                raise b.fail(f"buffer data at {offset} + {size} lies outside the {whole.size}-byte file")
            view = whole[offset : offset + size]
        else:
            span = b.raw_vector(0, "data")
            view = whole[span[0] : span[0] + span[1]] if span else whole[:0]
        view.flags.writeable = False
        out.append(view if view.size else None)
    return out


def _tensor(t: Table, index: int, buffers: list[np.ndarray | None]) -> TflTensor:
    shape_arr = t.array(0, "i4", "shape")
    shape = tuple(int(d) for d in shape_arr) if shape_arr is not None else ()
    sig_arr = t.array(7, "i4", "shape_signature")
    signature = tuple(int(d) for d in sig_arr) if sig_arr is not None and sig_arr.size == len(shape) else shape
    if any(d < 0 for d in shape) or any(d < -1 for d in signature):
        raise t.fail(f"shape {list(shape)} (signature {list(signature)}) has a negative dimension")
    buffer = t.num(2, "u32")
    if buffer >= len(buffers):
        raise t.fail(f"buffer index {buffer} is outside the {len(buffers)} buffers")
    scales = zps = None
    qdim = 0
    q = t.table(4, "quantization")
    if q is not None:
        scales = q.array(2, "f4", "scale")
        zps = q.array(3, "i8", "zero_point")
        qdim = q.num(6)
        if q.num(4, "u8"):
            raise q.fail("custom quantization details are not supported")
    ttype = t.num(1, "i8")
    raw = buffers[buffer] if buffer else None
    data = None
    if raw is not None and ttype in TT.DTYPES and t.table(6, "sparsity") is None:
        dt = np.dtype(TT.DTYPES[ttype])
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if raw.size != n * dt.itemsize:
            raise t.fail(f"buffer {buffer} has {raw.size} bytes, shape {list(shape)} of {TT.NAMES[ttype]} needs "
                         f"{n * dt.itemsize}")
        data = raw.view(dt).reshape(shape)
    elif raw is not None and ttype in TT.DTYPES:
        data = raw.view(np.dtype(TT.DTYPES[ttype])) if raw.size % np.dtype(TT.DTYPES[ttype]).itemsize == 0 else None
    return TflTensor(index, t.text(3), ttype, shape, signature, buffer, scales, zps, qdim, t.flag(5),
                     t.table(6, "sparsity"), data)


def parse_tflite(data: memoryview, what: str) -> TflFile:
    """Read the whole ``Model`` table of a ``TFL3`` file (raises ``FlatbufferError`` when malformed)."""
    root = root_table(data, what, b"TFL3")
    buffers = _buffer_views(data, root)
    codes: list[tuple[int, str, int]] = []
    for oc in root.tables(1, "operator_codes"):
        code = oc.num(0, "i8")
        if code == _PLACEHOLDER_FOR_GREATER_OP_CODES or oc.has(3):
            code = max(code, oc.num(3))
        codes.append((code, oc.text(1), oc.num(2, "i32", 1)))
    sub_tables = root.tables(2, "subgraphs")
    if not sub_tables:
        raise root.fail("the model has no subgraph")
    subgraphs: list[TflSubgraph] = []
    for si, sg in enumerate(sub_tables):
        tensors = [_tensor(t, i, buffers) for i, t in enumerate(sg.tables(0, f"subgraph {si} tensors"))]
        n = len(tensors)
        ops: list[TflOp] = []
        for oi, o in enumerate(sg.tables(3, f"subgraph {si} operators")):
            ci = o.num(0, "u32")
            if ci >= len(codes):
                raise o.fail(f"opcode index {ci} is outside the {len(codes)} operator codes")
            code, custom, version = codes[ci]
            kind, options = o.union(3, 4, "builtin_options")
            ops.append(TflOp(oi, code, custom, version, _indexes(o, 1, "inputs", n, optional=True),
                             _indexes(o, 2, "outputs", n), kind, options, _indexes(o, 8, "intermediates", n),
                             o.union(11, 12, "builtin_options_2")[1]))
        subgraphs.append(TflSubgraph(si, sg.text(4), tensors, _indexes(sg, 1, "inputs", n),
                                     _indexes(sg, 2, "outputs", n), ops))
    signatures = []
    for sd in root.tables(7, "signature_defs"):
        si = sd.num(4, "u32")
        if si >= len(subgraphs):
            raise sd.fail(f"subgraph index {si} is outside the {len(subgraphs)} subgraphs")
        limit = len(subgraphs[si].tensors)

        def tmap(slot: int, sd: Table = sd, limit: int = limit) -> list[tuple[str, int]]:
            pairs = []
            for m in sd.tables(slot, "tensor map"):
                ti = m.num(1, "u32")
                if ti >= limit:
                    raise m.fail(f"tensor index {ti} is outside the {limit} tensors")
                pairs.append((m.text(0), ti))
            return pairs

        signatures.append(TflSignature(sd.text(2), si, tmap(0), tmap(1)))
    return TflFile(root.num(0, "u32"), subgraphs, signatures, root)
