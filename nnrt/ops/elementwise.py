"""Elementwise operations without a fused activation: unary math, POW, MAXIMUM/MINIMUM,
comparisons, logical operations and SELECT.

Unary math (ABS, EXP, LOG, NEG, SIN, SQRT, RSQRT, FLOOR) maps ``[x] -> [out]`` of x's type;
float16 computes in float32 and casts back; ABS and NEG also take TENSOR_INT32 and RSQRT
(feature level 7) takes 8-bit asymmetric quantized tensors, computed in real numbers and
requantized to the output's parameters. POW, MAXIMUM, MINIMUM and the comparisons broadcast
their two inputs (NNAPI's trailing-dimension rule). Comparisons of quantized inputs compare
real values, so the two inputs may have different scales and zero points; MAXIMUM and
MINIMUM requantize to the output's parameters. The comparisons are on the WHILE-loop hot
path (a condition model is usually one LESS), so their non-quantized kernel is one numpy call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnrt.ops._common import FLOAT_TYPES, QUANT8_TYPES, broadcast_shape, broadcasts, from_real, to_real
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

Ufunc = Callable[..., np.ndarray]


# -- unary math ---------------------------------------------------------------------------


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)  # type: ignore[no-any-return]


_UNARY: dict[Op, Ufunc] = {
    Op.ABS: np.abs,
    Op.EXP: np.exp,
    Op.LOG: np.log,
    Op.NEG: np.negative,
    Op.SIN: np.sin,
    Op.SQRT: np.sqrt,
    Op.RSQRT: _rsqrt,
    Op.FLOOR: np.floor,
}
_UNARY_EXTRA_TYPES: dict[Op, tuple[T, ...]] = {
    Op.ABS: (T.TENSOR_INT32,),
    Op.NEG: (T.TENSOR_INT32,),
    Op.RSQRT: QUANT8_TYPES,
}


@kernel(*_UNARY)
def prepare_unary(call: OpCall) -> Kernel:
    call.expect_counts(1, 1)
    t = call.expect_type(0, *FLOAT_TYPES, *_UNARY_EXTRA_TYPES.get(call.type, ()))
    call.expect_same_type(0, outputs=[0])
    fn = _UNARY[call.type]
    in_op, out_op = call.inputs[0], call.outputs[0]

    if t is T.TENSOR_INT32:

        def run_int(x: np.ndarray) -> np.ndarray:
            return fn(x).astype(np.int32, copy=False)

        return run_int

    if t.is_quantized:

        def run_quant(x: np.ndarray) -> np.ndarray:
            real = to_real(x, in_op, np.float64)
            if np.any(real < 0):
                call.fail("RSQRT of a negative value")
            return from_real(fn(real), out_op)

        return run_quant

    if t is T.TENSOR_FLOAT16:

        def run_half(x: np.ndarray) -> np.ndarray:
            return fn(x.astype(np.float32)).astype(np.float16)

        return run_half

    def run_float(x: np.ndarray) -> np.ndarray:
        return fn(x).astype(np.float32, copy=False)

    return run_float


# -- POW, MAXIMUM, MINIMUM ----------------------------------------------------------------


@kernel(Op.POW)
@broadcasts(0, 1)
def prepare_pow(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    t = call.expect_type(0, *FLOAT_TYPES)
    call.expect_same_type(0, 1, outputs=[0])
    broadcast_shape(call, call.inputs[0].dimensions, call.inputs[1].dimensions)

    if t is T.TENSOR_FLOAT16:

        def run_half(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
            return np.power(base.astype(np.float32), exponent.astype(np.float32)).astype(np.float16)

        return run_half

    def run_float(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.power(base, exponent)
        return out

    return run_float


@kernel(Op.MAXIMUM, Op.MINIMUM)
@broadcasts(0, 1)
def prepare_min_max(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    t = call.expect_type(0, *FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)
    call.expect_same_type(0, 1, outputs=[0])
    broadcast_shape(call, call.inputs[0].dimensions, call.inputs[1].dimensions)
    fn: Ufunc = np.maximum if call.type is Op.MAXIMUM else np.minimum
    a_op, b_op, out_op = call.inputs[0], call.inputs[1], call.outputs[0]

    if t.is_quantized:

        def run_quant(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return from_real(fn(to_real(a, a_op, np.float64), to_real(b, b_op, np.float64)), out_op)

        return run_quant

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fn(a, b)

    return run


# -- comparisons --------------------------------------------------------------------------

_COMPARISONS: dict[Op, Ufunc] = {
    Op.EQUAL: np.equal,
    Op.NOT_EQUAL: np.not_equal,
    Op.GREATER: np.greater,
    Op.GREATER_EQUAL: np.greater_equal,
    Op.LESS: np.less,
    Op.LESS_EQUAL: np.less_equal,
}


@kernel(*_COMPARISONS)
@broadcasts(0, 1)
def prepare_comparison(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    t = call.expect_type(0, T.TENSOR_BOOL8, *FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)
    call.expect_same_type(0, 1)
    call.expect_output_type(0, T.TENSOR_BOOL8)
    broadcast_shape(call, call.inputs[0].dimensions, call.inputs[1].dimensions)
    fn = _COMPARISONS[call.type]
    a_op, b_op = call.inputs[0], call.inputs[1]

    if t.is_quantized:
        # Real values in float32, as NNAPI's reference computes them.
        def run_quant(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return fn(to_real(a, a_op), to_real(b, b_op))

        return run_quant

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fn(a, b)

    return run


# -- logical ------------------------------------------------------------------------------


@kernel(Op.LOGICAL_AND, Op.LOGICAL_OR)
@broadcasts(0, 1)
def prepare_logical_binary(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    call.expect_type(0, T.TENSOR_BOOL8)
    call.expect_same_type(0, 1, outputs=[0])
    broadcast_shape(call, call.inputs[0].dimensions, call.inputs[1].dimensions)
    fn: Ufunc = np.logical_and if call.type is Op.LOGICAL_AND else np.logical_or

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return fn(a, b)

    return run


@kernel(Op.LOGICAL_NOT)
def prepare_logical_not(call: OpCall) -> Kernel:
    call.expect_counts(1, 1)
    call.expect_type(0, T.TENSOR_BOOL8)
    call.expect_same_type(0, outputs=[0])

    def run(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.logical_not(x)
        return out

    return run


# -- SELECT -------------------------------------------------------------------------------


@kernel(Op.SELECT)
def prepare_select(call: OpCall) -> Kernel:
    call.expect_counts(3, 1)
    call.expect_type(0, T.TENSOR_BOOL8)
    t = call.expect_type(1, *FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)
    call.expect_same_type(1, 2, outputs=[0])
    dims = [call.inputs[i].dimensions for i in range(3)]
    known = [d for d in dims if d]
    for d in known[1:]:
        if len(d) != len(known[0]) or any(x != y and x and y for x, y in zip(d, known[0], strict=True)):
            call.fail(f"condition and inputs must have the same shape, got {[list(d) for d in dims]}")
    a_op, b_op, out_op = call.inputs[1], call.inputs[2], call.outputs[0]

    def check(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        if not cond.shape == a.shape == b.shape:
            call.fail(f"condition and inputs must have the same shape, got {cond.shape}, {a.shape}, {b.shape}")

    if t.is_quantized:

        def run_quant(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            check(cond, a, b)
            return from_real(np.where(cond, to_real(a, a_op, np.float64), to_real(b, b_op, np.float64)), out_op)

        return run_quant

    def run(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        check(cond, a, b)
        out: np.ndarray = np.where(cond, a, b)
        return out

    return run
