"""Fast elementwise paths against their plain formulas: 8-bit lookup tables (quantized ADD, SUB,
MUL, PRELU and the unary activations give exactly what dequantize-compute-requantize gives, with
broadcasting and every fused activation), PRELU with a constant slope (max/min form), and the
in-place LOGISTIC."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.model import Operand
from nnrt.ops import _jit
from nnrt.ops._common import from_real, to_real

QT = {False: T.TENSOR_QUANT8_ASYMM, True: T.TENSOR_QUANT8_ASYMM_SIGNED}
UFUNCS = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply}


def _operand(t: T, scale: float, zero: int) -> Operand:
    m = Model()
    return m.operands[m.add_operand(t, [1], scale, zero)]


def _binary_model(op: Op, t: T, a_dims: list[int], b_dims: list[int], qs: list[tuple[float, int]], act: int) -> Model:
    m = Model()
    a = m.add_operand(t, a_dims, *qs[0])
    b = m.add_operand(t, b_dims, *qs[1])
    ins = [a, b]
    if op is not Op.PRELU:
        i = m.add_operand(T.INT32)
        m.set_operand_value(i, act)
        ins.append(i)
    y = m.add_operand(t, [0] * max(len(a_dims), len(b_dims)), *qs[2])
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([a, b], [y])
    m.finish()
    return m


@settings(max_examples=40, deadline=None)
@given(op=st.sampled_from([Op.ADD, Op.SUB, Op.MUL, Op.PRELU]), signed=st.booleans(), act=st.sampled_from([0, 1, 2, 3]),
       bcast=st.sampled_from(["same", "row", "scalar", "left"]), seed=st.integers(0, 2**16))
def test_quantized_binary_tables_equal_the_formula(device: nnrt.CpuDevice, op: Op, signed: bool, act: int, bcast: str,
                                                   seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = QT[signed]
    lo, hi = (-128, 127) if signed else (0, 255)
    qs = [(float(rng.uniform(0.01, 0.2)), int(rng.integers(lo, hi + 1))) for _ in range(3)]
    a_dims, b_dims = {"same": ([2, 3, 4], [2, 3, 4]), "row": ([2, 3, 4], [4]), "scalar": ([2, 3, 4], [1]),
                      "left": ([4], [2, 3, 4])}[bcast]
    act = 0 if op is Op.PRELU else act
    a = rng.integers(lo, hi + 1, a_dims).astype(t.dtype)
    b = rng.integers(lo, hi + 1, b_dims).astype(t.dtype)
    out = device.prepare_model_sync(_binary_model(op, t, a_dims, b_dims, qs, act)).execute_sync([a, b]).outputs[0]
    ra, rb = (to_real(v, _operand(t, *q), np.float64) for v, q in ((a, qs[0]), (b, qs[1])))
    real = np.where(ra >= 0, ra, ra * rb) if op is Op.PRELU else UFUNCS[op](ra, rb)
    np.testing.assert_array_equal(out, from_real(real, _operand(t, *qs[2]), act))


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from([Op.RELU, Op.RELU1, Op.RELU6, Op.TANH, Op.LOGISTIC, Op.HARD_SWISH]), signed=st.booleans(),
       seed=st.integers(0, 2**16))
def test_quantized_unary_tables_equal_the_formula(device: nnrt.CpuDevice, op: Op, signed: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = QT[signed]
    lo, hi = (-128, 127) if signed else (0, 255)
    xq = (float(rng.uniform(0.01, 0.2)), int(rng.integers(lo, hi + 1)))
    yq = {Op.TANH: (1 / 128, 0 if signed else 128), Op.LOGISTIC: (1 / 256, -128 if signed else 0)}.get(
        op, (float(rng.uniform(0.01, 0.2)), int(rng.integers(lo, hi + 1))))
    m = Model()
    x = m.add_operand(t, [3, 5], *xq)
    y = m.add_operand(t, [3, 5], *yq)
    m.add_operation(op, [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    xv = rng.integers(lo, hi + 1, (3, 5)).astype(t.dtype)
    out = device.prepare_model_sync(m).execute_sync([xv]).outputs[0]
    r = to_real(xv, _operand(t, *xq), np.float64)
    real = {Op.RELU: np.maximum(r, 0), Op.RELU1: np.clip(r, -1, 1), Op.RELU6: np.clip(r, 0, 6), Op.TANH: np.tanh(r),
            Op.LOGISTIC: 1 / (1 + np.exp(-r)), Op.HARD_SWISH: r * np.clip(r + 3, 0, 6) / 6}[op]
    np.testing.assert_array_equal(out, from_real(real, _operand(t, *yq)))


def _float_model(op: Op, dims: list[int], slope: np.ndarray | None = None) -> Model:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, dims)
    ins = [x]
    if slope is not None:
        s = m.add_operand(T.TENSOR_FLOAT32, list(slope.shape))
        m.set_operand_value(s, slope)
        ins.append(s)
    y = m.add_operand(T.TENSOR_FLOAT32, dims)
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def test_prelu_constant_slope_forms_match_where(device: nnrt.CpuDevice) -> None:
    """Slopes below 1 (max form), above 1 (min form), mixed or with a zero (the general form),
    on values including infinities, NaN and zeros."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    x[0, 0, 0, :] = [np.inf, -np.inf, np.nan, 0.0, -0.0]
    for slope in (rng.uniform(-2, 1, 5), rng.uniform(1, 3, 5), rng.uniform(-2, 3, 5), np.array([0, 0.5, 1, 0.2, -1])):
        s = slope.astype(np.float32)
        out = device.prepare_model_sync(_float_model(Op.PRELU, [2, 3, 4, 5], s)).execute_sync([x]).outputs[0]
        with np.errstate(all="ignore"):
            want = np.where(x >= 0, x, x * s)
        np.testing.assert_array_equal(out, want)


