"""Constant folding for the ONNX importer: nodes whose inputs are all constants run in numpy.

Exported models compute Reshape targets, Slice bounds, Resize sizes and the like from
``Shape`` of a tensor whose dimensions are known at import (fixed in the file or by
``input_shapes``). Folding those chains here turns them into constants, which is what NNAPI
operations need (RESHAPE's shape, SLICE's begin/size...). ``Shape``/``Size`` fold as soon as the
shape is fully known, even when the tensor's value is not. Folding also covers constant weight
preprocessing an exporter leaves in the graph (DequantizeLinear of int8 weights, Transpose or
Cast of initializers), so those cost nothing at run time.

Each folder mirrors the ONNX operator's definition for the dtypes it is used with; ops whose
numpy translation would differ in an edge case (integer division rounding, float casts) are
written out explicitly. Anything not listed here is not folded and goes to its mapper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.importers._onnx import NodeCtx, Reject, Value, mapper
from nnrt.importers._onnx_proto import ONNX_DTYPES, tensor_array

__all__ = ["try_fold"]

Arrays = list[np.ndarray | None]
Folder = Callable[[NodeCtx, Arrays], list[np.ndarray]]
FOLDERS: dict[str, Folder] = {}

#: Folding a result larger than this is left to run time (a folded constant is stored in the model).
MAX_FOLD_ELEMENTS = 1 << 22


def folder(*names: str) -> Callable[[Folder], Folder]:
    def reg(fn: Folder) -> Folder:
        for n in names:
            FOLDERS[n] = fn
        return fn

    return reg


def try_fold(ctx: NodeCtx) -> bool:
    """Fold ``ctx``'s node if it can; sets its outputs to constant Values and returns True."""
    op = ctx.node.op_type
    if op in ("Shape", "Size") and ctx.inputs and ctx.inputs[0] is not None and ctx.inputs[0].known:
        shape = np.asarray(ctx.inputs[0].shape, dtype=np.int64)
        if op == "Size":
            out = np.asarray(int(np.prod(shape)), dtype=np.int64)
        else:
            r = len(shape)
            start, end = ctx.i("start", 0), ctx.i("end", r)
            out = shape[slice(start + r if start < 0 else start, end + r if end < 0 else end)]
        ctx.set(0, Value(out.dtype, out.shape, const=out))
        return True
    fn = FOLDERS.get(op)
    if fn is None or any(v is not None and v.const is None for v in ctx.inputs):
        return False
    if any(v is not None and v.quant is not None for v in ctx.inputs):
        return False
    arrays: Arrays = [None if v is None else v.const for v in ctx.inputs]
    with np.errstate(all="ignore"):
        results = fn(ctx, arrays)
    for k, res in enumerate(results):
        arr = np.asarray(res)
        if arr.size > MAX_FOLD_ELEMENTS:
            raise Reject(f"folding would create a constant of {arr.size} elements")
        arr.flags.writeable = False
        ctx.set(k, Value(arr.dtype, arr.shape, const=arr))
    return True


@mapper("Constant", "Shape", "Size", "Range")
def _not_folded(ctx: NodeCtx) -> None:
    """Reached only when folding did not apply: say what would make it fold."""
    if ctx.node.op_type in ("Shape", "Size"):
        raise Reject("the input's shape is not fully known at load (input_shapes can fix it), "
                     "and nnrt has no run-time shape operation")
    if ctx.node.op_type == "Range":
        raise Reject("start, limit and delta must be constants")
    raise Reject("the value attribute is missing or of an unsupported kind")


def _a(arrays: Arrays, i: int) -> np.ndarray:
    x = arrays[i] if i < len(arrays) else None
    if x is None:
        raise Reject(f"input {i} is required")
    return x


