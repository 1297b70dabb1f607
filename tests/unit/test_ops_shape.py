"""Shape, layout and resize kernels through the public API: numpy formulas, run-time shapes,
requantization, fresh outputs, and bad signatures rejected with INVALID_ARGUMENT."""

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
from tests.helpers import all_outputs as run
from tests.helpers import rejected

Arg = tuple[T, Sequence[int] | None, object]  # (type, dims, constant value or None for a model input)


def build(op: Op, args: Sequence[Arg], outs: Sequence[tuple[T, Sequence[int]]],
          quant: dict[int, tuple[float, int]] | None = None) -> tuple[Model, list[int]]:
    """One-operation model; ``quant`` maps operand positions (inputs then outputs) to (scale, zp)."""
    quant = quant or {}
    m = Model()
    ins, model_inputs = [], []
    for k, (t, dims, value) in enumerate(args):
        i = m.add_operand(t, dims, *quant.get(k, (0.0, 0)))
        if value is None:
            model_inputs.append(i)
        else:
            m.set_operand_value(i, value)
        ins.append(i)
    outputs = [m.add_operand(t, dims, *quant.get(len(args) + j, (0.0, 0))) for j, (t, dims) in enumerate(outs)]
    m.add_operation(op, ins, outputs)
    m.identify_inputs_and_outputs(model_inputs, outputs)
    m.finish()
    return m, model_inputs


def i32(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int32)


F32 = T.TENSOR_FLOAT32


def test_reshape_minus_one_and_runtime_shape(device: nnrt.CpuDevice) -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    m, _ = build(Op.RESHAPE, [(F32, [2, 3, 4], None), (T.TENSOR_INT32, [2], i32(-1, 6))], [(F32, [4, 6])])
    (y,) = run(device, m, x)
    np.testing.assert_array_equal(y, x.reshape(4, 6))
    # The shape is a model input: the output's dimensions are only known at run time.
    m, _ = build(Op.RESHAPE, [(F32, [2, 3, 4], None), (T.TENSOR_INT32, [3], None)], [(F32, [0, 0, 0])])
    (y,) = run(device, m, x, i32(3, -1, 2))
    assert y.shape == (3, 4, 2)
    np.testing.assert_array_equal(y, x.reshape(3, 4, 2))
    y[...] = -1  # the result is the caller's own array, not a view of the input
    assert x[0, 0, 0] == 0


def test_reshape_bad_shape_rejected(device: nnrt.CpuDevice) -> None:
    m, _ = build(Op.RESHAPE, [(F32, [2, 3], None), (T.TENSOR_INT32, [2], i32(4, 2))], [(F32, [4, 2])])
    rejected(device, m, "elements")
    m, _ = build(Op.RESHAPE, [(F32, [2, 3], None), (T.TENSOR_INT32, [2], i32(-1, -1))], [(F32, [0, 0])])
    rejected(device, m, "more than one -1")


def test_concat_requantizes_to_output(device: nnrt.CpuDevice) -> None:
    a = np.array([[0, 10, 20]], dtype=np.uint8)  # scale 0.5, zp 0 -> 0, 5, 10
    b = np.array([[4, 6, 8]], dtype=np.uint8)  # scale 1.0, zp 4 -> 0, 2, 4
    q8 = T.TENSOR_QUANT8_ASYMM
    m, _ = build(Op.CONCATENATION, [(q8, [1, 3], None), (q8, [1, 3], None), (T.INT32, None, 0)], [(q8, [2, 3])],
                 quant={0: (0.5, 0), 1: (1.0, 4), 3: (0.25, 10)})
    (y,) = run(device, m, a, b)
    np.testing.assert_array_equal(y, [[10, 30, 50], [10, 18, 26]])


def test_concat_bad_signatures_rejected(device: nnrt.CpuDevice) -> None:
    dims5 = [1, 1, 1, 1, 2]
    m, _ = build(Op.CONCATENATION, [(F32, dims5, None), (F32, dims5, None), (T.INT32, None, 4)],
                 [(F32, [1, 1, 1, 1, 4])])
    rejected(device, m, "ranks up to 4")
    m, _ = build(Op.CONCATENATION, [(F32, [2, 2], None), (F32, [3, 3], None), (T.INT32, None, 0)], [(F32, [5, 2])])
    rejected(device, m, "dimension 1")
    m, _ = build(Op.CONCATENATION, [(F32, [2, 2], None), (T.TENSOR_FLOAT16, [2, 2], None), (T.INT32, None, 0)],
                 [(F32, [4, 2])])
    rejected(device, m, "type")


