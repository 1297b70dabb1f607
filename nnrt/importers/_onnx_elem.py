"""ONNX elementwise, activation, reduction, softmax, cast and quantization ops → NNAPI.

Direct maps: Add/Sub/Mul/Div (broadcasting, as NNAPI's ADD..DIV), Pow, Max/Min/Sum/Mean
(chained), comparisons and logical ops, Where (SELECT, broadcast by hand), Abs/Neg/Exp/Log/
Sqrt/Sin/Floor, Relu/Sigmoid/Tanh/HardSwish/Elu, PRelu/LeakyRelu (PRELU), Clip (RELU, RELU1,
RELU6 or MAXIMUM/MINIMUM), Softmax/LogSoftmax (opset < 13 flattens the input to 2-D at
``axis`` first, as ONNX defined it then), Reduce* (MEAN, REDUCE_*), ArgMax/ArgMin, Cast,
and (in ``_onnx_quant``) the quantization ops.

Decompositions, exact up to float rounding: HardSigmoid = min(max(alphax+beta, 0), 1); Selu =
gamma*ELU(x, alpha); Reciprocal = 1/x; Ceil = -floor(-x); Softplus = log(exp(x)+1); Softsign =
x/(1+|x|); Mish = x*tanh(softplus(x)); Gelu(tanh) from its formula; Erf (and so exact Gelu)
from Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7, below float32 test tolerances);
ReduceL1/L2/SumSquare/LogSum/LogSumExp from REDUCE_SUM. SiLU/Swish exports (Sigmoid x Mul)
need no pattern: each node maps on its own.
"""

from __future__ import annotations

import math

import numpy as np

from nnrt.importers._onnx import Arg, NodeCtx, Reject, Shape, Value, mapper
from nnrt.importers._onnx_proto import ONNX_DTYPES
from nnrt.types import OperationType as Op

__all__ = ["bshape", "broadcast_to", "normalize_axes"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
_I64 = np.dtype(np.int64)
_BOOL = np.dtype(bool)


def bshape(a: Shape, b: Shape) -> Shape:
    """Numpy broadcasting of two shapes whose dims may be unknown (0)."""
    if a is None or b is None:
        return None
    r = max(len(a), len(b))
    a2, b2 = (1,) * (r - len(a)) + a, (1,) * (r - len(b)) + b
    out = []
    for x, y in zip(a2, b2):
        if x == 1:
            out.append(y)
        elif y in (1, x):
            out.append(x)
        elif x == 0 or y == 0:
            out.append(max(x, y) if max(x, y) > 1 else 0)
        else:
            raise Reject(f"shapes {list(a)} and {list(b)} do not broadcast")
    return tuple(out)


def normalize_axes(axes: list[int], rank: int) -> list[int]:
    out = []
    for ax in axes:
        if not -rank <= ax < rank:
            raise Reject(f"axis {ax} is out of range for rank {rank}")
        out.append(ax % rank)
    return out


def _float(ctx: NodeCtx, v: Value, what: str = "input 0") -> None:
    if v.dtype not in _FLOATS or v.quant is not None:
        raise Reject(f"{what} has type {v.dtype}; only float32 and float16 are supported")


def _const_like(v: Value, value: float) -> Value:
    arr = np.asarray([value], dtype=v.dtype if v.dtype != _I64 else np.int32)
    return Value(arr.dtype, arr.shape, const=arr)


def _bin(ctx: NodeCtx, op: Op, a: Value, b: Value, out: int | None = 0) -> Value:
    dtype = a.dtype
    shape = bshape(a.shape, b.shape)
    act = [ctx.b.i32(0)] if op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV) else []
    if out is None:
        return ctx.b.op1(op, [a, b, *act], dtype, shape)
    return ctx.emit(op, [a, b, *act], dtype, shape, i=out)


