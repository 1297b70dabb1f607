"""Normalization kernels through the public API: numpy formulas for L2_NORMALIZATION (with
an axis and all-zero vectors), LOCAL_RESPONSE_NORMALIZATION and INSTANCE_NORMALIZATION, and
bad signatures rejected with INVALID_ARGUMENT."""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import first_output as run
from tests.helpers import rejected, single_op_model


def test_l2_normalization_axis_and_zeros(device: nnrt.CpuDevice) -> None:
    x = np.array([[3, 0], [4, 0]], np.float32)
    out = run(device, single_op_model(Op.L2_NORMALIZATION, T.TENSOR_FLOAT32, [2, 2], [(T.INT32, 0)]), x)
    np.testing.assert_allclose(out, [[0.6, 0], [0.8, 0]], atol=1e-6)


def test_l2_normalization_quant8(device: nnrt.CpuDevice) -> None:
    x = np.array([131, 132], np.uint8)  # scale 1, zp 128: [3, 4]
    m = single_op_model(Op.L2_NORMALIZATION, T.TENSOR_QUANT8_ASYMM, [2], [], out_q=(1 / 128, 128), in_q=(1.0, 128))
    out = run(device, m, x)
    np.testing.assert_array_equal(out, [128 + 77, 128 + 102])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lrn_matches_formula(device: nnrt.CpuDevice, axis: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    radius, bias, alpha, beta = 1, 1.0, 0.5, 0.75
    params = [(T.INT32, radius), (T.FLOAT32, bias), (T.FLOAT32, alpha), (T.FLOAT32, beta), (T.INT32, axis)]
    out = run(device, single_op_model(Op.LOCAL_RESPONSE_NORMALIZATION, T.TENSOR_FLOAT32, [3, 5], params), x)
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
    out = run(device, single_op_model(Op.INSTANCE_NORMALIZATION, T.TENSOR_FLOAT32, [2, 3, 4, 5], params), x)
    ax = (2, 3) if nchw else (1, 2)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(axis=ax, keepdims=True)) / np.sqrt(xd.var(axis=ax, keepdims=True) + 1e-4) * 2.0 + 0.5
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_bad_signatures(device: nnrt.CpuDevice) -> None:
    for m, match in [
        (single_op_model(Op.L2_NORMALIZATION, T.TENSOR_FLOAT32, [2, 2], [(T.INT32, 2)]), "axis 2 is out of range"),
        (single_op_model(Op.L2_NORMALIZATION, T.TENSOR_QUANT8_ASYMM, [2], [], out_q=(0.5, 128), in_q=(1.0, 128)), "scale 1/128"),
        (single_op_model(Op.LOCAL_RESPONSE_NORMALIZATION, T.TENSOR_FLOAT16, [1, 4],
                         [(T.INT32, 1), (T.FLOAT32, 1.0), (T.FLOAT32, 1.0), (T.FLOAT32, 0.5)]), "input 2"),
        (single_op_model(Op.INSTANCE_NORMALIZATION, T.TENSOR_FLOAT32, [2, 3],
                         [(T.FLOAT32, 1.0), (T.FLOAT32, 0.0), (T.FLOAT32, 1e-4), (T.BOOL, False)]), "rank 2"),
    ]:
        rejected(device, m, match)
