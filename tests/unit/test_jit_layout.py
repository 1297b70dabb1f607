"""The compiled float32 loops of the MediaPipe models' cheap-but-frequent operations against their
numpy twins: RESIZE_BILINEAR (``_jit_float.bilinear_f32``), PAD of the last axis
(``pad_last_f32``) and AVERAGE_POOL_2D (``average_pool_f32``).

Each case prepares the same model with the compiled kernels and with ``NNRT_JIT=0`` (the numpy
reference the CTS runs) and requires identical outputs, NaN and infinities included: the loops
do the numpy kernels' float32 operations in the same order. Geometries are edge shapes (one
row, one column, downscaling, NCHW, batches) and Hypothesis draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.ops import _jit, pooling, resize
from nnrt.ops._jit_float import average_pool_f32
from tests.unit.test_jit_float import POOL_GEOMETRIES, _count_compiled, _pool_model
from tests.unit.test_jit_float import _both_unary as _both

pytest.importorskip("numba")

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 1e38, -1e38, 1e-40], dtype=np.float32)


def _scalar(m: Model, t: T, value: Any) -> int:
    i = m.add_operand(t)
    m.set_operand_value(i, value)
    return i


def _with_specials(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1)
    k = min(flat.size, SPECIAL.size)
    flat[:k] = SPECIAL[:k]
    return x


# -- RESIZE_BILINEAR ----------------------------------------------------------------------------


def _resize_model(dims: list[int], size: tuple[Any, Any], flags: tuple[bool, ...], t: T = T.TENSOR_FLOAT32,
                  q: tuple[float, int] = (0.0, 0)) -> Model:
    m = Model()
    x = m.add_operand(t, dims, *q)
    scale = isinstance(size[0], float)
    st_ = T.FLOAT32 if scale else T.INT32
    ins = [x, _scalar(m, st_, size[0]), _scalar(m, st_, size[1]), *(_scalar(m, T.BOOL, f) for f in flags)]
    y = m.add_operand(t, [0, 0, 0, 0], *q)
    m.add_operation(Op.RESIZE_BILINEAR, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


RESIZE = {  # NHWC input, (out width, out height)
    "mediapipe-2x": ([1, 24, 24, 48], (48, 48)),
    "one-row": ([1, 1, 7, 3], (13, 1)),
    "one-column": ([1, 9, 1, 2], (1, 4)),
    "downscale": ([2, 10, 13, 5], (4, 3)),
    "to-one-pixel": ([1, 5, 6, 4], (1, 1)),
    "one-channel": ([1, 4, 4, 1], (9, 7)),
}


@pytest.mark.parametrize("name", sorted(RESIZE))
@pytest.mark.parametrize("flags", [(), (False,), (False, True, False), (False, False, True), (True, False, True),
                                   (True, True, False)])
def test_resize_bilinear_identical(device: nnrt.CpuDevice, name: str, flags: tuple[bool, ...]) -> None:
    dims, size = RESIZE[name]
    x = np.random.default_rng(len(name)).standard_normal(dims).astype(np.float32)
    nchw = bool(flags and flags[0])
    if nchw:
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        dims = list(x.shape)
    fast, ref = _both(device, _resize_model(dims, size, flags), _with_specials(x))
    assert fast.shape == ref.shape and fast.dtype == np.float32
    np.testing.assert_array_equal(fast, ref)


def test_resize_bilinear_by_scale_and_quantized(device: nnrt.CpuDevice) -> None:
    x = np.random.default_rng(1).standard_normal((1, 6, 5, 3)).astype(np.float32)
    fast, ref = _both(device, _resize_model([1, 6, 5, 3], (1.7, 2.5), (False, False, True)), x)
    assert fast.shape == (1, 15, 8, 3)
    np.testing.assert_array_equal(fast, ref)
    q = np.random.default_rng(2).integers(-128, 128, (1, 6, 5, 3)).astype(np.int8)
    m = _resize_model([1, 6, 5, 3], (11, 7), (False, False, True), T.TENSOR_QUANT8_ASYMM_SIGNED, (0.05, -3))
    fast, ref = _both(device, m, q)
    assert fast.dtype == np.int8
    np.testing.assert_array_equal(fast, ref)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2), h=st.integers(1, 9), w=st.integers(1, 9), c=st.integers(1, 20), oh=st.integers(1, 20),
       ow=st.integers(1, 20), corners=st.sampled_from([(False, False), (True, False), (False, True)]),
       seed=st.integers(0, 2**16))
def test_resize_bilinear_random_geometry(device: nnrt.CpuDevice, n: int, h: int, w: int, c: int, oh: int, ow: int,
                                         corners: tuple[bool, bool], seed: int) -> None:
    x = np.random.default_rng(seed).standard_normal((n, h, w, c)).astype(np.float32)
    fast, ref = _both(device, _resize_model([n, h, w, c], (ow, oh), (False, *corners)), x)
    np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize("op", [Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR])
@pytest.mark.parametrize("on", [True, False])
def test_resize_of_an_image_without_rows_or_columns_is_rejected(device: nnrt.CpuDevice, op: Op, on: bool) -> None:
    """A dynamic input with no rows or no columns (NHWC or NCHW) has no pixel to sample: INVALID_ARGUMENT
    naming the operation, not the compiled loop reading past the input (an output of garbage that looked
    valid) nor numpy's IndexError as GENERAL_FAILURE. An empty batch or channel axis still resizes."""
    for nchw in (False, True):
        m = _resize_model([0, 0, 0, 0], (4, 3), (nchw,))
        if op is Op.RESIZE_NEAREST_NEIGHBOR:
            m = Model()
            x = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 0])
            ins = [x, _scalar(m, T.INT32, 4), _scalar(m, T.INT32, 3), _scalar(m, T.BOOL, nchw)]
            y = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 0])
            m.add_operation(op, ins, [y])
            m.identify_inputs_and_outputs([x], [y])
            m.finish()
        with _jit.forced(on):
            prepared = device.prepare_model_sync(m)
        for shape in ([1, 0, 5, 3], [1, 5, 0, 3], [2, 0, 0, 1]):
            dims = [shape[0], shape[3], shape[1], shape[2]] if nchw else shape
            with pytest.raises(nnrt.InvalidArgumentError, match=f"{op.name}.*without rows or columns"):
                prepared.execute_sync([np.zeros(dims, np.float32)])
        empty = [0, 3, 5, 5] if nchw else [0, 5, 5, 3]
        assert prepared.execute_sync([np.zeros(empty, np.float32)]).outputs[0].size == 0


