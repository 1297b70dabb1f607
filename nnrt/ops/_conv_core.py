"""The compute cores of the 2-D convolutions, in real numbers and NHWC: the run's ``Geometry``,
im2col by window views, and the depthwise tap loop.

Why these formulations (``benchmarks/kernels.py`` measures them against ONNX Runtime):

* numpy ufuncs run fastest on contiguous 1-D operands that fit in cache: a 2-D slice with a
  row stride, or a [C] weight broadcast along rows, costs 1.5-2x as much per element. The
  depthwise core therefore copies the input once into a zero-padded, *phase-split* buffer
  (for stride s, every s-th row and column of the padded input in one plane per phase, so
  that every tap of every stride reads whole output rows as contiguous ranges) and sums the
  taps' products with one ``np.einsum`` per phase, the weights tiled to one output row: one
  pass per tap and no temporary, about twice as fast as a multiply and an add per tap.
* A convolution with few outputs and many taps (a temporal convolution, an STFT as a conv) is
  one contraction over a strided window view (``np.einsum`` or one gather and one product)
  instead of a loop over taps.
* im2col gathers the taps from a strided window view in one copy, not one copy per tap.
* With numba, float32 depthwise runs a compiled loop instead (``compiled_depthwise``: the
  row loop at column stride 1, the pixel loop otherwise; ``_jit_float`` says why), its
  per-geometry layout (column table, weights tiled to a block) made once and remembered.

Integer-valued inputs (the quantized kernels pass zero-point-centred 8-bit values) keep exact
sums as long as every partial sum stays below 2**24 in float32 (``exact_in_float32``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nnrt.ops._common import activation_bounds
from nnrt.ops._jit import compiled
from nnrt.ops._jit_depthwise import (
    BLOCK,
    DEPTHWISE_NINE_F32,
    DEPTHWISE_QUADS_F32,
    DEPTHWISE_ROWS_F32,
    NINE_MIN_CHANNELS,
    QUADS_MIN_CHANNELS,
    depthwise_nine_f32,
    depthwise_quads_f32,
    depthwise_rows_f32,
)
from nnrt.ops._jit_float import WINDOW_PIXELS_F32, window_pixels_f32

__all__ = [
    "Geometry",
    "CompiledDepthwise",
    "compiled_depthwise",
    "depthwise_direct",
    "depthwise_sums",
    "exact_in_float32",
    "im2col",
    "live_taps",
    "padded",
    "window_view",
]

@dataclass(frozen=True, slots=True)
class Geometry:
    """Padding, strides, dilations and output size of one run (all in NHWC terms)."""

    top: int
    bottom: int
    left: int
    right: int
    stride_h: int
    stride_w: int
    dil_h: int
    dil_w: int
    out_h: int
    out_w: int
    nchw: bool
    act: int
    extra: int


def exact_in_float32(taps: int, x_max: int = 255, w_max: int = 255) -> bool:
    """Whether sums of ``taps`` products of integers up to ``x_max`` and ``w_max`` are exact in float32."""
    return taps * x_max * w_max < 1 << 24


def padded(x: np.ndarray, g: Geometry, k_h: int, k_w: int, dtype: type[np.floating] | None = None) -> np.ndarray:
    """``x`` (NHWC) zero-padded to exactly the extent the taps read (``x`` itself when none is needed)."""
    n, h, w, c = x.shape
    need_h = (g.out_h - 1) * g.stride_h + (k_h - 1) * g.dil_h + 1
    need_w = (g.out_w - 1) * g.stride_w + (k_w - 1) * g.dil_w + 1
    if g.top == 0 and g.left == 0 and need_h <= h and need_w <= w and (dtype is None or x.dtype == dtype):
        return x
    xp = np.zeros((n, need_h, need_w, c), dtype=dtype or x.dtype)
    hh, ww = min(h, need_h - g.top), min(w, need_w - g.left)
    xp[:, g.top : g.top + hh, g.left : g.left + ww] = x[:, :hh, :ww]
    return xp


def window_view(xp: np.ndarray, g: Geometry, k_h: int, k_w: int) -> np.ndarray:
    """The taps of padded NHWC ``xp`` as a read-only view [N, OH, OW, KH, KW, C] (no copy)."""
    sn, sh, sw, sc = xp.strides
    shape = (xp.shape[0], g.out_h, g.out_w, k_h, k_w, xp.shape[3])
    strides = (sn, sh * g.stride_h, sw * g.stride_w, sh * g.dil_h, sw * g.dil_w, sc)
    view: np.ndarray = as_strided(xp, shape, strides, writeable=False)
    return view


def im2col(xp: np.ndarray, g: Geometry, k_h: int, k_w: int, ones: bool) -> np.ndarray:
    """[N*OH*OW, KH*KW*C (+1)] rows of taps in (kh, kw, c) order, plus a column of ones when asked."""
    n, c = xp.shape[0], xp.shape[3]
    p, k = n * g.out_h * g.out_w, k_h * k_w * c
    cols = np.empty((p, k + 1 if ones else k), dtype=xp.dtype)
    np.copyto(cols[:, :k].reshape(n, g.out_h, g.out_w, k_h, k_w, c), window_view(xp, g, k_h, k_w))
    if ones:
        cols[:, k] = 1
    return cols


def depthwise_direct(x: np.ndarray, taps: np.ndarray, g: Geometry) -> np.ndarray:
    """Depthwise convolution (no bias) as one contraction: for few outputs and many taps.

    ``taps`` is the real filter [KH, KW, C]; returns a fresh [N, OH, OW, C] array.
    """
    k_h, k_w = taps.shape[0], taps.shape[1]
    xp = padded(x, g, k_h, k_w)
    out: np.ndarray = np.einsum("nhwijc,ijc->nhwc", window_view(xp, g, k_h, k_w), taps)
    return out


def _phase_range(p: int, s: int, before: int, size: int, count: int) -> tuple[int, int, int]:
    """Phase ``p`` of stride ``s`` over an input of ``size`` padded by ``before``: the first and
    last (exclusive) buffer positions below ``count`` that hold input, and the first input index."""
    lo = max(0, (before - p + s - 1) // s)
    hi = min(count, (size - 1 + before - p) // s + 1)
    return lo, hi, lo * s + p - before


def _phase_buffer(x: np.ndarray, g: Geometry, k_h: int, k_w: int, dtype: type[np.floating], zero: float
                  ) -> tuple[np.ndarray, int, int]:
    """``x - zero`` (NHWC) zero-padded and split by stride phase: [SH, SW, N, HQ*WQ*C] and HQ, WQ.

    Phase (a, b) holds padded rows a, a+SH, ... and columns b, b+SW, ...; HQ and WQ cover the
    output grid plus the taps' reach, plus one spare row for the wider grid's last taps.
    """
    n, h, w, c = x.shape
    sh, sw = g.stride_h, g.stride_w
    hq = g.out_h + (k_h - 1) * g.dil_h // sh + 1
    wq = g.out_w + (k_w - 1) * g.dil_w // sw
    buf = np.zeros((sh, sw, n, hq, wq, c), dtype=dtype)
    for a in range(sh):
        r0, r1, src_r = _phase_range(a, sh, g.top, h, hq)
        if r0 >= r1:
            continue
        for b in range(sw):
            c0, c1, src_c = _phase_range(b, sw, g.left, w, wq)
            if c0 >= c1:
                continue
            src = x[:, src_r : src_r + (r1 - r0 - 1) * sh + 1 : sh, src_c : src_c + (c1 - c0 - 1) * sw + 1 : sw]
            dst = buf[a, b, :, r0:r1, c0:c1]
            if zero:
                np.subtract(src, dtype(zero), out=dst, casting="unsafe")
            else:
                np.copyto(dst, src, casting="unsafe")
    return buf.reshape(sh, sw, n, hq * wq * c), hq, wq


class TiledTaps:
    """A depthwise filter's taps [KH*KW, C] tiled to the length of one accumulator block, cached
    per length (a kernel sees few input widths)."""

    __slots__ = ("_cache", "taps")

    def __init__(self, taps: np.ndarray) -> None:
        self.taps = np.ascontiguousarray(taps.reshape(-1, taps.shape[-1]))
        self._cache: dict[int, np.ndarray] = {}

    def tiled(self, repeats: int) -> np.ndarray:
        t = self._cache.get(repeats)
        if t is None:
            t = np.tile(self.taps, (1, repeats))
            if len(self._cache) < 8:
                self._cache[repeats] = t
        return t


def depthwise_sums(x: np.ndarray, taps: TiledTaps, k_h: int, k_w: int, g: Geometry,
                   dtype: type[np.floating], zero: float = 0.0) -> np.ndarray:
    """Depthwise sums (no bias) of NHWC ``x - zero``: a fresh [N, OH, OW*C] array of ``dtype``.

    ``taps`` holds the filter in ``dtype``. For each stride phase, the taps that read it form a
    grid (rows i0, i0 + di, ...; columns j0, j0 + dj, ...) whose sources are one strided view
    of the phase's buffer; einsum sums the products over the taps, with each output row's
    ``OW*C`` values contiguous and the weights tiled to a row and broadcast down the rows (one
    pass per tap, no temporary: twice as fast as a multiply and an add per tap).
    """
    n, c = x.shape[0], x.shape[3]
    buf, _hq, wq = _phase_buffer(x, g, k_h, k_w, dtype, zero)
    oh, ow = g.out_h, g.out_w
    row, length = wq * c, ow * c
    tiled = taps.tiled(ow).reshape(k_h, k_w, length)
    item = buf.itemsize
    out = np.empty((n, oh, length), dtype=dtype)
    for a, (i0, i_step, ni) in _phase_taps(k_h, g.dil_h, g.stride_h):
        for b, (j0, j_step, nj) in _phase_taps(k_w, g.dil_w, g.stride_w):
            base = ((i0 * g.dil_h // g.stride_h) * wq + j0 * g.dil_w // g.stride_w) * c
            steps = (i_step * g.dil_h // g.stride_h * row * item, j_step * g.dil_w // g.stride_w * c * item)
            wsub = tiled[i0::i_step, j0::j_step][:ni, :nj]
            w = as_strided(wsub, (ni, nj, oh, length), (*wsub.strides[:2], 0, item), writeable=False)
            first = a == 0 and b == 0
            for bi in range(n):
                src = as_strided(buf[a, b, bi, base:], (ni, nj, oh, length), (*steps, row * item, item),
                                 writeable=False)
                if first:
                    np.einsum("ijrl,ijrl->rl", src, w, out=out[bi])
                else:
                    out[bi] += np.einsum("ijrl,ijrl->rl", src, w)
    return out


def _phase_taps(k: int, dil: int, stride: int) -> list[tuple[int, tuple[int, int, int]]]:
    """For each stride phase the ``k`` taps read: (phase, (first tap, tap step, count)).

    Phase 0 always comes first (tap 0 reads it)."""
    by_phase: dict[int, list[int]] = {}
    for i in range(k):
        by_phase.setdefault(i * dil % stride, []).append(i)
    return [(p, (ts[0], ts[1] - ts[0] if len(ts) > 1 else 1, len(ts))) for p, ts in sorted(by_phase.items())]


#: numba's fast-math flag for fused multiply-adds (the row-major depthwise loop's sums).
_CONTRACT = frozenset({"contract"})

#: A compiled depthwise layer: (NHWC input shape, filter taps, bias, KW, geometry, HARD_SWISH
#: after the activation) -> its run on float32 NHWC inputs of that shape (the layout its loop
#: reads made once: a small layer's loop takes a few microseconds, as long as making it).
CompiledDepthwise = Callable[[tuple[int, ...], TiledTaps, TiledTaps, int, Geometry, bool],
                             Callable[[np.ndarray], np.ndarray]]


def compiled_depthwise(stride_w: int | None, channels: int | None, k_w: int | None = None
                       ) -> CompiledDepthwise | None:
    """At preparation: the compiled float32 depthwise loop for a layer's column stride and
    filter width (the channel count, unused now, may matter to a later loop), or None when numba
    is absent or ``NNRT_JIT=0``.

    The row-major loop for column stride 1, the pixel-major one otherwise (``_jit_float``'s
    module comment; measured with both loops indexed flat: at stride 1 the row loop takes
    0.65-1.05 of the pixel loop's time, [1,128,128,8] 1x1 to [1,8,8,64] 3x3; at stride 2 the
    pixel loop 0.5-0.8 of the row loop's on a phase-split input, 16-144 channels). Only the
    loop a layer uses is compiled (or loaded from numba's cache). A filter five columns wide at
    column stride 1 over ``QUADS_MIN_CHANNELS`` or more and rows of 12 pixels or more takes
    ``depthwise_quads_f32`` instead when undilated (four output pixels per pass where they fit;
    CPU time, 5x5: [1,14,14,256] 78 -> 60 us, [1,3,96,88] 28 -> 18, [1,2,96,200] 31 -> 18; on
    [1,7,7,512] no four pixels fit: 36 -> 38, the row loop kept). At column strides above 1,
    3x3 filters over ``NINE_MIN_CHANNELS`` or more take ``depthwise_nine_f32`` (one pass per
    output pixel: 3x3/2 [1,112,112,32] 109 -> 81 us, [1,28,28,128] 20 -> 14).
    """
    if stride_w == 1:
        rows = compiled(depthwise_rows_f32, DEPTHWISE_ROWS_F32, _CONTRACT)
        quads = compiled(depthwise_quads_f32, DEPTHWISE_QUADS_F32, _CONTRACT) if k_w == 5 and rows else None
        return None if rows is None else partial(_depthwise_rows, rows, quads)
    pixels = compiled(window_pixels_f32, WINDOW_PIXELS_F32)
    nine = compiled(depthwise_nine_f32, DEPTHWISE_NINE_F32, _CONTRACT) if k_w == 3 and pixels else None
    return None if pixels is None else partial(_depthwise_pixels, pixels, nine)


def _depthwise_pixels(fn: Callable[..., Any], nine: Callable[..., Any] | None, shape: tuple[int, ...], taps: TiledTaps,
                      bias: TiledTaps, k_w: int, g: Geometry, hswish: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """The pixel loop's run (column strides above 1), or ``nine`` (``depthwise_nine_f32``) on a
    3x3 layer of ``NINE_MIN_CHANNELS`` or more."""
    n, c = shape[0], shape[3]
    lo, hi = activation_bounds(g.act)
    w, b = taps.taps.reshape(-1, k_w, c), bias.taps[0]
    if nine is not None and w.shape[:2] == (3, 3) and c >= NINE_MIN_CHANNELS:

        def run_nine(x: np.ndarray) -> np.ndarray:
            out = np.empty((n, g.out_h, g.out_w, c), dtype=np.float32)
            nine(np.ascontiguousarray(x, dtype=np.float32), w, b, out, g.stride_h, g.stride_w, g.dil_h, g.dil_w, g.top,
                 g.left, lo, hi, hswish)
            return out

        return run_nine

    def run(x: np.ndarray) -> np.ndarray:
        out = np.empty((n, g.out_h, g.out_w, c), dtype=np.float32)
        fn(np.ascontiguousarray(x, dtype=np.float32), w, b, out, g.stride_h, g.stride_w, g.dil_h, g.dil_w, g.top, g.left,
           lo, hi, False, hswish)
        return out

    return run


def _depthwise_rows(fn: Callable[..., Any], quads: Callable[..., Any] | None, shape: tuple[int, ...], taps: TiledTaps,
                    bias: TiledTaps, k_w: int, g: Geometry, hswish: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """Lays out what ``depthwise_rows_f32`` reads (column stride 1): the rows flattened, the
    weights and bias tiled to ``BLOCK`` floats of whole pixels, and per tap column the shift and
    the output range it covers; or runs ``quads`` (``depthwise_quads_f32``) on a layer it takes
    (``compiled_depthwise``)."""
    n, h, w, c = shape
    reps, cols, lo, hi = _row_layout(w, c, k_w, g)
    flat, rows = (n, h, w * c), (n, g.out_h, g.out_w * c)
    if quads is not None and k_w == 5 and g.dil_w == 1 and c >= QUADS_MIN_CHANNELS and w >= 12:
        wq, spans = taps.taps.reshape(-1, 5, c), _filter_rows(h, taps.taps.shape[0] // 5, g)

        def run_quads(x: np.ndarray) -> np.ndarray:
            out = np.empty((n, g.out_h, g.out_w, c), dtype=np.float32)
            quads(np.ascontiguousarray(x, dtype=np.float32).reshape(flat), wq, bias.taps[0], out.reshape(rows), spans,
                  g.stride_h, g.dil_h, g.top, g.left, lo, hi, hswish)
            return out

        return run_quads
    wt, bt = taps.tiled(reps).reshape(-1, k_w, reps * c), bias.tiled(reps)[0]

    def run(x: np.ndarray) -> np.ndarray:
        out = np.empty((n, g.out_h, g.out_w, c), dtype=np.float32)
        fn(np.ascontiguousarray(x, dtype=np.float32).reshape(flat), wt, bt, cols, out.reshape(rows), g.stride_h, g.dil_h,
           g.top, lo, hi, hswish)
        return out

    return run


@lru_cache(maxsize=512)
def _row_layout(w: int, c: int, k_w: int, g: Geometry) -> tuple[int, np.ndarray, np.float32, np.float32]:
    """For ``depthwise_rows_f32`` on an input row of ``w`` pixels of ``c`` channels: the pixels
    the weights are tiled to, ``cols`` (per tap column: shift, first, end; read-only) and the
    activation's bounds. Remembered: a small layer's loop takes 1-2 us, this 3-5 us."""
    cols = np.empty((k_w, 3), dtype=np.int64)
    for j in range(k_w):
        off = j * g.dil_w - g.left
        cols[j] = off * c, max(0, -off) * c, max(0, min(g.out_w, w - off)) * c
    cols.flags.writeable = False
    return max(1, min(g.out_w, -(-BLOCK // c))), cols, *activation_bounds(g.act)


@lru_cache(maxsize=512)
def _filter_rows(h: int, k_h: int, g: Geometry) -> np.ndarray:
    """Per output row, the filter rows ``[first, end)`` that read an input of ``h`` rows
    (read-only int64 [OH, 2]; remembered per geometry, as ``_row_layout``)."""
    spans = np.empty((g.out_h, 2), dtype=np.int64)
    for oy in range(g.out_h):
        inside = [i for i in range(k_h) if 0 <= oy * g.stride_h - g.top + i * g.dil_h < h]  # a contiguous range
        spans[oy] = (inside[0], inside[-1] + 1) if inside else (0, 0)
    spans.flags.writeable = False
    return spans


def live_taps(g: Geometry | None, shape: tuple[int, ...] | None, filter_shape: tuple[int, ...]
              ) -> tuple[int, int, int, int] | None:
    """``(i0, i1, j0, j1)``: the filter rows ``i0..i1`` and columns ``j0..j1`` (exclusive ends)
    outside which every tap reads padding only, for every output; None when that is the whole
    filter, when the geometry is not constant, or when dropping the leading taps would leave a
    negative padding. (PP-OCRv3's recognizer runs 3x3 filters over 1024 channels on a one-row
    input: two thirds of their products are with padding; ONNX Runtime skips them.)"""
    if g is None or shape is None:
        return None
    in_h, in_w = (shape[2], shape[3]) if g.nchw else (shape[1], shape[2])

    def span(k: int, out: int, stride: int, before: int, dil: int, size: int) -> tuple[int, int]:
        used = [i for i in range(k) if any(0 <= o * stride - before + i * dil < size for o in range(out))]
        return (used[0], used[-1] + 1) if used else (0, k)

    i0, i1 = span(filter_shape[1], g.out_h, g.stride_h, g.top, g.dil_h, in_h)
    j0, j1 = span(filter_shape[2], g.out_w, g.stride_w, g.left, g.dil_w, in_w)
    if (i0, i1, j0, j1) == (0, filter_shape[1], 0, filter_shape[2]) or i0 * g.dil_h > g.top or j0 * g.dil_w > g.left:
        return None
    return i0, i1, j0, j1
