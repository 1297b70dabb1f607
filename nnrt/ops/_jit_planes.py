"""The first layers' CONV_2D steps (at most ``_jit_conv.PLANES_MAX_CHANNELS`` input channels):
the channel-major gather of their taps (``planes_rows_f32``) and ``planes_blocks_f32``, the loop
over blocks that runs gather, MKL's product and the bias pass in one compiled call.

Why a module of its own: ``_jit_conv.Im2colConv`` drives both (its docstring and
``benchmarks/first_layer.py`` have the figures); ``planes_blocks_f32`` calls the other compiled
steps, which numba resolves as module globals when it compiles it (``planes_blocks`` sets them
first). Valid numpy/Python written for numba, as in ``_jit_conv``; tested there
(``tests/unit/test_jit_conv.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.ops import _jit
from nnrt.ops._gemm import SGEMM_F32, Product, backend, sgemm_f32
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import BIAS_ACT_F32, bias_act_f32

__all__ = ["PLANES_BLOCKS_F32", "PLANES_ROWS_F32", "planes_blocks", "planes_blocks_f32", "planes_rows_f32"]

#: The one signature ``planes_rows_f32`` is compiled for (``_jit_conv.im2col_rows_f32``'s).
PLANES_ROWS_F32 = (
    "void(Array(float32, 3, 'C', readonly=True), float32[:, ::1], int64, int64, int64, int64, int64,"
    " int64, int64, int64, int64, int64, int64, int64)"
)



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


#: The steps ``planes_blocks_f32`` runs per block: module globals that ``planes_blocks`` sets to
#: their compiled forms before compiling it (numba resolves a global when it compiles).
_gather: Any = planes_rows_f32
_product: Any = None
_bias_pass: Any = bias_act_f32

#: The one signature ``planes_blocks_f32`` is compiled for.
PLANES_BLOCKS_F32 = (
    "void(Array(float32, 3, 'C', readonly=True), Array(float32, 2, 'C', readonly=True),"
    " Array(float32, 1, 'C', readonly=True), float32[:, ::1], float32[::1], int64, int64, int64, int64, int64,"
    " int64, int64, int64, int64, int64, int64, int64, float32, float32)"
)


def planes_blocks_f32(xf: np.ndarray, weights: np.ndarray, bias: np.ndarray, out: np.ndarray, buf: np.ndarray,
                      rows: int, c: int, kh: int, kw: int, stride_h: int, stride_w: int, dil_h: int, dil_w: int,
                      top: int, left: int, out_h: int, out_w: int, lo: np.float32, hi: np.float32) -> None:
    """``Im2colConv``'s loop over blocks of ``rows`` pixels with planes and no epilogue in one
    compiled call: per block the gather into ``buf``, MKL's product into ``out`` [P, Cout], the
    bias + activation pass (from Python: ~3 us per block; 224x224 3x3/2 3->32: 331 -> 297 us)."""
    k = weights.shape[0]
    p = out.shape[0]
    for p0 in range(0, p, rows):
        r = min(rows, p - p0)
        block = buf[: r * k].reshape((k, r))
        _gather(xf, block, p0, c, kh, kw, stride_h, stride_w, dil_h, dil_w, top, left, out_h, out_w)
        dst = out[p0 : p0 + r]
        _product(block.T, weights, dst)
        _bias_pass(dst, bias, lo, hi)


def planes_blocks(mm: Product) -> Callable[..., Any] | None:
    """``planes_blocks_f32`` compiled, when ``mm`` is MKL's compiled product (``_gemm.sgemm_f32``)
    and its steps compile; else None (the blocks run from Python)."""
    global _gather, _product, _bias_pass
    if backend() != "mkl":  # MKL is loaded first: its compiled caller resolves the symbol then
        return None
    sgemm = _jit.compiled(sgemm_f32, SGEMM_F32)
    if sgemm is None or mm is not sgemm:
        return None
    gather, bias_pass = _jit.compiled(planes_rows_f32, PLANES_ROWS_F32), _jit.compiled(bias_act_f32, BIAS_ACT_F32)
    if gather is None or bias_pass is None:
        return None
    with _blocks_lock:
        _gather, _product, _bias_pass = gather, sgemm, bias_pass
        return compiled(planes_blocks_f32, PLANES_BLOCKS_F32)


_blocks_lock = threading.Lock()