def _un(ctx: NodeCtx, op: Op, x: Value, extra: list[int] | None = None, out: int | None = 0) -> Value:
    ins: list[Arg] = [x, *(extra or [])]
    if out is None:
        return ctx.b.op1(op, ins, x.dtype, x.shape, x.quant)
    return ctx.emit(op, ins, x.dtype, x.shape, x.quant, i=out)


def _check_binary(ctx: NodeCtx, a: Value, b: Value, ints: bool = True) -> None:
    allowed = [*_FLOATS, np.dtype(np.int32), _I64] if ints else list(_FLOATS)
    for k, v in enumerate((a, b)):
        if v.dtype not in allowed or v.quant is not None:
            raise Reject(f"input {k} has type {v.dtype}, not supported by this operator")


_ARITH = {"Add": Op.ADD, "Sub": Op.SUB, "Mul": Op.MUL, "Div": Op.DIV}


@mapper("Add", "Sub", "Mul", "Div")
def _arith(ctx: NodeCtx) -> None:
    a, b = ctx.inp(0), ctx.inp(1)
    op = _ARITH[ctx.node.op_type]
    _check_binary(ctx, a, b, ints=op is not Op.DIV)
    _bin(ctx, op, a, b)


@mapper("Pow")
def _pow(ctx: NodeCtx) -> None:
    a, b = ctx.inp(0), ctx.inp(1)
    _float(ctx, a)
    if b.dtype != a.dtype:
        if b.const is None:
            raise Reject(f"exponent of type {b.dtype} differs from the base's {a.dtype}")
        c = b.const.astype(a.dtype)
        b = Value(c.dtype, c.shape, const=c)
    if b.const is not None and b.const.size == 1 and float(b.const.reshape(-1)[0]) == 2.0:
        _bin(ctx, Op.MUL, a, a)
        return
    _bin(ctx, Op.POW, a, b)


@mapper("Max", "Min", "Sum", "Mean")
def _variadic(ctx: NodeCtx) -> None:
    xs = ctx.all_inputs()
    if not xs:
        raise Reject("needs at least one input")
    op = {"Max": Op.MAXIMUM, "Min": Op.MINIMUM, "Sum": Op.ADD, "Mean": Op.ADD}[ctx.node.op_type]
    for k, v in enumerate(xs):
        if v.dtype != xs[0].dtype or v.quant is not None or v.dtype not in (*_FLOATS, np.int32, _I64):
            raise Reject(f"input {k} has type {v.dtype}; inputs must share one float or int type")
    if len(xs) == 1:
        ctx.set(0, ctx.b.copy(xs[0]) if xs[0].index is None else xs[0])
        return
    acc = xs[0]
    last = len(xs) - 2
    for k, v in enumerate(xs[1:]):
        final = k == last and ctx.node.op_type != "Mean"
        acc = _bin(ctx, op, acc, v, out=0 if final else None)
    if ctx.node.op_type == "Mean":
        _float(ctx, acc)
        _bin(ctx, Op.MUL, acc, _const_like(acc, 1.0 / len(xs)))


_COMPARE = {"Equal": Op.EQUAL, "Less": Op.LESS, "Greater": Op.GREATER, "LessOrEqual": Op.LESS_EQUAL,
            "GreaterOrEqual": Op.GREATER_EQUAL}  # fmt: skip


@mapper(*_COMPARE)
def _compare(ctx: NodeCtx) -> None:
    a, b = ctx.inp(0), ctx.inp(1)
    if a.dtype not in (*_FLOATS, np.int32, _I64, _BOOL) or a.quant is not None:
        raise Reject(f"input 0 has type {a.dtype}, not supported")
    ctx.emit(_COMPARE[ctx.node.op_type], [a, b], _BOOL, bshape(a.shape, b.shape))