def test_pad_quant_uses_zero_point(device: nnrt.CpuDevice) -> None:
    q8 = T.TENSOR_QUANT8_ASYMM_SIGNED
    m, _ = build(Op.PAD, [(q8, [1, 2], None), (T.TENSOR_INT32, [2, 2], i32(0, 0, 1, 1))], [(q8, [1, 4])],
                 quant={0: (0.5, -3), 2: (0.5, -3)})
    (y,) = run(device, m, np.array([[5, 7]], dtype=np.int8))
    np.testing.assert_array_equal(y, [[-3, 5, 7, -3]])


def test_strided_slice_shrink_must_select_one(device: nnrt.CpuDevice) -> None:
    params: list[Arg] = [(T.TENSOR_INT32, [2], i32(0, 0)), (T.TENSOR_INT32, [2], i32(2, 3)),
                         (T.TENSOR_INT32, [2], i32(1, 1)), (T.INT32, None, 0), (T.INT32, None, 0), (T.INT32, None, 1)]
    m, _ = build(Op.STRIDED_SLICE, [(F32, [2, 3], None), *params], [(F32, [3])])
    rejected(device, m, "shrink")


def test_strided_slice_negative_stride(device: nnrt.CpuDevice) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    params: list[Arg] = [(T.TENSOR_INT32, [2], i32(-1, 3)), (T.TENSOR_INT32, [2], i32(-4, -5)),
                         (T.TENSOR_INT32, [2], i32(-1, -2)), (T.INT32, None, 0), (T.INT32, None, 0), (T.INT32, None, 0)]
    m, _ = build(Op.STRIDED_SLICE, [(F32, [3, 4], None), *params], [(F32, [0, 0])])
    (y,) = run(device, m, x)
    np.testing.assert_array_equal(y, x[::-1, ::-2])


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=4),
                  elements=st.floats(-100, 100, width=32)), st.randoms(use_true_random=False))
def test_transpose_matches_numpy(device: nnrt.CpuDevice, x: np.ndarray, rnd: object) -> None:
    perm = list(range(x.ndim))
    rnd.shuffle(perm)  # type: ignore[attr-defined]
    m, _ = build(Op.TRANSPOSE, [(F32, list(x.shape), None), (T.TENSOR_INT32, [x.ndim], None)], [(F32, [0] * x.ndim)])
    (y,) = run(device, m, x, i32(*perm))
    np.testing.assert_array_equal(y, x.transpose(perm))


