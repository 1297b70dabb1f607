"""Compiled float32 CONV_2D (numba): im2col built by a compiled loop in row blocks that stay in
L2, one BLAS product per block written straight into the output, bias and fused activation
applied to the block while it is in cache.

Why (``benchmarks/kernels.py`` measures it against numpy and ONNX Runtime): numpy's im2col of a
KxK convolution is one copy from a strided window view into a [P, K*K*C] buffer; for a
[1,80,80,96] input that buffer is 22 MB, written once and read once by BLAS from memory, and
numpy's copy of a 6-D view with a short inner dimension (C = 3 or 12 floats) pays its loop
overhead every few elements. The loop here writes each output pixel's row of taps directly,
one contiguous run of ``KW*C`` floats per filter row when the row lies inside the input (any
column stride, dilation 1), and fills a block of about ``BLOCK_BYTES`` at a time, so BLAS reads
its left operand from L2. Measured on the real models' shapes: 1.2-2.5x faster than the numpy
path (3x3 96->24 on [1,80,80,96]: 6.1 -> 3.8 ms; the first layer 5x5/2 3->32: 0.93 -> 0.77 ms).

``im2col_rows_f32`` is valid numpy/Python (mypy checks it; it runs uncompiled, slowly) written
for numba's ``njit``, as in ``_jit_float``. ``Im2colConv`` is the plain-Python driver the
CONV_2D kernel builds at preparation when numba is available; the numpy formulation in
``conv.conv_nhwc`` stays the reference (``NNRT_JIT=0``, the CTS) and both are tested against
each other (``tests/unit/test_jit_conv.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.ops._conv_core import Geometry

__all__ = ["BLOCK_BYTES", "IM2COL_ROWS_F32", "MIN_ROWS", "Im2colConv", "im2col_rows_f32"]

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


_local = threading.local()


def _scratch(size: int) -> np.ndarray:
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
    per block (module doc). Made once at preparation from the compiled functions; ``__call__``
    takes one run's NHWC input, filter matrix and geometry."""

    __slots__ = ("_bias_act", "_im2col")

    def __init__(self, im2col: Callable[..., Any], bias_act: Callable[..., Any]) -> None:
        self._im2col = im2col
        self._bias_act = bias_act

    def __call__(self, x: np.ndarray, wmat: np.ndarray, k_h: int, k_w: int, g: Geometry,
                 lo: np.float32, hi: np.float32) -> np.ndarray:
        """``x`` real float32 NHWC [N, H, W, C] (any strides), ``wmat`` the [K+1, Cout] matrix of
        ``conv._conv_matrix`` (taps in (kh, kw, c) order, then the bias row); returns a fresh
        NHWC [N, OH, OW, Cout] result, activation applied (``lo > hi``: none)."""
        n, h, w, c = x.shape
        k = k_h * k_w * c
        cout = wmat.shape[1]
        p = n * g.out_h * g.out_w
        xf = np.ascontiguousarray(x).reshape(n, h, w * c)
        weights, bias = wmat[:k], wmat[k]
        out = np.empty((p, cout), dtype=np.float32)
        rows = min(p, max(MIN_ROWS, max(BLOCK_BYTES, 8 * weights.size) // (4 * k)))
        cols = _scratch(rows * k).reshape(rows, k)
        for p0 in range(0, p, rows):
            block = cols[: min(rows, p - p0)]
            self._im2col(xf, block, p0, c, k_h, k_w, g.stride_h, g.stride_w, g.dil_h, g.dil_w,
                         g.top, g.left, g.out_h, g.out_w)
            dst = out[p0 : p0 + block.shape[0]]
            np.matmul(block, weights, out=dst)
            self._bias_act(dst, bias, lo, hi)
        return out.reshape(n, g.out_h, g.out_w, cout)
