"""Region-of-interest feature extraction: ROI_ALIGN and ROI_POOLING.

Signatures (NNAPI): ``ROI_ALIGN [input, rois, batch_index, out_h, out_w, h_stride, w_stride,
h_ratio, w_ratio, nchw] -> [out]`` and ``ROI_POOLING [input, rois, batch_index, out_h, out_w,
h_stride, w_stride, nchw] -> [out]``. ``rois`` is ``[num_rois, 4]`` boxes ``(x1, y1, x2, y2)`` in
image coordinates (feature map coordinates times the strides); ``batch_index[k]`` names the
feature map of box ``k``; the output is ``[num_rois, out_h, out_w, depth]`` (or NCHW).
Float32, float16 and 8-bit quantized feature maps are supported; quantized models give the
boxes as TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0.

Box geometry follows NNAPI's reference kernels operation by operation, in the boxes' own
precision (float16 arithmetic for float16 models), because sample positions and pooling
bins are decided by it. ROI_ALIGN averages bilinear samples through two separable weight
matrices (rows and columns of the feature map) per box; ROI_POOLING takes the maximum over
each bin, bins with no pixel give the zero point (0 for floats).
"""

from __future__ import annotations

import math

import numpy as np

from nnrt.model import Operand
from nnrt.ops._common import QUANT8_TYPES, from_nchw, from_real, to_nchw, to_real
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_ROI_SCALE = 0.125


def check_box_quant(call: OpCall, operand: Operand, what: str) -> None:
    """Quantized box coordinates (TENSOR_QUANT16_ASYMM) must use scale 0.125 and zero point 0."""
    if operand.type is T.TENSOR_QUANT16_ASYMM and (operand.scale != _ROI_SCALE or operand.zero_point != 0):
        call.fail(f"{what} must have scale 0.125 and zero point 0, got {operand.scale} and {operand.zero_point}")


def _signature(call: OpCall, with_ratios: bool) -> tuple[T, type[np.floating]]:
    """Validate the common ROI signature; return the feature-map type and the geometry dtype."""
    n_in = 10 if with_ratios else 8
    call.expect_counts(n_in, 1)
    t = call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, *QUANT8_TYPES)
    if t is T.TENSOR_FLOAT16:
        roi_t, scalar_t = T.TENSOR_FLOAT16, T.FLOAT16
    elif t is T.TENSOR_FLOAT32:
        roi_t, scalar_t = T.TENSOR_FLOAT32, T.FLOAT32
    else:
        roi_t, scalar_t = T.TENSOR_QUANT16_ASYMM, T.FLOAT32
    call.expect_type(1, roi_t)
    call.expect_type(2, T.TENSOR_INT32)
    call.expect_type(3, T.INT32)
    call.expect_type(4, T.INT32)
    call.expect_type(5, scalar_t)
    call.expect_type(6, scalar_t)
    if with_ratios:
        call.expect_type(7, T.INT32)
        call.expect_type(8, T.INT32)
    call.expect_type(n_in - 1, T.BOOL)
    call.expect_output_type(0, t)
    call.expect_rank(0, 4)
    call.expect_rank(1, 2)
    call.expect_rank(2, 1)
    rois = call.inputs[1]
    if len(rois.dimensions) == 2 and rois.dimensions[1] not in (0, 4):
        call.fail(f"input 1 (rois) must be [num_rois, 4], got {list(rois.dimensions)}")
    check_box_quant(call, rois, "input 1 (rois)")
    bidx = call.inputs[2]
    n_rois = rois.dimensions[0] if len(rois.dimensions) == 2 else 0
    n_idx = bidx.dimensions[0] if len(bidx.dimensions) == 1 else 0
    if n_rois and n_idx and n_rois != n_idx:
        call.fail(f"input 2 (batch indices) has {n_idx} entries for {n_rois} boxes")
    for i, what in ((3, "output height"), (4, "output width"), (5, "height stride"), (6, "width stride")):
        v = call.const(i)
        if v is not None and not v > 0:
            call.fail(f"input {i} ({what}) must be positive, got {v}")
    if with_ratios:
        for i in (7, 8):
            v = call.const(i)
            if v is not None and v < 0:
                call.fail(f"input {i} (sampling ratio) must not be negative, got {v}")
    return t, (np.float16 if t is T.TENSOR_FLOAT16 else np.float32)


