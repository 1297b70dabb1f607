"""Object-detection post-processing: AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT,
DETECTION_POSTPROCESSING, GENERATE_PROPOSALS and HEATMAP_MAX_KEYPOINT (ROI_ALIGN and
ROI_POOLING live in ``roi``, imported at the bottom).

Boxes are ``(x1, y1, x2, y2)`` corners (DETECTION_POSTPROCESSING: ``(y1, x1, y2, x2)``).
Every kernel computes in float32 like NNAPI's reference: float16 inputs are widened and the
results narrowed, quantized inputs are dequantized (boxes are TENSOR_QUANT16_ASYMM with scale
0.125, anchors of GENERATE_PROPOSALS TENSOR_QUANT16_SYMM) and the results requantized.

The non-maximum suppressions reproduce the reference's in-place algorithm exactly, because
the CTS checks which boxes survive and in which order: the best remaining candidate (first
one on ties) is swapped to the front, and every later candidate it suppresses is swapped
with the last live one, which reorders the candidates for the next round. Sorts by score
are stable. BOX_WITH_NMS_LIMIT and GENERATE_PROPOSALS have data-dependent output sizes
(possibly zero); the other outputs have fixed shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nnrt.model import Operand
from nnrt.ops._common import QUANT8_TYPES, from_nchw, from_real, to_real
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.roi import check_box_quant
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

F32 = np.float32


def _real32(x: np.ndarray, operand: Operand) -> np.ndarray:
    """Float32 values of a float, float16 or quantized tensor (a fresh array)."""
    return np.array(to_real(x, operand, np.float32), dtype=F32)


def _narrow(real: np.ndarray, operand: Operand) -> np.ndarray:
    """Results computed in float32 as values of ``operand``'s type."""
    return from_real(np.asarray(real, dtype=F32).copy(), operand)


def _expect_types(call: OpCall, inputs: Sequence[T], outputs: Sequence[T]) -> None:
    for i, t in enumerate(inputs):
        call.expect_type(i, t)
    for j, t in enumerate(outputs):
        call.expect_output_type(j, t)


def _dim(op: Operand, k: int) -> int:
    """Dimension ``k`` of an operand, 0 when unknown."""
    return op.dimensions[k] if len(op.dimensions) > k else 0


def _same(call: OpCall, what: str, a: int, b: int) -> None:
    if a and b and a != b:
        call.fail(f"{what}: {a} vs {b}")


def _check_ordered(call: OpCall, boxes: np.ndarray, what: str) -> None:
    """Boxes (rows of x1, y1, x2, y2) must have x1 <= x2 and y1 <= y2."""
    bad = ~((boxes[:, 0] <= boxes[:, 2]) & (boxes[:, 1] <= boxes[:, 3]))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        call.fail(f"{what}: box {k} {boxes[k].tolist()} has x2 < x1 or y2 < y1")


def _iou(boxes: np.ndarray, one: np.ndarray) -> np.ndarray:
    """Intersection over union of each row of ``boxes`` with box ``one``, in float32."""
    area1 = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    area2 = (one[2] - one[0]) * (one[3] - one[1])
    w = np.maximum(np.minimum(boxes[:, 2], one[2]) - np.maximum(boxes[:, 0], one[0]), F32(0))
    h = np.maximum(np.minimum(boxes[:, 3], one[3]) - np.maximum(boxes[:, 1], one[1]), F32(0))
    inter = w * h
    return inter / (area1 + area2 - inter)  # type: ignore[no-any-return]


#: Decides which candidates the newly selected box suppresses (may rescale their scores).
Suppress = Callable[[int, np.ndarray], np.ndarray]


def _nms(scores: np.ndarray, candidates: list[int], max_keep: int, suppress: Suppress) -> list[int]:
    """NNAPI's in-place greedy NMS over ``candidates`` (indices into ``scores``), best first."""
    sel = list(candidates)
    start, end = 0, len(sel)
    limit = end if max_keep < 0 else max_keep
    while start < end and start < limit:
        best = start + int(np.argmax(scores[sel[start:end]]))
        sel[start], sel[best] = sel[best], sel[start]
        if end > start + 1:
            rest = np.array(sel[start + 1 : end])
            removed = suppress(sel[start], rest)
            if removed.any():
                gone = set(rest[removed].tolist())
                i = start + 1
                while i < end:
                    if sel[i] in gone:
                        end -= 1
                        sel[i], sel[end] = sel[end], sel[i]
                    else:
                        i += 1
        start += 1
    return sel[:start]


