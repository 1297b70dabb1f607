"""Integer LSTM cells: QUANTIZED_16BIT_LSTM and QUANTIZED_LSTM, in NNAPI's exact integer pipeline.

Both follow the reference kernels bit for bit (the CTS allows one unit of error on their
8- and 16-bit outputs, which real-number arithmetic does not meet): int32 accumulators are
rescaled with ``MultiplyByQuantizedMultiplier`` (a 31-bit fixed-point multiplier and a
power-of-two shift), and the gate nonlinearities are gemmlowp's 16-bit fixed-point
``logistic`` and ``tanh`` (exp by a Taylor polynomial and a barrel shifter, division by
Newton-Raphson). Raw 16-bit values are held in int64 arrays; the integer primitives (C++'s
int16 wrap-around, saturation, rounding shifts, ``MultiplyByQuantizedMultiplier``) live in
``_common``, shared with ``qlstm``.

QUANTIZED_16BIT_LSTM (FL3): uint8 input and output with scale 1/128 and zero point 128, a
16-bit cell state with 4 integer bits, one fully connected layer per gate. QUANTIZED_LSTM
(FL4): int8 input/output state, int16 cell state with a power-of-two scale, symmetric int8
weights, optional CIFG, peepholes, layer normalization, projection and clipping, with the
gates' intermediate scales given as inputs.
"""

from __future__ import annotations

import numpy as np

from nnrt.ops._common import multiply_by_quantized_multiplier, quantize_multiplier
from nnrt.ops._common import rounding_divide_by_pot as _rdpot
from nnrt.ops._common import saturate as _sat
from nnrt.ops._common import saturating_doubling_high_mul as _srdhm
from nnrt.ops._common import wrap16 as _wrap16
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["fixed_logistic", "fixed_tanh"]

I64 = np.int64


# -- integer helpers (gemmlowp / TFLite semantics) ----------------------------------------


def _smpot16(x: np.ndarray, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT on int16 raw values."""
    if exponent > 0:
        threshold = (1 << (15 - exponent)) - 1
        y = _wrap16(x << exponent)
        return np.where(x > threshold, 32767, np.where(x < -threshold, -32768, y))
    return _rdpot(x, -exponent)


def _c16(value32: int) -> int:
    """A gemmlowp int32 constant rescaled for int16 fixed point."""
    return int(_rdpot(np.asarray(value32, dtype=I64), 16))


def _mul16(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    return _srdhm(a, b, 16)


def _exp_on_interval(a: np.ndarray) -> np.ndarray:
    """exp(a) for a F0 in [-1/4, 0), as gemmlowp's Taylor expansion around -1/8."""
    constant_term, one_third = _c16(1895147668), _c16(715827883)
    x = _wrap16(a + (1 << 12))
    x2 = _mul16(x, x)
    x3 = _mul16(x2, x)
    x4 = _mul16(x2, x2)
    x4_over_4 = _smpot16(x4, -2)
    poly = _smpot16(_wrap16(_mul16(_wrap16(x4_over_4 + x3), one_third) + x2), -1)
    return _sat(constant_term + _mul16(np.full_like(x, constant_term), _wrap16(x + poly)), 16)


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242))


def _exp_on_negative_values(a: np.ndarray, int_bits: int) -> np.ndarray:
    frac = 15 - int_bits
    one_quarter = 1 << (frac - 2)
    a_mod = _wrap16((a & (one_quarter - 1)) - one_quarter)
    result = _exp_on_interval(_smpot16(a_mod, int_bits))
    remainder = _wrap16(a_mod - a)
    for exponent, multiplier in _EXP_BARREL:
        if int_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where(remainder & bit, _mul16(result, _c16(multiplier)), result)
    if int_bits > 5:
        clamp = _c16(-(1 << (36 - int_bits)))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, 32767, result)