def test_logistic_in_place_matches_formula(device: nnrt.CpuDevice) -> None:
    """The numpy kernel (the compiled one is ``tests/unit/test_jit_logistic.py``'s)."""
    x = np.linspace(-100, 100, 4001, dtype=np.float32).reshape(1, -1)
    with _jit.forced(False):
        out = device.prepare_model_sync(_float_model(Op.LOGISTIC, [1, 4001])).execute_sync([x]).outputs[0]
    with np.errstate(over="ignore"):
        want = np.float32(1) / (np.float32(1) + np.exp(-x))
    np.testing.assert_array_equal(out, want)


def test_arithmetic_with_a_per_channel_constant_over_rows(device: nnrt.CpuDevice) -> None:
    """ADD/SUB/MUL/DIV of a large tensor and a constant [C] vector (either side, with an
    activation) equal numpy's broadcasting, for two ranks."""
    rng = np.random.default_rng(4)
    vec = rng.standard_normal(24).astype(np.float32)
    for op, ufunc in ((Op.ADD, np.add), (Op.SUB, np.subtract), (Op.MUL, np.multiply), (Op.DIV, np.divide)):
        for const_first in (False, True):
            for dims in ([1, 40, 40, 24], [3, 175, 24]):
                m = Model()
                x = m.add_operand(T.TENSOR_FLOAT32, dims)
                c = m.add_operand(T.TENSOR_FLOAT32, [24])
                m.set_operand_value(c, vec)
                act = m.add_operand(T.INT32)
                m.set_operand_value(act, 1)
                y = m.add_operand(T.TENSOR_FLOAT32, dims)
                m.add_operation(op, [c, x, act] if const_first else [x, c, act], [y])
                m.identify_inputs_and_outputs([x], [y])
                m.finish()
                xv = rng.standard_normal(dims).astype(np.float32)
                out = device.prepare_model_sync(m).execute_sync([xv]).outputs[0]
                want = ufunc(vec, xv) if const_first else ufunc(xv, vec)
                np.testing.assert_array_equal(out, np.maximum(want, 0))