def _hard(boxes: np.ndarray, iou_threshold: float) -> Suppress:
    thr = F32(iou_threshold)

    def suppress(best: int, rest: np.ndarray) -> np.ndarray:
        return _iou(boxes[rest], boxes[best]) >= thr

    return suppress


def _stable_desc(scores: np.ndarray, idx: Sequence[int]) -> list[int]:
    order = np.argsort(-scores[np.asarray(idx, dtype=np.int64)], kind="stable")
    return [idx[k] for k in order.tolist()]


def _bbox_transform(rois: np.ndarray, deltas: np.ndarray, image_hw: np.ndarray) -> np.ndarray:
    """Apply ``deltas [n, k, 4]`` (dx, dy, log dw, log dh) to ``rois [n, 4]``; clip to the image ``[n, 2]``."""
    w = rois[:, 2] - rois[:, 0]
    h = rois[:, 3] - rois[:, 1]
    cx = (rois[:, 0] + rois[:, 2]) / F32(2)
    cy = (rois[:, 1] + rois[:, 3]) / F32(2)
    w, h, cx, cy = w[:, None], h[:, None], cx[:, None], cy[:, None]
    nw = np.exp(deltas[..., 2]) * w
    nh = np.exp(deltas[..., 3]) * h
    ncx = cx + deltas[..., 0] * w
    ncy = cy + deltas[..., 1] * h
    img_h, img_w = image_hw[:, 0:1], image_hw[:, 1:2]
    zero = F32(0)
    out = np.stack(
        [
            np.minimum(np.maximum(ncx - nw / F32(2), zero), img_w),
            np.minimum(np.maximum(ncy - nh / F32(2), zero), img_h),
            np.minimum(np.maximum(ncx + nw / F32(2), zero), img_w),
            np.minimum(np.maximum(ncy + nh / F32(2), zero), img_h),
        ],
        axis=-1,
    )
    return out.astype(F32)


# -- AXIS_ALIGNED_BBOX_TRANSFORM ----------------------------------------------------------


