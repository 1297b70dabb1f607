"""Compiled copies for the data-movement kernels of ``shape`` (kept here: that module is long).

* ``channels_last_f32`` (compiled): a float32 TRANSPOSE from NCHW to NHWC with more channels than
  ``shape``'s one-copy-per-channel path takes (a feature map, not an image), read plane by plane
  and written pixel by pixel: [1,12,208,208] 184 -> 144 us (the per-channel copies: 635 us).
* ``concat2_rows_f32`` (compiled): a float32 CONCATENATION of two inputs, row by row in one
  pass over the output, where numpy copies each input into its slice in turn: two [2704, 96]
  into [2704, 192] 185 -> 140 us, 190 -> 145 us with the inputs and output out of cache (one
  input per call of a compiled copy: 171-211 us). The values are copied, so the results are the
  numpy kernel's bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["CHANNELS_LAST_F32", "CONCAT2_ROWS_F32", "channels_last", "channels_last_f32", "concat2", "concat2_rows_f32"]

#: The signature ``channels_last_f32`` is compiled for.
CHANNELS_LAST_F32 = "void(Array(float32, 3, 'C', readonly=True), float32[:, :, ::1])"

#: The signature ``concat2_rows_f32`` is compiled for.
CONCAT2_ROWS_F32 = ("void(Array(float32, 2, 'C', readonly=True), Array(float32, 2, 'C', readonly=True), "
                    "float32[:, ::1])")


def channels_last_f32(x: np.ndarray, out: np.ndarray) -> None:
    """``out[n, p, c] = x[n, c, p]``: ``x`` [N, C, P] (NCHW with H*W = P) into ``out`` [N, P, C]."""
    for n in range(x.shape[0]):
        xn, on = x[n], out[n]
        for p in range(x.shape[2]):
            o = on[p]
            for c in range(x.shape[1]):
                o[c] = xn[c, p]


def concat2_rows_f32(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[r] = a[r] ++ b[r]`` for every row: ``a`` [R, A], ``b`` [R, B], ``out`` [R, A + B]."""
    na = a.shape[1]
    for r in range(a.shape[0]):
        ar, br, o = a[r], b[r], out[r]
        for j in range(na):
            o[j] = ar[j]
        for j in range(b.shape[1]):
            o[na + j] = br[j]


def channels_last(core: Callable[..., None], x: np.ndarray) -> np.ndarray:
    """NCHW float32 ``x`` as a fresh NHWC array, by ``core`` (``channels_last_f32`` compiled)."""
    n, c, h, w = x.shape
    out = np.empty((n, h, w, c), np.float32)
    core(np.ascontiguousarray(x).reshape(n, c, h * w), out.reshape(n, h * w, c))
    return out


def concat2(core: Callable[..., None], a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    """Float32 ``a`` and ``b`` (non-empty, shapes checked) joined along ``axis`` into a fresh
    array, by ``core`` (``concat2_rows_f32`` compiled)."""
    out = np.empty((*a.shape[:axis], a.shape[axis] + b.shape[axis], *a.shape[axis + 1:]), np.float32)
    rows = math.prod(a.shape[:axis])
    core(np.ascontiguousarray(a).reshape(rows, -1), np.ascontiguousarray(b).reshape(rows, -1), out.reshape(rows, -1))
    return out
