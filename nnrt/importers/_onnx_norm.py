"""ONNX normalisations over axes → NNAPI MEAN / SUB / MUL / RSQRT chains.

LayerNormalization (axis..last), RMSNormalization and MeanVarianceNormalization have no NNAPI
operation; each is built from the ops its definition names, in float32/float16:
``d = x - mean(x)``, ``y = d * rsqrt(mean(d * d) + epsilon)`` (RMS: ``x * rsqrt(mean(x * x) +
epsilon)``), then scale and bias. The optional Mean / InvStdDev outputs of LayerNormalization
are the chain's MEAN and RSQRT results (float32 inputs: ONNX computes them in float32).
InstanceNormalization → INSTANCE_NORMALIZATION + per-channel MUL/ADD (scale and bias constants
or run-time tensors); LRN (odd size) → LOCAL_RESPONSE_NORMALIZATION; LpNormalization p=2 →
L2_NORMALIZATION. (BatchNormalization lives in ``_onnx_nn``.)
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._onnx import Arg, NodeCtx, Reject, Value, mapper
from nnrt.importers._onnx_elem import normalize_axes
from nnrt.importers._onnx_nn import channel_const
from nnrt.types import OperationType as Op

__all__: list[str] = []

_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def _mean(ctx: NodeCtx, x: Value, axes: list[int]) -> Value:
    assert x.shape is not None
    shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
    return ctx.b.op1(Op.MEAN, [x, ctx.b.ints(axes), ctx.b.i32(1)], x.dtype, shape)


def _bin(ctx: NodeCtx, op: Op, a: Value, b: Value, shape: tuple[int, ...] | None) -> Value:
    return ctx.b.op1(op, [a, b, ctx.b.i32(0)], a.dtype, shape)


def _eps(x: Value, value: float) -> Value:
    arr = np.asarray([value], dtype=x.dtype)
    return Value(arr.dtype, arr.shape, const=arr)


def _normalized(ctx: NodeCtx, x: Value, axes: list[int], eps: float, center: bool,
                stats: list[Value] | None = None) -> Value:
    """(x - mean) * rsqrt(mean((x - mean)^2) + eps) over ``axes``; without ``center``, x * rsqrt(mean(x^2) + eps).
    ``stats`` (when given, with ``center``) receives the mean and the rsqrt, reduced axes kept as 1."""
    mean = _mean(ctx, x, axes) if center else None
    d = _bin(ctx, Op.SUB, x, mean, x.shape) if mean is not None else x
    var = _mean(ctx, _bin(ctx, Op.MUL, d, d, x.shape), axes)
    inv = ctx.b.op1(Op.RSQRT, [_bin(ctx, Op.ADD, var, _eps(x, eps), var.shape)], x.dtype, var.shape)
    if stats is not None and mean is not None:
        stats += [mean, inv]
    return _bin(ctx, Op.MUL, d, inv, x.shape)


def _finish(ctx: NodeCtx, y: Value, scale: Value | None, bias: Value | None) -> None:
    steps = [(Op.MUL, scale), (Op.ADD, bias)]
    steps = [(op, v) for op, v in steps if v is not None]
    if not steps:
        ctx.set(0, ctx.b.copy(y))
        return
    for k, (op, v) in enumerate(steps):
        assert v is not None
        if k == len(steps) - 1:
            ctx.emit(op, [y, v, ctx.b.i32(0)], y.dtype, y.shape)
        else:
            y = _bin(ctx, op, y, v, y.shape)


def _input(ctx: NodeCtx, stats: bool = False) -> tuple[Value, int]:
    x = ctx.inp(0)
    if x.dtype not in _FLOATS or x.quant is not None:
        raise Reject(f"input of type {x.dtype} is not supported")
    if any(ctx.out(k) for k in range(1, len(ctx.node.outputs))) and not (stats and x.dtype == np.float32):
        raise Reject("the Mean / InvStdDev outputs are supported for float32 LayerNormalization only")
    r = x.need_rank(ctx.node.op_type)
    if r > 4:
        raise Reject(f"rank {r} is not supported (NNAPI's MEAN takes rank <= 4)")
    return x, r


def _param(ctx: NodeCtx, i: int, x: Value) -> Value | None:
    v = ctx.opt(i)
    if v is not None and v.dtype != x.dtype:
        if v.const is None:
            raise Reject(f"input {i} has type {v.dtype}, not the input's {x.dtype}")
        c = v.const.astype(x.dtype)
        v = Value(c.dtype, c.shape, const=c)
    return v


@mapper("LayerNormalization")
def _layer_norm(ctx: NodeCtx) -> None:
    x, r = _input(ctx, stats=True)
    if ctx.i("stash_type", 1) != 1:
        raise Reject("stash_type other than float32 is not supported")
    axis = normalize_axes([ctx.i("axis", -1)], r)[0]
    stats: list[Value] = []
    y = _normalized(ctx, x, list(range(axis, r)), ctx.f("epsilon", 1e-5), center=True, stats=stats)
    _finish(ctx, y, _param(ctx, 1, x), _param(ctx, 2, x))
    for k, v in enumerate(stats, start=1):
        if ctx.out(k):
            ctx.set(k, v)


@mapper("RMSNormalization")
def _rms_norm(ctx: NodeCtx) -> None:
    x, r = _input(ctx)
    axis = normalize_axes([ctx.i("axis", -1)], r)[0]
    y = _normalized(ctx, x, list(range(axis, r)), ctx.f("epsilon", 1e-5), center=False)
    _finish(ctx, y, _param(ctx, 1, x), None)


@mapper("MeanVarianceNormalization")
def _mvn(ctx: NodeCtx) -> None:
    x, r = _input(ctx)
    axes = sorted(set(normalize_axes(ctx.ints("axes", [0, 2, 3]) or [], r)))
    y = _normalized(ctx, x, axes, 1e-9, center=True)
    ctx.set(0, y)


@mapper("InstanceNormalization")
def _instance_norm(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    if x.need_rank("InstanceNormalization") != 4 or x.dtype not in _FLOATS:
        raise Reject("only 4-D float inputs are supported")
    y = ctx.b.op1(Op.INSTANCE_NORMALIZATION, [x, ctx.b.f32(1.0, x), ctx.b.f32(0.0, x),
                                              ctx.b.f32(ctx.f("epsilon", 1e-5), x), ctx.b.bool(True)], x.dtype, x.shape)
    y = ctx.b.op1(Op.MUL, [y, _per_channel(ctx, 1, "scale", x), ctx.b.i32(0)], x.dtype, x.shape)
    ctx.emit(Op.ADD, [y, _per_channel(ctx, 2, "B", x), ctx.b.i32(0)], x.dtype, x.shape)


def _per_channel(ctx: NodeCtx, i: int, what: str, x: Value) -> Value:
    """Input ``i``, one value per channel, as [C, 1, 1] to broadcast over NCHW ``x`` (a run-time
    tensor by a RESHAPE)."""
    v = ctx.inp(i)
    assert x.shape is not None
    if v.const is not None:
        return channel_const(v.const, 4, x.dtype)
    if v.dtype != x.dtype or v.shape is None or len(v.shape) != 1:
        raise Reject(f"{what} (input {i}) must be 1-D of {x.dtype}, not {v.shape} of {v.dtype}")
    return ctx.b.reshape(v, [v.shape[0] or x.shape[1] or -1, 1, 1])


@mapper("LRN")
def _lrn(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    size = ctx.i("size", 0)
    if size % 2 == 0 or x.dtype not in _FLOATS:
        raise Reject("only odd sizes and float inputs are supported (NNAPI's window is symmetric)")
    x.need_rank("LRN")
    ins: list[Arg] = [x, ctx.b.i32((size - 1) // 2), ctx.b.f32(ctx.f("bias", 1.0), x), ctx.b.f32(ctx.f("alpha", 1e-4) / size, x),
           ctx.b.f32(ctx.f("beta", 0.75), x), ctx.b.i32(1)]
    ctx.emit(Op.LOCAL_RESPONSE_NORMALIZATION, ins, x.dtype, x.shape)


@mapper("LpNormalization")
def _lp_norm(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    if ctx.i("p", 2) != 2 or x.dtype not in _FLOATS:
        raise Reject("only p=2 on float inputs is supported")
    axis = normalize_axes([ctx.i("axis", -1)], x.need_rank("LpNormalization"))[0]
    ctx.emit(Op.L2_NORMALIZATION, [x, ctx.b.i32(axis)], x.dtype, x.shape)
