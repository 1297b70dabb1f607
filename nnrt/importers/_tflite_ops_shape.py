"""TFLite → NNAPI mappers for ops that move data: reshapes, concatenation and splitting,
padding, slicing, gathering, transposes, resizing, reductions, arg-max/min, top-k, reverse and
table lookups.

NNAPI takes their shape-like arguments (target shapes, paddings, axes, permutations, sizes)
as constants, so a TFLite tensor feeding one of them must be a constant in the file (int64
constants are narrowed to int32 when they fit). RESHAPE takes its shape from the constant
input, else ``new_shape``, else the output tensor (a boolean RESHAPE that only drops unit axes
is a REDUCE_ANY over them: NNAPI reshapes no booleans). SPLIT_V becomes one SLICE per output;
UNPACK is SPLIT then SQUEEZE; MEAN keeps its own op, the other reducers map to REDUCE_*.
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._tflite_graph import Graph, Unsupported, mapper
from nnrt.importers._tflite_ops_nn import options
from nnrt.importers._tflite_schema import TT, TflOp
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_RESHAPE, _SQUEEZE, _EXPAND_DIMS, _CONCAT, _PACK, _UNPACK = 22, 43, 70, 2, 83, 88
_SPLIT, _SPLIT_V, _PAD, _PADV2, _MIRROR_PAD = 49, 102, 34, 60, 100
_SLICE, _STRIDED_SLICE, _GATHER, _TRANSPOSE, _TILE = 65, 45, 36, 39, 69
_RESIZE_BILINEAR, _RESIZE_NEAREST = 23, 97
_MEAN, _SUM, _PROD, _RMAX, _RMIN, _RANY, _RALL = 40, 74, 81, 82, 89, 91, 140
_ARG_MAX, _ARG_MIN = 56, 79
_S2D, _D2S, _B2S, _S2B, _EMBEDDING_LOOKUP, _FILL, _TOPK_V2, _REVERSE_V2 = 26, 5, 37, 38, 7, 94, 48, 105
_HASHTABLE_LOOKUP = 10

_REDUCERS = {_SUM: Op.REDUCE_SUM, _PROD: Op.REDUCE_PROD, _RMAX: Op.REDUCE_MAX, _RMIN: Op.REDUCE_MIN,
             _RANY: Op.REDUCE_ANY, _RALL: Op.REDUCE_ALL}


def _rank(g: Graph, operand: int) -> int:
    return len(g.model.operands[operand].dimensions)


def _axis(axis: int, rank: int) -> int:
    if rank and not -rank <= axis < rank:
        raise Unsupported(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 and rank else axis


@mapper(_RESHAPE)
def _reshape(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    shape: list[int] | None = None
    if g.has_input(op, 1) and g.const_value(op.inputs[1]) is not None:
        shape = g.const_ints(op, 1, "shape")
    elif op.options is not None and op.options.array(0, "i4", "new_shape") is not None:
        arr = op.options.array(0, "i4", "new_shape")
        assert arr is not None
        shape = [int(v) for v in arr]
    else:
        dims = g.dims(g.tensor(op.outputs[0]))
        if list(dims).count(0) > 1:
            raise Unsupported("the target shape is computed and the output has several unknown dimensions")
        shape = [d if d else -1 for d in dims]
    if not shape:
        shape = [1]  # a rank-0 target is a one-element tensor in nnrt
    if list(g.model.operands[x].dimensions) == shape and all(d > 0 for d in shape):
        g.alias(op.outputs[0], x)  # already that shape in nnrt (e.g. [1] to a scalar): no op, any type
        return
    if g.type_of(x) is T.TENSOR_BOOL8:
        axes = _dropped_unit_axes(list(g.model.operands[x].dimensions), shape)
        if axes is None:
            raise Unsupported(f"RESHAPE of booleans to {shape} (NNAPI reshapes no TENSOR_BOOL8)")
        # dropping size-1 axes of a bool tensor is REDUCE_ANY over them (each reduces one value)
        g.op(Op.REDUCE_ANY, [x, g.ints(axes), g.flag(False)], [g.out(op.outputs[0])])
        return
    g.op(Op.RESHAPE, [x, g.ints(shape)], [g.out(op.outputs[0])])


def _dropped_unit_axes(dims: list[int], target: list[int]) -> list[int] | None:
    """The size-1 axes of ``dims`` whose removal leaves ``target`` (``None`` if none do)."""
    axes, j = [], 0
    for i, d in enumerate(dims):
        if j < len(target) and d == target[j] and d > 0:
            j += 1
        elif d == 1:
            axes.append(i)
        else:
            return None
    return axes if j == len(target) and axes else None


@mapper(_SQUEEZE)
def _squeeze(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    arr = op.options.array(0, "i4", "squeeze_dims") if op.options is not None else None
    axes = [int(v) for v in arr] if arr is not None else []
    ins = [x, g.ints(axes)] if axes else [x]
    g.op(Op.SQUEEZE, ins, [g.out(op.outputs[0])])


@mapper(_EXPAND_DIMS)
def _expand_dims(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    (axis,) = g.const_ints(op, 1, "axis")
    g.op(Op.EXPAND_DIMS, [x, g.i32(axis)], [g.out(op.outputs[0])])


@mapper(_CONCAT)
def _concat(g: Graph, op: TflOp) -> None:
    o = options(op)
    xs = [g.input(i) for i in op.inputs]
    axis = _axis(o.num(0), _rank(g, xs[0]))
    y = g.after_activation(o.num(1, "i8"), op.outputs[0])
    g.op(Op.CONCATENATION, [*xs, g.i32(axis)], [y])


@mapper(_PACK)
def _pack(g: Graph, op: TflOp) -> None:
    xs = [g.input(i) for i in op.inputs]
    axis = _axis(options(op).num(1), _rank(g, xs[0]) + 1)
    g.op(Op.PACK, [g.i32(axis), *xs], [g.out(op.outputs[0])])


@mapper(_UNPACK)
def _unpack(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    axis = _axis(options(op).num(1), _rank(g, x))
    outs = [g.out(ti) for ti in op.outputs]
    parts = []
    for y in outs:
        dims = list(g.model.operands[y].dimensions)
        parts.append(g.temp(y, dims=[*dims[:axis], 1, *dims[axis:]]))
    g.op(Op.SPLIT, [x, g.i32(axis), g.i32(len(outs))], parts)
    for part, y in zip(parts, outs):
        g.op(Op.SQUEEZE, [part, g.ints([axis])], [y])


@mapper(_SPLIT)
def _split(g: Graph, op: TflOp) -> None:
    (axis,) = g.const_ints(op, 0, "axis")
    x = g.input(op.inputs[1])
    g.op(Op.SPLIT, [x, g.i32(_axis(axis, _rank(g, x))), g.i32(len(op.outputs))], [g.out(t) for t in op.outputs])


@mapper(_SPLIT_V)
def _split_v(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    sizes = g.const_ints(op, 1, "size_splits")
    (axis,) = g.const_ints(op, 2, "axis")
    dims = g.model.operands[x].dimensions
    axis = _axis(axis, len(dims))
    if sizes.count(-1) > 1 or len(sizes) != len(op.outputs):
        raise Unsupported(f"size_splits {sizes} for {len(op.outputs)} outputs")
    if -1 in sizes:
        if dims and dims[axis]:
            sizes[sizes.index(-1)] = dims[axis] - (sum(sizes) + 1)
        elif sizes.index(-1) != len(sizes) - 1:
            raise Unsupported("size_splits with -1 before the last part on an unknown dimension")
    start = 0
    for size, ti in zip(sizes, op.outputs):
        begin = [0] * len(dims)
        extent = [-1] * len(dims)
        begin[axis], extent[axis] = start, size
        g.op(Op.SLICE, [x, g.ints(begin), g.ints(extent)], [g.out(ti)])
        start += size


@mapper(_PAD, _PADV2)
def _pad(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    pads = _paddings_at(g, op, 1)
    y = g.out(op.outputs[0])
    if op.code == _PAD or not g.has_input(op, 2):
        g.op(Op.PAD, [x, pads], [y])
        return
    value = g.const_value(op.inputs[2])
    if value is None:
        raise Unsupported("constant_values must be a constant")
    xo = g.model.operands[x]
    v = value.reshape(-1)[0]
    scalar = g.f32(float(v)) if xo.type is T.TENSOR_FLOAT32 else g.i32(int(v))
    if xo.type is T.TENSOR_FLOAT16:
        scalar = g.scalar(T.FLOAT16, float(v))
    g.op(Op.PAD_V2, [x, pads, scalar], [y])


@mapper(_MIRROR_PAD)
def _mirror_pad(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    mode = options(op).num(0, "i8")
    g.op(Op.MIRROR_PAD, [x, _paddings_at(g, op, 1), g.i32(mode)], [g.out(op.outputs[0])])


@mapper(_SLICE)
def _slice(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    begin, size = g.const_ints(op, 1, "begin"), g.const_ints(op, 2, "size")
    g.op(Op.SLICE, [x, g.ints(begin), g.ints(size)], [g.out(op.outputs[0])])


@mapper(_STRIDED_SLICE)
def _strided_slice(g: Graph, op: TflOp) -> None:
    o = options(op)
    if o.num(2) or o.num(3) or o.flag(5):
        raise Unsupported("ellipsis_mask, new_axis_mask or offset (NNAPI's STRIDED_SLICE has none)")
    x = g.input(op.inputs[0])
    begin, end, strides = (g.const_ints(op, k, n) for k, n in ((1, "begin"), (2, "end"), (3, "strides")))
    ins = [x, g.ints(begin), g.ints(end), g.ints(strides), g.i32(o.num(0)), g.i32(o.num(1)), g.i32(o.num(4))]
    g.op(Op.STRIDED_SLICE, ins, [g.out(op.outputs[0])])


@mapper(_GATHER)
def _gather(g: Graph, op: TflOp) -> None:
    o = op.options
    axis, batch_dims = (o.num(0), o.num(1)) if o is not None else (0, 0)
    if batch_dims:
        raise Unsupported(f"batch_dims {batch_dims} (NNAPI's GATHER has none)")
    x = g.input(op.inputs[0])
    it = g.tensor(op.inputs[1])
    if it.type == TT.INT64 and it.data is None:
        raise Unsupported("computed int64 indices")
    idx = g.input(op.inputs[1])
    g.op(Op.GATHER, [x, g.i32(_axis(axis, _rank(g, x))), idx], [g.out(op.outputs[0])])


@mapper(_TRANSPOSE)
def _transpose(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    g.op(Op.TRANSPOSE, [x, g.ints(g.const_ints(op, 1, "perm"))], [g.out(op.outputs[0])])


@mapper(_TILE)
def _tile(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    g.op(Op.TILE, [x, g.ints(g.const_ints(op, 1, "multiples"))], [g.out(op.outputs[0])])


@mapper(_RESIZE_BILINEAR, _RESIZE_NEAREST)
def _resize(g: Graph, op: TflOp) -> None:
    o = op.options
    if op.code == _RESIZE_BILINEAR:
        align, half = (o.flag(2), o.flag(3)) if o is not None else (False, False)
    else:
        align, half = (o.flag(0), o.flag(1)) if o is not None else (False, False)
    x = g.input(op.inputs[0])
    size = g.const_ints(op, 1, "size")
    if len(size) != 2:
        raise Unsupported(f"size {size}; expected [height, width]")
    kind = Op.RESIZE_BILINEAR if op.code == _RESIZE_BILINEAR else Op.RESIZE_NEAREST_NEIGHBOR
    ins = [x, g.i32(size[1]), g.i32(size[0]), g.flag(False), g.flag(align), g.flag(half)]
    g.op(kind, ins, [g.out(op.outputs[0])])


@mapper(_MEAN, *_REDUCERS)
def _reduce(g: Graph, op: TflOp) -> None:
    keep = op.options.flag(0) if op.options is not None else False
    x = g.input(op.inputs[0])
    rank = _rank(g, x)
    axes = sorted({_axis(a, rank) for a in g.const_ints(op, 1, "axes")})
    y = g.out(op.outputs[0])
    if op.code == _MEAN:
        g.op(Op.MEAN, [x, g.ints(axes), g.i32(int(keep))], [y])
        return
    kind = _REDUCERS[op.code]
    if kind in (Op.REDUCE_SUM, Op.REDUCE_PROD) and g.type_of(x) is not T.TENSOR_FLOAT32:
        raise Unsupported(f"{kind.name} on {g.type_of(x).name} (NNAPI's is float only)")
    g.op(kind, [x, g.ints(axes), g.flag(keep)], [y])


@mapper(_ARG_MAX, _ARG_MIN)
def _arg(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    (axis,) = g.const_ints(op, 1, "axis")
    kind = Op.ARGMAX if op.code == _ARG_MAX else Op.ARGMIN
    # NNAPI's ARGMAX/ARGMIN give int32; an int64 output keeps its values in int32.
    g.op(kind, [x, g.i32(_axis(axis, _rank(g, x)))], [g.out(op.outputs[0], T.TENSOR_INT32)])


@mapper(_S2D, _D2S)
def _space_depth(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    kind = Op.SPACE_TO_DEPTH if op.code == _S2D else Op.DEPTH_TO_SPACE
    g.op(kind, [x, g.i32(options(op).num(0)), g.flag(False)], [g.out(op.outputs[0])])


@mapper(_B2S, _S2B)
def _batch_space(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    block = g.ints(g.const_ints(op, 1, "block_shape"))
    if op.code == _B2S:
        if any(g.const_ints(op, 2, "crops")):
            raise Unsupported("non-zero crops (NNAPI's BATCH_TO_SPACE_ND has none)")
        g.op(Op.BATCH_TO_SPACE_ND, [x, block, g.flag(False)], [g.out(op.outputs[0])])
        return
    g.op(Op.SPACE_TO_BATCH_ND, [x, block, _paddings_at(g, op, 2), g.flag(False)], [g.out(op.outputs[0])])


def _paddings_at(g: Graph, op: TflOp, k: int) -> int:
    pads = g.const_ints(op, k, "paddings")
    return g.const(np.asarray(pads, np.int32).reshape(-1, 2), T.TENSOR_INT32)


@mapper(_TOPK_V2)
def _topk(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    (k,) = g.const_ints(op, 1, "k")
    g.op(Op.TOPK_V2, [x, g.i32(k)], [g.out(op.outputs[0]), g.out(op.outputs[1], T.TENSOR_INT32)])


@mapper(_REVERSE_V2)
def _reverse(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    axes = g.const_ints(op, 1, "axis")
    if len(axes) != 1:
        raise Unsupported(f"axes {axes} (NNAPI's REVERSE takes one axis)")
    g.op(Op.REVERSE, [x, g.ints([_axis(axes[0], _rank(g, x))])], [g.out(op.outputs[0])])


@mapper(_EMBEDDING_LOOKUP)
def _embedding_lookup(g: Graph, op: TflOp) -> None:
    ids, values = g.input(op.inputs[0]), g.input(op.inputs[1])
    g.op(Op.EMBEDDING_LOOKUP, [ids, values], [g.out(op.outputs[0])])


@mapper(_HASHTABLE_LOOKUP)
def _hashtable_lookup(g: Graph, op: TflOp) -> None:
    lookups, keys, values = (g.input(op.inputs[k]) for k in range(3))
    hits = g.out(op.outputs[1], T.TENSOR_QUANT8_ASYMM)
    g.op(Op.HASHTABLE_LOOKUP, [lookups, keys, values], [g.out(op.outputs[0]), hits])


@mapper(_FILL)
def _fill(g: Graph, op: TflOp) -> None:
    dims = g.const_ints(op, 0, "dims")
    vt = g.tensor(op.inputs[1])
    v = g.const_value(op.inputs[1])
    if v is None:
        raise Unsupported("a computed fill value")
    value = v.reshape(-1)[0]
    scalar = {TT.FLOAT32: lambda: g.f32(float(value)), TT.INT32: lambda: g.i32(int(value))}.get(vt.type)
    if scalar is None:
        raise Unsupported(f"FILL of {vt.type_name}")
    g.op(Op.FILL, [g.ints(dims), scalar()], [g.out(op.outputs[0])])
