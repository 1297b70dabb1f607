"""Compiled float32 kernels (numba): the loops themselves, written as plain annotated Python.

Every function here is valid numpy/Python (mypy checks it, and it runs uncompiled, slowly) and
is written for numba's ``njit``: ``nnrt.ops._jit.compiled`` turns it into a native function
when numba is installed and enabled. The numpy kernels in the op modules stay the reference;
each function here has a numpy twin it is tested against (``tests/unit/test_jit_float.py``).

How the loops are shaped (``benchmarks/kernels.py`` measures them against numpy and ONNX
Runtime):

* Inner loops run over one contiguous range of a *slice* (``a[lo:hi]`` indexed from 0), or over
  a flat array with unsigned (``np.uint64``) offsets. An index such as ``x[k + offset]`` with a
  possibly negative signed ``offset`` makes numba check for Python's negative-index wraparound
  on every element, which stops LLVM from vectorizing (measured 0.76 against 0.063 ns per
  multiply-add). A multi-dimensional index whose last component is a loop variable counting
  from 0 (``o[ox, k]`` for ``k in range(c)``) vectorizes as well: LLVM proves it non-negative.
* Depthwise convolution's loops at column stride 1 live in ``_jit_depthwise``;
  ``window_pixels_f32`` here loops over output pixels with the channels innermost (taken at
  column strides > 1, and by MAX_POOL_2D), starting each output row with the bias and ending it
  with the fused activation while the row is in cache.
* numba makes two atomic reference-count updates for each array slice it creates in a loop
  that it cannot prove short-lived: in the depthwise and window loops that was half the time.
  They index flat arrays with unsigned offsets instead, and take maxima and clamp with selects
  rather than branches, so the inner loops vectorize. (Where numba prunes the counts, as in
  the one-row-slice loops of PRELU, MEAN and the bias pass, flat indexing measured no faster.)
  A loop that writes an array it also reads through another argument (an in-place variant
  with ``out`` = ``x``) fails LLVM's run-time overlap check and runs scalar: 10-20x slower.
* Elementwise functions (HARD_SWISH, PRELU with a per-channel slope) are one pass over the
  input into a fresh array, in the numpy kernel's float32 operations, so the results are
  bit-identical (numpy makes one pass and one temporary per operation: 2.3-3.9x slower).
* The bias and fused activation of a 1x1 CONV_2D: one pass over BLAS's product, in place (numpy:
  an add pass and a clip pass; 20-30% of a large pointwise convolution), bit-identical.
* A 1x1 CONV_2D whose only reader is a global AVERAGE_POOL_2D (``execution._fuse_pool``): the
  same bias and activation per block of BLAS's product, summed per channel instead of stored
  (``bias_act_sum_f32``), so the convolution's output is never written to memory; a global
  AVERAGE_POOL_2D alone makes the same sums (``_jit_pointwise.BlockMean``), so both agree bit for bit.
* MAX_POOL_2D is the same pixel loop taking maxima instead of products (numpy: one pass per
  window row and column over strided views; 3x slower). Maxima are exact: identical results.
  AVERAGE_POOL_2D (not global) has its own one-pass loop adding in numpy's order: identical.
* MEAN over a run of adjacent axes (the global average pool of NHWC: axes 1, 2) sums each
  output's inputs into float64 accumulators in one pass, innermost values contiguous; numpy
  first copies the input to float64 (4-11x slower). The float64 sums round to the same
  float32 means in practice (the order of the additions differs from numpy's pairwise sums).
* RESIZE_BILINEAR: one pass over the output with the channels innermost, the numpy kernel's
  float32 operations in its order (numpy: a gather and a product per corner and axis, each a
  fresh 4-D array: [1,24,24,48] to 48x48 0.9 ms); bit-identical.
* PAD of the last axis (a channel PAD before a residual ADD, as in BlazeFace): one pass writing
  each output row in order (numpy: strided fills and a strided copy). Copies: identical.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "AVERAGE_POOL_F32",
    "BIAS_ACT_F32",
    "BIAS_ACT_SUM_F32",
    "BILINEAR_F32",
    "MEAN_F32",
    "PAD_LAST_F32",
    "PRELU_F32",
    "SUM_ROWS",
    "UNARY_F32",
    "WINDOW_PIXELS_F32",
    "average_pool_f32",
    "bias_act_f32",
    "bias_act_sum_f32",
    "bilinear_f32",
    "hard_swish_f32",
    "mean_f32",
    "pad_last_f32",
    "prelu_f32",
    "window_pixels_f32",
]

#: The one signature ``window_pixels_f32`` is compiled for.
WINDOW_PIXELS_F32 = (
    "void(Array(float32, 4, 'C', readonly=True), Array(float32, 3, 'C', readonly=True),"
    " Array(float32, 1, 'C', readonly=True), float32[:, :, :, ::1],"
    " int64, int64, int64, int64, int64, int64, float32, float32, boolean, boolean)"
)


def window_pixels_f32(
    x: np.ndarray,
    w: np.ndarray,
    init: np.ndarray,
    out: np.ndarray,
    stride_h: int,
    stride_w: int,
    dil_h: int,
    dil_w: int,
    top: int,
    left: int,
    lo: np.float32,
    hi: np.float32,
    take_max: bool,
    hswish: bool,
) -> None:
    """A KHxKW window (``w``'s first two dimensions, dilated) over float32 NHWC ``x`` [N, H, W, C]
    into ``out`` [N, OH, OW, C] (written in full), one output pixel's channels at a time.

    Each output starts at ``init`` [C]; each tap of its window inside the input then adds
    ``x * w[i, j]`` (depthwise convolution with depth multiplier 1, ``init`` = the bias) or, with
    ``take_max``, takes the maximum (MAX_POOL_2D, ``init`` = -inf: exact, NaN propagating as
    with ``np.maximum``; ``w`` only gives the window's size). ``top``/``left``: padding before
    the first row and column; positions outside the input take no part. Last, the fused
    activation clamps to [``lo``, ``hi``]; ``lo > hi`` means none; with ``hswish`` HARD_SWISH
    follows, per output row. Indexed flat, maxima and
    clamps as selects (see ``_jit_depthwise.depthwise_rows_f32``).
    """
    n, h, wd, c = x.shape
    kh, kw = w.shape[0], w.shape[1]
    oh, ow = out.shape[1], out.shape[2]
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    u, uc = np.uint64, np.uint64(c)
    clamp = lo <= hi
    three, six, zero = np.float32(3), np.float32(6), np.float32(0)
    for b in range(n):
        for oy in range(oh):
            o0 = (b * oh + oy) * ow * c
            for ox in range(ow):
                d = u(o0 + ox * c)
                for k in range(uc):
                    of[d + k] = init[k]
            for i in range(kh):
                iy = oy * stride_h - top + i * dil_h
                if iy < 0 or iy >= h:
                    continue
                xr = (b * h + iy) * wd * c
                for j in range(kw):
                    off = j * dil_w - left
                    ox0 = 0 if off >= 0 else (stride_w - 1 - off) // stride_w
                    ox1 = min(ow, (wd - 1 - off) // stride_w + 1)
                    wr = u((i * kw + j) * c)
                    for ox in range(ox0, ox1):
                        s0, d = u(xr + (ox * stride_w + off) * c), u(o0 + ox * c)
                        if take_max:  # selects, not branches: vectorized
                            for k in range(uc):
                                v, cur = xf[s0 + k], of[d + k]
                                of[d + k] = v if v > cur or v != v else cur
                        else:
                            for k in range(uc):
                                of[d + k] = of[d + k] + xf[s0 + k] * wf[wr + k]
            if clamp:
                for t in range(u(o0), u(o0 + ow * c)):
                    v = of[t]
                    v = lo if v < lo else v
                    of[t] = hi if v > hi else v
            if hswish:  # as in ``depthwise_rows_f32``
                for t in range(u(o0), u(o0 + ow * c)):
                    v = of[t]
                    r = v + three
                    r = zero if r < zero else r
                    of[t] = (six if r > six else r) * v / six


#: The one signature ``average_pool_f32`` is compiled for.
AVERAGE_POOL_F32 = (
    "void(Array(float32, 4, 'C', readonly=True), float32[:, :, :, ::1], int64, int64, int64, int64, int64, int64,"
    " float32, float32)"
)


def average_pool_f32(x: np.ndarray, out: np.ndarray, k_h: int, k_w: int, stride_h: int, stride_w: int, top: int,
                     left: int, lo: np.float32, hi: np.float32) -> None:
    """AVERAGE_POOL_2D of float32 NHWC ``x`` into ``out`` [N, OH, OW, C]: each window's real
    (unpadded) inputs summed in the numpy kernel's order (``pooling``: down each window column,
    then across the column sums, from 0), divided by their count, then the fused activation
    clamps to [``lo``, ``hi``] (``lo > hi``: none). One pass, channels innermost, indexed flat;
    the same values as numpy's separable passes up to the sign of a zero sum."""
    n, h, w, c = x.shape
    oh, ow = out.shape[1], out.shape[2]
    xf, of = x.reshape(-1), out.reshape(-1)
    u, uc = np.uint64, np.uint64(c)
    col = np.empty(c, dtype=np.float32)
    acc = np.empty(c, dtype=np.float32)
    clamp = lo <= hi
    for b in range(n):
        for oy in range(oh):
            i0, i1 = max(0, oy * stride_h - top), min(h, oy * stride_h - top + k_h)
            for ox in range(ow):
                j0, j1 = max(0, ox * stride_w - left), min(w, ox * stride_w - left + k_w)
                acc[:] = 0
                for j in range(j0, j1):
                    col[:] = 0
                    for i in range(i0, i1):
                        src = u(((b * h + i) * w + j) * c)
                        for k in range(uc):
                            col[k] = col[k] + xf[src + k]
                    for k in range(uc):
                        acc[k] = acc[k] + col[k]
                count = np.float32(max((i1 - i0) * (j1 - j0), 1))
                dst = u(((b * oh + oy) * ow + ox) * c)
                for k in range(uc):
                    v = acc[k] / count
                    if clamp:
                        v = lo if v < lo else v
                        v = hi if v > hi else v
                    of[dst + k] = v


#: The signature of the compiled elementwise functions: flat input, flat output of its size.
UNARY_F32 = "void(Array(float32, 1, 'C', readonly=True), float32[::1])"


def hard_swish_f32(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x * clip(x + 3, 0, 6) / 6`` over flat float32 arrays, as the numpy kernel
    computes it (``activations._hard_swish``): bit-identical, NaN stays NaN."""
    three, six, zero = np.float32(3), np.float32(6), np.float32(0)
    for i in range(x.shape[0]):
        v = x[i]
        r = v + three
        if r < zero:
            r = zero
        elif r > six:
            r = six
        out[i] = r * v / six


#: The one signature ``mean_f32`` is compiled for.
MEAN_F32 = "void(Array(float32, 3, 'C', readonly=True), float32[:, ::1])"


def mean_f32(x: np.ndarray, out: np.ndarray) -> None:
    """``out[a, b] = mean(x[a, :, b])`` for float32 ``x`` [A, R, B] (R > 0), summed in float64."""
    a_n, r_n, b_n = x.shape
    acc = np.empty(b_n, dtype=np.float64)
    for a in range(a_n):
        acc[:] = 0.0
        for r in range(r_n):
            row = x[a, r]
            for b in range(b_n):
                acc[b] += row[b]
        for b in range(b_n):
            out[a, b] = acc[b] / r_n


#: The one signature ``prelu_f32`` is compiled for.
PRELU_F32 = "void(Array(float32, 2, 'C', readonly=True), Array(float32, 1, 'C', readonly=True), float32[:, ::1])"


def prelu_f32(x: np.ndarray, alpha: np.ndarray, out: np.ndarray) -> None:
    """``out = x if x >= 0 else alpha * x`` for float32 ``x`` [P, C] and a slope ``alpha`` [C]
    (NaN stays NaN: it is not >= 0 and alpha * NaN is NaN)."""
    zero = np.float32(0)
    for p in range(x.shape[0]):
        xr, o = x[p], out[p]
        for c in range(x.shape[1]):
            v = xr[c]
            o[c] = v if v >= zero else v * alpha[c]


#: The one signature ``bias_act_f32`` is compiled for.
BIAS_ACT_F32 = "void(float32[:, ::1], Array(float32, 1, 'C', readonly=True), float32, float32)"


def bias_act_f32(out: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32) -> None:
    """``out = clip(out + bias, lo, hi)`` in place for float32 ``out`` [P, C] and ``bias`` [C];
    ``lo > hi`` means no clamp. NaN stays NaN, as with ``np.clip``."""
    clamp = lo <= hi
    for p in range(out.shape[0]):
        o = out[p]
        for c in range(out.shape[1]):
            v = o[c] + bias[c]
            if clamp:
                if v < lo:
                    v = lo
                elif v > hi:
                    v = hi
            o[c] = v


#: Rows ``bias_act_sum_f32`` adds in float32 before adding their sums in float64.
SUM_ROWS = 32

#: The one signature ``bias_act_sum_f32`` is compiled for.
BIAS_ACT_SUM_F32 = (
    "void(Array(float32, 2, 'C', readonly=True), Array(float32, 1, 'C', readonly=True), float32, float32,"
    " float64[::1])"
)


def bias_act_sum_f32(block: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, acc: np.ndarray) -> None:
    """``acc[c] += sum over p of clip(block[p, c] + bias[c], lo, hi)`` for float32 ``block``
    [P, C] and ``bias`` [C], float64 ``acc`` [C]: each clipped value is ``bias_act_f32``'s float32
    value. ``lo > hi`` means no clamp; NaN stays NaN (selects). The values of ``SUM_ROWS`` rows
    are added in float32, four rows per pass (one load and store of the partial sums per four
    rows, not per row), and each such partial sum to ``acc`` in float64: 2-2.8x faster than
    one float64 addition per value (0.17 -> 0.08 ns per value in cache), within 1e-7 of the
    float64 sum relative to the sum of magnitudes. Deterministic: the order depends on the
    shape only."""
    n, c = block.shape
    bf = block.reshape(-1)
    u = np.uint64
    if lo > hi:
        lo, hi = np.float32(-np.inf), np.float32(np.inf)
    part = np.empty(c, dtype=np.float32)
    for p0 in range(0, n, SUM_ROWS):
        p1 = min(n, p0 + SUM_ROWS)
        for k in range(c):
            part[k] = 0.0
        p = p0
        while p + 4 <= p1:
            b0 = u(p * c)
            b1, b2, b3 = b0 + u(c), b0 + u(2 * c), b0 + u(3 * c)
            for k in range(u(c)):
                bk = bias[k]
                v0, v1, v2, v3 = bf[b0 + k] + bk, bf[b1 + k] + bk, bf[b2 + k] + bk, bf[b3 + k] + bk
                v0, v1 = (lo if v0 < lo else v0), (lo if v1 < lo else v1)
                v2, v3 = (lo if v2 < lo else v2), (lo if v3 < lo else v3)
                v0, v1 = (hi if v0 > hi else v0), (hi if v1 > hi else v1)
                v2, v3 = (hi if v2 > hi else v2), (hi if v3 > hi else v3)
                part[k] += (v0 + v1) + (v2 + v3)
            p += 4
        while p < p1:
            b0 = u(p * c)
            for k in range(u(c)):
                v0 = bf[b0 + k] + bias[k]
                v0 = lo if v0 < lo else v0
                part[k] += hi if v0 > hi else v0
            p += 1
        for k in range(c):
            acc[k] += part[k]


#: The one signature ``bilinear_f32`` is compiled for.
BILINEAR_F32 = (
    "void(Array(float32, 4, 'C', readonly=True), Array(int64, 1, 'C', readonly=True),"
    " Array(int64, 1, 'C', readonly=True), Array(float32, 1, 'C', readonly=True),"
    " Array(int64, 1, 'C', readonly=True), Array(int64, 1, 'C', readonly=True),"
    " Array(float32, 1, 'C', readonly=True), float32[:, :, :, ::1])"
)


def bilinear_f32(x: np.ndarray, y0: np.ndarray, y1: np.ndarray, dy: np.ndarray, x0: np.ndarray, x1: np.ndarray,
                 dx: np.ndarray, out: np.ndarray) -> None:
    """RESIZE_BILINEAR of float32 NHWC ``x`` into ``out`` [N, OH, OW, C], given per output row
    its two source rows and the upper one's weight (``y0``, ``y1``, ``dy``) and the same per
    output column. Each value is ``(a*(1-dx) + b*dx)*(1-dy) + (c*(1-dx) + d*dx)*dy`` in
    float32, the numpy kernel's operations in its order (``resize._bilinear``): bit-identical."""
    one = np.float32(1)
    n, c = x.shape[0], x.shape[3]
    oh, ow = out.shape[1], out.shape[2]
    for b in range(n):
        for oy in range(oh):
            top, bottom, o = x[b, y0[oy]], x[b, y1[oy]], out[b, oy]
            wy = dy[oy]
            vy = one - wy
            for ox in range(ow):
                wx = dx[ox]
                vx = one - wx
                ta, tb, ba, bb, dst = top[x0[ox]], top[x1[ox]], bottom[x0[ox]], bottom[x1[ox]], o[ox]
                for k in range(c):
                    t = ta[k] * vx + tb[k] * wx
                    u = ba[k] * vx + bb[k] * wx
                    dst[k] = t * vy + u * wy


#: The one signature ``pad_last_f32`` is compiled for.
PAD_LAST_F32 = "void(Array(float32, 2, 'C', readonly=True), float32[:, ::1], int64, float32)"


def pad_last_f32(x: np.ndarray, out: np.ndarray, lo: int, fill: np.float32) -> None:
    """PAD of the last axis only: ``out[p] = [fill]*lo + x[p] + [fill]*rest`` for float32 ``x``
    [P, C] and ``out`` [P, C + lo + rest], one pass (numpy: a strided fill per side, then a
    strided copy: 2.5-3x slower on a channel PAD before a residual ADD). Indexed flat: with a
    slice per row (few channels, many rows) the loop took 1.3x numpy's time."""
    c, width = x.shape[1], out.shape[1]
    xf, of = x.reshape(-1), out.reshape(-1)
    u = np.uint64
    for p in range(x.shape[0]):
        src, dst = u(p * c), u(p * width)
        for k in range(u(lo)):
            of[dst + k] = fill
        body = dst + u(lo)
        for k in range(u(c)):
            of[body + k] = xf[src + k]
        for k in range(u(lo + c), u(width)):
            of[dst + k] = fill