@pytest.mark.parametrize(("shape", "perm", "dtype"), [
    ((1, 3, 48, 192), (0, 2, 3, 1), np.float32), ((2, 2, 40, 60), (0, 2, 3, 1), np.float32),
    ((1, 4, 32, 33), (0, 2, 3, 1), np.uint8), ((3, 5000), (1, 0), np.float32), ((1, 3, 64, 64), (2, 0, 3, 1), np.float32),
    ((1, 5, 40, 40), (0, 2, 3, 1), np.float32), ((1, 3, 8, 8), (0, 2, 3, 1), np.float32),
])  # fmt: skip
def test_transpose_to_a_short_last_axis(device: nnrt.CpuDevice, shape: tuple[int, ...], perm: tuple[int, ...],
                                        dtype: type[np.generic]) -> None:
    """NCHW -> NHWC of an image (one strided copy per channel from 4096 values, 2-4 channels):
    numpy's transpose, values and dtype, special values included."""
    x = (np.random.default_rng(1).standard_normal(shape) * 50).astype(dtype)
    if dtype is np.float32:
        x.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf]
    t = F32 if dtype is np.float32 else T.TENSOR_QUANT8_ASYMM
    q = (0.5, 3) if dtype is np.uint8 else (0.0, 0)
    m = Model()
    xi = m.add_operand(t, list(shape), *q)
    pi = m.add_operand(T.TENSOR_INT32, [len(perm)])
    m.set_operand_value(pi, np.array(perm, np.int32))
    yi = m.add_operand(t, [shape[i] for i in perm], *q)
    m.add_operation(Op.TRANSPOSE, [xi, pi], [yi])
    m.identify_inputs_and_outputs([xi], [yi])
    m.finish()
    (y,) = run(device, m, x)
    want = x.transpose(perm)
    assert y.dtype == want.dtype and y.flags.c_contiguous
    np.testing.assert_array_equal(y.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


def test_depth_space_round_trip_nchw(device: nnrt.CpuDevice) -> None:
    x = np.arange(2 * 8 * 2 * 3, dtype=np.float32).reshape(2, 8, 2, 3)  # NCHW, C = 8
    m, _ = build(Op.DEPTH_TO_SPACE, [(F32, [2, 8, 2, 3], None), (T.INT32, None, 2), (T.BOOL, None, True)],
                 [(F32, [2, 2, 4, 6])])
    (y,) = run(device, m, x)
    m2, _ = build(Op.SPACE_TO_DEPTH, [(F32, [2, 2, 4, 6], None), (T.INT32, None, 2), (T.BOOL, None, True)],
                  [(F32, [2, 8, 2, 3])])
    (z,) = run(device, m2, y)
    np.testing.assert_array_equal(z, x)


def test_space_batch_round_trip(device: nnrt.CpuDevice) -> None:
    x = np.arange(1 * 4 * 6 * 2, dtype=np.float32).reshape(1, 4, 6, 2)
    m, _ = build(Op.SPACE_TO_BATCH_ND, [(F32, [1, 4, 6, 2], None), (T.TENSOR_INT32, [2], i32(2, 3)),
                                        (T.TENSOR_INT32, [2, 2], i32(0, 0, 0, 0))], [(F32, [6, 2, 2, 2])])
    (y,) = run(device, m, x)
    m2, _ = build(Op.BATCH_TO_SPACE_ND, [(F32, [6, 2, 2, 2], None), (T.TENSOR_INT32, [2], i32(2, 3))],
                  [(F32, [1, 4, 6, 2])])
    (z,) = run(device, m2, y)
    np.testing.assert_array_equal(z, x)


def test_resize_nearest_integer_upscale(device: nnrt.CpuDevice) -> None:
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3, 1)
    m, _ = build(Op.RESIZE_NEAREST_NEIGHBOR, [(F32, [1, 2, 3, 1], None), (T.INT32, None, 6), (T.INT32, None, 4),
                                              (T.BOOL, None, False)], [(F32, [1, 4, 6, 1])])
    (y,) = run(device, m, x)
    np.testing.assert_array_equal(y, x.repeat(2, axis=1).repeat(2, axis=2))


@pytest.mark.parametrize(("dims", "out_hw"), [
    ([1, 4, 5, 3], (8, 10)),  # 2x: one broadcasting copy
    ([2, 3, 2, 4], (9, 8)),  # batch 2, 3x by 4x
    ([1, 4, 4, 2], (4, 4)),  # 1x: a fresh copy
    ([1, 4, 6, 2], (6, 9)),  # 1.5x: the gathers
    ([1, 6, 4, 1], (3, 8)),  # down by 2 on H, up by 2 on W: the gathers
])
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True)])  # align_corners, half_pixel
@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize("t", [F32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_FLOAT16])
def test_resize_nearest_matches_the_gathers(device: nnrt.CpuDevice, dims: list[int], out_hw: tuple[int, int],
                                            flags: tuple[bool, bool], nchw: bool, t: T) -> None:
    from nnrt.ops.resize import _nearest_axis

    x = np.random.default_rng(5).integers(0, 255, dims).astype(t.dtype)
    xin = x.transpose(0, 3, 1, 2).copy() if nchw else x
    oh, ow = out_hw
    out_dims = [dims[0], dims[3], oh, ow] if nchw else [dims[0], oh, ow, dims[3]]
    args: list[Arg] = [(t, list(xin.shape), None), (T.INT32, None, ow), (T.INT32, None, oh),
                       (T.BOOL, None, nchw), (T.BOOL, None, flags[0]), (T.BOOL, None, flags[1])]
    quant = {0: (0.5, 3), 6: (0.5, 3)} if t.is_quantized else {}
    m, _ = build(Op.RESIZE_NEAREST_NEIGHBOR, args, [(t, out_dims)], quant=quant)
    (y,) = run(device, m, xin)
    want = x[:, _nearest_axis(dims[1], oh, *flags)][:, :, _nearest_axis(dims[2], ow, *flags)]
    assert y.dtype == t.dtype and y.flags.c_contiguous and y.flags.writeable
    np.testing.assert_array_equal(y, want.transpose(0, 3, 1, 2) if nchw else want)
    assert not np.shares_memory(y, xin)


