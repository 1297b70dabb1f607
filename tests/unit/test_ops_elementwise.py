"""Elementwise kernels through the public API: numpy formulas for unary math, comparisons of
quantized inputs with different scales, MAXIMUM requantization, SELECT, and bad signatures
rejected with INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Sequence

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
from tests.helpers import rejected

Spec = tuple[T, list[int]] | tuple[T, list[int], float, int]


def build(op: Op, ins: Sequence[Spec], outs: Sequence[Spec]) -> tuple[Model, list[int]]:
    m = Model()
    in_idx = [m.add_operand(*s) for s in ins]
    out_idx = [m.add_operand(*s) for s in outs]
    m.add_operation(op, in_idx, out_idx)
    m.identify_inputs_and_outputs(in_idx, out_idx)
    m.finish()
    return m, in_idx


@pytest.mark.parametrize(
    ("op", "formula"),
    [(Op.EXP, np.exp), (Op.SIN, np.sin), (Op.ABS, np.abs), (Op.NEG, np.negative), (Op.FLOOR, np.floor),
     (Op.SQRT, lambda x: np.sqrt(np.abs(x))), (Op.RSQRT, lambda x: 1 / np.sqrt(np.abs(x)))],
)
@pytest.mark.parametrize("t", [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16])
def test_unary_float(device: nnrt.CpuDevice, op: Op, formula: object, t: T) -> None:
    x = np.linspace(0.5, 4, 6, dtype=t.dtype).reshape(2, 3)
    if op in (Op.EXP, Op.SIN, Op.ABS, Op.NEG, Op.FLOOR):
        x = x - t.dtype.type(2)
    m, _ = build(op, [(t, [2, 3])], [(t, [2, 3])])
    out = run(device, m, x)
    assert out.dtype == t.dtype
    assert callable(formula)
    np.testing.assert_allclose(out.astype(np.float64), formula(x.astype(np.float64)), rtol=3e-3, atol=3e-3)


def test_less_quantized_different_scales(device: nnrt.CpuDevice) -> None:
    m, _ = build(Op.LESS, [(T.TENSOR_QUANT8_ASYMM, [3], 1.0, 128), (T.TENSOR_QUANT8_ASYMM, [3], 2.0, 128)],
                 [(T.TENSOR_BOOL8, [3])])
    a = np.array([129, 132, 130], np.uint8)  # 1, 4, 2
    b = np.array([129, 130, 129], np.uint8)  # 2, 4, 2
    np.testing.assert_array_equal(run(device, m, a, b), [True, False, False])


def test_maximum_requantizes_to_output(device: nnrt.CpuDevice) -> None:
    m, _ = build(Op.MAXIMUM, [(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 0.5, 0), (T.TENSOR_QUANT8_ASYMM_SIGNED, [1], 1.0, 0)],
                 [(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 0.25, -10)])
    out = run(device, m, np.array([4, -6], np.int8), np.array([1], np.int8))  # max([2, -3], 1) = [2, 1]
    np.testing.assert_array_equal(out, [-2, -6])


def test_select_int32(device: nnrt.CpuDevice) -> None:
    m, _ = build(Op.SELECT, [(T.TENSOR_BOOL8, [3]), (T.TENSOR_INT32, [3]), (T.TENSOR_INT32, [3])], [(T.TENSOR_INT32, [3])])
    out = run(device, m, np.array([True, False, True]), np.array([1, 2, 3], np.int32), np.array([4, 5, 6], np.int32))
    np.testing.assert_array_equal(out, [1, 5, 3])


@settings(max_examples=25, deadline=None)
@given(
    a=hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), elements=st.integers(-5, 5)),
    op=st.sampled_from([Op.EQUAL, Op.NOT_EQUAL, Op.GREATER, Op.GREATER_EQUAL, Op.LESS, Op.LESS_EQUAL]),
)
def test_comparison_broadcast_property(device: nnrt.CpuDevice, a: np.ndarray, op: Op) -> None:
    b = np.array([0], np.int32)
    m, _ = build(op, [(T.TENSOR_INT32, list(a.shape)), (T.TENSOR_INT32, [1])], [(T.TENSOR_BOOL8, list(a.shape))])
    ufunc = {Op.EQUAL: np.equal, Op.NOT_EQUAL: np.not_equal, Op.GREATER: np.greater,
             Op.GREATER_EQUAL: np.greater_equal, Op.LESS: np.less, Op.LESS_EQUAL: np.less_equal}[op]
    np.testing.assert_array_equal(run(device, m, a, b), ufunc(a, b))


def test_bad_signatures(device: nnrt.CpuDevice) -> None:
    rejected(device, lambda: build(Op.LESS, [(T.TENSOR_FLOAT32, [2])] * 2, [(T.TENSOR_FLOAT32, [2])])[0], "output 0")
    rejected(device, lambda: build(Op.EXP, [(T.TENSOR_INT32, [2])], [(T.TENSOR_INT32, [2])])[0], "input 0")
    m, _ = build(Op.MAXIMUM, [(T.TENSOR_FLOAT32, [2]), (T.TENSOR_FLOAT32, [3])],
                 [(T.TENSOR_FLOAT32, [2])])
    rejected(device, m, "cannot be broadcast")
    m, _ = build(Op.SELECT, [(T.TENSOR_BOOL8, [2]), (T.TENSOR_FLOAT32, [3]), (T.TENSOR_FLOAT32, [3])],
                 [(T.TENSOR_FLOAT32, [3])])
    rejected(device, m, "same shape")
