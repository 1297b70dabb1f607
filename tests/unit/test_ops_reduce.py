"""Reduction kernels through the public API: keep_dims and negative/repeated axes against
numpy, the rank-0-becomes-[1] rule, ARGMAX/TOPK_V2 tie order, and bad signatures rejected
with INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nnrt
from nnrt import ErrorStatus, Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import all_outputs as run


def reduce_model(op: Op, t: T, dims: list[int], axes: list[int], keep: bool, out_dims: list[int]) -> Model:
    m = Model()
    x = m.add_operand(t, dims)
    a = m.add_operand(T.TENSOR_INT32, [len(axes)])
    m.set_operand_value(a, np.array(axes, np.int32))
    k = m.add_operand(T.INT32 if op is Op.MEAN else T.BOOL)
    m.set_operand_value(k, int(keep) if op is Op.MEAN else keep)
    y = m.add_operand(t, out_dims)
    m.add_operation(op, [x, a, k], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


REDUCERS: dict[Op, Callable[..., np.ndarray]] = {
    Op.MEAN: np.mean,
    Op.REDUCE_SUM: np.sum,
    Op.REDUCE_MAX: np.max,
    Op.REDUCE_MIN: np.min,
    Op.REDUCE_PROD: np.prod,
}


@settings(max_examples=25, deadline=None)
@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=4), elements=st.floats(-4, 4, width=32)),
    data=st.data(),
    op=st.sampled_from([Op.MEAN, Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD]),
    keep=st.booleans(),
)
def test_float_reductions_match_numpy(device: nnrt.CpuDevice, x: np.ndarray, data: st.DataObject, op: Op, keep: bool) -> None:
    axes = data.draw(st.lists(st.integers(-x.ndim, x.ndim - 1), min_size=1, max_size=3))
    ax = tuple(sorted({a % x.ndim for a in axes}))
    fn: Callable[..., np.ndarray] = REDUCERS[op]
    want = np.asarray(fn(x.astype(np.float64), axis=ax, keepdims=keep))
    want = want.reshape(1) if want.ndim == 0 else want  # NNAPI gives [1], never rank 0
    (out,) = run(device, reduce_model(op, T.TENSOR_FLOAT32, list(x.shape), axes, keep, [0] * want.ndim), x)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_reduce_all_to_shape_1(device: nnrt.CpuDevice) -> None:
    x = np.array([[True, False], [True, True]])
    (out,) = run(device, reduce_model(Op.REDUCE_ANY, T.TENSOR_BOOL8, [2, 2], [0, -1], False, [1]), x)
    np.testing.assert_array_equal(out, [True])


def test_argmax_first_on_ties(device: nnrt.CpuDevice) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_INT32, [2, 3])
    a = m.add_operand(T.INT32)
    m.set_operand_value(a, -1)
    y = m.add_operand(T.TENSOR_INT32, [2])
    m.add_operation(Op.ARGMAX, [x, a], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    (out,) = run(device, m, np.array([[1, 5, 5], [7, 7, 0]], np.int32))
    np.testing.assert_array_equal(out, [1, 0])


def test_topk_order(device: nnrt.CpuDevice) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 5])
    k = m.add_operand(T.INT32)
    m.set_operand_value(k, 3)
    v = m.add_operand(T.TENSOR_FLOAT32, [1, 3])
    i = m.add_operand(T.TENSOR_INT32, [1, 3])
    m.add_operation(Op.TOPK_V2, [x, k], [v, i])
    m.identify_inputs_and_outputs([x], [v, i])
    m.finish()
    values, indices = run(device, m, np.array([[1, 3, 2, 3, 0]], np.float32))
    np.testing.assert_array_equal(values, [[3, 3, 2]])
    np.testing.assert_array_equal(indices, [[1, 3, 2]])


def test_bad_signatures(device: nnrt.CpuDevice) -> None:
    for build, match in [
        (lambda: reduce_model(Op.REDUCE_SUM, T.TENSOR_FLOAT32, [2, 3], [2], False, [2]), "axis 2 is out of range"),
        (lambda: reduce_model(Op.REDUCE_SUM, T.TENSOR_INT32, [2, 3], [0], False, [3]), "input 0"),
        (lambda: reduce_model(Op.REDUCE_ALL, T.TENSOR_FLOAT32, [2, 3], [0], False, [3]), "input 0"),
    ]:
        with pytest.raises(nnrt.InvalidArgumentError, match=match) as info:
            device.prepare_model_sync(build())
        assert info.value.status is ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize(("dims", "axes", "keep"), [
    ([1, 80, 80, 96], [1, 2], True), ([2, 7, 5, 3], [1, 2], False), ([1, 1, 1, 8], [-3, -2], True),
    ([3, 300, 17], [0, 1], True), ([4, 6], [0], False), ([1, 97, 101, 5], [2], True), ([2, 3, 4, 5], [0, 2], False),
])
def test_float32_mean_over_outer_axes_keeps_its_bits(device: nnrt.CpuDevice, dims: list[int], axes: list[int],
                                                     keep: bool) -> None:
    """A global average pool (MEAN over axes other than the last) sums float32 straight into
    float64: bit for bit the mean of the float64 copy it used to make, special values included."""
    x = (np.random.default_rng(len(dims)).standard_normal(dims) * 100).astype(np.float32)
    flat = x.reshape(-1)
    flat[::97] = np.float32(3e38)
    flat[1::89] = np.float32(-1e-40)
    flat[5] = np.inf if flat.size > 5 else flat[0]
    want = x.astype(np.float64).mean(axis=tuple(axes), keepdims=keep).astype(np.float32)
    out_dims = list(want.shape)
    got = run(device, reduce_model(Op.MEAN, T.TENSOR_FLOAT32, dims, axes, keep, out_dims), x)[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_constant_axes_planned_per_shape_match_axes_given_at_run_time(device: nnrt.CpuDevice) -> None:
    """With constant axes the checks and the path are settled once per input shape: the same bits
    as axes given at run time (checked on every call) over several shapes of a dynamic input,
    and the empty-axis failure still raised at run time, for a shape never seen, after others."""
    const = device.prepare_model_sync(reduce_model(Op.MEAN, T.TENSOR_FLOAT32, [0, 0], [-1], True, [0, 1]))
    m = Model()
    x, a, k = m.add_operand(T.TENSOR_FLOAT32, [0, 0]), m.add_operand(T.TENSOR_INT32, [1]), m.add_operand(T.INT32)
    m.set_operand_value(k, 1)
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 1])
    m.add_operation(Op.MEAN, [x, a, k], [y])
    m.identify_inputs_and_outputs([x, a], [y])
    m.finish()
    dynamic = device.prepare_model_sync(m)
    rng = np.random.default_rng(5)
    for shape in [(1, 128), (3, 5), (1, 128), (2, 5000), (0, 4), (1, 128)]:
        v = rng.standard_normal(shape).astype(np.float32)
        (got,) = const.execute_sync([v]).outputs
        (want,) = dynamic.execute_sync([v, np.array([1], np.int32)]).outputs
        assert got.shape == want.shape == (shape[0], 1)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    for _ in range(2):
        with pytest.raises(nnrt.InvalidArgumentError, match=r"MEAN.*input 0 has shape \[2, 0\].*empty axis") as info:
            const.execute_sync([np.ones((2, 0), np.float32)])
        assert info.value.status is ErrorStatus.INVALID_ARGUMENT
