"""TFLite → NNAPI mappers for element-wise ops: arithmetic with fused activations, activations,
unary math, comparisons, logic, selection, and the type changes (QUANTIZE, DEQUANTIZE, CAST).

Rules: ADD/SUB/MUL/DIV pass the fused activation (a TANH activation becomes a TANH op after);
LEAKY_RELU becomes PRELU with a one-element alpha (float: alpha; quantized: the value 1 with scale
alpha, as the delegate does); a DEQUANTIZE of a float16 constant is folded into a float32
constant at load; QUANTIZE from a quantized input (a requantization) becomes DEQUANTIZE then
QUANTIZE; SQUARE is MUL(x, x) and SQUARED_DIFFERENCE is SUB then MUL for float tensors.
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
_QUANTIZE, _DEQUANTIZE = 114, 6
_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)


def _check_float(g: Graph, operand: int, kind: Op) -> None:
    if kind in _FLOAT_ONLY and g.type_of(operand) not in _FLOATS and not (
        kind is Op.DIV and g.type_of(operand) is T.TENSOR_INT32
    ):
        raise Unsupported(f"NNAPI's {kind.name} takes float tensors, got {g.type_of(operand).name}")


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
        out_t = g.tensor(op.outputs[0])
        if (out_t.type in (TT.INT8, TT.INT16, TT.UINT8) and not out_t.quantized) or g.tensor(op.inputs[0]).type == TT.INT64:
            raise Unsupported(f"CAST from {g.tensor(op.inputs[0]).type_name} to {out_t.type_name}")
    g.op(kind, [x], [g.out(op.outputs[0])])


@mapper(*_BINARY)
def _binary(g: Graph, op: TflOp) -> None:
    kind = _BINARY[op.code]
    a, b = g.input(op.inputs[0]), g.input(op.inputs[1])
    _check_float(g, a, kind)
    g.op(kind, [a, b], [g.out(op.outputs[0])])


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
    t = g.tensor(op.inputs[0])
    out_t = g.tensor(op.outputs[0])
    if t.type == TT.FLOAT16 and t.data is not None and out_t.type == TT.FLOAT32:
        g.const(t.data.astype(np.float32).reshape(t.shape or (1,)), T.TENSOR_FLOAT32, name=out_t.name,
                key=op.outputs[0])
        return
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