def _check_run(call: OpCall, x: np.ndarray, rois: np.ndarray, bidx: np.ndarray, params: tuple[float, ...]) -> None:
    if x.ndim != 4:
        call.fail(f"input 0 must have rank 4, got {x.ndim}")
    if rois.ndim != 2 or rois.shape[1] != 4:
        call.fail(f"input 1 (rois) must be [num_rois, 4], got {list(rois.shape)}")
    if bidx.shape != (rois.shape[0],):
        call.fail(f"input 2 (batch indices) must have shape [{rois.shape[0]}], got {list(bidx.shape)}")
    out_h, out_w, h_stride, w_stride = params[:4]
    if not (out_h > 0 and out_w > 0 and h_stride > 0 and w_stride > 0):
        call.fail(f"output size and strides must be positive, got {out_h}, {out_w}, {h_stride}, {w_stride}")
    if bidx.size and (bidx.min() < 0 or bidx.max() >= x.shape[0]):
        call.fail(f"input 2 (batch indices) must be in [0, {x.shape[0]}), got {bidx.tolist()}")


def _scaled_boxes(rois: np.ndarray, rois_op: Operand, h_stride: float, w_stride: float, rdt: type) -> np.ndarray:
    """Boxes in feature-map coordinates ``[x1, y1, x2, y2]`` (geometry dtype), checked as NNAPI does."""
    real: np.ndarray = to_real(rois, rois_op).astype(rdt)
    scale: np.ndarray = np.array([1.0 / w_stride, 1.0 / h_stride] * 2, dtype=np.float32).astype(rdt)
    out: np.ndarray = (real * scale).astype(rdt)
    return out