@kernel(Op.AXIS_ALIGNED_BBOX_TRANSFORM)
def prepare_bbox_transform(call: OpCall) -> Kernel:
    call.expect_counts(4, 1)
    t = call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT16_ASYMM)
    if t is T.TENSOR_QUANT16_ASYMM:
        delta_t = call.expect_type(1, *QUANT8_TYPES)
    else:
        delta_t = t
    _expect_types(call, (t, delta_t, T.TENSOR_INT32, t), (t,))
    for i, rank in ((0, 2), (1, 2), (2, 1), (3, 2)):
        call.expect_rank(i, rank)
    rois_op, deltas_op, batch_op, info_op, out_op = (*call.inputs, call.outputs[0])
    if _dim(rois_op, 1) not in (0, 4):
        call.fail(f"input 0 (rois) must be [num_rois, 4], got {list(rois_op.dimensions)}")
    if _dim(deltas_op, 1) % 4:
        call.fail(f"input 1 (deltas) must be [num_rois, 4 * num_classes], got {list(deltas_op.dimensions)}")
    if _dim(info_op, 1) not in (0, 2):
        call.fail(f"input 3 (image info) must be [batches, 2], got {list(info_op.dimensions)}")
    _same(call, "deltas and rois disagree on the number of boxes", _dim(deltas_op, 0), _dim(rois_op, 0))
    _same(call, "batch indices and rois disagree on the number of boxes", _dim(batch_op, 0), _dim(rois_op, 0))
    check_box_quant(call, rois_op, "input 0 (rois)")
    check_box_quant(call, info_op, "input 3 (image info)")

    def run(rois: np.ndarray, deltas: np.ndarray, batches: np.ndarray, info: np.ndarray) -> np.ndarray:
        n = rois.shape[0]
        if rois.ndim != 2 or rois.shape[1] != 4 or deltas.ndim != 2 or deltas.shape[0] != n or deltas.shape[1] % 4:
            call.fail(f"rois {list(rois.shape)} and deltas {list(deltas.shape)} do not match")
        if info.ndim != 2 or info.shape[1] != 2 or info.shape[0] == 0 or batches.shape != (n,):
            call.fail(f"image info {list(info.shape)} or batch indices {list(batches.shape)} malformed")
        if n and (batches.min() < 0 or batches.max() >= info.shape[0]):
            call.fail(f"batch indices {batches.tolist()} out of range [0, {info.shape[0]})")
        r = _real32(rois, rois_op)
        _check_ordered(call, r, "input 0 (rois)")
        d = _real32(deltas, deltas_op).reshape(n, deltas.shape[1] // 4, 4)
        hw = _real32(info, info_op)[batches.astype(np.int64)]
        return _narrow(_bbox_transform(r, d, hw).reshape(n, deltas.shape[1]), out_op)

    return run


# -- BOX_WITH_NMS_LIMIT -------------------------------------------------------------------


def _soft(boxes: np.ndarray, scores: np.ndarray, kind: int, iou_thr: float, sigma: float, thr: float) -> Suppress:
    iou_t, sig, keep_t = F32(iou_thr), F32(sigma), F32(thr)

    def suppress(best: int, rest: np.ndarray) -> np.ndarray:
        iou = _iou(boxes[rest], boxes[best])
        if kind == 0:
            factor = np.where(iou < iou_t, F32(1), F32(0)).astype(F32)
        elif kind == 1:
            factor = np.where(iou < iou_t, F32(1), F32(1) - iou).astype(F32)
        else:
            factor = np.exp(F32(-1) * iou * iou / sig).astype(F32)
        scores[rest] = scores[rest] * factor
        return scores[rest] < keep_t  # type: ignore[no-any-return]

    return suppress


@kernel(Op.BOX_WITH_NMS_LIMIT)
def prepare_box_with_nms_limit(call: OpCall) -> Kernel:
    call.expect_counts(9, 4)
    t = call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, *QUANT8_TYPES)
    roi_t = {T.TENSOR_FLOAT32: t, T.TENSOR_FLOAT16: t}.get(t, T.TENSOR_QUANT16_ASYMM)
    s = T.FLOAT16 if t is T.TENSOR_FLOAT16 else T.FLOAT32
    _expect_types(
        call,
        (t, roi_t, T.TENSOR_INT32, s, T.INT32, T.INT32, s, s, s),
        (t, roi_t, T.TENSOR_INT32, T.TENSOR_INT32),
    )
    for i, rank in ((0, 2), (1, 2), (2, 1)):
        call.expect_rank(i, rank)
    scores_op, rois_op, batch_op = call.inputs[:3]
    _same(call, "rois and scores disagree on the number of boxes", _dim(rois_op, 0), _dim(scores_op, 0))
    _same(call, "batch indices and scores disagree on the number of boxes", _dim(batch_op, 0), _dim(scores_op, 0))
    _same(call, "rois must have 4 values per class", _dim(rois_op, 1), 4 * _dim(scores_op, 1))
    if 0 < _dim(scores_op, 1) < 2:
        call.fail("scores need at least 2 classes (class 0 is the background)")
    check_box_quant(call, rois_op, "input 1 (rois)")
    kind = call.const(5)
    if kind is not None and kind not in (0, 1, 2):
        call.fail(f"input 5 (NMS kernel) must be 0 (hard), 1 (linear) or 2 (gaussian), got {kind}")
    out_scores_op = call.outputs[0]

    def run(
        scores: np.ndarray,
        rois: np.ndarray,
        batches: np.ndarray,
        score_thr: float,
        max_det: int,
        kind: int,
        iou_thr: float,
        sigma: float,
        nms_thr: float,
    ) -> tuple[np.ndarray, ...]:
        if kind not in (0, 1, 2):
            call.fail(f"input 5 (NMS kernel) must be 0 (hard), 1 (linear) or 2 (gaussian), got {kind}")
        n, n_cls = scores.shape
        if rois.shape != (n, 4 * n_cls) or batches.shape != (n,) or n_cls < 2:
            call.fail(f"scores {list(scores.shape)}, rois {list(rois.shape)}, batches {list(batches.shape)} mismatch")
        sc = _real32(scores, scores_op).reshape(-1)
        boxes = _real32(rois, rois_op).reshape(-1, 4)
        suppress = _soft(boxes, sc, kind, iou_thr, sigma, nms_thr)
        picked: list[int] = []
        out_batches: list[int] = []
        start = 0
        while start < n:  # boxes of one batch are consecutive
            stop = start + 1
            while stop < n and batches[stop] == batches[start]:
                stop += 1
            # The reference checks the group's first (stop - start) boxes of the flattened list.
            _check_ordered(call, boxes[start * n_cls : start * n_cls + (stop - start)], "input 1 (rois)")
            above = (sc > F32(score_thr)).reshape(n, n_cls)
            found: list[int] = []
            for c in range(1, n_cls):
                cand = (np.flatnonzero(above[start:stop, c]) + start) * n_cls + c
                found += _nms(sc, cand.tolist(), max_det, suppress)
            found = _stable_desc(sc, found)
            if max_det >= 0:
                found = found[:max_det]
            found.sort(key=lambda k: k % n_cls)  # stable: by class, then by score
            picked += found
            out_batches += [int(batches[start])] * len(found)
            start = stop
        idx = np.array(picked, dtype=np.int64)
        return (
            _narrow(sc[idx], out_scores_op),
            np.array(rois.reshape(-1, 4)[idx]),
            (idx % n_cls).astype(np.int32),
            np.array(out_batches, dtype=np.int32),
        )

    return run


