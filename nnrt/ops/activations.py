"""Activation kernels: RELU, RELU1, RELU6, LOGISTIC, TANH, ELU, HARD_SWISH, PRELU, SOFTMAX, LOG_SOFTMAX.

All are elementwise (or, for the softmaxes, along one axis) and keep the input's shape.
Float16 computes in float32 and rounds back; quantized tensors are computed in real numbers
(float64) and requantized to the output's scale and zero point with ``from_real``. Float32
HARD_SWISH and PRELU with a constant per-channel slope run compiled loops when numba is
available (``_jit_float``, bit-identical); float32 LOGISTIC runs ``_jit_logistic.logistic_f32``
(its own exp, within 2.5 ulp, not numpy's bits: numpy's formula stays the reference). NNAPI
fixes the quantization of some outputs and rejects models that use another one:
LOGISTIC and SOFTMAX output scale 1/256 with zero point 0 (QUANT8_ASYMM) or -128
(QUANT8_ASYMM_SIGNED); TANH output scale 1/128 with zero point 128 or 0.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnrt.model import Operand
from nnrt.ops._common import (
    ChannelRows,
    broadcast_shape,
    float_scalar_type,
    from_real,
    lookup_binary,
    normalize_axis,
    quant8_table,
    to_real,
)
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import PRELU_F32, UNARY_F32, hard_swish_f32, prelu_f32
from nnrt.ops._jit_logistic import compiled_logistic
from nnrt.ops._jit_quant import set_lookup_call, table_lookups
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_ALL_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_FLOAT_ONLY = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)

#: Fixed (scale, zero point) of quantized outputs, by operation and output type.
_FIXED_QUANT: dict[Op, dict[T, tuple[float, int]]] = {
    Op.LOGISTIC: {T.TENSOR_QUANT8_ASYMM: (1.0 / 256, 0), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 256, -128)},
    Op.SOFTMAX: {T.TENSOR_QUANT8_ASYMM: (1.0 / 256, 0), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 256, -128)},
    Op.TANH: {T.TENSOR_QUANT8_ASYMM: (1.0 / 128, 128), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 128, 0)},
}

RealFn = Callable[[np.ndarray], np.ndarray]


def _check_fixed_quant(call: OpCall) -> None:
    """Reject quantized outputs whose scale/zero point differ from the ones NNAPI fixes."""
    rule = _FIXED_QUANT.get(call.type, {}).get(call.outputs[0].type)
    if rule is None:
        return
    call.expect_fixed_output_quant(*rule)


def _check_max_rank(call: OpCall, i: int, max_rank: int) -> None:
    dims = call.inputs[i].dimensions
    if len(dims) > max_rank:
        call.fail(f"input {i} ({call.inputs[i].label}) has rank {len(dims)}; at most {max_rank} is supported")


def _elementwise(in_op: Operand, out_op: Operand, fn: RealFn) -> Kernel:
    """A kernel applying ``fn`` to real values (float32 for float tensors; for quantized ones,
    a table of ``fn`` computed in float64 for each of the 256 input values)."""
    if in_op.type.is_quantized:
        table = quant8_table(lambda q: from_real(fn(to_real(q, in_op, np.float64)), out_op), (in_op,))
        lookup = table_lookups(in_op, out_op)[0]

        def run_quant(x: np.ndarray) -> np.ndarray:
            return lookup(table, x)

        set_lookup_call(run_quant, table)
        return run_quant

    def run(x: np.ndarray) -> np.ndarray:
        return from_real(fn(to_real(x, in_op)), out_op)

    return run


# -- RELU, RELU1, RELU6, LOGISTIC, TANH, HARD_SWISH ----------------------------------------


_ZERO_F32 = np.float32(0)


def _relu(x: np.ndarray) -> np.ndarray:
    # (``x.dtype.type(0)`` per call costs about 0.8 us, the maximum of 128 values 0.5)
    return np.maximum(x, _ZERO_F32 if x.dtype == _ZERO_F32.dtype else x.dtype.type(0))  # type: ignore[no-any-return]


def _relu1(x: np.ndarray) -> np.ndarray:
    return np.clip(x, x.dtype.type(-1), x.dtype.type(1))  # type: ignore[no-any-return]


def _relu6(x: np.ndarray) -> np.ndarray:
    return np.clip(x, x.dtype.type(0), x.dtype.type(6))  # type: ignore[no-any-return]


#: Elements below which LOGISTIC makes a new array per operation: ``out=`` costs 0.2-0.3 us per
#: numpy call, more than allocating a few elements (openWakeWord's [1, 1]: 3.4 -> 2.1 us).
_SMALL = 256


def _logistic(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in one fresh array (four passes, no other temporaries); the same
    float32 operations into new arrays on small tensors (the same bits)."""
    one = x.dtype.type(1)
    if x.size < _SMALL:
        return np.reciprocal(np.exp(np.negative(x)) + one)  # type: ignore[no-any-return]
    t: np.ndarray = np.negative(x)
    np.exp(t, out=t)
    t += one
    return np.reciprocal(t, out=t)  # type: ignore[no-any-return]


