"""Normalizations: L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION and INSTANCE_NORMALIZATION.

L2_NORMALIZATION (``[input, axis?]``) divides by the L2 norm along ``axis`` (default -1,
negative allowed); the norm is floored at 1e-6, so an all-zero vector normalises to zeros.
Quantized inputs give outputs of scale 1/128 and zero point 128 (unsigned) or 0 (signed).
LOCAL_RESPONSE_NORMALIZATION (``[input, radius, bias, alpha, beta, axis?]``) divides each
element by ``(bias + alpha * sum of squares within radius along axis) ** beta``.
INSTANCE_NORMALIZATION (``[input, gamma, beta, epsilon, nchw]``) normalises each (batch,
channel) plane of a 4-D tensor to zero mean and unit variance, then scales and shifts. The
scalar parameters are FLOAT16 for float16 tensors and FLOAT32 otherwise. Everything computes
in float64 and casts back to the output's type.
"""

from __future__ import annotations

import numpy as np

from nnrt.ops._common import FLOAT_TYPES, QUANT8_TYPES, float_scalar_type, from_real, normalize_axis, to_real
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_L2_EPSILON = 1e-6
_L2_OUTPUT_ZERO_POINT = {T.TENSOR_QUANT8_ASYMM: 128, T.TENSOR_QUANT8_ASYMM_SIGNED: 0}


def _check_const_axis(call: OpCall, i: int) -> None:
    rank = len(call.inputs[0].dimensions)
    if call.has_input(i) and rank:
        axis = call.const(i)
        if axis is not None:
            normalize_axis(call, axis, rank, i)


# -- L2_NORMALIZATION ---------------------------------------------------------------------


@kernel(Op.L2_NORMALIZATION)
def prepare_l2_normalization(call: OpCall) -> Kernel:
    call.expect_counts((1, 2), 1)
    t = call.expect_type(0, *FLOAT_TYPES, *QUANT8_TYPES)
    call.expect_same_type(0, outputs=[0])
    if call.has_input(1):
        call.expect_type(1, T.INT32)
    _check_const_axis(call, 1)
    in_op, out_op = call.inputs[0], call.outputs[0]
    if t.is_quantized:
        call.expect_fixed_output_quant(1.0 / 128, _L2_OUTPUT_ZERO_POINT[t])

    def run(x: np.ndarray, axis: int | None = None) -> np.ndarray:
        if x.ndim == 0:
            call.fail("input 0 must have rank at least 1")
        ax = normalize_axis(call, -1 if axis is None else axis, x.ndim, 1)
        real = to_real(x, in_op, np.float64)
        norm = np.sqrt(np.sum(real * real, axis=ax, keepdims=True))
        return from_real(real / np.maximum(norm, _L2_EPSILON), out_op)

    return run


# -- LOCAL_RESPONSE_NORMALIZATION ---------------------------------------------------------


@kernel(Op.LOCAL_RESPONSE_NORMALIZATION)
def prepare_lrn(call: OpCall) -> Kernel:
    call.expect_counts((5, 6), 1)
    call.expect_type(0, *FLOAT_TYPES)
    call.expect_same_type(0, outputs=[0])
    call.expect_type(1, T.INT32)
    st = float_scalar_type(call.inputs[0].type)
    for i in (2, 3, 4):
        call.expect_type(i, st)
    if call.has_input(5):
        call.expect_type(5, T.INT32)
    _check_const_axis(call, 5)
    radius = call.const(1)
    if radius is not None and radius < 0:
        call.fail(f"input 1: radius {radius} is negative")
    out_type = call.outputs[0].type.dtype

    def run(x: np.ndarray, radius: int, bias: float, alpha: float, beta: float, axis: int | None = None) -> np.ndarray:
        if x.ndim == 0:
            call.fail("input 0 must have rank at least 1")
        if radius < 0:
            call.fail(f"input 1: radius {radius} is negative")
        ax = normalize_axis(call, -1 if axis is None else axis, x.ndim, 5)
        real = np.moveaxis(x.astype(np.float64), ax, -1)
        n = real.shape[-1]
        # Window sums of squares from a zero-led cumulative sum: sum over [c - r, c + r].
        csum = np.concatenate([np.zeros((*real.shape[:-1], 1)), np.cumsum(real * real, axis=-1)], axis=-1)
        c = np.arange(n)
        hi = np.minimum(c + radius, n - 1) + 1
        lo = np.maximum(c - radius, 0)
        sqr_sum = csum[..., hi] - csum[..., lo]
        out: np.ndarray = real / np.power(bias + alpha * sqr_sum, beta)
        return np.moveaxis(out, -1, ax).astype(out_type)

    return run


# -- INSTANCE_NORMALIZATION ---------------------------------------------------------------


@kernel(Op.INSTANCE_NORMALIZATION)
def prepare_instance_normalization(call: OpCall) -> Kernel:
    call.expect_counts(5, 1)
    call.expect_type(0, *FLOAT_TYPES)
    call.expect_same_type(0, outputs=[0])
    call.expect_rank(0, 4)
    st = float_scalar_type(call.inputs[0].type)
    for i in (1, 2, 3):
        call.expect_type(i, st)
    call.expect_type(4, T.BOOL)
    out_type = call.outputs[0].type.dtype

    def run(x: np.ndarray, gamma: float, beta: float, epsilon: float, nchw: bool) -> np.ndarray:
        if x.ndim != 4:
            call.fail(f"input 0 must have rank 4, got {x.ndim}")
        spatial = (2, 3) if nchw else (1, 2)
        real = x.astype(np.float64)
        mean = real.mean(axis=spatial, keepdims=True)
        centered = real - mean
        var = np.mean(centered * centered, axis=spatial, keepdims=True)
        out: np.ndarray = centered * (gamma / np.sqrt(var + epsilon)) + beta
        return out.astype(out_type)

    return run
