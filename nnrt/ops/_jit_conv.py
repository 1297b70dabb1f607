"""Compiled float32 CONV_2D (numba): im2col built by a compiled loop in row blocks that stay in
L2, one BLAS product per block written straight into the output, bias and fused activation
applied to the block while it is in cache; and Winograd F(2x2, 3x3) for 3x3 stride-1 filters
over many channels.

Why (``benchmarks/kernels.py`` measures it against numpy and ONNX Runtime): numpy's im2col of a
KxK convolution is one copy from a strided window view into a [P, K*K*C] buffer; for a
[1,80,80,96] input that buffer is 22 MB, written once and read once by BLAS from memory, and
numpy's copy of a 6-D view with a short inner dimension (C = 3 or 12 floats) pays its loop
overhead every few elements. The loop here writes each output pixel's row of taps directly,
one contiguous run of ``KW*C`` floats per filter row when the row lies inside the input (any
column stride, dilation 1), and fills a block of about ``BLOCK_BYTES`` at a time, so BLAS reads
its left operand from L2. Measured on the real models' shapes: 1.2-2.5x faster than the numpy
path (3x3 96->24 on [1,80,80,96]: 6.1 -> 3.8 ms; the first layer 5x5/2 3->32: 0.93 -> 0.77 ms).
With at most 4 input channels (first layers) the taps are gathered channel-major instead
(``planes_rows_f32``, blocks of ``PLANES_ROWS`` pixels or more): BLAS multiplies the transposed
[K, pixels] block faster when K is 27 or 75.

What is left after that is BLAS itself (OpenBLAS runs these products at 85-135 GFLOP/s, ONNX
Runtime's direct convolutions at ~160). Winograd F(2x2, 3x3) needs 2.25x fewer multiply-adds:
each 4x4 input tile is transformed (``winograd_input_f32``, channels innermost), 16 products
[tiles, Cin] x [Cin, Cout] run per block of tile rows, and each tile's 16 products are
transformed back into 2x2 outputs with bias and activation (``winograd_output_f32``). From 48
input channels it is 1.35-1.8x faster than the blocked im2col (3x3 96->96 on [1,52,52,96]:
3.9 -> 2.3 ms, ONNX Runtime 2.7); below, or with few output channels (``WINO_MIN_BALANCE``), the
transforms cost more than they save. Its results
differ from the direct sum by rounding only (the transforms' coefficients are 0, +-1 and 1/2);
inputs with NaN, inf or huge values take the im2col path, where they give what numpy gives.
A direct compiled convolution (taps outer, output channels inner) was measured too and lost
to im2col + BLAS by 1.3-3x on every shape, the first layers (3 input channels) included.

Every loop here is valid numpy/Python (mypy checks it; it runs uncompiled, slowly) written
for numba's ``njit``, as in ``_jit_float``. ``Im2colConv`` and ``WinogradConv`` are the
plain-Python drivers the CONV_2D kernel builds at preparation when numba is available; the
numpy formulation in ``conv.conv_nhwc`` stays the reference (``NNRT_JIT=0``, the CTS) and both
are tested against each other (``tests/unit/test_jit_conv.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.ops._conv_core import Geometry
from nnrt.ops._epilogue import Epilogue
from nnrt.ops._gemm import Product, batched_product, flush_subnormals, product
from nnrt.ops._jit import compiled

__all__ = [
    "scratch",
    "BLOCK_BYTES",
    "IM2COL_ROWS_F32",
    "MIN_ROWS",
    "PLANES_MAX_CHANNELS",
    "PLANES_OUT_FLOATS",
    "PLANES_ROWS",
    "PLANES_ROWS_F32",
    "SCRATCH_MAX",
    "WINO_INPUT_F32",
    "WINO_LIMIT",
    "WINO_MIN_BALANCE",
    "WINO_MIN_CHANNELS",
    "WINO_MIN_SIZE",
    "WINO_OUTPUT_F32",
    "Im2colConv",
    "WinogradConv",
    "im2col_rows_f32",
    "planes_rows_f32",
    "winograd",
    "winograd_filter",
    "winograd_input_f32",
    "winograd_output_f32",
]

#: Size of one block of im2col rows, at least (about the L2 cache: 1 MB per core here). Each
#: BLAS call packs the whole filter matrix again, so a block also holds at least twice the
#: filter's bytes. Measured over 128 KB..whole on the real models' 3x3 shapes
#: (``/work/notes/conv.md``): 1 MB best or within noise where the filter is small; with a
#: 1.3-2.6 MB filter, blocks of 2-4 MB run 1.2x faster than 1 MB ones and as fast as one block.
BLOCK_BYTES = 1 << 20

#: Fewest rows in a block (BLAS is inefficient on very short left operands; a 3x3x1024 filter
#: gives 28 rows of 36 KB in 1 MB).
MIN_ROWS = 64

#: The one signature ``im2col_rows_f32`` is compiled for.
IM2COL_ROWS_F32 = (
    "void(Array(float32, 3, 'C', readonly=True), float32[:, ::1], int64, int64, int64, int64, int64,"
    " int64, int64, int64, int64, int64, int64, int64)"
)


def im2col_rows_f32(
    xf: np.ndarray,
    cols: np.ndarray,
    p0: int,
    c: int,
    kh: int,
    kw: int,
    stride_h: int,
    stride_w: int,
    dil_h: int,
    dil_w: int,
    top: int,
    left: int,
    out_h: int,
    out_w: int,
) -> None:
    """Rows ``p0 .. p0 + len(cols)`` of the im2col matrix of float32 NHWC input ``xf`` viewed as
    [N, H, W*C]: row ``p`` (output pixel ``n, oy, ox`` in row-major order) holds the ``KH*KW*C``
    input values its filter taps read, in (kh, kw, c) order; taps outside the input read zero.

    For dilation 1 along the width, a filter row inside the input is one contiguous run of
    ``KW*C`` floats, copied in one loop; otherwise each tap's ``C`` floats are copied (or zeroed).
    """
    h, wc = xf.shape[1], xf.shape[2]
    w = wc // c
    kwc = kw * c
    rows = cols.shape[0]
    per_image = out_h * out_w
    r = 0
    p = p0
    while r < rows:
        b = p // per_image
        rem = p - b * per_image
        oy = rem // out_w
        ox0 = rem - oy * out_w
        ox1 = min(out_w, ox0 + rows - r)
        for i in range(kh):
            iy = oy * stride_h - top + i * dil_h
            base = i * kwc
            if iy < 0 or iy >= h:
                for ox in range(ox0, ox1):
                    zero = cols[r + ox - ox0, base : base + kwc]
                    for k in range(kwc):
                        zero[k] = 0.0
                continue
            xr = xf[b, iy]
            for ox in range(ox0, ox1):
                dst = cols[r + ox - ox0, base : base + kwc]
                ix0 = ox * stride_w - left
                if dil_w == 1 and ix0 >= 0 and ix0 + kw <= w:
                    src = xr[ix0 * c : ix0 * c + kwc]
                    for k in range(kwc):
                        dst[k] = src[k]
                    continue
                for j in range(kw):
                    ix = ix0 + j * dil_w
                    d = dst[j * c : j * c + c]
                    if ix < 0 or ix >= w:
                        for k in range(c):
                            d[k] = 0.0
                    else:
                        s = xr[ix * c : ix * c + c]
                        for k in range(c):
                            d[k] = s[k]
        r += ox1 - ox0
        p += ox1 - ox0


#: The one signature ``planes_rows_f32`` is compiled for: ``im2col_rows_f32``'s.
PLANES_ROWS_F32 = IM2COL_ROWS_F32

#: Input channels up to which a CONV_2D gathers its taps channel-major (``planes_rows_f32``):
#: with K = 27 or 75 taps BLAS multiplies a transposed [K, pixels] block 1.25x faster than a
#: [pixels, K] one, and the gather (one input value per output pixel and tap) is cheap.
#: Measured on the first layers of the real models (3 channels): 1.15-1.8x faster than the
#: im2col rows; at 8 channels both are equal.
PLANES_MAX_CHANNELS = 4

#: Output pixels per block of channel-major planes: at least ``PLANES_ROWS``, and as many as
#: make ``PLANES_OUT_FLOATS`` floats of output (128 KB: the product's block stays in L2 while
#: BLAS writes it). Measured on first layers (3 channels, 3x3 and 5x5, 8-64 output channels,
#: blocks of 512-4096 pixels interleaved): 1024 pixels best for 32 output channels and more
#: (224x224 3x3/2 -> 32: 373 -> 321 us against 4096; 1.0-1.15x at 64), 2048 for 16 and 4096
#: for 8; the product alone, [P, 27] x [27, 32]: 136 us in blocks of 1024 against 217 in 4096.
PLANES_ROWS = 1024
PLANES_OUT_FLOATS = 1 << 15


def planes_rows_f32(
    xf: np.ndarray,
    planes: np.ndarray,
    p0: int,
    c: int,
    kh: int,
    kw: int,
    stride_h: int,
    stride_w: int,
    dil_h: int,
    dil_w: int,
    top: int,
    left: int,
    out_h: int,
    out_w: int,
) -> None:
    """The transpose of ``im2col_rows_f32``: column ``r`` of ``planes`` [KH*KW*C, R] holds the
    taps of output pixel ``p0 + r``, row ``(i*KW + j)*C + c`` the values of one tap and channel
    (zero outside the input). Each row is written contiguously, one output row at a time.

    Each input row a tap row reads is first split once into one contiguous run per channel and
    column phase (``x % stride_w``), kept for the next output rows that read it (``KH`` rows
    kept): a tap's values for an output row are then one contiguous copy, zeros before and after
    (not one strided, bounds-checked load per value): 2.3x fewer strided loads on a 3x3/2 first
    layer; the block's first layer (224x224x3) 114 -> 105 us CPU, the rest being the split's
    strided loads (~45 us) and the copies (~33 us)."""
    h, wc = xf.shape[1], xf.shape[2]
    w = wc // c
    rows = planes.shape[1]
    per_image = out_h * out_w
    wq = (w + stride_w - 1) // stride_w  # columns of one phase, at most
    run = c * stride_w * wq  # floats of one split row
    split = np.empty(kh * run, dtype=np.float32)
    tags = np.full(kh, -1, dtype=np.int64)  # which input row (image * h + y) each slot holds
    pf = planes.reshape(-1)
    u = np.uint64
    r = 0
    p = p0
    while r < rows:
        b = p // per_image
        rem = p - b * per_image
        oy = rem // out_w
        ox0 = rem - oy * out_w
        cnt = min(out_w - ox0, rows - r)
        for i in range(kh):
            iy = oy * stride_h - top + i * dil_h
            if iy < 0 or iy >= h:
                for t in range(kw * c):
                    d = u((i * kw * c + t) * rows + r)
                    for q in range(u(cnt)):
                        pf[d + q] = 0.0
                continue
            key = b * h + iy
            slot = 0
            for s in range(kh):  # the slot holding this row, else the one holding the oldest
                if tags[s] == key or (tags[slot] != key and tags[s] < tags[slot]):
                    slot = s
            sb = slot * run
            if tags[slot] != key:
                tags[slot] = key
                src = u((b * h + iy) * wc)
                xflat = xf.reshape(-1)
                for ph in range(min(stride_w, w)):
                    n_ph = (w - ph + stride_w - 1) // stride_w
                    for ci in range(c):
                        d = u(sb + (ci * stride_w + ph) * wq)
                        s0 = src + u(ph * c + ci)
                        step = u(stride_w * c)
                        for k in range(u(n_ph)):
                            split[d + k] = xflat[s0 + k * step]
            for j in range(kw):
                off = j * dil_w - left
                ph = off % stride_w
                shift = (off - ph) // stride_w  # tap column of output x: phase ph, index x + shift
                n_ph = (w - ph + stride_w - 1) // stride_w
                q_lo = min(cnt, max(0, -shift - ox0))
                q_hi = max(q_lo, min(cnt, n_ph - shift - ox0))
                for ci in range(c):
                    d = u(((i * kw + j) * c + ci) * rows + r)
                    for q in range(u(q_lo)):
                        pf[d + q] = 0.0
                    if q_hi > q_lo:
                        s0 = u(sb + (ci * stride_w + ph) * wq + ox0 + shift + q_lo)
                        d1 = d + u(q_lo)
                        for q in range(u(q_hi - q_lo)):
                            pf[d1 + q] = split[s0 + q]
                    for q in range(u(q_hi), u(cnt)):
                        pf[d + q] = 0.0
        r += cnt
        p += cnt


_local = threading.local()

#: Largest padded input (float32 elements: 16 MB) that Winograd copies into the thread's
#: scratch buffer; a larger one gets a buffer of its own, so no thread keeps one huge input's
#: worth of memory for its life (the other scratch uses are bounded by the block sizes).
SCRATCH_MAX = 4 << 20


def scratch(size: int) -> np.ndarray:
    """A float32 buffer of ``size`` elements private to the calling thread, reused by every
    CONV_2D kernel that runs on it (a kernel never suspends while it uses it). A fresh buffer
    per call would cost its page faults each time: 0.5 ms per MB on this machine, as much as
    the im2col loop itself."""
    buf: np.ndarray | None = getattr(_local, "buf", None)
    if buf is None or buf.size < size:
        buf = _local.buf = np.empty(size, dtype=np.float32)
    return buf[:size]


class Im2colConv:
    """A float32 CONV_2D (group 1) as blocked compiled im2col + BLAS, bias and fused activation
    per block (module doc). Made once at preparation from the compiled functions and the
    backend's product (``_gemm.product`` unless ``mm`` is given); ``__call__`` takes one run's
    NHWC input, filter matrix and geometry."""

    __slots__ = ("_bias_act", "_im2col", "_mm", "_planes")

    def __init__(self, im2col: Callable[..., Any], bias_act: Callable[..., Any],
                 planes: Callable[..., Any] | None = None, mm: Product | None = None) -> None:
        self._im2col = im2col
        self._bias_act = bias_act
        self._planes = planes
        self._mm = mm if mm is not None else product()

    def __call__(self, x: np.ndarray, wmat: np.ndarray, k_h: int, k_w: int, g: Geometry,
                 lo: np.float32, hi: np.float32, epilogue: Epilogue | None = None) -> np.ndarray:
        """``x`` real float32 NHWC [N, H, W, C] (any strides), ``wmat`` the [K+1, Cout] matrix of
        ``conv.conv_matrix`` (taps in (kh, kw, c) order, then the bias row); returns a fresh
        NHWC [N, OH, OW, Cout] result, activation applied (``lo > hi``: none), then
        ``epilogue`` (``_epilogue``) on each block of rows while it is in cache."""
        n, h, w, c = x.shape
        k = k_h * k_w * c
        cout = wmat.shape[1]
        p = n * g.out_h * g.out_w
        xf = np.ascontiguousarray(x).reshape(n, h, w * c)
        weights, bias = wmat[:k], wmat[k]
        out = np.empty((p, cout), dtype=np.float32)
        fill, mm = self._im2col, self._mm
        planes = self._planes is not None and c <= PLANES_MAX_CHANNELS
        if self._planes is not None and planes:
            fill, rows = self._planes, min(p, max(PLANES_ROWS, PLANES_OUT_FLOATS // cout))
        else:
            rows = min(p, max(MIN_ROWS, max(BLOCK_BYTES, 8 * weights.size) // (4 * k)))
        buf = scratch(rows * k)
        for p0 in range(0, p, rows):
            r = min(rows, p - p0)
            block = buf[: r * k].reshape((k, r) if planes else (r, k))
            fill(xf, block, p0, c, k_h, k_w, g.stride_h, g.stride_w, g.dil_h, g.dil_w, g.top, g.left, g.out_h, g.out_w)
            dst = out[p0 : p0 + r]
            mm(block.T if planes else block, weights, dst)
            if epilogue is None:
                self._bias_act(dst, bias, lo, hi)
            else:
                epilogue.with_bias(dst, bias, lo, hi, p0, self._bias_act)
        return out.reshape(n, g.out_h, g.out_w, cout)


# -- Winograd F(2x2, 3x3) ---------------------------------------------------------------------

#: The transforms of F(2x2, 3x3) (Lavin and Gray, 2015): a 4x4 input tile ``d`` and a 3x3
#: filter ``g`` give the 2x2 outputs ``A^T [(G g G^T) * (B^T d B)] A``.
WINO_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])

#: The signatures ``winograd_input_f32`` and ``winograd_output_f32`` are compiled for.
WINO_INPUT_F32 = "void(Array(float32, 3, 'C', readonly=True), float32[:, :, ::1], int64, int64, int64, int64)"
WINO_OUTPUT_F32 = (
    "void(Array(float32, 3, 'C', readonly=True), Array(float32, 1, 'C', readonly=True), float32[:, :, :, ::1],"
    " int64, int64, int64, float32, float32)"
)


def winograd_filter(w: np.ndarray) -> np.ndarray:
    """A 3x3 filter [Cout, 3, 3, Cin] as the 16 [Cin, Cout] matrices ``G g G^T`` (float32, [16, Cin, Cout]),
    subnormal values flushed to zero (``_gemm.flush_subnormals``)."""
    u = np.einsum("ai,oijc,bj->abco", WINO_G, w.astype(np.float64), WINO_G)
    return flush_subnormals(np.ascontiguousarray(u.reshape(16, w.shape[3], w.shape[0]), dtype=np.float32))


def winograd_input_f32(xp: np.ndarray, v: np.ndarray, c: int, tiles_w: int, ty0: int, ty1: int) -> None:
    """``B^T d B`` of the 4x4 input tiles of rows ``ty0 .. ty1`` of every image into ``v``
    [16, tiles, C] (tile ``(n, ty, tx)`` at ``(n*(ty1-ty0) + ty-ty0) * tiles_w + tx``).

    ``xp`` [N, HP, WP*C] is the zero-padded NHWC input: tile ``(ty, tx)`` covers rows
    ``2ty .. 2ty+3`` and columns ``2tx .. 2tx+3``. The channels are innermost, so each
    transform runs over ``C`` contiguous values at once.
    """
    n = xp.shape[0]
    rows = ty1 - ty0
    for b in range(n):
        for ty in range(ty0, ty1):
            r0, r1, r2, r3 = xp[b, 2 * ty], xp[b, 2 * ty + 1], xp[b, 2 * ty + 2], xp[b, 2 * ty + 3]
            for tx in range(tiles_w):
                t = (b * rows + ty - ty0) * tiles_w + tx
                o = 2 * tx * c
                v0, v1, v2, v3 = v[0, t], v[1, t], v[2, t], v[3, t]
                v4, v5, v6, v7 = v[4, t], v[5, t], v[6, t], v[7, t]
                v8, v9, v10, v11 = v[8, t], v[9, t], v[10, t], v[11, t]
                v12, v13, v14, v15 = v[12, t], v[13, t], v[14, t], v[15, t]
                for k in range(c):
                    d00, d01, d02, d03 = r0[o + k], r0[o + c + k], r0[o + 2 * c + k], r0[o + 3 * c + k]
                    d10, d11, d12, d13 = r1[o + k], r1[o + c + k], r1[o + 2 * c + k], r1[o + 3 * c + k]
                    d20, d21, d22, d23 = r2[o + k], r2[o + c + k], r2[o + 2 * c + k], r2[o + 3 * c + k]
                    d30, d31, d32, d33 = r3[o + k], r3[o + c + k], r3[o + 2 * c + k], r3[o + 3 * c + k]
                    # rows: B^T d
                    a0, a1, a2, a3 = d00 - d20, d01 - d21, d02 - d22, d03 - d23
                    b0, b1, b2, b3 = d10 + d20, d11 + d21, d12 + d22, d13 + d23
                    e0, e1, e2, e3 = d20 - d10, d21 - d11, d22 - d12, d23 - d13
                    f0, f1, f2, f3 = d10 - d30, d11 - d31, d12 - d32, d13 - d33
                    # columns: (B^T d) B
                    v0[k] = a0 - a2
                    v1[k] = a1 + a2
                    v2[k] = a2 - a1
                    v3[k] = a1 - a3
                    v4[k] = b0 - b2
                    v5[k] = b1 + b2
                    v6[k] = b2 - b1
                    v7[k] = b1 - b3
                    v8[k] = e0 - e2
                    v9[k] = e1 + e2
                    v10[k] = e2 - e1
                    v11[k] = e1 - e3
                    v12[k] = f0 - f2
                    v13[k] = f1 + f2
                    v14[k] = f2 - f1
                    v15[k] = f1 - f3


def winograd_output_f32(m: np.ndarray, bias: np.ndarray, out: np.ndarray, tiles_w: int, ty0: int, ty1: int,
                        lo: np.float32, hi: np.float32) -> None:
    """``A^T m A`` of the products ``m`` [16, tiles, Cout] of tile rows ``ty0 .. ty1`` (laid out
    as ``winograd_input_f32``'s) plus ``bias``, clamped to [``lo``, ``hi``] (``lo > hi``: no
    clamp), into the 2x2 output pixels of each tile that ``out`` [N, OH, OW, Cout] has."""
    n, oh, ow, co = out.shape
    rows = ty1 - ty0
    clamp = lo <= hi
    for b in range(n):
        for ty in range(ty0, ty1):
            for tx in range(tiles_w):
                t = (b * rows + ty - ty0) * tiles_w + tx
                oy, ox = 2 * ty, 2 * tx
                two_rows, two_cols = oy + 1 < oh, ox + 1 < ow
                y00 = out[b, oy, ox]
                y01 = out[b, oy, ox + 1] if two_cols else y00
                y10 = out[b, oy + 1, ox] if two_rows else y00
                y11 = out[b, oy + 1, ox + 1] if two_rows and two_cols else y00
                m0, m1, m2, m3 = m[0, t], m[1, t], m[2, t], m[3, t]
                m4, m5, m6, m7 = m[4, t], m[5, t], m[6, t], m[7, t]
                m8, m9, m10, m11 = m[8, t], m[9, t], m[10, t], m[11, t]
                m12, m13, m14, m15 = m[12, t], m[13, t], m[14, t], m[15, t]
                for k in range(co):
                    # rows: A^T m
                    p0 = m0[k] + m4[k] + m8[k]
                    p1 = m1[k] + m5[k] + m9[k]
                    p2 = m2[k] + m6[k] + m10[k]
                    p3 = m3[k] + m7[k] + m11[k]
                    q0 = m4[k] - m8[k] - m12[k]
                    q1 = m5[k] - m9[k] - m13[k]
                    q2 = m6[k] - m10[k] - m14[k]
                    q3 = m7[k] - m11[k] - m15[k]
                    # columns, plus the bias; then the activation (NaN stays NaN)
                    r0 = p0 + p1 + p2 + bias[k]
                    r1 = p1 - p2 - p3 + bias[k]
                    r2 = q0 + q1 + q2 + bias[k]
                    r3 = q1 - q2 - q3 + bias[k]
                    if clamp:
                        r0 = lo if r0 < lo else (hi if r0 > hi else r0)
                        r1 = lo if r1 < lo else (hi if r1 > hi else r1)
                        r2 = lo if r2 < lo else (hi if r2 > hi else r2)
                        r3 = lo if r3 < lo else (hi if r3 > hi else r3)
                    # at an edge the missing pixels alias y00, which is written last
                    y11[k] = r3
                    y10[k] = r2
                    y01[k] = r1
                    y00[k] = r0


#: Fewest input channels for which a 3x3 stride-1 CONV_2D takes Winograd (below, the
#: transforms cost more than the products they save: measured 0.7-1.06x at 8-32 channels,
#: 1.35-1.8x at 48-96, 1.1x at 192 on 13x13).
WINO_MIN_CHANNELS = 48

#: Least ``Cin * Cout / (Cin + Cout)`` for Winograd: its transforms cost per tile in proportion to
#: Cin + Cout, the multiply-adds it saves in proportion to Cin x Cout, so few output channels do
#: not pay for them. Measured (CPU time, im2col / Winograd, interleaved; MKL's products | numpy's):
#: 48->24 on 80x80 0.73-0.79 | 0.88; 96->24 on 80x80 (PP-OCR det's FPN) 0.84-0.90 | 1.01-1.03;
#: 48->48 on 52x52 1.12-1.18 | 1.45; 128->32 on 40x40 1.01-1.05 | 1.44; 64->64 on 40x40 1.37 | 1.60.
WINO_MIN_BALANCE = 24

#: Fewest output rows and columns for Winograd: on small outputs its 16 transformed filters
#: (1.8x the filter's bytes) are read for few tiles, and odd sizes waste part of the edge
#: tiles (measured: 13x13 1.1-1.6x faster than im2col; 3x40 and 1x40 2-3x slower).
WINO_MIN_SIZE = 8

#: Largest magnitude of the inputs and filter values Winograd takes: the transforms add up to
#: 16 values of each, so nothing overflows float32 (3.4e38) on the way.
WINO_LIMIT = np.float32(1e36)

#: Bytes of transformed tiles (inputs and products) per block of tile rows: they stay in L2
#: between the transforms and the 16 products.
WINO_BLOCK_BYTES = 1 << 20


class WinogradConv:
    """A float32 3x3 CONV_2D with stride 1 and dilation 1 as Winograd F(2x2, 3x3): the input
    tiles transformed by a compiled loop, 16 BLAS products [tiles, Cin] x [Cin, Cout] per block
    of tile rows (2.25x fewer multiply-adds than im2col's one product), the outputs transformed
    back with bias and activation. Made at preparation from a constant filter; the 16 products
    are one batched call of the backend (``_gemm.batched_product`` unless ``bm`` is given)."""

    __slots__ = ("_bias", "_bm", "_fin", "_fout", "_u")

    def __init__(self, w: np.ndarray, bias: np.ndarray, fin: Callable[..., Any], fout: Callable[..., Any],
                 bm: Product | None = None) -> None:
        self._u = winograd_filter(w)
        self._bias = np.ascontiguousarray(bias, dtype=np.float32)
        self._fin, self._fout = fin, fout
        self._bm = bm if bm is not None else batched_product()

    @staticmethod
    def takes(x: np.ndarray) -> bool:
        """Whether the input is in Winograd's domain: every value finite and below ``WINO_LIMIT``
        in magnitude. Otherwise the transforms would turn an infinite input into NaN (inf - inf)
        where the direct sum gives +-inf or, after a fused activation, its bound, and could
        overflow; such inputs take the im2col path (two reductions: 2-3% of the convolution)."""
        return bool(x.min() > -WINO_LIMIT and x.max() < WINO_LIMIT)

    def __call__(self, x: np.ndarray, g: Geometry, lo: np.float32, hi: np.float32,
                 epilogue: Epilogue | None = None) -> np.ndarray:
        """``x`` real float32 NHWC (``takes(x)``); returns a fresh NHWC result, bias and activation
        applied, then ``epilogue`` (``_epilogue``) on the whole result."""
        n, h, w, c = x.shape
        cout = self._u.shape[2]
        th, tw = -(-g.out_h // 2), -(-g.out_w // 2)
        hp, wp = 2 * th + 2, 2 * tw + 2
        rows = max(1, min(th, WINO_BLOCK_BYTES // (64 * n * tw * (c + cout))))
        tiles = n * rows * tw
        size = n * hp * wp * c
        own = size > SCRATCH_MAX  # a padded copy this large is not kept for the thread's life
        buf = scratch(16 * tiles * (c + cout) + (0 if own else size))
        xp = (np.empty(size, dtype=np.float32) if own else buf[-size:]).reshape(n, hp, wp, c)
        xp.fill(0.0)
        hh, ww = min(h, hp - g.top), min(w, wp - g.left)
        xp[:, g.top : g.top + hh, g.left : g.left + ww] = x[:, :hh, :ww]
        xf = xp.reshape(n, hp, wp * c)
        v = buf[: 16 * tiles * c]
        m = buf[16 * tiles * c : 16 * tiles * (c + cout)]
        out = np.empty((n, g.out_h, g.out_w, cout), dtype=np.float32)
        for ty0 in range(0, th, rows):
            ty1 = min(th, ty0 + rows)
            t = n * (ty1 - ty0) * tw
            vb, mb = v[: 16 * t * c].reshape(16, t, c), m[: 16 * t * cout].reshape(16, t, cout)
            self._fin(xf, vb, c, tw, ty0, ty1)
            self._bm(vb, self._u, mb)
            self._fout(mb, self._bias, out, tw, ty0, ty1, lo, hi)
        if epilogue is not None:  # per block of tile rows it measured 1.05-1.1x the separate step
            return epilogue.after(out)
        return out


def winograd(w: np.ndarray, b: np.ndarray, g: Geometry | None, bias_act: Callable[..., Any] | None
             ) -> WinogradConv | None:
    """The Winograd form of a float32 CONV_2D with constant filter ``w`` [Cout, KH, KW, Cin],
    bias ``b`` and geometry ``g`` (None: not constant), when it applies (3x3, stride 1,
    dilation 1, finite weights below ``WINO_LIMIT``) and pays (``WINO_MIN_CHANNELS``,
    ``WINO_MIN_BALANCE``, ``WINO_MIN_SIZE``); else
    None. ``bias_act`` is the compiled bias pass (None: numba is not in use)."""
    if bias_act is None or g is None or w.shape[1:3] != (3, 3) or w.shape[3] < WINO_MIN_CHANNELS:
        return None
    if w.shape[0] * w.shape[3] < WINO_MIN_BALANCE * (w.shape[0] + w.shape[3]):
        return None
    if (g.stride_h, g.stride_w, g.dil_h, g.dil_w) != (1, 1, 1, 1) or min(g.out_h, g.out_w) < WINO_MIN_SIZE:
        return None
    if not (np.abs(w).max() < WINO_LIMIT and np.abs(b).max(initial=0) < WINO_LIMIT):
        return None
    fin, fout = compiled(winograd_input_f32, WINO_INPUT_F32), compiled(winograd_output_f32, WINO_OUTPUT_F32)
    if fin is None or fout is None:
        return None
    return WinogradConv(w, b, fin, fout)
