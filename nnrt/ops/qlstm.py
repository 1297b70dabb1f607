"""QUANTIZED_LSTM (FL4): one step of TFLite's 8x8->16 integer LSTM, bit for bit.

Signed int8 input and output state, symmetric int8 weights, int16 cell state whose scale is
a power of two (at most 2^-9), int32 biases, optional CIFG, peepholes (int16), layer
normalization (int16 weights; the gate bias is then applied inside the normalization),
projection (int8 weights, int32 bias) and clipping. Inputs 26-29 are the scales of each gate's
matmul result (the layer normalization's input) and 30/31 the hidden state's zero point and
scale. Every matmul is accumulated in int32, rescaled with a fixed-point multiplier to int16
and saturated; gates use gemmlowp's fixed-point logistic/tanh (from ``lstm_quant``).
"""

from __future__ import annotations

import math

import numpy as np

from nnrt.ops._common import multiply_by_quantized_multiplier as mbqm
from nnrt.ops._common import optional_tensor, quantize_multiplier, wrap16
from nnrt.ops._common import rounding_divide_by_pot as rdpot
from nnrt.ops._common import saturate as _sat
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.lstm_quant import fixed_logistic, fixed_tanh
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

I64 = np.int64
F32 = np.float32
_TYPES = {
    0: T.TENSOR_QUANT8_ASYMM_SIGNED,
    **{i: T.TENSOR_QUANT8_SYMM for i in range(1, 9)},
    **{i: T.TENSOR_QUANT16_SYMM for i in range(9, 12)},
    **{i: T.TENSOR_INT32 for i in range(12, 16)},
    16: T.TENSOR_QUANT8_SYMM,
    17: T.TENSOR_INT32,
    18: T.TENSOR_QUANT8_ASYMM_SIGNED,
    19: T.TENSOR_QUANT16_SYMM,
    **{i: T.TENSOR_QUANT16_SYMM for i in range(20, 24)},
    **{i: T.FLOAT32 for i in range(24, 30)},
    30: T.INT32,
    31: T.FLOAT32,
}