def _hard_swish(x: np.ndarray) -> np.ndarray:
    """x * clip(x + 3, 0, 6) / 6 in one fresh array."""
    t = x.dtype.type
    r: np.ndarray = np.add(x, t(3), out=np.empty(x.shape, x.dtype))  # an array for rank 0 too
    np.clip(r, t(0), t(6), out=r)
    r *= x
    r /= t(6)
    return r


_UNARY: dict[Op, RealFn] = {
    Op.RELU: _relu,
    Op.RELU1: _relu1,
    Op.RELU6: _relu6,
    Op.LOGISTIC: _logistic,
    Op.TANH: np.tanh,
    Op.HARD_SWISH: _hard_swish,
}


@kernel(Op.RELU, Op.RELU1, Op.RELU6, Op.LOGISTIC, Op.TANH, Op.HARD_SWISH)
def prepare_unary(call: OpCall) -> Kernel:
    call.expect_counts(1, 1)
    t = call.expect_type(0, *_ALL_TYPES)
    call.expect_output_type(0, t)
    if call.type is not Op.HARD_SWISH:
        _check_max_rank(call, 0, 4)
    _check_fixed_quant(call)
    if call.type is Op.HARD_SWISH and t is T.TENSOR_FLOAT32:
        fast = compiled(hard_swish_f32, UNARY_F32)
        if fast is not None:
            return _compiled_unary(fast)
    if call.type is Op.LOGISTIC and t is T.TENSOR_FLOAT32:
        logistic = compiled_logistic()  # not numpy's bits: the formula stays the reference (NNRT_JIT=0)
        if logistic is not None:
            return _compiled_unary(lambda x, out: logistic(x.reshape(1, -1), out.reshape(1, -1), 0, False))
    if t is T.TENSOR_FLOAT32:  # float32 in and out: the function itself (its real values are the
        return _UNARY[call.type]  # values; the two no-op conversions cost 1.5 us of a 128-value RELU's 2.4)
    return _elementwise(call.inputs[0], call.outputs[0], _UNARY[call.type])


def _compiled_unary(fn: Callable[..., None]) -> Kernel:
    """A float32 kernel running a compiled elementwise loop of ``_jit_float`` into a fresh array."""

    def run(x: np.ndarray) -> np.ndarray:
        out = np.empty(x.shape, dtype=np.float32)
        fn(np.ascontiguousarray(x, dtype=np.float32).reshape(-1), out.reshape(-1))
        return out

    return run


# -- ELU ----------------------------------------------------------------------------------


