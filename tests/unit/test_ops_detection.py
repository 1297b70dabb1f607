"""Detection, ROI and DENSIFY kernels through the public API: ROI_ALIGN against a sample-by-sample
numpy formula (Hypothesis), small hand-checked NMS / pooling / bbox / densify cases, data-dependent
zero-sized outputs feeding ROI_ALIGN, and bad signatures rejected with INVALID_ARGUMENT."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import ErrorStatus, Model
from nnrt import OperandType as T
from nnrt import OperationType as Op

Scalar = int | float | bool


def _scalar(m: Model, v: Scalar, t: T | None = None) -> int:
    kind = t or (T.BOOL if isinstance(v, bool) else T.INT32 if isinstance(v, int) else T.FLOAT32)
    i = m.add_operand(kind)
    m.set_operand_value(i, v)
    return i


def _const(m: Model, arr: np.ndarray, t: T, scale: float = 0.0, zp: int = 0) -> int:
    i = m.add_operand(t, list(arr.shape), scale, zp)
    m.set_operand_value(i, arr)
    return i


def roi_align_model(x_dims: list[int], n_rois: int, params: list[Scalar], *, t: T = T.TENSOR_FLOAT32,
                    x_scale: float = 0.0) -> Model:  # fmt: skip
    m = Model()
    x = m.add_operand(t, x_dims, x_scale)
    rois = m.add_operand(T.TENSOR_FLOAT32, [n_rois, 4])
    bidx = m.add_operand(T.TENSOR_INT32, [n_rois])
    scalars = [_scalar(m, v) for v in params]
    out = m.add_operand(t, [0, 0, 0, 0], x_scale)
    m.add_operation(Op.ROI_ALIGN, [x, rois, bidx, *scalars], [out])
    m.identify_inputs_and_outputs([x, rois, bidx], [out])
    m.finish()
    return m


def ref_roi_align(x: np.ndarray, rois: np.ndarray, bidx: np.ndarray, oh: int, ow: int, stride: float, ratio: int) -> np.ndarray:
    """Sample by sample bilinear averaging (NHWC, same stride and sampling ratio on both axes)."""
    _, h, w, c = x.shape
    out = np.zeros((rois.shape[0], oh, ow, c))
    for k, (x1, y1, x2, y2) in enumerate(rois.astype(np.float64) / stride):
        bw, bh = max(x2 - x1, 1.0) / ow, max(y2 - y1, 1.0) / oh
        for i in range(oh):
            for j in range(ow):
                acc = np.zeros(c)
                for si in range(ratio):
                    for sj in range(ratio):
                        py = y1 + i * bh + (si + 0.5) * bh / ratio
                        px = x1 + j * bw + (sj + 0.5) * bw / ratio
                        r0, c0 = min(int(py), h - 1), min(int(px), w - 1)
                        r1, c1 = min(r0 + 1, h - 1), min(c0 + 1, w - 1)
                        fy = py - r0 if r0 < h - 1 else 0.0
                        fx = px - c0 if c0 < w - 1 else 0.0
                        f = x[bidx[k]].astype(np.float64)
                        acc += (1 - fy) * ((1 - fx) * f[r0, c0] + fx * f[r0, c1]) + fy * ((1 - fx) * f[r1, c0] + fx * f[r1, c1])
                out[k, i, j] = acc / (ratio * ratio)
    return out


@settings(max_examples=30, deadline=None)
@given(
    hw=st.tuples(st.integers(2, 6), st.integers(2, 6)), out=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    ratio=st.integers(1, 3), n_rois=st.integers(1, 3), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_roi_align_matches_numpy(
    device: nnrt.CpuDevice, hw: tuple[int, int], out: tuple[int, int], ratio: int, n_rois: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    h, w = hw
    x = rng.standard_normal((2, h, w, 3)).astype(np.float32)
    stride = 2.0
    # Corners on a quarter grid so sample positions are exact in float32.
    a = rng.integers(0, 4 * w, size=(n_rois, 2)) / 4.0 * stride
    b = rng.integers(0, 4 * h, size=(n_rois, 2)) / 4.0 * stride
    rois = np.stack([a.min(1), b.min(1), a.max(1), b.max(1)], axis=1).astype(np.float32)
    bidx = rng.integers(0, 2, size=n_rois).astype(np.int32)
    m = roi_align_model([2, h, w, 3], n_rois, [out[0], out[1], stride, stride, ratio, ratio, False])
    got = device.prepare_model_sync(m).execute_sync([x, rois, bidx]).outputs[0]
    want = ref_roi_align(x, rois, bidx, out[0], out[1], stride, ratio)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_roi_pooling_nchw(device: nnrt.CpuDevice) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 1, 4, 4])
    rois = _const(m, np.array([[0, 0, 6, 6], [2, 2, 6, 6]], np.float32), T.TENSOR_FLOAT32)
    bidx = _const(m, np.array([0, 0], np.int32), T.TENSOR_INT32)
    scalars = [_scalar(m, v) for v in (2, 2, 2.0, 2.0, True)]
    out = m.add_operand(T.TENSOR_FLOAT32, [2, 1, 2, 2])
    m.add_operation(Op.ROI_POOLING, [x, rois, bidx, *scalars], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    data = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    got = device.prepare_model_sync(m).execute_sync([data]).outputs[0]
    # Box 0 covers rows/cols 0..3 in 2x2 bins; box 1 covers 1..3 (bins [1, 3) and [2, 4)).
    np.testing.assert_array_equal(got[0, 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(got[1, 0], [[10, 11], [14, 15]])


def nms_model(kind: int, score_thr: float, max_det: int, iou_thr: float, n: int, n_cls: int) -> Model:
    m = Model()
    scores = m.add_operand(T.TENSOR_FLOAT32, [n, n_cls])
    rois = m.add_operand(T.TENSOR_FLOAT32, [n, 4 * n_cls])
    batches = m.add_operand(T.TENSOR_INT32, [n])
    scalars = [_scalar(m, v) for v in (score_thr, max_det, kind, iou_thr, 0.5, 0.1)]
    kinds = ((T.TENSOR_FLOAT32, 1), (T.TENSOR_FLOAT32, 2), (T.TENSOR_INT32, 1), (T.TENSOR_INT32, 1))
    outs = [m.add_operand(t, [0] * r) for t, r in kinds]
    m.add_operation(Op.BOX_WITH_NMS_LIMIT, [scores, rois, batches, *scalars], outs)
    m.identify_inputs_and_outputs([scores, rois, batches], outs)
    m.finish()
    return m


def test_box_with_nms_limit_hard(device: nnrt.CpuDevice) -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], np.float32)
    rois = np.tile(boxes, (1, 2))  # same box for both classes
    scores = np.array([[0.0, 0.9], [0.0, 0.8], [0.0, 0.7]], np.float32)
    outs = device.prepare_model_sync(nms_model(0, 0.1, -1, 0.5, 3, 2)).execute_sync(
        [scores, rois, np.zeros(3, np.int32)]
    ).outputs
    np.testing.assert_allclose(outs[0], [0.9, 0.7])  # box 1 overlaps box 0 (IoU 0.68) and is dropped
    np.testing.assert_array_equal(outs[1], boxes[[0, 2]])
    assert outs[2].tolist() == [1, 1] and outs[3].tolist() == [0, 0]


def test_box_with_nms_limit_linear_rescales(device: nnrt.CpuDevice) -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 5]], np.float32)
    scores = np.array([[0.0, 0.9], [0.0, 0.8]], np.float32)
    outs = device.prepare_model_sync(nms_model(1, 0.0, -1, 0.3, 2, 2)).execute_sync(
        [scores, np.tile(boxes, (1, 2)), np.zeros(2, np.int32)]
    ).outputs
    np.testing.assert_allclose(outs[0], [0.9, 0.8 * 0.5], rtol=1e-6)  # IoU 0.5 >= 0.3: score * (1 - IoU)


def test_zero_sized_nms_feeds_roi_align(device: nnrt.CpuDevice) -> None:
    m = Model()
    scores = _const(m, np.array([[0.9, 0.1]], np.float32), T.TENSOR_FLOAT32)
    rois = _const(m, np.array([[1, 1, 10, 10, 0, 0, 10, 10]], np.float32), T.TENSOR_FLOAT32)
    batches = _const(m, np.array([0], np.int32), T.TENSOR_INT32)
    scalars = [_scalar(m, v) for v in (0.3, -1, 0, 0.4, 1.0, 0.3)]
    s_out = m.add_operand(T.TENSOR_FLOAT32, [0])
    r_out = m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    c_out = m.add_operand(T.TENSOR_INT32, [0])
    b_out = m.add_operand(T.TENSOR_INT32, [0])
    m.add_operation(Op.BOX_WITH_NMS_LIMIT, [scores, rois, batches, *scalars], [s_out, r_out, c_out, b_out])
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 1, 1, 1])
    align = [_scalar(m, v) for v in (2, 2, 2.0, 2.0, 4, 4, False)]
    fmap = m.add_operand(T.TENSOR_FLOAT32, [0, 2, 2, 1])
    m.add_operation(Op.ROI_ALIGN, [x, r_out, b_out, *align], [fmap])
    m.identify_inputs_and_outputs([x], [s_out, c_out, fmap])
    m.finish()
    outs = device.prepare_model_sync(m).execute_sync([np.zeros((1, 1, 1, 1), np.float32)]).outputs
    assert [o.shape for o in outs] == [(0,), (0,), (0, 2, 2, 1)]


def test_axis_aligned_bbox_transform_quant(device: nnrt.CpuDevice) -> None:
    m = Model()
    rois = m.add_operand(T.TENSOR_QUANT16_ASYMM, [1, 4], 0.125, 0)
    deltas = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 8], 0.05, 128)
    bidx = _const(m, np.array([0], np.int32), T.TENSOR_INT32)
    info = _const(m, np.array([[80, 80]], np.uint16), T.TENSOR_QUANT16_ASYMM, 0.125, 0)
    out = m.add_operand(T.TENSOR_QUANT16_ASYMM, [1, 8], 0.125, 0)
    m.add_operation(Op.AXIS_ALIGNED_BBOX_TRANSFORM, [rois, deltas, bidx, info], [out])
    m.identify_inputs_and_outputs([rois, deltas], [out])
    m.finish()
    box = np.array([[16, 16, 48, 48]], np.uint16)  # (2, 2, 6, 6) in real units
    d = np.array([[128, 128, 128, 128, 148, 128, 128, 128]], np.uint8)  # class 1: dx = 1 box width
    got = device.prepare_model_sync(m).execute_sync([box, d]).outputs[0]
    assert got.dtype == np.uint16
    assert got[0, :4].tolist() == [16, 16, 48, 48]
    assert got[0, 4:].tolist() == [48, 16, 80, 48]  # shifted by 4 real units, clipped at image width 10


def test_densify_csr(device: nnrt.CpuDevice) -> None:
    m = Model()
    values = m.add_operand(T.TENSOR_FLOAT32, [3])
    ins = [values]
    for arr in ([0, 1], [], [0, 1], [3, 4]):
        a = np.array(arr, np.int32)
        i = m.add_operand(T.TENSOR_INT32, [len(arr)])
        m.set_operand_value(i, a if len(arr) else None)  # an empty block map is omitted
        ins.append(i)
    for arr in ([], [], [0, 2, 3, 3], [1, 3, 0]):
        i = m.add_operand(T.TENSOR_INT32, [max(len(arr), 1)])
        m.set_operand_value(i, np.array(arr, np.int32) if arr else None)
        ins.append(i)
    out = m.add_operand(T.TENSOR_FLOAT32, [3, 4])
    m.add_operation(Op.DENSIFY, ins, [out])
    m.identify_inputs_and_outputs([values], [out])
    m.finish()
    got = device.prepare_model_sync(m).execute_sync([np.array([1, 2, 3], np.float32)]).outputs[0]
    want = np.zeros((3, 4), np.float32)
    want[0, 1], want[0, 3], want[1, 0] = 1, 2, 3
    np.testing.assert_array_equal(got, want)


def test_heatmap_max_keypoint_peak(device: nnrt.CpuDevice) -> None:
    m = Model()
    hm = m.add_operand(T.TENSOR_FLOAT32, [1, 4, 4, 1])
    boxes = _const(m, np.array([[0, 0, 8, 8]], np.float32), T.TENSOR_FLOAT32)
    layout = _scalar(m, False)
    score = m.add_operand(T.TENSOR_FLOAT32, [1, 1])
    kp = m.add_operand(T.TENSOR_FLOAT32, [1, 1, 2])
    m.add_operation(Op.HEATMAP_MAX_KEYPOINT, [hm, boxes, layout], [score, kp])
    m.identify_inputs_and_outputs([hm], [score, kp])
    m.finish()
    yy, xx = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    data = (5.0 - (yy - 1) ** 2 - (xx - 2) ** 2).astype(np.float32).reshape(1, 4, 4, 1)  # exact quadratic, peak (1, 2)
    outs = device.prepare_model_sync(m).execute_sync([data]).outputs
    np.testing.assert_allclose(outs[0], [[5.0]], rtol=1e-6)
    np.testing.assert_allclose(outs[1], [[[(2 + 0.5) / 4 * 8, (1 + 0.5) / 4 * 8]]], rtol=1e-6)


# -- bad signatures ------------------------------------------------------------------------------


def rejected(device: nnrt.CpuDevice, m: Model, match: str) -> None:
    with pytest.raises(nnrt.NnrtError, match=match) as info:
        device.prepare_model_sync(m)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def test_roi_align_rejects_float_rois_for_quant_input(device: nnrt.CpuDevice) -> None:
    m = roi_align_model([1, 2, 2, 1], 1, [2, 2, 1.0, 1.0, 0, 0, False], t=T.TENSOR_QUANT8_ASYMM, x_scale=0.5)
    rejected(device, m, "TENSOR_FLOAT32; expected TENSOR_QUANT16_ASYMM")


def test_roi_align_rejects_bad_roi_quantization(device: nnrt.CpuDevice) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 1], 0.5, 0)
    rois = m.add_operand(T.TENSOR_QUANT16_ASYMM, [1, 4], 0.25, 0)
    bidx = m.add_operand(T.TENSOR_INT32, [1])
    scalars = [_scalar(m, v) for v in (2, 2, 1.0, 1.0, 0, 0, False)]
    out = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 1], 0.5, 0)
    m.add_operation(Op.ROI_ALIGN, [x, rois, bidx, *scalars], [out])
    m.identify_inputs_and_outputs([x, rois, bidx], [out])
    m.finish()
    rejected(device, m, "scale 0.125")


def test_box_with_nms_limit_rejects_unknown_kernel(device: nnrt.CpuDevice) -> None:
    rejected(device, nms_model(3, 0.1, -1, 0.5, 2, 2), "NMS kernel")


def test_roi_align_rejects_nonpositive_output_size(device: nnrt.CpuDevice) -> None:
    rejected(device, roi_align_model([1, 2, 2, 1], 1, [0, 2, 1.0, 1.0, 0, 0, False]), "must be positive")


def test_roi_align_rejects_box_outside_map(device: nnrt.CpuDevice) -> None:
    m = roi_align_model([1, 2, 2, 1], 1, [1, 1, 1.0, 1.0, 1, 1, False])
    prepared = device.prepare_model_sync(m)
    x = np.zeros((1, 2, 2, 1), np.float32)
    with pytest.raises(nnrt.NnrtError, match="outside the feature map") as info:
        prepared.execute_sync([x, np.array([[0, 0, 5, 1]], np.float32), np.zeros(1, np.int32)])
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def test_math_sanity() -> None:
    ones = ref_roi_align(np.ones((1, 2, 2, 1)), np.array([[0, 0, 2, 2]]), np.array([0]), 1, 1, 1.0, 2)
    assert math.isclose(ones[0, 0, 0, 0], 1.0)