@folder("Constant")
def _constant(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    attrs = ctx.node.attrs
    if "value" in attrs and attrs["value"].t is not None:
        return [tensor_array(attrs["value"].t, "Constant")]
    for name, dt in (("value_float", np.float32), ("value_int", np.int64)):
        if name in attrs:
            return [np.asarray(attrs[name].value(), dtype=dt)]
    for name, dt in (("value_floats", np.float32), ("value_ints", np.int64)):
        if name in attrs:
            return [np.asarray(attrs[name].value(), dtype=dt)]
    raise Reject("only tensor, float and int Constant values are supported")


@folder("ConstantOfShape")
def _constant_of_shape(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    attr = ctx.node.attrs.get("value")
    fill = tensor_array(attr.t, "ConstantOfShape") if attr is not None and attr.t is not None else np.zeros(1, np.float32)
    return [np.full(tuple(int(d) for d in _a(a, 0)), fill.reshape(-1)[0], dtype=fill.dtype)]


@folder("Identity", "Dropout")
def _identity(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x = _a(a, 0)
    return [x, np.ones(x.shape, bool)][: len(ctx.node.outputs)]


@folder("Cast")
def _cast(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    dt = ONNX_DTYPES.get(ctx.i("to", 0))
    if dt is None:
        raise Reject(f"Cast to ONNX type {ctx.i('to', 0)} is not supported")
    x = _a(a, 0)
    if x.dtype.kind == "f" and dt.kind in "iu":
        x = np.trunc(x)
    return [x.astype(dt)]


@folder("CastLike")
def _cast_like(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x, like = _a(a, 0), _a(a, 1)
    if x.dtype.kind == "f" and like.dtype.kind in "iu":
        x = np.trunc(x)
    return [x.astype(like.dtype)]


@folder("Mod")
def _mod(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x, y = _a(a, 0), _a(a, 1)
    if (y == 0).any() and x.dtype.kind in "iu":
        raise Reject("integer modulo by zero in a constant expression")
    return [np.fmod(x, y) if ctx.i("fmod", 0) else np.mod(x, y).astype(x.dtype)]


@folder("Gather")
def _gather(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x, idx = _a(a, 0), _a(a, 1)
    axis = ctx.i("axis", 0)
    return [np.take(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)]


@folder("Concat")
def _concat(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    return [np.concatenate([x for x in a if x is not None], axis=ctx.i("axis", 0))]


def _axes(ctx: NodeCtx, a: Arrays, since: int) -> list[int] | None:
    if ctx.opset >= since:
        ax = a[1] if len(a) > 1 else None
        return None if ax is None else [int(v) for v in ax.reshape(-1)]
    return ctx.ints("axes")


@folder("Unsqueeze")
def _unsqueeze(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x = _a(a, 0)
    axes = _axes(ctx, a, 13) or []
    r = x.ndim + len(axes)
    return [np.expand_dims(x, tuple(sorted(ax + r if ax < 0 else ax for ax in axes)))]


@folder("Squeeze")
def _squeeze(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x = _a(a, 0)
    axes = _axes(ctx, a, 13)
    return [np.squeeze(x) if axes is None else np.squeeze(x, tuple(ax % x.ndim for ax in axes))]


@folder("Reshape")
def _reshape(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x, shape = _a(a, 0), [int(d) for d in _a(a, 1)]
    if not ctx.i("allowzero", 0):
        shape = [x.shape[k] if d == 0 else d for k, d in enumerate(shape)]
    return [x.reshape(shape)]


@folder("Flatten")
def _flatten(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x = _a(a, 0)
    axis = ctx.i("axis", 1) % (x.ndim + 1) if x.ndim else 0
    return [x.reshape(int(np.prod(x.shape[:axis])), -1)]


@folder("Transpose")
def _transpose(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    return [np.transpose(_a(a, 0), ctx.ints("perm"))]


@folder("Slice")
def _slice(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    # Python slices clamp out-of-range bounds exactly as ONNX Slice does.
    x = _a(a, 0)
    starts, ends = _a(a, 1).reshape(-1), _a(a, 2).reshape(-1)
    axes = a[3].reshape(-1) if len(a) > 3 and a[3] is not None else np.arange(len(starts))
    steps = a[4].reshape(-1) if len(a) > 4 and a[4] is not None else np.ones(len(starts), np.int64)
    index: list[slice] = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        index[int(ax)] = slice(int(s), int(e), int(st))
    return [x[tuple(index)]]


@folder("Range")
def _range(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    start, limit, delta = _a(a, 0), _a(a, 1), _a(a, 2)
    return [np.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)]


@folder("Expand")
def _expand(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x, shape = _a(a, 0), tuple(int(d) for d in _a(a, 1))
    return [x * np.ones(shape, dtype=x.dtype)]


@folder("Tile")
def _tile(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    return [np.tile(_a(a, 0), tuple(int(d) for d in _a(a, 1)))]


def _int_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu":
        if np.any(y == 0):
            raise Reject("integer division by zero in a constant expression")
        q = np.abs(x) // np.abs(y)
        return np.asarray(np.where((x < 0) ^ (y < 0), -q, q), dtype=x.dtype)
    return np.asarray(x / y, dtype=x.dtype)


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _int_div, "Equal": np.equal,
    "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}  # fmt: skip
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Neg": np.negative, "Abs": np.abs, "Not": np.logical_not, "Floor": np.floor, "Ceil": np.ceil,
    "Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Sign": np.sign,
}  # fmt: skip


@folder(*_BINARY)
def _binary(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x, y = _a(a, 0), _a(a, 1)
    r = _BINARY[ctx.node.op_type](x, y)
    return [np.asarray(r, dtype=r.dtype if r.dtype == bool else x.dtype)]


@folder(*_UNARY)
def _unary(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x = _a(a, 0)
    return [np.asarray(_UNARY[ctx.node.op_type](x), dtype=x.dtype)]


@folder("Max", "Min", "Sum")
def _variadic(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    fn = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add}[ctx.node.op_type]
    xs = [x for x in a if x is not None]
    r = xs[0]
    for x in xs[1:]:
        r = fn(r, x)
    return [np.asarray(r, dtype=xs[0].dtype)]


@folder("Where")
def _where(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    return [np.where(_a(a, 0), _a(a, 1), _a(a, 2))]


@folder("ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin")
def _reduce(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x = _a(a, 0)
    since = 13 if ctx.node.op_type == "ReduceSum" else 18
    axes = _axes(ctx, a, since)
    keep = bool(ctx.i("keepdims", 1))
    if not axes:
        if ctx.i("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(x.ndim))
    fn: Any = {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min}[ctx.node.op_type]
    return [np.asarray(fn(x, axis=tuple(axes), keepdims=keep), dtype=x.dtype)]


@folder("DequantizeLinear")
def _dequantize(ctx: NodeCtx, a: Arrays) -> list[np.ndarray]:
    x, scale = _a(a, 0), _a(a, 1)
    zp = a[2] if len(a) > 2 and a[2] is not None else np.zeros_like(scale, dtype=x.dtype)
    if x.dtype.kind not in "iu" or scale.dtype != np.float32:
        raise Reject(f"DequantizeLinear of {x.dtype} with {scale.dtype} scale is not supported")
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * x.ndim
        shape[ctx.i("axis", 1) % x.ndim] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return [((x.astype(np.int32) - zp.astype(np.int32)) * scale).astype(np.float32)]