# -- GENERATE_PROPOSALS -------------------------------------------------------------------


@kernel(Op.GENERATE_PROPOSALS)
def prepare_generate_proposals(call: OpCall) -> Kernel:
    call.expect_counts(11, 3)
    t = call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, *QUANT8_TYPES)
    quant = t.is_quantized
    s = T.FLOAT16 if t is T.TENSOR_FLOAT16 else T.FLOAT32
    anchor_t, box_t = (T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT16_ASYMM) if quant else (t, t)
    _expect_types(
        call,
        (t, t, anchor_t, box_t, s, s, T.INT32, T.INT32, s, s, T.BOOL),
        (t, box_t, T.TENSOR_INT32),
    )
    for i, rank in ((0, 4), (1, 4), (2, 2), (3, 2)):
        call.expect_rank(i, rank)
    scores_op, deltas_op, anchors_op, info_op = call.inputs[:4]
    if _dim(anchors_op, 1) not in (0, 4) or _dim(info_op, 1) not in (0, 2):
        call.fail(f"anchors {list(anchors_op.dimensions)} or image info {list(info_op.dimensions)} malformed")
    if t is T.TENSOR_QUANT8_ASYMM and (
        anchors_op.scale != 0.125 or info_op.scale != 0.125 or info_op.zero_point != 0
    ):
        call.fail("anchors and image info must have scale 0.125 (image info zero point 0)")
    out_scores_op, out_rois_op = call.outputs[:2]

    def run(
        scores: np.ndarray,
        deltas: np.ndarray,
        anchors: np.ndarray,
        info: np.ndarray,
        h_stride: float,
        w_stride: float,
        pre_nms: int,
        post_nms: int,
        iou_thr: float,
        min_size: float,
        nchw: bool,
    ) -> tuple[np.ndarray, ...]:
        sc = _real32(scores, scores_op)
        dl = _real32(deltas, deltas_op)
        if nchw:
            sc, dl = from_nchw(sc), from_nchw(dl)
        b, h, w, a = sc.shape
        if dl.shape != (b, h, w, 4 * a) or anchors.shape != (a, 4) or info.shape != (b, 2):
            call.fail(
                f"scores {list(sc.shape)}, deltas {list(dl.shape)}, anchors {list(anchors.shape)} "
                f"and image info {list(info.shape)} do not match"
            )
        anc = _real32(anchors, anchors_op)
        img = _real32(info, info_op)
        ys = np.arange(h, dtype=F32) * F32(h_stride)
        xs = np.arange(w, dtype=F32) * F32(w_stride)
        shift = np.zeros((h, w, 1, 4), dtype=F32)
        shift[..., 0::2] = xs[None, :, None, None]
        shift[..., 1::2] = ys[:, None, None, None]
        base = (anc[None, None] + shift).reshape(-1, 4)
        size = base.shape[0]
        thr = F32(min_size)
        out_idx: list[np.ndarray] = []
        out_boxes: list[np.ndarray] = []
        out_scores: list[np.ndarray] = []
        for k in range(b):
            boxes = _bbox_transform(base, dl[k].reshape(-1, 1, 4), np.repeat(img[k : k + 1], size, axis=0))[:, 0]
            flat = sc[k].reshape(-1)
            order = np.arange(size)
            if 0 < pre_nms < size:
                order = np.argsort(-flat, kind="stable")[:pre_nms]
            bw = boxes[order, 2] - boxes[order, 0]
            bh = boxes[order, 3] - boxes[order, 1]
            cx = boxes[order, 0] + bw / F32(2)
            cy = boxes[order, 1] + bh / F32(2)
            keep = (bw > thr) & (bh > thr) & (cx < img[k, 1]) & (cy < img[k, 0])
            sel = np.array(_nms(flat, order[keep].tolist(), post_nms, _hard(boxes, iou_thr)), dtype=np.int64)
            out_boxes.append(boxes[sel])
            out_scores.append(flat[sel])
            out_idx.append(np.full(sel.size, k, dtype=np.int32))
        return (
            _narrow(np.concatenate(out_scores) if out_scores else np.zeros(0, F32), out_scores_op),
            _narrow(np.concatenate(out_boxes) if out_boxes else np.zeros((0, 4), F32), out_rois_op),
            np.concatenate(out_idx) if out_idx else np.zeros(0, np.int32),
        )

    return run