@pytest.mark.parametrize(("shape", "perm"), [
    ([1, 3, 40, 50], [0, 2, 3, 1]),  # NCHW -> NHWC of an image: one plane per channel
    ([2, 4, 32, 40], [0, 2, 3, 1]),  # batch 2, 4 channels
    ([1, 5, 40, 40], [0, 2, 3, 1]),  # 5 channels: numpy's copy
    ([3, 64, 70], [1, 2, 0]),  # rank 3
    ([2, 70, 64], [0, 2, 1]),  # the other axes out of order: numpy's copy
    ([1, 3, 4, 5], [0, 2, 3, 1]),  # small: numpy's copy
])
@pytest.mark.parametrize("t", [F32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_FLOAT16])
def test_transpose_of_large_tensors_matches_numpy(device: nnrt.CpuDevice, shape: list[int], perm: list[int], t: T) -> None:
    x = np.random.default_rng(6).integers(0, 200, shape).astype(t.dtype)
    out_dims = [shape[p] for p in perm]
    quant = {0: (0.5, 3), 2: (0.5, 3)} if t.is_quantized else {}
    m, _ = build(Op.TRANSPOSE, [(t, shape, None), (T.TENSOR_INT32, [len(perm)], i32(*perm))], [(t, out_dims)],
                 quant=quant)
    (y,) = run(device, m, x)
    assert y.dtype == t.dtype and y.flags.c_contiguous and not np.shares_memory(y, x)
    np.testing.assert_array_equal(y, x.transpose(perm))


@pytest.mark.parametrize(("a_dims", "b_dims", "axis"), [
    ([1, 5, 6, 4], [1, 5, 6, 3], 3), ([2, 5, 6, 4], [2, 5, 2, 4], 2), ([2, 3, 4], [1, 3, 4], 0), ([2, 3], [2, 5], -1),
])
@pytest.mark.parametrize("jit", [True, False])
def test_two_input_concatenation_in_both_modes(device: nnrt.CpuDevice, a_dims: list[int], b_dims: list[int], axis: int,
                                              jit: bool) -> None:
    """Two float32 inputs: the compiled one-pass copy (``_copies.concat2_rows_f32``) with numba,
    numpy's concatenate without: the same values, NaN and signed zeros included."""
    from nnrt.ops import _jit

    rng = np.random.default_rng(8)
    a, b = rng.standard_normal(a_dims).astype(np.float32), rng.standard_normal(b_dims).astype(np.float32)
    a.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    out_dims = list(a_dims)
    out_dims[axis] += b_dims[axis]
    m, _ = build(Op.CONCATENATION, [(F32, a_dims, None), (F32, b_dims, None), (T.INT32, None, axis)], [(F32, out_dims)])
    with _jit.forced(jit):
        (y,) = run(device, m, a, b)
    want = np.concatenate([a, b], axis=axis)
    assert y.flags.c_contiguous and y.shape == want.shape
    np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))


def test_resize_bilinear_by_scale_align_corners(device: nnrt.CpuDevice) -> None:
    x = np.array([0, 3], dtype=np.float32).reshape(1, 1, 2, 1)
    args: list[Arg] = [(F32, [1, 1, 2, 1], None), (T.FLOAT32, None, 2.0), (T.FLOAT32, None, 1.0),
                       (T.BOOL, None, False), (T.BOOL, None, True), (T.BOOL, None, False)]
    m, _ = build(Op.RESIZE_BILINEAR, args, [(F32, [1, 1, 4, 1])])
    (y,) = run(device, m, x)
    np.testing.assert_allclose(y.ravel(), [0, 1, 2, 3])


def test_resize_rejects_both_corner_flags(device: nnrt.CpuDevice) -> None:
    args: list[Arg] = [(F32, [1, 2, 2, 1], None), (T.INT32, None, 4), (T.INT32, None, 4),
                       (T.BOOL, None, False), (T.BOOL, None, True), (T.BOOL, None, True)]
    m, _ = build(Op.RESIZE_BILINEAR, args, [(F32, [1, 4, 4, 1])])
    rejected(device, m, "cannot both be true")


