"""Normalization kernels through the public API: numpy formulas for L2_NORMALIZATION (with
an axis and all-zero vectors), LOCAL_RESPONSE_NORMALIZATION and INSTANCE_NORMALIZATION, and
bad signatures rejected with INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Model
from nnrt import OperandType as T
from nnrt import OperationType as Op


def model(op: Op, t: T, dims: list[int], params: Sequence[tuple[T, object]], out_q: tuple[float, int] = (0.0, 0),
          in_q: tuple[float, int] = (0.0, 0)) -> Model:
    m = Model()
    x = m.add_operand(t, dims, *in_q)
    ins = [x]
    for pt, value in params:
        i = m.add_operand(pt)
        m.set_operand_value(i, value)
        ins.append(i)
    y = m.add_operand(t, dims, *out_q)
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def run(device: nnrt.CpuDevice, m: Model, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    return out


def test_l2_normalization_axis_and_zeros(device: nnrt.CpuDevice) -> None:
    x = np.array([[3, 0], [4, 0]], np.float32)
    out = run(device, model(Op.L2_NORMALIZATION, T.TENSOR_FLOAT32, [2, 2], [(T.INT32, 0)]), x)
    np.testing.assert_allclose(out, [[0.6, 0], [0.8, 0]], atol=1e-6)


def test_l2_normalization_quant8(device: nnrt.CpuDevice) -> None:
    x = np.array([131, 132], np.uint8)  # scale 1, zp 128: [3, 4]
    out = run(device, model(Op.L2_NORMALIZATION, T.TENSOR_QUANT8_ASYMM, [2], [], (1 / 128, 128), (1.0, 128)), x)
    np.testing.assert_array_equal(out, [128 + 77, 128 + 102])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lrn_matches_formula(device: nnrt.CpuDevice, axis: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    radius, bias, alpha, beta = 1, 1.0, 0.5, 0.75
    params = [(T.INT32, radius), (T.FLOAT32, bias), (T.FLOAT32, alpha), (T.FLOAT32, beta), (T.INT32, axis)]
    out = run(device, model(Op.LOCAL_RESPONSE_NORMALIZATION, T.TENSOR_FLOAT32, [3, 5], params), x)
    xm = np.moveaxis(x.astype(np.float64), axis, -1)
    n = xm.shape[-1]
    sq = np.stack([np.sum(xm[..., max(0, c - radius): c + radius + 1] ** 2, axis=-1) for c in range(n)], axis=-1)
    want = np.moveaxis(xm / (bias + alpha * sq) ** beta, -1, axis)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nchw", [False, True])
def test_instance_normalization(device: nnrt.CpuDevice, nchw: bool) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    params = [(T.FLOAT32, 2.0), (T.FLOAT32, 0.5), (T.FLOAT32, 1e-4), (T.BOOL, nchw)]
    out = run(device, model(Op.INSTANCE_NORMALIZATION, T.TENSOR_FLOAT32, [2, 3, 4, 5], params), x)
    ax = (2, 3) if nchw else (1, 2)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(axis=ax, keepdims=True)) / np.sqrt(xd.var(axis=ax, keepdims=True) + 1e-4) * 2.0 + 0.5
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_bad_signatures(device: nnrt.CpuDevice) -> None:
    for m, match in [
        (model(Op.L2_NORMALIZATION, T.TENSOR_FLOAT32, [2, 2], [(T.INT32, 2)]), "axis 2 is out of range"),
        (model(Op.L2_NORMALIZATION, T.TENSOR_QUANT8_ASYMM, [2], [], (0.5, 128), (1.0, 128)), "scale 1/128"),
        (model(Op.LOCAL_RESPONSE_NORMALIZATION, T.TENSOR_FLOAT16, [1, 4],
               [(T.INT32, 1), (T.FLOAT32, 1.0), (T.FLOAT32, 1.0), (T.FLOAT32, 0.5)]), "input 2"),
        (model(Op.INSTANCE_NORMALIZATION, T.TENSOR_FLOAT32, [2, 3],
               [(T.FLOAT32, 1.0), (T.FLOAT32, 0.0), (T.FLOAT32, 1e-4), (T.BOOL, False)]), "rank 2"),
    ]:
        with pytest.raises(nnrt.InvalidArgumentError, match=match) as info:
            device.prepare_model_sync(m)
        assert info.value.status is ErrorStatus.INVALID_ARGUMENT
