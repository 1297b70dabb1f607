"""TFLite → NNAPI mappers for element-wise ops: arithmetic with fused activations, activations,
unary math, comparisons, logic, selection, and the type changes (QUANTIZE, DEQUANTIZE, CAST).

Rules: ADD/SUB/MUL/DIV pass the fused activation (TANH and SIGN_BIT are refused: LiteRT does
not apply them either); int32 DIV is refused (TFLite truncates, NNAPI rounds down) and int32
FLOOR_DIV is NNAPI's DIV (float: DIV then FLOOR); ADD_N is a chain of ADDs; quantized
MAXIMUM/MINIMUM need one quantization on all operands (LiteRT does not rescale);
LEAKY_RELU becomes PRELU with a one-element alpha (float: alpha; quantized: the value 1 with scale
alpha, as the delegate does); a DEQUANTIZE of float16 becomes CAST (a constant stays a float16
view of the file; preparation folds the CAST once); QUANTIZE from a quantized input (a requantization) becomes DEQUANTIZE then
QUANTIZE; SQUARE is MUL(x, x) and SQUARED_DIFFERENCE is SUB then MUL for float tensors; GELU's
tanh form is spelled out in MUL/ADD/TANH (its erf form has no NNAPI equivalent).
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._tflite_graph import Graph, Unsupported, mapper
from nnrt.importers._tflite_schema import TT, TflOp
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_ARITH = {0: Op.ADD, 41: Op.SUB, 18: Op.MUL, 42: Op.DIV}
_UNARY = {
    19: Op.RELU, 20: Op.RELU1, 21: Op.RELU6, 14: Op.LOGISTIC, 28: Op.TANH, 117: Op.HARD_SWISH,
    101: Op.ABS, 47: Op.EXP, 73: Op.LOG, 59: Op.NEG, 75: Op.SQRT, 76: Op.RSQRT, 66: Op.SIN, 8: Op.FLOOR,
    87: Op.LOGICAL_NOT, 53: Op.CAST,
}
_BINARY = {
    55: Op.MAXIMUM, 57: Op.MINIMUM, 78: Op.POW, 54: Op.PRELU,
    58: Op.LESS, 63: Op.LESS_EQUAL, 61: Op.GREATER, 62: Op.GREATER_EQUAL, 71: Op.EQUAL, 72: Op.NOT_EQUAL,
    84: Op.LOGICAL_OR, 86: Op.LOGICAL_AND,
}
_FLOAT_ONLY = {Op.DIV, Op.POW, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.FLOOR}
_ELU, _LEAKY_RELU, _SELECT, _SELECT_V2, _SQUARE, _SQUARED_DIFF = 111, 98, 64, 123, 92, 99
_QUANTIZE, _DEQUANTIZE, _GELU, _RELU_0_TO_1, _FLOOR_DIV, _ADD_N = 114, 6, 150, 152, 90, 106
_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _check_float(g: Graph, operand: int, kind: Op) -> None:
    if kind in _FLOAT_ONLY and g.type_of(operand) not in _FLOATS:
        why = " (its int32 DIV rounds down, TFLite's DIV truncates)" if kind is Op.DIV else ""
        raise Unsupported(f"NNAPI's {kind.name} takes float tensors, got {g.type_of(operand).name}{why}")


@mapper(*_ARITH)
def _arith(g: Graph, op: TflOp) -> None:
    kind = _ARITH[op.code]
    act = op.options.num(0, "i8") if op.options is not None else 0
    a, b = g.input(op.inputs[0]), g.input(op.inputs[1])
    _check_float(g, a, kind)
    if g.type_of(a) is T.TENSOR_QUANT16_SYMM:
        raise Unsupported(f"int16 {kind.name} (NNAPI has no QUANT16 arithmetic)")
    fuse, y = g.fused(act, op.outputs[0])
    g.op(kind, [a, b, fuse], [y])


@mapper(*_UNARY)
def _unary(g: Graph, op: TflOp) -> None:
    kind = _UNARY[op.code]
    x = g.input(op.inputs[0])
    _check_float(g, x, kind)
    if kind is Op.CAST:
        # int64 values nnrt holds as int32 (ARG_MAX results, narrowed constants) cast as int32;
        # an int64 result is held as int32 too
        in_t, out_t = g.tensor(op.inputs[0]), g.tensor(op.outputs[0])
        if (out_t.type in (TT.INT8, TT.INT16, TT.UINT8) and not out_t.quantized) or (
            in_t.type == TT.INT64 and g.type_of(x) is not T.TENSOR_INT32
        ):
            raise Unsupported(f"CAST from {in_t.type_name} to {out_t.type_name}")
        g.op(kind, [x], [g.out(op.outputs[0], T.TENSOR_INT32 if out_t.type == TT.INT64 else None)])
        return
    g.op(kind, [x], [g.out(op.outputs[0])])


@mapper(*_BINARY)
def _binary(g: Graph, op: TflOp) -> None:
    kind = _BINARY[op.code]
    a, b = g.input(op.inputs[0]), g.input(op.inputs[1])
    _check_float(g, a, kind)
    y = g.out(op.outputs[0])
    if kind in (Op.MAXIMUM, Op.MINIMUM) and g.type_of(a).is_quantized:
        quants = {(g.model.operands[i].scale, g.model.operands[i].zero_point) for i in (a, b, y)}
        if len(quants) > 1:  # LiteRT compares and copies raw values; NNAPI would requantize
            raise Unsupported(f"quantized {kind.name} with differing scales or zero points (LiteRT does not rescale)")
    g.op(kind, [a, b], [y])


@mapper(_FLOOR_DIV)
def _floor_div(g: Graph, op: TflOp) -> None:
    """int32: NNAPI's DIV, which rounds toward negative infinity; float: DIV then FLOOR."""
    a, b = g.input(op.inputs[0]), g.input(op.inputs[1])
    if g.type_of(a) is T.TENSOR_INT32:
        g.op(Op.DIV, [a, b, g.i32(0)], [g.out(op.outputs[0])])
        return
    if g.type_of(a) not in _FLOATS:
        raise Unsupported(f"FLOOR_DIV on {g.type_of(a).name}")
    y = g.out(op.outputs[0])
    q = g.temp(y)
    g.op(Op.DIV, [a, b, g.i32(0)], [q])
    g.op(Op.FLOOR, [q], [y])