@kernel(Op.ELU)
def prepare_elu(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    t = call.expect_type(0, *_FLOAT_ONLY)
    call.expect_type(1, float_scalar_type(t))
    call.expect_output_type(0, t)
    in_op, out_op = call.inputs[0], call.outputs[0]

    def run(x: np.ndarray, alpha: float) -> np.ndarray:
        real = to_real(x, in_op)
        a = np.float32(alpha)
        return from_real(np.where(real < 0, a * np.expm1(np.minimum(real, np.float32(0))), real), out_op)

    return run


# -- PRELU --------------------------------------------------------------------------------


@kernel(Op.PRELU)
def prepare_prelu(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    t = call.expect_type(0, *_ALL_TYPES)
    call.expect_type(1, t)
    call.expect_output_type(0, t)
    broadcast_shape(call, call.inputs[0].dimensions, call.inputs[1].dimensions)
    in_op, alpha_op, out_op = call.inputs[0], call.inputs[1], call.outputs[0]

    if t.is_quantized:

        def formula(qx: np.ndarray, qa: np.ndarray) -> np.ndarray:
            real = to_real(qx, in_op, np.float64)
            return from_real(np.where(real >= 0, real, real * to_real(qa, alpha_op, np.float64)), out_op)

        table = quant8_table(formula, (in_op, alpha_op))

        def run_quant(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
            if x.ndim and alpha.ndim:
                broadcast_shape(call, x.shape, alpha.shape)
            return lookup_binary(table, x, alpha)

        return run_quant

    slope = call.const(1)
    if t is T.TENSOR_FLOAT32 and slope is not None and slope.size:
        return _prelu_const(call, slope)

    def run(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        if x.ndim and alpha.ndim:
            broadcast_shape(call, x.shape, alpha.shape)
        real = to_real(x, in_op)
        return from_real(np.where(real >= 0, real, real * to_real(alpha, alpha_op)), out_op)

    return run


def _prelu_const(call: OpCall, slope: np.ndarray) -> Kernel:
    """Float32 PRELU with a constant slope: min(x, 0) * alpha + max(x, 0) (a masked copy is 5x
    slower on mixed signs). With the slope on one side of 1 it is max(x, alpha * x) (min when
    alpha >= 1; for x >= 0, alpha * x <= x exactly when alpha <= 1): two passes. A zero slope is
    left to the general form (0 * inf is NaN where PRELU gives inf). A per-channel slope runs
    over long rows; with numba, a per-channel or single slope runs a compiled loop instead
    (``_jit_float.prelu_f32``, bit-identical up to the sign of zero, 2.3-3.9x faster)."""
    below = bool(np.all((slope <= 1) & (slope != 0)))
    pick = np.maximum if below else np.minimum if bool(np.all(slope >= 1)) else None
    rows = ChannelRows.of(slope)
    per_channel = slope.size == 1 or slope.size == slope.shape[-1]
    fast = compiled(prelu_f32, PRELU_F32) if per_channel else None

    valid: set[tuple[int, ...]] = set()  # input shapes already checked against the slope's
    rows_of: dict[int, np.ndarray] = {}  # channels -> the slope as one contiguous row

    def run_const(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        if x.ndim and alpha.ndim and (alpha.shape != slope.shape or x.shape not in valid):
            broadcast_shape(call, x.shape, alpha.shape)
            if alpha.shape == slope.shape and len(valid) < 8:
                valid.add(x.shape)
        if fast is not None and x.size and slope.ndim <= x.ndim and slope.size in (1, x.shape[-1]):
            c = x.shape[-1]
            a = rows_of.get(c)
            if a is None:
                a = np.ascontiguousarray(np.broadcast_to(slope.reshape(-1), (c,)), dtype=np.float32)
                if len(rows_of) < 8:  # (a single slope fits inputs of any width: keep a few)
                    rows_of[c] = a
            res = np.empty(x.shape, dtype=np.float32)
            fast(np.ascontiguousarray(x, dtype=np.float32).reshape(-1, c), a, res.reshape(-1, c))
            return res
        views = rows.views(x) if rows is not None else None
        xv, av = views if views is not None else (x, alpha)
        out: np.ndarray
        if pick is not None:
            out = np.multiply(xv, av)
            pick(out, xv, out=out)
        else:  # min(x, 0) * alpha + max(x, 0): the same values, no data-dependent branches
            out = np.multiply(np.minimum(xv, np.float32(0)), av)  # the slope may widen the shape
            out += np.maximum(xv, np.float32(0))
        return out.reshape(x.shape) if views is not None else out

    return run_const


# -- SOFTMAX, LOG_SOFTMAX ------------------------------------------------------------------


def _check_beta(call: OpCall, beta: object, positive: bool) -> float:
    """Beta as a float; SOFTMAX (not LOG_SOFTMAX) requires it positive, as NNAPI does."""
    if not isinstance(beta, (int, float, np.floating)) or (positive and not float(beta) > 0.0):
        call.fail(f"input 1: beta must be a {'positive ' if positive else ''}number, got {beta!r}")
    return float(beta)


def _prepare_softmax_signature(call: OpCall, types: tuple[T, ...], axis_required: bool) -> T:
    call.expect_counts((3,) if axis_required else (2, 3), 1)
    t = call.expect_type(0, *types)
    call.expect_type(1, float_scalar_type(t))
    if len(call.inputs) == 3:
        call.expect_type(2, T.INT32)
    call.expect_output_type(0, t)
    rank = len(call.inputs[0].dimensions)
    beta = call.const(1)
    if beta is not None:
        _check_beta(call, beta, call.type is Op.SOFTMAX)
    if len(call.inputs) == 3 and call.const(2) is not None:
        normalize_axis(call, call.const(2), rank or None, 2)
    return t


@kernel(Op.SOFTMAX)
def prepare_softmax(call: OpCall) -> Kernel:
    t = _prepare_softmax_signature(call, _ALL_TYPES, axis_required=False)
    _check_max_rank(call, 0, 4)
    _check_fixed_quant(call)
    in_op, out_op = call.inputs[0], call.outputs[0]
    dtype = np.float64 if t.is_quantized else np.float32

    def run(x: np.ndarray, beta: float, axis: int = -1) -> np.ndarray:
        b = _check_beta(call, beta, True)
        ax = normalize_axis(call, axis, x.ndim or None, 2)
        real = to_real(x, in_op, dtype)
        if real.size == 0:
            return from_real(real.copy(), out_op)
        e = np.exp((real - real.max(axis=ax, keepdims=True)) * dtype(b))
        e /= e.sum(axis=ax, keepdims=True)
        return from_real(e, out_op)

    return run


@kernel(Op.LOG_SOFTMAX)
def prepare_log_softmax(call: OpCall) -> Kernel:
    _prepare_softmax_signature(call, _FLOAT_ONLY, axis_required=True)
    in_op, out_op = call.inputs[0], call.outputs[0]

    def run(x: np.ndarray, beta: float, axis: int) -> np.ndarray:
        b = _check_beta(call, beta, False)
        ax = normalize_axis(call, axis, x.ndim or None, 2)
        real = to_real(x, in_op)
        if real.size == 0:
            return from_real(real.copy(), out_op)
        z = (real - real.max(axis=ax, keepdims=True)) * np.float32(b)
        z -= np.log(np.exp(z).sum(axis=ax, keepdims=True))
        return from_real(z, out_op)

    return run