def test_split_and_gather(device: nnrt.CpuDevice) -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    ti = T.TENSOR_INT32
    m, _ = build(Op.SPLIT, [(ti, [3, 4], None), (T.INT32, None, -1), (T.INT32, None, 2)], [(ti, [3, 2]), (ti, [3, 2])])
    a, b = run(device, m, x)
    np.testing.assert_array_equal(a, x[:, :2])
    np.testing.assert_array_equal(b, x[:, 2:])
    m, _ = build(Op.GATHER, [(ti, [3, 4], None), (T.INT32, None, 1), (ti, [2, 2], i32(3, 0, 1, 1).reshape(2, 2))],
                 [(ti, [3, 2, 2])])
    (g,) = run(device, m, x)
    np.testing.assert_array_equal(g, np.take(x, [[3, 0], [1, 1]], axis=1))
    m, _ = build(Op.SPLIT, [(ti, [3, 4], None), (T.INT32, None, 0), (T.INT32, None, 2)], [(ti, [0, 4]), (ti, [0, 4])])
    rejected(device, m, "cannot be split")


@pytest.mark.parametrize("dims", [[2, 1, 128], [0, 0, 0]])  # known at preparation, or per run
@pytest.mark.parametrize(("axis", "indices"), [(0, i32(1)), (0, i32(0, 1)), (-1, i32(3, 4, 5)),
                                               (1, i32(2, 0)), (2, i32(4, 4)), (1, i32(0, 1, 2))])
def test_gather_constant_indices_as_take(device: nnrt.CpuDevice, dims: list[int], axis: int,
                                         indices: np.ndarray) -> None:
    """GATHER with constant axis and indices (a slice for one ascending run, else ``np.take``,
    planned once per input shape) gives ``np.take``'s values, NaN included, on every shape."""
    for shape in ([2, 3, 6], [2, 3, 6], [3, 5, 7]) if 0 in dims else ([2, 1, 128],):
        if 0 not in dims and max(indices.flat) >= shape[axis]:
            continue
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        x.flat[::7] = np.nan
        out_dims = [0] * (len(shape) - 1 + indices.ndim)
        m, _ = build(Op.GATHER, [(F32, dims, None), (T.INT32, None, axis), (T.TENSOR_INT32, list(indices.shape), indices)],
                     [(F32, out_dims)])
        (g,) = run(device, m, x)
        want = np.take(x, indices, axis=axis)
        assert g.shape == want.shape and g.flags.owndata
        np.testing.assert_array_equal(g, want)


def test_gather_constant_indices_out_of_range(device: nnrt.CpuDevice) -> None:
    m, _ = build(Op.GATHER, [(F32, [2, 3], None), (T.INT32, None, 1), (T.TENSOR_INT32, [1], i32(3))], [(F32, [2, 1])])
    rejected(device, m, "indices must be in")
    m, _ = build(Op.GATHER, [(F32, [0, 0], None), (T.INT32, None, 1), (T.TENSOR_INT32, [1], i32(3))], [(F32, [0, 0])])
    prepared = device.prepare_model_sync(m)
    with pytest.raises(nnrt.NnrtError, match="indices must be in"):
        prepared.execute_sync([np.zeros((2, 3), np.float32)])
    np.testing.assert_array_equal(prepared.execute_sync([np.ones((1, 4), np.float32)]).outputs[0], [[1]])


@pytest.mark.parametrize(("shape", "axis", "num"), [([1, 512], 1, 4), ([2, 6, 3], 0, 2), ([2, 6, 3], -2, 3),
                                                    ([1, 9], 1, 1), ([4, 1], 0, 4)])
def test_split_constant_parameters_as_numpy(device: nnrt.CpuDevice, shape: list[int], axis: int, num: int) -> None:
    """SPLIT with constant axis and count (slices planned once per input shape) gives
    ``np.split``'s parts as fresh arrays, with the input's shape known or only given at run."""
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    x.flat[::5] = np.nan
    for dims in (shape, [0] * len(shape)):
        outs = [(F32, [0] * len(shape))] * num
        m, _ = build(Op.SPLIT, [(F32, dims, None), (T.INT32, None, axis), (T.INT32, None, num)], outs)
        got = run(device, m, x)
        for g, want in zip(got, np.split(x, num, axis=axis), strict=True):
            assert g.flags.owndata and g.flags.c_contiguous
            np.testing.assert_array_equal(g, want)
    if num == 1:
        return
    m, _ = build(Op.SPLIT, [(F32, [0] * len(shape), None), (T.INT32, None, axis), (T.INT32, None, num)],
                 [(F32, [0] * len(shape))] * num)
    with pytest.raises(nnrt.NnrtError, match="cannot be split"):
        device.prepare_model_sync(m).execute_sync([np.zeros([d + 1 for d in shape], np.float32)])
