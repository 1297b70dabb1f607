"""Layout tracking for the ONNX importer: spatial ops run NHWC, transposes only at the edges.

ONNX CNNs are NCHW; nnrt's kernels are NHWC natively and serve NNAPI's NCHW flag by viewing
the input as NHWC and transposing every output back. ``benchmarks/load_onnx.py`` measured a
chain of six convolutions and a pool: NHWC between one transpose at entry and one at exit took
0.47x-0.73x the time of the same ops with the NCHW flag. So the importer keeps a rank-4
tensor NHWC once a spatial op (conv, pool, resize, ...) produced or needed it: a ``Value``
with ``nhwc`` set holds its tensor transposed (its ``shape`` stays ONNX's NCHW), and
``Builder.logical`` / ``Builder.nhwc`` give the other layout with one TRANSPOSE, made on first
need and shared by every later consumer (``Value.twin``). Graph outputs are always NCHW.

Ops that do not care about the layout keep it: the elementwise ones in ``TRANSPARENT`` run on
NHWC operands when every run-time input is 4-D (constants of rank <= 4 are re-laid to
match: a per-channel [C, 1, 1] becomes [1, 1, 1, C]), and Concat maps its axis. Every other
mapper reads its inputs through ``NodeCtx.inp``, which hands it NCHW.
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._onnx import Mapper, NodeCtx, Reject, Value, to_nhwc
from nnrt.types import OperationType as Op

__all__ = ["TRANSPARENT", "run_in_nhwc"]

#: Elementwise ops (outputs shaped like the broadcast inputs) that run in whatever layout their inputs have.
TRANSPARENT = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Relu", "Sigmoid", "Tanh", "HardSwish",
    "HardSigmoid", "Elu", "Selu", "LeakyRelu", "PRelu", "Clip", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal",
    "Floor", "Ceil", "Erf", "Gelu", "Softplus", "Softsign", "Mish", "Identity", "Dropout", "QuantizeLinear",
    "DequantizeLinear", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor",
    "Where", "Cast", "Sin", "IsNaN", "IsInf",
})  # fmt: skip

_PARAMS = {"Clip": (1, 2), "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2)}  # scalar parameters: leave as they are


def _relaid_const(v: Value) -> Value | None:
    """A constant re-laid to broadcast against NHWC operands as it did against NCHW ones."""
    assert v.const is not None
    c = v.const
    if c.ndim > 4:
        return None
    if c.size == 1:
        return v
    c4 = c.reshape((1,) * (4 - c.ndim) + c.shape).transpose(0, 2, 3, 1)
    arr = np.ascontiguousarray(c4)
    return Value(arr.dtype, arr.shape, const=arr, quant=v.quant, channel=v.channel, int_scale=v.int_scale)


def _as_plain(v: Value) -> Value:
    """An NHWC value presented to a mapper as a plain tensor of its physical shape."""
    assert v.shape is not None
    return Value(v.dtype, to_nhwc(v.shape), index=v.index, quant=v.quant)


def run_in_nhwc(ctx: NodeCtx, fn: Mapper) -> bool:
    """Map ``ctx``'s node on NHWC operands if it is layout-transparent and an input is NHWC."""
    op = ctx.node.op_type
    if not any(v is not None and v.nhwc for v in ctx.inputs):
        return False
    if op == "Concat":
        return _concat(ctx)
    if op not in TRANSPARENT:
        return False
    params = _PARAMS.get(op, ())
    plain: list[Value | None] = []
    for k, v in enumerate(ctx.inputs):
        if v is None or k in params:
            plain.append(v)
        elif v.const is not None:
            c = _relaid_const(v)
            if c is None:
                return False
            plain.append(c)
        elif v.rank != 4:
            return False
        else:
            plain.append(_as_plain(ctx.b.nhwc(v)))
    inner = NodeCtx(ctx.b, ctx.node, plain)
    fn(inner)
    for k, out in enumerate(inner.outputs):
        if out is None:
            continue
        if out.shape is None or len(out.shape) != 4 or out.const is not None:
            # Not reachable for the ops listed with 4-D inputs (outputs broadcast to 4-D); refuse, never mislabel.
            raise Reject(f"internal: {op} on NHWC inputs gave an output of shape {out.shape}")
        dims = out.shape
        out.shape, out.nhwc = (dims[0], dims[3], dims[1], dims[2]), True
        ctx.set(k, out)
    return True


def _concat(ctx: NodeCtx) -> bool:
    xs = [v for v in ctx.inputs if v is not None]
    if any(v.rank != 4 or v.dtype != xs[0].dtype for v in xs) or len(xs) < 2:
        return False
    axis = ctx.i("axis", 0) % 4
    phys = [ctx.b.nhwc(v) for v in xs]
    shape = list(xs[0].shape or ())
    total = 0
    for v in xs:
        d = (v.shape or ())[axis]
        total = total + d if total >= 0 and d > 0 else -1
    shape[axis] = max(total, 0)
    where = (0, 3, 1, 2)[axis]  # NCHW axis -> its NHWC position
    ctx.set(0, ctx.b.op_nhwc(Op.CONCATENATION, [*phys, ctx.b.i32(where)], xs[0].dtype, tuple(shape), xs[0].quant,
                             ctx.out()))
    return True