def _check_boxes(call: OpCall, boxes: np.ndarray, limits: np.ndarray) -> None:
    """Boxes (feature-map units) must be non-negative, ordered and no larger than the map."""
    bad = (boxes < 0).any(axis=1) | (boxes > limits).any(axis=1)
    bad |= (boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        call.fail(f"box {k} {boxes[k].tolist()} is outside the feature map or inverted")


# -- ROI_ALIGN ------------------------------------------------------------------------------


def _axis_weights(start: np.floating, step: np.floating, ratio: int, n_out: int, size: int, rdt: type) -> np.ndarray:
    """``[n_out, size]`` summed bilinear weights of the sampling points of each output bin.

    Samples start half a sub-bin into each bin and advance by the sub-bin size while they are
    below the bin's end, accumulated in the geometry dtype as the reference kernel does.
    """
    idx: np.ndarray = np.arange(n_out, dtype=rdt)
    bin_size = rdt(step / rdt(ratio))
    lo = (step * idx + start).astype(rdt)
    hi = (step * (idx + rdt(1)) + start).astype(rdt)
    pos = (lo + rdt(bin_size / rdt(2))).astype(rdt)
    weights = np.zeros((n_out, size), dtype=np.float64)
    rows = np.arange(n_out)
    for _ in range(ratio + 4):  # float rounding may add a sample; the bound stops a stalled walk
        live = pos < hi
        if not live.any():
            break
        p = pos[live].astype(np.float64)
        low = np.floor(p).astype(np.int64)
        frac = p - low
        edge = low >= size - 1
        low = np.where(edge, size - 1, low)
        frac = np.where(edge, 0.0, frac)
        high = np.minimum(low + 1, size - 1)
        np.add.at(weights, (rows[live], low), 1.0 - frac)
        np.add.at(weights, (rows[live], high), frac)
        pos = (pos + bin_size).astype(rdt)
    return weights


def _roi_align(call: OpCall, rdt: type[np.floating]) -> Kernel:
    x_op, rois_op, out_op = call.inputs[0], call.inputs[1], call.outputs[0]
    quant = x_op.type.is_quantized

    def run(
        x: np.ndarray,
        rois: np.ndarray,
        bidx: np.ndarray,
        out_h: int,
        out_w: int,
        h_stride: float,
        w_stride: float,
        h_ratio: int,
        w_ratio: int,
        nchw: bool,
    ) -> np.ndarray:
        _check_run(call, x, rois, bidx, (out_h, out_w, h_stride, w_stride))
        if h_ratio < 0 or w_ratio < 0:
            call.fail(f"sampling ratios must not be negative, got {h_ratio}, {w_ratio}")
        fmap = from_nchw(x) if nchw else x
        _, in_h, in_w, depth = fmap.shape
        real = to_real(fmap, x_op, np.float64)
        boxes = _scaled_boxes(rois, rois_op, h_stride, w_stride, rdt)
        if quant:
            # The reference checks quantized boxes after scaling them a second time.
            check = (boxes * np.array([1.0 / w_stride, 1.0 / h_stride] * 2, dtype=np.float32)).astype(np.float32)
        else:
            check = boxes
        _check_boxes(call, check, np.array([in_w, in_h, in_w, in_h], dtype=np.float64))
        out = np.zeros((rois.shape[0], out_h, out_w, depth), dtype=np.float64)
        one = rdt(1)
        for k in range(rois.shape[0]):
            x1, y1, x2, y2 = boxes[k]
            roi_w = max(rdt(x2 - x1), one)
            roi_h = max(rdt(y2 - y1), one)
            w_step = rdt(roi_w / rdt(out_w))
            h_step = rdt(roi_h / rdt(out_h))
            wr = w_ratio if w_ratio > 0 else math.ceil(float(w_step))
            hr = h_ratio if h_ratio > 0 else math.ceil(float(h_step))
            wy = _axis_weights(y1, h_step, hr, out_h, in_h, rdt)
            wx = _axis_weights(x1, w_step, wr, out_w, in_w, rdt)
            rows = np.tensordot(wy, real[int(bidx[k])], axes=(1, 0))  # [out_h, in_w, depth]
            out[k] = np.einsum("jw,iwc->ijc", wx, rows) / (wr * hr)
        result = from_real(out if quant else out.astype(np.float32), out_op)
        return to_nchw(result).copy() if nchw else result

    return run


@kernel(Op.ROI_ALIGN)
def prepare_roi_align(call: OpCall) -> Kernel:
    _signature(call, with_ratios=True)
    return _roi_align(call, np.float32)


# -- ROI_POOLING ----------------------------------------------------------------------------


def _bins(start: int, step: np.floating, n_out: int, size: int, rdt: type) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) pixel ranges of each pooling bin: floor of the bin start, ceil of its end."""
    idx: np.ndarray = np.arange(n_out + 1, dtype=rdt)
    edges = (step * idx + rdt(start)).astype(rdt).astype(np.float64)
    lo = np.minimum(np.floor(edges[:-1]), size).astype(np.int64)
    hi = np.minimum(np.ceil(edges[1:]), size).astype(np.int64)
    return lo, hi


def _roi_pooling(call: OpCall, rdt: type[np.floating]) -> Kernel:
    x_op, rois_op, out_op = call.inputs[0], call.inputs[1], call.outputs[0]
    empty_value = x_op.zero_point if x_op.type.is_quantized else 0

    def run(
        x: np.ndarray,
        rois: np.ndarray,
        bidx: np.ndarray,
        out_h: int,
        out_w: int,
        h_stride: float,
        w_stride: float,
        nchw: bool,
    ) -> np.ndarray:
        _check_run(call, x, rois, bidx, (out_h, out_w, h_stride, w_stride))
        fmap = from_nchw(x) if nchw else x
        _, in_h, in_w, depth = fmap.shape
        boxes = _scaled_boxes(rois, rois_op, h_stride, w_stride, rdt)
        _check_boxes(call, boxes, np.array([in_w, in_h, in_w, in_h], dtype=np.float64))
        corners = np.trunc(boxes.astype(np.float64) + np.copysign(0.5, boxes.astype(np.float64))).astype(np.int64)
        out = np.full((rois.shape[0], out_h, out_w, depth), empty_value, dtype=out_op.type.dtype)
        for k in range(rois.shape[0]):
            x1, y1, x2, y2 = (int(v) for v in corners[k])
            w_step = rdt(rdt(max(x2 - x1 + 1, 1)) / rdt(out_w))
            h_step = rdt(rdt(max(y2 - y1 + 1, 1)) / rdt(out_h))
            w_lo, w_hi = _bins(x1, w_step, out_w, in_w, rdt)
            h_lo, h_hi = _bins(y1, h_step, out_h, in_h, rdt)
            src = fmap[int(bidx[k])]
            cols = np.zeros((in_h, out_w, depth), dtype=src.dtype)
            for j in range(out_w):
                if w_hi[j] > w_lo[j]:
                    cols[:, j] = src[:, w_lo[j] : w_hi[j]].max(axis=1)
            for i in range(out_h):
                if h_hi[i] > h_lo[i]:
                    out[k, i] = cols[h_lo[i] : h_hi[i]].max(axis=0)
            out[k][:, w_hi <= w_lo] = empty_value
        return to_nchw(out).copy() if nchw else out

    return run


@kernel(Op.ROI_POOLING)
def prepare_roi_pooling(call: OpCall) -> Kernel:
    _, rdt = _signature(call, with_ratios=False)
    return _roi_pooling(call, rdt)