def test_resize_bilinear_takes_the_compiled_loop(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    def numpy_path(*args: Any) -> np.ndarray:
        raise AssertionError("the numpy bilinear ran")

    monkeypatch.setattr(resize, "_bilinear", numpy_path)
    x = np.arange(2 * 3 * 2, dtype=np.float32).reshape(1, 2, 3, 2)
    with _jit.forced(True):
        out = device.prepare_model_sync(_resize_model([1, 2, 3, 2], (6, 4), ())).execute_sync([x]).outputs[0]
    assert out.shape == (1, 4, 6, 2) and out[0, 0, 0, 0] == 0 and out[0, -1, -1, -1] == x[0, -1, -1, -1]


# -- PAD of the last axis -----------------------------------------------------------------------


def _pad_model(dims: list[int], pads: list[tuple[int, int]], value: float | None = None) -> Model:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, dims)
    p = m.add_operand(T.TENSOR_INT32, [len(dims), 2])
    m.set_operand_value(p, np.array(pads, dtype=np.int32).reshape(len(dims), 2))
    ins = [x, p] + ([_scalar(m, T.FLOAT32, value)] if value is not None else [])
    y = m.add_operand(T.TENSOR_FLOAT32, [0] * len(dims))
    m.add_operation(Op.PAD_V2 if value is not None else Op.PAD, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


PADS = {  # input dims, paddings
    "blazeface-channels": ([1, 64, 64, 24], [(0, 0), (0, 0), (0, 0), (0, 4)]),
    "both-sides": ([2, 3, 5, 7], [(0, 0), (0, 0), (0, 0), (3, 2)]),
    "before-only": ([1, 1, 1, 5], [(0, 0), (0, 0), (0, 0), (2, 0)]),
    "one-channel": ([4, 1], [(0, 0), (0, 9)]),
    "rank-1": ([6], [(1, 2)]),
    "nothing": ([2, 3, 4], [(0, 0), (0, 0), (0, 0)]),
    "spatial (numpy path)": ([1, 4, 4, 3], [(0, 0), (1, 1), (1, 1), (0, 0)]),
}


@pytest.mark.parametrize("name", sorted(PADS))
@pytest.mark.parametrize("value", [None, 0.0, -1.5, float("-inf"), float("nan")])
def test_pad_last_axis_identical(device: nnrt.CpuDevice, name: str, value: float | None) -> None:
    dims, pads = PADS[name]
    x = _with_specials(np.random.default_rng(len(name)).standard_normal(dims).astype(np.float32))
    fast, ref = _both(device, _pad_model(dims, pads, value), x)
    assert fast.shape == ref.shape == tuple(d + lo + hi for d, (lo, hi) in zip(dims, pads, strict=True))
    np.testing.assert_array_equal(fast, ref)
    if value is not None and not np.isnan(value) and pads[-1][1]:
        assert (fast[..., -1] == np.float32(value)).all()


@settings(max_examples=40, deadline=None)
@given(dims=st.lists(st.integers(1, 6), min_size=1, max_size=4), lo=st.integers(0, 5), hi=st.integers(0, 5),
       seed=st.integers(0, 2**16))
def test_pad_last_axis_random(device: nnrt.CpuDevice, dims: list[int], lo: int, hi: int, seed: int) -> None:
    x = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    pads = [(0, 0)] * (len(dims) - 1) + [(lo, hi)]
    fast, ref = _both(device, _pad_model(dims, pads), x)
    np.testing.assert_array_equal(fast, ref)


# -- AVERAGE_POOL_2D ----------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "pads", "stride", "k", "nchw"), [
    *POOL_GEOMETRIES, ((1, 56, 56, 64), (0, 0, 0, 0), (2, 2), (2, 2), False), ((3, 5, 1, 7), (1, 1, 0, 0), (1, 1), (3, 1), True),
])  # fmt: skip
@pytest.mark.parametrize("act", [0, 1, 3])
def test_average_pool_identical(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...],
                                pads: tuple[int, int, int, int], stride: tuple[int, int], k: tuple[int, int], nchw: bool,
                                act: int) -> None:
    """Padding on some sides, windows over padding only, strides above the window, NCHW, NaN
    and infinities: numpy's additions in numpy's order, so the same values. A global window
    sums in float64 instead (``_jit_conv.BlockMean``, what a 1x1 CONV_2D fused into it adds):
    numpy's float32 BLAS product within an ulp or two, NaN and inf in the same places."""
    x = _with_specials((np.random.default_rng(sum(shape)).standard_normal(shape) * 4).astype(np.float32))
    x.reshape(-1)[-2] = np.nan
    dims = [shape[0], shape[3], shape[1], shape[2]] if nchw else list(shape)
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    calls = _count_compiled(monkeypatch, pooling, average_pool_f32)
    fast, ref = _both(device, _pool_model(dims, [*pads, *stride, *k, act, nchw], Op.AVERAGE_POOL_2D), xin)
    global_window = k[0] >= shape[1] and k[1] >= shape[2] and not any(pads)
    assert bool(calls) is not global_window
    assert fast.shape == ref.shape
    if global_window:
        np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref))
        np.testing.assert_allclose(fast, ref, rtol=3e-7, atol=1e-7)
    else:
        np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize("op", [Op.MAX_POOL_2D, Op.AVERAGE_POOL_2D, Op.DEPTHWISE_CONV_2D, Op.CONV_2D])
