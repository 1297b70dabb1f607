"""FULLY_CONNECTED and BATCH_MATMUL through the public API: numpy formulas, and the bad
signatures NNAPI rejects with INVALID_ARGUMENT at preparation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import rejected


def fc_model(
    x_dims: list[int],
    w: np.ndarray,
    b: np.ndarray,
    act: int = 0,
    *,
    t: T = T.TENSOR_FLOAT32,
    bias_type: T | None = None,
    scales: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
    zps: tuple[int, int, int] = (0, 0, 0),
) -> Model:
    m = Model()
    x = m.add_operand(t, x_dims, scales[0], zps[0])
    wi = m.add_operand(t, list(w.shape), scales[1], zps[1])
    bi = m.add_operand(bias_type or t, list(b.shape), scales[2])
    ai = m.add_operand(T.INT32)
    y = m.add_operand(t, [0, 0], scales[3], zps[2])
    m.set_operand_value(wi, w)
    m.set_operand_value(bi, b)
    m.set_operand_value(ai, act)
    m.add_operation(Op.FULLY_CONNECTED, [x, wi, bi, ai], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 4),
    units=st.integers(1, 6),
    size=st.integers(1, 7),
    act=st.sampled_from([0, 1, 2, 3]),
    seed=st.integers(0, 2**16),
)
def test_fully_connected_float32_matches_numpy(
    device: nnrt.CpuDevice, batch: int, units: int, size: int, act: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((units, size)).astype(np.float32)
    b = rng.standard_normal(units).astype(np.float32)
    x = rng.standard_normal((batch, size)).astype(np.float32)
    out = device.prepare_model_sync(fc_model([batch, size], w, b, act)).execute_sync([x]).outputs[0]
    want = x @ w.T + b
    lo, hi = {0: (-np.inf, np.inf), 1: (0, np.inf), 2: (-1, 1), 3: (0, 6)}[act]
    np.testing.assert_allclose(out, np.clip(want, lo, hi), rtol=1e-5, atol=1e-5)
    assert out.dtype == np.float32 and out.shape == (batch, units)


def test_fully_connected_flattens_rank4_input(device: nnrt.CpuDevice) -> None:
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones(3, np.float32)
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    out = device.prepare_model_sync(fc_model([1, 2, 2, 2], w, b)).execute_sync([x]).outputs[0]
    np.testing.assert_allclose(out, x.reshape(2, 4) @ w.T + b)


def test_fully_connected_quant8(device: nnrt.CpuDevice) -> None:
    w = np.array([[130, 126], [128, 132]], np.uint8)  # zp 128, scale 0.5 -> [[1, -1], [0, 2]]
    b = np.array([4, -4], np.int32)  # scale 0.25 -> [1, -1]
    m = fc_model([1, 2], w, b, t=T.TENSOR_QUANT8_ASYMM, bias_type=T.TENSOR_INT32,
                 scales=(0.5, 0.5, 0.25, 0.5), zps=(100, 128, 10))
    x = np.array([[104, 96]], np.uint8)  # [2, -2]
    out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    # real: [2*1 + -2*-1 + 1, 0 + -4 - 1] = [5, -5] -> /0.5 + 10
    assert out.tolist() == [[20, 0]]


def test_fully_connected_rejects_bad_bias_scale(device: nnrt.CpuDevice) -> None:
    m = fc_model([1, 2], np.zeros((2, 2), np.uint8), np.zeros(2, np.int32), t=T.TENSOR_QUANT8_ASYMM,
                 bias_type=T.TENSOR_INT32, scales=(0.5, 0.5, 0.5, 1.0), zps=(0, 0, 0))
    rejected(device, m, "bias scale")


def test_fully_connected_rejects_bad_signatures(device: nnrt.CpuDevice) -> None:
    w = np.zeros((3, 4), np.float32)
    rejected(device, fc_model([2, 4], w, np.zeros(2, np.float32)), "bias")
    rejected(device, fc_model([2, 5], w, np.zeros(3, np.float32)), "multiple")
    rejected(device, fc_model([2, 4], w, np.zeros(3, np.float32), act=7), "activation")
    rejected(device, fc_model([2, 4], w, np.zeros(3, np.int32), bias_type=T.TENSOR_INT32), "INT32")


def bmm_model(a_dims: list[int], b_dims: list[int], adj_x: bool, adj_y: bool, t: T = T.TENSOR_FLOAT32) -> Model:
    m = Model()
    a = m.add_operand(t, a_dims)
    b = m.add_operand(t, b_dims)
    ax = m.add_operand(T.BOOL)
    ay = m.add_operand(T.BOOL)
    y = m.add_operand(t, [0] * len(a_dims))
    m.set_operand_value(ax, adj_x)
    m.set_operand_value(ay, adj_y)
    m.add_operation(Op.BATCH_MATMUL, [a, b, ax, ay], [y])
    m.identify_inputs_and_outputs([a, b], [y])
    m.finish()
    return m


@pytest.mark.parametrize("adj_x", [False, True])
@pytest.mark.parametrize("adj_y", [False, True])
def test_batch_matmul_adjoints(device: nnrt.CpuDevice, adj_x: bool, adj_y: bool) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-5, 5, (2, 3, 4)).astype(np.int32)
    b = rng.integers(-5, 5, (2, 4, 5)).astype(np.int32)
    a_in = np.swapaxes(a, 1, 2).copy() if adj_x else a
    b_in = np.swapaxes(b, 1, 2).copy() if adj_y else b
    m = bmm_model(list(a_in.shape), list(b_in.shape), adj_x, adj_y, T.TENSOR_INT32)
    out = device.prepare_model_sync(m).execute_sync([a_in, b_in]).outputs[0]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a @ b)


def test_batch_matmul_rejects_bad_shapes(device: nnrt.CpuDevice) -> None:
    rejected(device, bmm_model([1, 2, 3], [1, 4, 3], False, False), "cannot be multiplied")
    rejected(device, bmm_model([2, 3], [1, 3, 4], False, False), "ranks differ")
    rejected(device, bmm_model([2, 2, 3], [3, 3, 4], False, False), "batch dimension")
