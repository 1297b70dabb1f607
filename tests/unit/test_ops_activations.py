"""Activation kernels through the public API: numpy formulas, NNAPI's fixed output
quantization of LOGISTIC/SOFTMAX/TANH, and bad signatures rejected with INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import first_output as run
from tests.helpers import rejected, single_op_model

FORMULAS: dict[Op, Callable[[np.ndarray], np.ndarray]] = {
    Op.RELU: lambda x: np.maximum(x, 0),
    Op.RELU1: lambda x: np.clip(x, -1, 1),
    Op.RELU6: lambda x: np.clip(x, 0, 6),
    Op.LOGISTIC: lambda x: 1 / (1 + np.exp(-x)),
    Op.TANH: np.tanh,
    Op.HARD_SWISH: lambda x: x * np.clip(x + 3, 0, 6) / 6,
}


@pytest.mark.parametrize("op", list(FORMULAS))
@pytest.mark.parametrize("t", [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16])
def test_float_unary(device: nnrt.CpuDevice, op: Op, t: T) -> None:
    x = np.linspace(-8, 8, 24, dtype=t.dtype).reshape(2, 3, 4)
    out = run(device, single_op_model(op, t, [2, 3, 4]), x)
    assert out.dtype == t.dtype
    np.testing.assert_allclose(out.astype(np.float64), FORMULAS[op](x.astype(np.float64)), rtol=2e-3, atol=2e-3)


def test_logistic_quant8_signed_output(device: nnrt.CpuDevice) -> None:
    x = np.array([-128, -28, 0, 127], np.int8)  # scale 0.05, zp -28 -> [-5, 0, 1.4, 7.75]
    m = single_op_model(Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM_SIGNED, [4], in_q=(0.05, -28), out_q=(1 / 256, -128))
    real = (x.astype(np.float64) + 28) * 0.05
    want = np.clip(np.round(256 / (1 + np.exp(-real))) - 128, -128, 127)
    assert np.abs(run(device, m, x).astype(int) - want).max() <= 1


@pytest.mark.parametrize(
    ("op", "t", "out_q"),
    [
        (Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM, (1 / 128, 0)),
        (Op.LOGISTIC, T.TENSOR_QUANT8_ASYMM_SIGNED, (1 / 256, 0)),
        (Op.TANH, T.TENSOR_QUANT8_ASYMM, (1 / 128, 0)),
        (Op.TANH, T.TENSOR_QUANT8_ASYMM_SIGNED, (1 / 256, 0)),
    ],
)
def test_fixed_output_quantization_is_enforced(device: nnrt.CpuDevice, op: Op, t: T, out_q: tuple[float, int]) -> None:
    rejected(device, lambda: single_op_model(op, t, [4], in_q=(0.1, 0), out_q=out_q), "must have scale")


def test_softmax_quant8_output_rule(device: nnrt.CpuDevice) -> None:
    extra = [(T.FLOAT32, 1.0)]
    bad = single_op_model(Op.SOFTMAX, T.TENSOR_QUANT8_ASYMM, [1, 4], extra, in_q=(0.1, 0), out_q=(1 / 256, 128))
    rejected(device, bad, "must have scale")
    ok = single_op_model(Op.SOFTMAX, T.TENSOR_QUANT8_ASYMM, [1, 4], extra, in_q=(0.1, 0), out_q=(1 / 256, 0))
    out = run(device, ok, np.array([[10, 20, 30, 40]], np.uint8))
    e = np.exp(np.array([1.0, 2.0, 3.0, 4.0]))
    assert np.abs(out[0].astype(int) - np.round(256 * e / e.sum())).max() <= 1


@settings(max_examples=30, deadline=None)
@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=5),
                 elements=st.floats(-20, 20, width=32)),
    beta=st.floats(0.1, 3.0),
    data=st.data(),
)
def test_softmax_matches_numpy(device: nnrt.CpuDevice, x: np.ndarray, beta: float, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    m = single_op_model(Op.SOFTMAX, T.TENSOR_FLOAT32, list(x.shape), [(T.FLOAT32, beta), (T.INT32, axis)])
    z = (x.astype(np.float64) - x.max(axis=axis, keepdims=True)) * np.float32(beta)
    want = np.exp(z) / np.exp(z).sum(axis=axis, keepdims=True)
    np.testing.assert_allclose(run(device, m, x), want, rtol=1e-5, atol=1e-6)


def test_log_softmax_elu_prelu(device: nnrt.CpuDevice) -> None:
    x = np.array([[-2.0, -0.5, 0.0, 3.0]], np.float32)
    out = run(device, single_op_model(Op.LOG_SOFTMAX, T.TENSOR_FLOAT32, [1, 4], [(T.FLOAT32, 1.0), (T.INT32, -1)]), x)
    np.testing.assert_allclose(out, x - np.log(np.exp(x).sum()), rtol=1e-5)
    out = run(device, single_op_model(Op.ELU, T.TENSOR_FLOAT32, [1, 4], [(T.FLOAT32, 2.0)]), x)
    np.testing.assert_allclose(out, np.where(x < 0, 2.0 * np.expm1(x), x), rtol=1e-6)
    m = Model()
    xi = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    ai = m.add_operand(T.TENSOR_FLOAT32, [4])
    yi = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    m.set_operand_value(ai, np.array([0.5, 1.0, 2.0, 3.0], np.float32))
    m.add_operation(Op.PRELU, [xi, ai], [yi])
    m.identify_inputs_and_outputs([xi], [yi])
    m.finish()
    np.testing.assert_allclose(run(device, m, x), [[-1.0, -0.5, 0.0, 3.0]])


def test_bad_signatures(device: nnrt.CpuDevice) -> None:
    rejected(device, lambda: single_op_model(Op.RELU, T.TENSOR_INT32, [4]), "type")
    rejected(device, lambda: single_op_model(Op.RELU, T.TENSOR_FLOAT32, [1, 1, 1, 1, 4]), "rank")
    rejected(device, lambda: single_op_model(Op.SOFTMAX, T.TENSOR_FLOAT32, [1, 4], [(T.FLOAT32, 0.0)]), "beta")
    rejected(device, lambda: single_op_model(Op.SOFTMAX, T.TENSOR_FLOAT32, [1, 4], [(T.FLOAT32, 1.0), (T.INT32, 2)]), "axis")
    rejected(device, lambda: single_op_model(Op.SOFTMAX, T.TENSOR_FLOAT16, [1, 4], [(T.FLOAT32, 1.0)]), "FLOAT16")
    rejected(device, lambda: single_op_model(Op.ELU, T.TENSOR_QUANT8_ASYMM, [4], [(T.FLOAT32, 1.0)], in_q=(0.1, 0),
                                             out_q=(0.1, 0)), "type")


@pytest.mark.parametrize("size", [1, 255, 256, 1000])
def test_logistic_small_and_large_paths_give_the_same_bits(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``_SMALL`` elements LOGISTIC makes a new array per operation instead of working in
    one: the same float32 operations, so the same bits, special values included."""
    import nnrt.ops.activations as activations

    x = (np.random.default_rng(size).standard_normal(size) * 40).astype(np.float32)
    x[: min(size, 6)] = np.array([np.nan, np.inf, -np.inf, -0.0, 100.0, -100.0], np.float32)[: min(size, 6)]
    with np.errstate(all="ignore"):
        got = activations._logistic(x)
        monkeypatch.setattr(activations, "_SMALL", 0)
        want = activations._logistic(x)
        monkeypatch.setattr(activations, "_SMALL", 1 << 30)
        small = activations._logistic(x)
    assert got.dtype == want.dtype == small.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(small.view(np.uint32), want.view(np.uint32))