@pytest.mark.parametrize("on", [True, False])
def test_a_window_padding_too_large_for_any_result_is_resource_exhausted(device: nnrt.CpuDevice, op: Op,
                                                                        on: bool) -> None:
    """Explicit padding of 2**30 on a dynamic input asks for a 2**31 x 2**31 result: RESOURCE_EXHAUSTED_PERSISTENT
    naming the operation before allocating (as PAD and RESIZE do), not numpy's "array is too big"
    ValueError as GENERAL_FAILURE (the compiled pools, depthwise and CONV_2D) nor a MemoryError called transient."""
    big = 2**30
    if op in (Op.DEPTHWISE_CONV_2D, Op.CONV_2D):
        m = Model()
        x = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 2])
        w, b = m.add_operand(T.TENSOR_FLOAT32, [1, 3, 3, 2]), m.add_operand(T.TENSOR_FLOAT32, [1 if op is Op.CONV_2D else 2])
        m.set_operand_value(w, np.ones((1, 3, 3, 2), np.float32))
        m.set_operand_value(b, np.zeros(1 if op is Op.CONV_2D else 2, np.float32))
        params = (1, 0) if op is Op.CONV_2D else (1, 1, 0)  # strides, [depth multiplier], activation
        ins = [x, w, b, *(_scalar(m, T.INT32, v) for v in (big, big, big, big, 1, *params))]
        y = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 0])
        m.add_operation(op, ins, [y])
        m.identify_inputs_and_outputs([x], [y])
        m.finish()
    else:
        m = _pool_model([0, 0, 0, 0], [big, big, big, big, 1, 1, 2, 2, 0], op)
    with _jit.forced(on):
        prepared = device.prepare_model_sync(m)
    with pytest.raises(nnrt.ResourceExhaustedError, match=f"{op.name}.*a result of shape") as err:
        prepared.execute_sync([np.ones((1, 5, 5, 2), np.float32)])
    assert err.value.status is nnrt.ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