# -- DETECTION_POSTPROCESSING -------------------------------------------------------------


@kernel(Op.DETECTION_POSTPROCESSING)
def prepare_detection_postprocessing(call: OpCall) -> Kernel:
    call.expect_counts(14, 4)
    t = call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
    s = T.FLOAT16 if t is T.TENSOR_FLOAT16 else T.FLOAT32
    _expect_types(
        call,
        (t, t, t, s, s, s, s, T.BOOL, T.INT32, T.INT32, T.INT32, s, s, T.BOOL),
        (t, t, T.TENSOR_INT32, T.TENSOR_INT32),
    )
    for i, rank in ((0, 3), (1, 3), (2, 2)):
        call.expect_rank(i, rank)
    scores_op, deltas_op, anchors_op = call.inputs[:3]
    _same(call, "deltas and scores disagree on the number of anchors", _dim(deltas_op, 1), _dim(scores_op, 1))
    _same(call, "anchors and scores disagree on the number of anchors", _dim(anchors_op, 0), _dim(scores_op, 1))
    if 0 < _dim(deltas_op, 2) < 4 or _dim(anchors_op, 1) not in (0, 4):
        call.fail("deltas need at least 4 values per anchor and anchors exactly 4")
    if 0 < _dim(scores_op, 2) < 2:
        call.fail("scores need at least 2 classes (class 0 is the background)")
    consts = [call.const(i) for i in range(14)]
    _check_params(call, consts)
    out_scores_op, out_rois_op = call.outputs[:2]

    def run(
        scores: np.ndarray,
        deltas: np.ndarray,
        anchors: np.ndarray,
        *params: float | int | bool,
    ) -> tuple[np.ndarray, ...]:
        _check_params(call, [None, None, None, *params])
        sy, sx, sh, sw, regular, max_det, max_cls, per_cls, score_thr, iou_thr, bg_in_label = params
        b, n, n_cls = scores.shape
        if deltas.shape[:2] != (b, n) or deltas.shape[2] < 4 or anchors.shape != (n, 4) or n_cls < 2:
            call.fail(f"scores {list(scores.shape)}, deltas {list(deltas.shape)}, anchors {list(anchors.shape)}")
        sc = _real32(scores, scores_op)
        dl = _real32(deltas, deltas_op)[..., :4]
        an = _real32(anchors, anchors_op)
        y = an[:, 0] + an[:, 2] * dl[..., 0] / F32(sy)
        x = an[:, 1] + an[:, 3] * dl[..., 1] / F32(sx)
        hh = an[:, 2] * np.exp(dl[..., 2] / F32(sh)) * F32(0.5)
        hw = an[:, 3] * np.exp(dl[..., 3] / F32(sw)) * F32(0.5)
        boxes = np.stack([y - hh, x - hw, y + hh, x + hw], axis=-1).astype(F32)  # [b, n, 4]
        n_out_cls = min(n_cls - 1, int(max_cls))
        d = int(max_det) if regular else int(max_det) * int(max_cls)
        out_s = np.zeros((b, d), F32)
        out_b = np.zeros((b, d, 4), F32)
        out_c = np.zeros((b, d), np.int32)
        counts = np.zeros(b, np.int32)
        shift = 0 if bg_in_label else 1
        for k in range(b):
            flat = sc[k].reshape(-1)
            if regular:
                rep = np.repeat(boxes[k], n_cls, axis=0)  # box of flat index a * n_cls + c
                above = (flat > F32(score_thr)).reshape(n, n_cls)
                found: list[int] = []
                for c in range(1, n_cls):
                    cand = np.flatnonzero(above[:, c]) * n_cls + c
                    found += _nms(flat, cand.tolist(), int(per_cls), _hard(rep, float(iou_thr)))
                found = _stable_desc(flat, found)[: int(max_det)]
                idx = np.array(found, dtype=np.int64)
                m = idx.size
                out_s[k, :m] = flat[idx]
                out_b[k, :m] = rep[idx]
                out_c[k, :m] = idx % n_cls - shift
            else:
                best = sc[k, :, 1:].max(axis=1)
                cand = np.flatnonzero(best > F32(score_thr)).tolist()
                sel = np.array(_nms(best, cand, int(max_det), _hard(boxes[k], float(iou_thr))), dtype=np.int64)
                cls = np.argsort(-sc[k, sel, 1:], axis=1, kind="stable")[:, :n_out_cls] + 1  # [m, n_out_cls]
                m = sel.size * n_out_cls
                out_s[k, :m] = np.take_along_axis(sc[k, sel], cls, axis=1).reshape(-1)
                out_b[k, :m] = np.repeat(boxes[k, sel], n_out_cls, axis=0)
                out_c[k, :m] = (cls - shift).reshape(-1)
            counts[k] = m
        return _narrow(out_s, out_scores_op), _narrow(out_b, out_rois_op), out_c, counts

    return run