@mapper(_ADD_N)
def _add_n(g: Graph, op: TflOp) -> None:
    """A chain of ADDs (NNAPI has no n-ary add)."""
    xs = [g.input(i) for i in op.inputs]
    y = g.out(op.outputs[0])
    acc = xs[0]
    for k, x in enumerate(xs[1:], start=2):
        dst = y if k == len(xs) else g.temp(y)
        g.op(Op.ADD, [acc, x, g.i32(0)], [dst])
        acc = dst
    if len(xs) == 1:
        g.op(Op.CAST, [acc], [y])


@mapper(_ELU)
def _elu(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    if g.type_of(x) not in _FLOATS:
        raise Unsupported("quantized ELU (NNAPI's ELU is float only)")
    g.op(Op.ELU, [x, g.scalar(T.FLOAT32 if g.type_of(x) is T.TENSOR_FLOAT32 else T.FLOAT16, 1.0)],
         [g.out(op.outputs[0])])


@mapper(_LEAKY_RELU)
def _leaky_relu(g: Graph, op: TflOp) -> None:
    alpha = op.options.real(0) if op.options is not None else 0.2
    x = g.input(op.inputs[0])
    xo = g.model.operands[x]
    if xo.type in _FLOATS:
        a = g.const(np.array([alpha], xo.type.dtype), xo.type)
    elif xo.type is T.TENSOR_QUANT8_ASYMM_SIGNED and alpha > 0:
        a = g.const(np.array([1], np.int8), xo.type, float(alpha), 0)
    elif xo.type is T.TENSOR_QUANT8_ASYMM and alpha > 0:
        a = g.const(np.array([1], np.uint8), xo.type, float(alpha), 0)
    else:
        raise Unsupported(f"LEAKY_RELU with alpha {alpha} on {xo.type.name}")
    g.op(Op.PRELU, [x, a], [g.out(op.outputs[0])])


@mapper(_SELECT, _SELECT_V2)
def _select(g: Graph, op: TflOp) -> None:
    c, a, b = (g.input(op.inputs[k]) for k in range(3))
    dims = [g.model.operands[i].dimensions for i in (c, a, b)]
    if op.code == _SELECT_V2 and not (dims[0] == dims[1] == dims[2] and all(d > 0 for d in dims[0])):
        raise Unsupported(f"SELECT_V2 with broadcasting ({[list(d) for d in dims]}); NNAPI's SELECT needs equal shapes")
    g.op(Op.SELECT, [c, a, b], [g.out(op.outputs[0])])


@mapper(_SQUARE, _SQUARED_DIFF)
def _square(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    if g.type_of(x) not in _FLOATS:
        raise Unsupported("quantized SQUARE / SQUARED_DIFFERENCE")
    if op.code == _SQUARED_DIFF:
        d = g.temp(x, dims=g.dims(g.tensor(op.outputs[0])))
        g.op(Op.SUB, [x, g.input(op.inputs[1]), g.i32(0)], [d])
        x = d
    g.op(Op.MUL, [x, x, g.i32(0)], [g.out(op.outputs[0])])


@mapper(_DEQUANTIZE)
def _dequantize(g: Graph, op: TflOp) -> None:
    # float16 (constant weights too: kept as a float16 view of the file, not widened at load; the
    # plan folds the CAST of a constant once at preparation) -> CAST; quantized -> DEQUANTIZE
    x = g.input(op.inputs[0])
    y = g.out(op.outputs[0])
    g.op(Op.CAST if g.type_of(x) is T.TENSOR_FLOAT16 else Op.DEQUANTIZE, [x], [y])


@mapper(_QUANTIZE)
def _quantize(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    y = g.out(op.outputs[0])
    if g.type_of(x).is_quantized:
        real = g.temp(x, typ=T.TENSOR_FLOAT32)
        g.op(Op.DEQUANTIZE, [x], [real])
        x = real
    if g.type_of(y) not in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        raise Unsupported(f"QUANTIZE to {g.type_of(y).name} (NNAPI quantizes to 8 bits)")
    g.op(Op.QUANTIZE, [x], [y])


@mapper(_GELU)
def _gelu(g: Graph, op: TflOp) -> None:
    """GELU's tanh form, x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in NNAPI ops (NNAPI has
    no GELU and no ERF, so the exact erf form is refused)."""
    if op.options is None or not op.options.flag(0):
        raise Unsupported("exact (erf) GELU; NNAPI has no ERF (the approximate tanh form maps)")
    x = g.input(op.inputs[0])
    if g.type_of(x) is not T.TENSOR_FLOAT32:
        raise Unsupported(f"GELU on {g.type_of(x).name} (decomposed in float32 only)")

    def const(v: float) -> int:
        return g.const(np.array([v], np.float32), T.TENSOR_FLOAT32)

    def step(kind: Op, a: int, b: int, out: int | None = None) -> int:
        dst = g.temp(x) if out is None else out
        g.op(kind, [a, b, g.i32(0)], [dst])
        return dst

    cube = step(Op.MUL, step(Op.MUL, x, x), x)
    inner = step(Op.ADD, x, step(Op.MUL, cube, const(0.044715)))
    t = g.temp(x)
    g.op(Op.TANH, [step(Op.MUL, inner, const(float(np.sqrt(2.0 / np.pi))))], [t])
    step(Op.MUL, step(Op.MUL, x, const(0.5)), step(Op.ADD, t, const(1.0)), g.out(op.outputs[0]))


@mapper(_RELU_0_TO_1)
def _relu_0_to_1(g: Graph, op: TflOp) -> None:
    """min(max(x, 0), 1): RELU then MINIMUM with 1 (NNAPI's RELU1 clamps to [-1, 1])."""
    x = g.input(op.inputs[0])
    if g.type_of(x) is not T.TENSOR_FLOAT32:
        raise Unsupported(f"RELU_0_TO_1 on {g.type_of(x).name}")
    r = g.temp(x)
    g.op(Op.RELU, [x], [r])
    g.op(Op.MINIMUM, [r, g.const(np.array([1.0], np.float32), T.TENSOR_FLOAT32)], [g.out(op.outputs[0])])