def _newton_reciprocal(a: np.ndarray) -> np.ndarray:
    """x ~ 1 / ((1 + a) / 2) in F2 for a F0 in [0, 1], by 3 Newton-Raphson steps."""
    s = a + 32767
    half_den = np.where(s >= 0, (s + 1) // 2, -((-(s - 1)) // 2))  # (sum + sign) / 2, truncating
    x = _wrap16(_c16(1515870810) + _mul16(half_den, _c16(-1010580540)))
    for _ in range(3):
        one_minus = _wrap16((1 << 13) - _mul16(half_den, x))
        x = _wrap16(x + _smpot16(_mul16(x, one_minus), 2))
    return x


def fixed_logistic(a: np.ndarray, int_bits: int) -> np.ndarray:
    """gemmlowp logistic of int16 raw fixed-point values with ``int_bits`` integer bits (result F0)."""
    a = np.asarray(a, dtype=I64)
    positive = a > 0
    abs_in = np.where(positive, a, _wrap16(-a))
    r_pos = _smpot16(_newton_reciprocal(_exp_on_negative_values(_wrap16(-abs_in), int_bits)), 1)
    r_neg = _wrap16(32767 - r_pos)
    return np.where(a == 0, _c16(1 << 30), np.where(positive, r_pos, r_neg))


def fixed_tanh(a: np.ndarray, int_bits: int) -> np.ndarray:
    """gemmlowp tanh of int16 raw fixed-point values with ``int_bits`` integer bits (result F0)."""
    a = np.asarray(a, dtype=I64)
    negative = a < 0
    n = np.where(negative, a, _wrap16(-a))
    t = _smpot16(_wrap16(_newton_reciprocal(_exp_on_negative_values(n, int_bits + 1)) - (1 << 13)), 2)
    return np.where(a == 0, 0, np.where(negative, _wrap16(-t), t))


# -- QUANTIZED_16BIT_LSTM -----------------------------------------------------------------


@kernel(Op.QUANTIZED_16BIT_LSTM)
def prepare_quantized_16bit_lstm(call: OpCall) -> Kernel:
    call.expect_counts(15, 2)
    call.expect_type(0, T.TENSOR_QUANT8_ASYMM)
    for i in range(1, 9):
        call.expect_type(i, T.TENSOR_QUANT8_ASYMM)
    for i in range(9, 13):
        call.expect_type(i, T.TENSOR_INT32)
    call.expect_type(13, T.TENSOR_QUANT16_SYMM)
    call.expect_type(14, T.TENSOR_QUANT8_ASYMM)
    call.expect_output_type(0, T.TENSOR_QUANT16_SYMM)
    call.expect_output_type(1, T.TENSOR_QUANT8_ASYMM)
    ins = call.inputs
    w_scale, w_zp = ins[1].scale, ins[1].zero_point
    for i in range(1, 9):
        if ins[i].scale != w_scale or ins[i].zero_point != w_zp:
            call.fail(f"input {i}: every weight must share input 1's scale and zero point")
    for i in (0, 14):
        if ins[i].scale != 1.0 / 128 or ins[i].zero_point != 128:
            call.fail(f"input {i} must have scale 1/128 and zero point 128")
    if ins[13].scale != 1.0 / 2048 or ins[13].zero_point != 0:
        call.fail("input 13 (cell state) must have scale 1/2048 and zero point 0")
    for i in (0, 13, 14):
        call.expect_rank(i, 2)
    multiplier, shift = quantize_multiplier(float(np.float32(ins[0].scale) * np.float32(w_scale)) * 4096.0)

    def run(*args: object) -> tuple[np.ndarray, np.ndarray]:
        x, prev_c, prev_h = (np.asarray(args[i], dtype=I64) for i in (0, 13, 14))
        w = [np.asarray(args[i], dtype=I64) - w_zp for i in range(1, 9)]
        b = [np.asarray(args[i], dtype=I64) for i in range(9, 13)]
        units = b[0].shape[0] if b[0].ndim == 1 else -1
        batch = x.shape[0] if x.ndim == 2 else -1
        if (
            units < 1
            or batch < 1
            or any(wi.shape != (units, x.shape[1]) for wi in w[:4])
            or any(ri.shape != (units, units) for ri in w[4:])
            or any(bi.shape != (units,) for bi in b)
            or prev_c.shape != (batch, units)
            or prev_h.shape != (batch, units)
        ):
            call.fail("inconsistent shapes of input, weights, biases and states")
        # The reference concatenates the activations as [input, previous output] but each gate's
        # weights as [recurrent | input] (TFLite's legacy layout); the CTS data follows it.
        xh = np.concatenate([x - 128, prev_h - 128], axis=1)
        acc = []
        for k in range(4):
            wk = np.concatenate([w[4 + k], w[k]], axis=1)
            acc.append(_sat(multiply_by_quantized_multiplier(xh @ wk.T + b[k], multiplier, shift), 16))
        gate_i, gate_f, gate_o = (fixed_logistic(acc[k], 3) for k in (0, 1, 3))
        gate_g = fixed_tanh(acc[2], 3)
        i_times_g = _mul16(gate_i, gate_g)  # F0
        f_times_c = _mul16(gate_f, prev_c)  # F0 * F4 -> F4
        new_c = _sat(_smpot16(i_times_g, -4) + f_times_c, 16)
        h = _mul16(gate_o, fixed_tanh(_smpot16(new_c, 1), 3))
        out = 128 + np.clip(_rdpot(h, 8), -128, 127)
        return new_c.astype(np.int16), out.astype(np.uint8)

    return run


from nnrt.ops import qlstm as _qlstm  # noqa: E402,F401