def _check_params(call: OpCall, v: Sequence[object]) -> None:
    """DETECTION_POSTPROCESSING's scalar checks (``None`` = not known yet)."""
    for i in (3, 4, 5, 6):
        if v[i] is not None and not v[i] > 0:  # type: ignore[operator]
            call.fail(f"input {i} (box scale) must be positive, got {v[i]}")
    for i in (11, 12):
        if v[i] is not None and not v[i] >= 0:  # type: ignore[operator]
            call.fail(f"input {i} (threshold) must not be negative, got {v[i]}")
    if v[8] is not None and not v[8] > 0:  # type: ignore[operator]
        call.fail(f"input 8 (max detections) must be positive, got {v[8]}")
    if v[7] is True and v[10] is not None and not v[10] > 0:  # type: ignore[operator]
        call.fail(f"input 10 (max detections per class) must be positive, got {v[10]}")
    if v[7] is False and v[9] is not None and not v[9] > 0:  # type: ignore[operator]
        call.fail(f"input 9 (max classes per detection) must be positive, got {v[9]}")


# -- HEATMAP_MAX_KEYPOINT -----------------------------------------------------------------


def _keypoints(hm: np.ndarray, boxes: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Scores ``[n, k]`` and keypoints ``[n, k, 2]`` from NHWC heatmaps ``[n, s, s, k]`` (float32)."""
    n, size, _, k = hm.shape
    flat = hm.reshape(n, size * size, k)
    arg = np.argmax(flat, axis=1)  # [n, k], first maximum
    top = np.take_along_axis(flat, arg[:, None, :], axis=1)[:, 0]
    mh, mw = arg // size, arg % size
    g = np.empty((3, 3, n, k), dtype=F32)
    nn_, kk = np.arange(n)[:, None], np.arange(k)[None, :]
    for dh in (-1, 0, 1):
        hh = mh + dh
        hh = np.where(hh < 0, 1, np.where(hh >= size, size - 2, hh))
        for dw in (-1, 0, 1):
            ww = mw + dw
            ww = np.where(ww < 0, 1, np.where(ww >= size, size - 2, ww))
            g[dh + 1, dw + 1] = hm[nn_, hh, ww, kk]
    two, four = F32(2), F32(4)
    b0 = -(g[1, 2] - g[1, 0]) / two
    b1 = -(g[2, 1] - g[0, 1]) / two
    a00 = g[1, 0] - two * g[1, 1] + g[1, 2]
    a01 = (g[2, 2] - g[2, 0] - g[0, 2] + g[0, 0]) / four
    a11 = g[0, 1] - two * g[1, 1] + g[2, 1]
    cross = a00 * a11
    det = cross - a01 * a01
    solvable = ~(np.abs(det) < F32(tol) + F32(tol) * cross)
    d0 = np.where(solvable, (a11 * b0 - a01 * b1) / det, F32(0)).astype(F32)
    d1 = np.where(solvable, (a00 * b1 - a01 * b0) / det, F32(0)).astype(F32)
    big = np.maximum(np.abs(d0), np.abs(d1))
    clip = big > F32(1.5)
    factor = np.where(clip, F32(1.5) / np.where(clip, big, F32(1)), F32(1)).astype(F32)
    d0, d1 = d0 * factor, d1 * factor
    quad = ((a00 * d0 + a01 * d1) * d0 + (a01 * d0 + a11 * d1) * d1) / two
    score = np.where(solvable, g[1, 1] - b0 * d0 - b1 * d1 + quad, top).astype(F32)
    fsize = F32(size)
    wrel = (mw.astype(F32) + d0 + F32(0.5)) / fsize
    hrel = (mh.astype(F32) + d1 + F32(0.5)) / fsize
    x1, y1 = boxes[:, 0:1], boxes[:, 1:2]
    kx = wrel * (boxes[:, 2:3] - x1) + x1
    ky = hrel * (boxes[:, 3:4] - y1) + y1
    return score, np.stack([kx, ky], axis=-1).astype(F32)


@kernel(Op.HEATMAP_MAX_KEYPOINT)
def prepare_heatmap_max_keypoint(call: OpCall) -> Kernel:
    call.expect_counts(3, 2)
    t = call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, *QUANT8_TYPES)
    box_t = T.TENSOR_QUANT16_ASYMM if t.is_quantized else t
    _expect_types(call, (t, box_t, T.BOOL), (t, box_t))
    call.expect_rank(0, 4)
    call.expect_rank(1, 2)
    hm_op, boxes_op = call.inputs[:2]
    if _dim(boxes_op, 1) not in (0, 4):
        call.fail(f"input 1 (boxes) must be [num_boxes, 4], got {list(boxes_op.dimensions)}")
    _same(call, "boxes and heatmaps disagree on the number of boxes", _dim(boxes_op, 0), _dim(hm_op, 0))
    check_box_quant(call, boxes_op, "input 1 (boxes)")
    tol = 1e-3 if t is T.TENSOR_FLOAT16 else 1e-5
    out_scores_op, out_points_op = call.outputs

    def run(heatmap: np.ndarray, boxes: np.ndarray, nchw: bool) -> tuple[np.ndarray, np.ndarray]:
        hm = _real32(heatmap, hm_op)
        if nchw:
            hm = from_nchw(hm)
        n, size, size_w, _ = hm.shape
        if size != size_w or size < 2 or boxes.shape != (n, 4):
            call.fail(f"heatmaps {list(hm.shape)} must be square (at least 2x2), boxes {list(boxes.shape)} [n, 4]")
        b = _real32(boxes, boxes_op)
        _check_ordered(call, b, "input 1 (boxes)")
        score, points = _keypoints(np.ascontiguousarray(hm), b, tol)
        return _narrow(score, out_scores_op), _narrow(points, out_points_op)

    return run


from nnrt.ops import roi as _roi  # noqa: E402,F401