def _tdiv(a: np.ndarray | int, b: int) -> np.ndarray:
    """C++ integer division (truncating toward zero)."""
    a = np.asarray(a, dtype=I64)
    q: np.ndarray = np.where(a >= 0, a // b, -((-a) // b))
    return q


def _srdhm32(a: int, b: int) -> int:
    if a == b == -(1 << 31):
        return (1 << 31) - 1
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = ab + nudge
    return q >> 31 if q >= 0 else -((-q) >> 31)


def _smpot32(x: int, exponent: int) -> int:
    threshold = (1 << (31 - exponent)) - 1
    if x > threshold:
        return (1 << 31) - 1
    if x < -threshold:
        return -(1 << 31)
    return x << exponent


def _rdpot32(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    return (x >> exponent) + int((x & mask) > (mask >> 1) + int(x < 0))


def _inv_sqrt_multiplier(value: int) -> tuple[int, int]:
    """TFLite GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1)."""
    if value <= 1:
        return (1 << 31) - 1, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    max_left_shift_bits = 32 - value.bit_length() - 1
    pairs = max_left_shift_bits // 2 - 1
    shift -= pairs
    value <<= 2 * pairs
    half_input = _rdpot32(value >> 1, 1)
    half_three = (1 << 28) + (1 << 27)
    x = 1 << 28
    wrap = (1 << 32) - 1
    for _ in range(5):
        x3 = _smpot32(_srdhm32(_srdhm32(x, x), x), 6)
        diff = (_srdhm32(half_three, x) - _srdhm32(half_input, x3)) & wrap
        diff = diff - (1 << 32) if diff >= 1 << 31 else diff
        x = _smpot32(diff, 3)
    x = _srdhm32(x, 1518500250)
    if shift < 0:
        x <<= -shift
        shift = 0
    return x, -shift


def _layer_norm(x: np.ndarray, w: np.ndarray, bias: np.ndarray, scale: tuple[int, int], guard: int) -> np.ndarray:
    """TFLite ApplyLayerNorm on int16 gate values [batch, units] (result int16, F3)."""
    n = x.shape[1]
    out = np.empty_like(x)
    for b in range(x.shape[0]):
        v = x[b]
        mean = int(_tdiv(int(v.sum()) * 1024, n))
        variance = int((v * v).sum()) * ((1 << 20) // n) - mean * mean
        variance2 = int(_tdiv(variance, 1 << 20))
        if variance2 < 1:
            variance2 = guard
        inv_a, inv_b = _inv_sqrt_multiplier(variance2)
        rescaled = mbqm(1024 * v - mean, inv_a, inv_b)
        val3 = rescaled * w + bias
        val4 = _tdiv(np.where(val3 > 0, val3 + 512, val3 - 512), 1024)
        out[b] = _sat(mbqm(val4, scale[0], scale[1] + 12), 16)
    return out


def _mm(x: np.ndarray, w: np.ndarray, bias: np.ndarray, mult: tuple[int, int], acc: np.ndarray) -> np.ndarray:
    """MatrixBatchVectorMultiplyAccumulate into int16: sat(acc + rescale(x W^T + bias))."""
    return _sat(acc + mbqm(x @ w.T + bias, *mult), 16)


def _number(call: OpCall, args: tuple[object, ...], i: int) -> np.float32:
    v = args[i]
    if not isinstance(v, (int, float)):
        call.fail(f"input {i} must be a number")
    return F32(v)


def _qm(real: float | np.floating) -> tuple[int, int]:
    return quantize_multiplier(float(F32(real)))


@kernel(Op.QUANTIZED_LSTM)
def prepare_quantized_lstm(call: OpCall) -> Kernel:
    call.expect_counts(32, 3)
    for i, t in _TYPES.items():
        if call.has_input(i) or i in (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19) or i >= 24:
            call.expect_type(i, t)
    call.expect_output_type(0, T.TENSOR_QUANT8_ASYMM_SIGNED)
    call.expect_output_type(1, T.TENSOR_QUANT16_SYMM)
    call.expect_output_type(2, T.TENSOR_QUANT8_ASYMM_SIGNED)
    ins = call.inputs
    cell_log2 = math.log2(ins[19].scale) if ins[19].scale > 0 else 0.0
    cell_shift = round(cell_log2)
    if abs(cell_log2 - cell_shift) >= 1e-3 or cell_shift > -9:  # TFLite's CheckedLog2 tolerance
        call.fail(f"input 19 (cell state) scale {ins[19].scale} must be a power of two at most 2^-9")
    in_scale, in_zp = F32(ins[0].scale), ins[0].zero_point
    os_scale, os_zp = F32(ins[18].scale), ins[18].zero_point
    scale = [F32(op.scale) for op in ins[:24]]
    dtype8 = np.int8

    def run(*args: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        def get(i: int) -> np.ndarray | None:
            return optional_tensor(args[i], I64)

        x, h_in, c_in = get(0), get(18), get(19)
        if x is None or h_in is None or c_in is None or x.ndim != 2 or h_in.ndim != 2 or c_in.ndim != 2:
            call.fail("the input and both states are required and must have rank 2")
        w = [get(i) for i in range(1, 5)]
        r = [get(i) for i in range(5, 9)]
        peep = [get(9), get(10), None, get(11)]
        bias = [get(i) for i in range(12, 16)]
        proj_w, proj_b = get(16), get(17)
        ln = [get(i) for i in range(20, 24)]
        cell_clip, proj_clip, *inter, hidden_zp_f, hidden_scale = (_number(call, args, i) for i in range(24, 32))
        hidden_zp = int(hidden_zp_f)
        cifg = w[0] is None
        use_ln = ln[1] is not None
        use_peep = peep[1] is not None
        for k in (1, 2, 3):
            if w[k] is None or r[k] is None or (use_ln and ln[k] is None) or bias[k] is None:
                call.fail("the forget, cell and output gate weights and biases are required")
        if cifg != (r[0] is None) or (not cifg and bias[0] is None):
            call.fail("CIFG: input-gate weights, recurrent weights and bias must be all present or all omitted")
        batch, units, out_size = x.shape[0], w[1].shape[0], r[1].shape[1]  # type: ignore[union-attr]
        if c_in.shape != (batch, units) or h_in.shape != (batch, out_size):
            call.fail("state shapes do not match the input and weights")

        gates = [k for k in range(4) if not (k == 0 and cifg)]
        mult_in, mult_rec, mult_peep, bias_in, bias_rec = {}, {}, {}, {}, {}
        for k in gates:
            wk, rk = w[k], r[k]
            assert wk is not None and rk is not None
            if wk.shape != (units, x.shape[1]) or rk.shape != (units, out_size):
                call.fail(f"gate {k} weights have shapes {list(wk.shape)} and {list(rk.shape)}")
            mult_in[k] = _qm(scale[1 + k] * in_scale / inter[k])
            mult_rec[k] = _qm(scale[5 + k] * os_scale / inter[k])
            b_in = -in_zp * wk.sum(axis=1)
            if not use_ln:
                b_in = b_in + bias[k]
            bias_in[k] = b_in
            bias_rec[k] = -os_zp * rk.sum(axis=1)
            if use_peep and peep[k] is not None:
                mult_peep[k] = _qm(float(F32(2.0**cell_shift)) * float(scale[9 + (0, 1, 2, 2)[k]]) / float(inter[k]))
        ln_mult = {k: _qm(float(scale[20 + k])) for k in gates if use_ln}
        guards = {k: max(1, int(F32(10000) * scale[20 + k])) for k in gates if use_ln}

        def gate(k: int, cell: np.ndarray) -> np.ndarray:
            g = _mm(x, w[k], bias_in[k], mult_in[k], np.zeros((batch, units), I64))  # type: ignore[arg-type]
            g = _mm(h_in, r[k], bias_rec[k], mult_rec[k], g)  # type: ignore[arg-type]
            p = peep[k]
            if use_peep and p is not None:
                g = _sat(g + mbqm(p * cell, *mult_peep[k]), 16)
            if use_ln:
                g = _layer_norm(g, ln[k], bias[k], ln_mult[k], guards[k])  # type: ignore[arg-type]
            return g

        f = fixed_logistic(gate(1, c_in), 3)
        g = fixed_tanh(gate(2, c_in), 3)
        i = 32767 - f if cifg else fixed_logistic(gate(0, c_in), 3)
        c = wrap16(rdpot(f * c_in, 15))
        c = _sat(c + wrap16(rdpot(i * g, 30 + cell_shift)), 16)
        if cell_clip > 0:
            q_clip = int(min(max(float(F32(cell_clip) / scale[19]), -32768.0), 32767.0))
            c = np.clip(c, -q_clip, q_clip)
        o = fixed_logistic(gate(3, c), 3)
        hidden_mult = _qm(float(2.0**-15 / float(hidden_scale) * 2.0**-15))
        h8 = _sat(mbqm(o * fixed_tanh(c, 15 + cell_shift), *hidden_mult) - hidden_zp, 8)
        if proj_w is not None:
            if proj_w.shape != (out_size, units):
                call.fail(f"input 16 (projection weights) has shape {list(proj_w.shape)}")
            p_bias = hidden_zp * proj_w.sum(axis=1) + (proj_b if proj_b is not None else 0)
            proj_mult = _qm(float(scale[16] * hidden_scale / os_scale))
            h = _sat(mbqm(h8 @ proj_w.T + p_bias, *proj_mult) + os_zp, 8)
            if proj_clip > 0:
                q_pclip = int(min(max(float(F32(proj_clip) / os_scale), -128.0), 127.0))
                h = np.clip(h, -q_pclip, q_pclip)
        else:
            if out_size != units:
                call.fail("without projection the output size must equal the number of units")
            h = h8
        return h.astype(dtype8), c.astype(np.int16), h.astype(dtype8)

    return run
