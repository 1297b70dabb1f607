"""QUANTIZE, DEQUANTIZE and CAST through the public API, and the shapes/types NNAPI rejects."""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import first_output as run
from tests.helpers import rejected


def one_op(op: Op, in_t: T, out_t: T, dims: list[int], out_dims: list[int] | None = None,
           in_q: tuple[float, int] = (0.0, 0), out_q: tuple[float, int] = (0.0, 0)) -> Model:
    m = Model()
    x = m.add_operand(in_t, dims, *in_q)
    y = m.add_operand(out_t, dims if out_dims is None else out_dims, *out_q)
    m.add_operation(op, [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize("in_t", [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16])
def test_quantize_rounds_half_away_and_saturates(device: nnrt.CpuDevice, in_t: T) -> None:
    x = np.array([-1000.0, -2.5, -0.5, 0.5, 2.5, 1000.0], in_t.dtype)
    out = run(device, one_op(Op.QUANTIZE, in_t, T.TENSOR_QUANT8_ASYMM_SIGNED, [6], out_q=(0.5, 1)), x)
    assert out.dtype == np.int8
    assert out.tolist() == [-128, -4, 0, 2, 6, 127]


def test_dequantize_per_channel(device: nnrt.CpuDevice) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [2, 3])
    m.set_operand_symm_per_channel_quant_params(x, 1, [0.5, 1.0, 2.0])
    y = m.add_operand(T.TENSOR_FLOAT16, [2, 3])
    m.add_operation(Op.DEQUANTIZE, [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    out = run(device, m, np.array([[2, 2, 2], [-4, -4, -4]], np.int8))
    assert out.dtype == np.float16
    assert out.tolist() == [[1.0, 2.0, 4.0], [-2.0, -4.0, -8.0]]


def test_dequantize_asymm(device: nnrt.CpuDevice) -> None:
    m = one_op(Op.DEQUANTIZE, T.TENSOR_QUANT8_ASYMM, T.TENSOR_FLOAT32, [3], in_q=(0.25, 100))
    assert run(device, m, np.array([0, 100, 255], np.uint8)).tolist() == [-25.0, 0.0, 38.75]


def test_cast_uses_stored_values_and_saturates(device: nnrt.CpuDevice) -> None:
    q = (4.0, 100)
    m = one_op(Op.CAST, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, [4], out_q=q)
    assert run(device, m, np.array([-1.0, 2.7, 255.9, 300.0], np.float32)).tolist() == [0, 2, 255, 255]
    m = one_op(Op.CAST, T.TENSOR_QUANT8_ASYMM, T.TENSOR_INT32, [2], in_q=q)
    assert run(device, m, np.array([5, 200], np.uint8)).tolist() == [5, 200]
    m = one_op(Op.CAST, T.TENSOR_FLOAT16, T.TENSOR_INT32, [3])
    assert run(device, m, np.array([-1.5, 1.5, 7.0], np.float16)).tolist() == [-1, 1, 7]
    m = one_op(Op.CAST, T.TENSOR_BOOL8, T.TENSOR_BOOL8, [2])
    assert run(device, m, np.array([True, False])).tolist() == [True, False]


def test_bad_signatures(device: nnrt.CpuDevice) -> None:
    rejected(device, lambda: one_op(Op.CAST, T.TENSOR_INT32, T.TENSOR_INT32, [2, 3], [100]), "do not match")
    rejected(device, lambda: one_op(Op.CAST, T.TENSOR_BOOL8, T.TENSOR_INT32, [2]), "type")
    rejected(device, lambda: one_op(Op.QUANTIZE, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, [2], out_q=(1.0, 0)), "type")
    rejected(device, lambda: one_op(Op.DEQUANTIZE, T.TENSOR_QUANT8_ASYMM, T.TENSOR_INT32, [2], in_q=(1.0, 0)), "type")