@mapper("Mod")
def _mod(ctx: NodeCtx) -> None:
    a, b = ctx.inp(0), ctx.inp(1)
    if a.dtype not in (np.int32, _I64) or ctx.i("fmod", 0):
        raise Reject("only integer Mod with fmod=0 is supported")
    # NNAPI's integer DIV rounds toward -inf, so a - (a div b) * b has the divisor's sign, as ONNX wants.
    q = _bin(ctx, Op.DIV, a, b, out=None)
    _bin(ctx, Op.SUB, a, _bin(ctx, Op.MUL, q, b, out=None))


@mapper("IsNaN", "IsInf")
def _is_special(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    if ctx.node.op_type == "IsNaN":
        ctx.emit(Op.NOT_EQUAL, [x, x], _BOOL, x.shape)
        return
    pos, neg = ctx.i("detect_positive", 1), ctx.i("detect_negative", 1)
    if pos and neg:
        ctx.emit(Op.EQUAL, [_un(ctx, Op.ABS, x, out=None), _const_like(x, math.inf)], _BOOL, x.shape)
    elif pos or neg:
        ctx.emit(Op.EQUAL, [x, _const_like(x, math.inf if pos else -math.inf)], _BOOL, x.shape)
    else:  # detects nothing: |x| < -1 is false everywhere
        ctx.emit(Op.LESS, [_un(ctx, Op.ABS, x, out=None), _const_like(x, -1.0)], _BOOL, x.shape)


@mapper("And", "Or", "Xor", "Not")
def _logical(ctx: NodeCtx) -> None:
    a = ctx.inp(0)
    if ctx.node.op_type == "Not":
        ctx.emit(Op.LOGICAL_NOT, [a], _BOOL, a.shape)
        return
    b = ctx.inp(1)
    op = {"And": Op.LOGICAL_AND, "Or": Op.LOGICAL_OR, "Xor": Op.NOT_EQUAL}[ctx.node.op_type]
    ctx.emit(op, [a, b], _BOOL, bshape(a.shape, b.shape))


def broadcast_to(ctx: NodeCtx, v: Value, shape: Shape) -> Value:
    """``v`` broadcast to ``shape`` (known), by adding a zero tensor of that shape."""
    if v.shape == shape:
        return v
    if shape is None or not all(d > 0 for d in shape):
        raise Reject("broadcasting needs the output shape to be known")
    if v.const is not None:
        c = np.ascontiguousarray(np.broadcast_to(v.const, shape))
        return Value(c.dtype, c.shape, const=c, quant=v.quant)
    if v.dtype == _BOOL:
        false = Value(_BOOL, shape, const=np.zeros(shape, bool))
        return ctx.b.op1(Op.LOGICAL_OR, [v, false], _BOOL, shape)
    zeros = np.zeros(shape, dtype=v.dtype if v.dtype != _I64 else np.int32)
    return ctx.b.op1(Op.ADD, [v, Value(zeros.dtype, shape, const=zeros), ctx.b.i32(0)], v.dtype, shape)


@mapper("Where")
def _where(ctx: NodeCtx) -> None:
    c, a, b = ctx.inp(0), ctx.inp(1), ctx.inp(2)
    shape = bshape(bshape(c.shape, a.shape), b.shape)
    ctx.emit(Op.SELECT, [broadcast_to(ctx, c, shape), broadcast_to(ctx, a, shape), broadcast_to(ctx, b, shape)],
             a.dtype, shape, a.quant)


_UNARY = {"Abs": Op.ABS, "Neg": Op.NEG, "Exp": Op.EXP, "Log": Op.LOG, "Sqrt": Op.SQRT, "Sin": Op.SIN,
          "Floor": Op.FLOOR, "Relu": Op.RELU, "Sigmoid": Op.LOGISTIC, "Tanh": Op.TANH,
          "HardSwish": Op.HARD_SWISH}  # fmt: skip


@mapper(*_UNARY)
def _unary(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    op = _UNARY[ctx.node.op_type]
    if op not in (Op.ABS, Op.NEG) or x.dtype not in (np.int32, _I64):
        _float(ctx, x)
    _un(ctx, op, x)


@mapper("Reciprocal")
def _reciprocal(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    _bin(ctx, Op.DIV, _const_like(x, 1.0), x)


@mapper("Ceil")
def _ceil(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    _un(ctx, Op.NEG, _un(ctx, Op.FLOOR, _un(ctx, Op.NEG, x, out=None), out=None))


@mapper("Elu", "Selu")
def _elu(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    if ctx.node.op_type == "Elu":
        _un(ctx, Op.ELU, x, [ctx.b.f32(ctx.f("alpha", 1.0), x)])
        return
    e = _un(ctx, Op.ELU, x, [ctx.b.f32(ctx.f("alpha", 1.67326319217681884765625), x)], out=None)
    _bin(ctx, Op.MUL, e, _const_like(x, ctx.f("gamma", 1.05070102214813232421875)))


@mapper("LeakyRelu", "PRelu")
def _prelu(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    if ctx.node.op_type == "LeakyRelu":
        alpha = _const_like(x, ctx.f("alpha", 0.01))
    else:
        alpha = ctx.inp(1)
        if alpha.dtype != x.dtype:
            raise Reject(f"slope of type {alpha.dtype} differs from the input's {x.dtype}")
    ctx.emit(Op.PRELU, [x, alpha], x.dtype, bshape(x.shape, alpha.shape))


def _bounds(ctx: NodeCtx) -> tuple[float | None, float | None]:
    if ctx.opset < 11:
        return ctx.f("min", -math.inf), ctx.f("max", math.inf)
    out: list[float | None] = []
    for i, what in ((1, "min"), (2, "max")):
        c = ctx.const(i, what)
        out.append(None if c is None else float(c.reshape(-1)[0]))
    return out[0], out[1]


def _clip_run_time(ctx: NodeCtx, x: Value) -> bool:
    """Clip with a bound given at run time: MAXIMUM then MINIMUM by the bound tensors (which
    also gives ONNX's result, max, where min > max). False when both bounds are constants."""
    bounds = [ctx.opt(1), ctx.opt(2)] if ctx.opset >= 11 else []
    if all(v is None or v.const is not None for v in bounds):
        return False
    if x.dtype not in (*_FLOATS, np.dtype(np.int32), _I64):
        raise Reject(f"input 0 has type {x.dtype}, not supported")
    y, last = x, 1 if bounds[1] is not None else 0
    for k, (op, v) in enumerate(((Op.MAXIMUM, bounds[0]), (Op.MINIMUM, bounds[1]))):
        if v is None:
            continue
        if v.const is not None:
            v = _const_like(x, float(v.const.reshape(-1)[0]))
        elif v.dtype != x.dtype:
            raise Reject(f"bound (input {k + 1}) of type {v.dtype} differs from the input's {x.dtype}")
        y = _bin(ctx, op, y, v, out=0 if k == last else None)
    return True


@mapper("Clip")
def _clip(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    if _clip_run_time(ctx, x):
        return
    lo, hi = _bounds(ctx)
    if x.dtype in _FLOATS:
        relus: dict[tuple[float | None, float | None], Op] = {(0.0, 6.0): Op.RELU6, (-1.0, 1.0): Op.RELU1,
                                                              (0.0, None): Op.RELU}
        relu = relus.get((lo, hi))
        if relu is not None:
            _un(ctx, relu, x)
            return
    elif x.dtype not in (np.int32, _I64):
        raise Reject(f"input 0 has type {x.dtype}, not supported")
    if lo is None and hi is None:
        ctx.set(0, x)
        return
    y = x
    if lo is not None and hi is not None and lo > hi:
        lo = hi  # ONNX: min > max gives max everywhere
    if lo is not None:
        y = _bin(ctx, Op.MAXIMUM, y, _const_like(x, lo), out=0 if hi is None else None)
    if hi is not None:
        _bin(ctx, Op.MINIMUM, y, _const_like(x, hi))


@mapper("HardSigmoid")
def _hard_sigmoid(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    y = _bin(ctx, Op.MUL, x, _const_like(x, ctx.f("alpha", 0.2)), out=None)
    y = _bin(ctx, Op.ADD, y, _const_like(x, ctx.f("beta", 0.5)), out=None)
    y = _bin(ctx, Op.MAXIMUM, y, _const_like(x, 0.0), out=None)
    _bin(ctx, Op.MINIMUM, y, _const_like(x, 1.0))


def _softplus(ctx: NodeCtx, x: Value, out: int | None) -> Value:
    e = _un(ctx, Op.EXP, x, out=None)
    return _un(ctx, Op.LOG, _bin(ctx, Op.ADD, e, _const_like(x, 1.0), out=None), out=out)


@mapper("Softplus", "Softsign", "Mish")
def _soft(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    if ctx.node.op_type == "Softplus":
        _softplus(ctx, x, 0)
    elif ctx.node.op_type == "Softsign":
        d = _bin(ctx, Op.ADD, _un(ctx, Op.ABS, x, out=None), _const_like(x, 1.0), out=None)
        _bin(ctx, Op.DIV, x, d)
    else:
        _bin(ctx, Op.MUL, x, _un(ctx, Op.TANH, _softplus(ctx, x, None), out=None))


def erf(ctx: NodeCtx, x: Value, out: int | None) -> Value:
    """erf(x) by Abramowitz-Stegun 7.1.26: 1 - (a1 t + ... + a5 t^5) e^(-x^2), t = 1/(1 + p|x|), odd."""
    p, coeffs = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
    ax = _un(ctx, Op.ABS, x, out=None)
    t = _bin(ctx, Op.DIV, _const_like(x, 1.0),
             _bin(ctx, Op.ADD, _bin(ctx, Op.MUL, ax, _const_like(x, p), out=None), _const_like(x, 1.0), out=None),
             out=None)
    poly = _const_like(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        poly = _bin(ctx, Op.ADD, _bin(ctx, Op.MUL, poly, t, out=None), _const_like(x, c), out=None)
    poly = _bin(ctx, Op.MUL, poly, t, out=None)
    g = _un(ctx, Op.EXP, _un(ctx, Op.NEG, _bin(ctx, Op.MUL, x, x, out=None), out=None), out=None)
    pos = _bin(ctx, Op.SUB, _const_like(x, 1.0), _bin(ctx, Op.MUL, poly, g, out=None), out=None)
    # erf is odd: multiply by sign(x) = x / |x|, computed as x >= 0 ? 1 : -1 to keep erf(0) = 0.
    sign = _bin(ctx, Op.SUB, _bin(ctx, Op.MUL, _cast_bool(ctx, _cmp0(ctx, x), x), _const_like(x, 2.0), out=None),
                _const_like(x, 1.0), out=None)
    return _bin(ctx, Op.MUL, pos, sign, out=out)


def _cmp0(ctx: NodeCtx, x: Value) -> Value:
    zero = _const_like(x, 0.0)
    return ctx.b.op1(Op.GREATER_EQUAL, [x, zero], _BOOL, x.shape)


def _cast_bool(ctx: NodeCtx, c: Value, like: Value) -> Value:
    """A bool tensor as 1.0/0.0 of ``like``'s float type (SELECT of broadcast constants)."""
    if not like.known or like.shape is None:
        raise Reject("needs a known input shape")
    ones = Value(like.dtype, like.shape, const=np.ones(like.shape, like.dtype))
    zeros = Value(like.dtype, like.shape, const=np.zeros(like.shape, like.dtype))
    return ctx.b.op1(Op.SELECT, [c, ones, zeros], like.dtype, like.shape)


@mapper("Erf")
def _erf(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    erf(ctx, x, 0)


@mapper("Gelu")
def _gelu(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    if ctx.s("approximate", "none") == "tanh":
        x3 = _bin(ctx, Op.MUL, _bin(ctx, Op.MUL, x, x, out=None), x, out=None)
        inner = _bin(ctx, Op.ADD, x, _bin(ctx, Op.MUL, x3, _const_like(x, 0.044715), out=None), out=None)
        th = _un(ctx, Op.TANH, _bin(ctx, Op.MUL, inner, _const_like(x, math.sqrt(2 / math.pi)), out=None), out=None)
        core = th
    else:
        core = erf(ctx, _bin(ctx, Op.MUL, x, _const_like(x, 1 / math.sqrt(2)), out=None), None)
    half = _bin(ctx, Op.MUL, x, _const_like(x, 0.5), out=None)
    _bin(ctx, Op.MUL, half, _bin(ctx, Op.ADD, core, _const_like(x, 1.0), out=None))


def _axis(ctx: NodeCtx, x: Value, default: int) -> int:
    r = x.need_rank(ctx.node.op_type)
    return normalize_axes([ctx.i("axis", default)], max(r, 1))[0]


@mapper("Softmax", "LogSoftmax")
def _softmax(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    _float(ctx, x)
    op = Op.SOFTMAX if ctx.node.op_type == "Softmax" else Op.LOG_SOFTMAX
    r = x.need_rank(ctx.node.op_type)
    if r == 0 or r > 4:
        raise Reject(f"rank {r} is not supported (NNAPI's softmax takes rank 1 to 4)")
    beta = ctx.b.f32(1.0, x)
    if ctx.opset >= 13:
        ctx.emit(op, [x, beta, ctx.b.i32(_axis(ctx, x, -1))], x.dtype, x.shape)
        return
    axis = _axis(ctx, x, 1)
    if axis == r - 1:
        ctx.emit(op, [x, beta, ctx.b.i32(-1)], x.dtype, x.shape)
        return
    # Opset < 13: softmax over the input flattened to [prod(d[:axis]), prod(d[axis:])].
    assert x.shape is not None
    if not x.known:
        raise Reject(f"opset {ctx.opset} {ctx.node.op_type} with axis {axis} < rank - 1 needs a known input shape")
    flat = ctx.b.reshape(x, [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])
    y = ctx.b.op1(op, [flat, beta, ctx.b.i32(-1)], x.dtype, flat.shape)
    ctx.set(0, ctx.b.op(Op.RESHAPE, [y, ctx.b.ints(x.shape)], [(x.dtype, x.shape)], [ctx.out()])[0])


_REDUCE = {"ReduceMean": Op.MEAN, "ReduceSum": Op.REDUCE_SUM, "ReduceMax": Op.REDUCE_MAX, "ReduceMin": Op.REDUCE_MIN,
           "ReduceProd": Op.REDUCE_PROD, "ReduceL1": Op.REDUCE_SUM, "ReduceL2": Op.REDUCE_SUM,
           "ReduceSumSquare": Op.REDUCE_SUM, "ReduceLogSum": Op.REDUCE_SUM,
           "ReduceLogSumExp": Op.REDUCE_SUM}  # fmt: skip


@mapper(*_REDUCE)
def _reduce(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    kind = ctx.node.op_type
    int_ok = x.dtype in (np.int32, _I64) and kind in ("ReduceMax", "ReduceMin")
    if (x.dtype not in _FLOATS or x.quant is not None) and not int_ok:
        raise Reject(f"input 0 has type {x.dtype}, not supported")
    r = x.need_rank(kind)
    since = 13 if kind == "ReduceSum" else 18
    axes_arg: Value | list[int] | None = None
    runtime = ctx.opt(1) if ctx.opset >= since else None
    if runtime is not None and runtime.const is None:
        # Axes known only at run time: NNAPI's reductions take them as a tensor. Its length must be known
        # and non-zero (ONNX gives an empty list a meaning of its own); the output dims are then unknown.
        if runtime.shape is None or len(runtime.shape) != 1 or runtime.shape[0] <= 0:
            raise Reject("run-time axes need a known, non-zero length")
        axes_arg = runtime
        axes = None
    elif ctx.opset >= since:
        c = ctx.const(1, "axes")
        axes = None if c is None else [int(v) for v in c.reshape(-1)]
    else:
        axes = ctx.ints("axes")
    if axes_arg is None and not axes:
        if ctx.i("noop_with_empty_axes", 0) and ctx.opset >= since:
            ctx.set(0, ctx.b.copy(x))
            return
        axes = list(range(r))
    keep = bool(ctx.i("keepdims", 1))
    assert x.shape is not None
    shape: Shape
    if axes_arg is None:
        assert axes is not None
        axes = sorted(set(normalize_axes(axes, r)))
        axes_arg = axes
        shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape)) if keep else tuple(
            d for k, d in enumerate(x.shape) if k not in axes)
    else:
        shape = (0,) * r if keep else None
    # A full reduction without keepdims is a scalar: its operand has unknown rank and holds [1].
    src = x
    if kind in ("ReduceL2", "ReduceSumSquare"):
        src = _bin(ctx, Op.MUL, x, x, out=None)
    elif kind == "ReduceL1":
        src = _un(ctx, Op.ABS, x, out=None)
    elif kind == "ReduceLogSumExp":
        src = _un(ctx, Op.EXP, x, out=None)
    op = _REDUCE[kind]
    keep_arg = ctx.b.i32(int(keep)) if op is Op.MEAN else ctx.b.bool(keep)
    axes_in = ctx.b.ints(axes_arg) if isinstance(axes_arg, list) else axes_arg
    if kind in ("ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
        s = ctx.b.op1(op, [src, axes_in, keep_arg], x.dtype, shape)
        _un(ctx, Op.SQRT if kind == "ReduceL2" else Op.LOG, s)
    else:
        ctx.emit(op, [src, axes_in, keep_arg], x.dtype, shape)


@mapper("ArgMax", "ArgMin")
def _argmax(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    if ctx.i("select_last_index", 0):
        raise Reject("select_last_index=1 is not supported (NNAPI returns the first index)")
    axis = _axis(ctx, x, 0)
    assert x.shape is not None
    shape = tuple(d for k, d in enumerate(x.shape) if k != axis)
    op = Op.ARGMAX if ctx.node.op_type == "ArgMax" else Op.ARGMIN
    if not ctx.i("keepdims", 1):
        ctx.emit(op, [x, ctx.b.i32(axis)], _I64, shape)
        return
    y = ctx.b.op1(op, [x, ctx.b.i32(axis)], _I64, shape)
    ctx.emit(Op.EXPAND_DIMS, [y, ctx.b.i32(axis)], _I64, (*x.shape[:axis], 1, *x.shape[axis + 1:]))


@mapper("Cast", "CastLike")
def _cast(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    to = ctx.inp(1).dtype if ctx.node.op_type == "CastLike" else ONNX_DTYPES.get(ctx.i("to", 0))
    ok = (*_FLOATS, np.dtype(np.int32), _I64)
    if to is None or x.quant is not None:
        raise Reject(f"Cast to ONNX type {ctx.i('to', 0)} is not supported")
    if to == x.dtype or {to, x.dtype} <= {np.dtype(np.int32), _I64}:
        ctx.set(0, x if x.dtype == to else Value(to, x.shape, index=ctx.b.operand(x)))
        return
    if to == _BOOL and x.dtype in ok:
        zero = _const_like(x, 0.0)
        ctx.emit(Op.NOT_EQUAL, [x, zero], _BOOL, x.shape)
        return
    if x.dtype == _BOOL and to in ok:
        like = Value(to, x.shape)
        ctx.set(0, _cast_bool(ctx, x, like))
        return
    if x.dtype not in ok or to not in ok:
        raise Reject(f"Cast from {x.dtype} to {to} is not supported")
    ctx.emit(Op.CAST, [x], to, x.shape)
