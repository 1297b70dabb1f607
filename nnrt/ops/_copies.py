"""Faster copies for the data-movement kernels of ``shape`` (kept here: that module is long).

* ``by_planes``: a TRANSPOSE whose last output axis is a short input axis (NCHW -> NHWC of an
  image: 3 channels), one strided copy per index of that axis: each reads its plane in order,
  where numpy's copy walks the input across all planes for every output row ([1,3,320,320] to
  NHWC 283 -> 88 us; it loses from 12 planes on, 184 -> 635 us for [1,12,208,208]).
* ``channels_last_f32`` (compiled): the same transpose with more channels (NCHW -> NHWC of a
  feature map), read plane by plane and written pixel by pixel: [1,12,208,208] 184 -> 144 us.
* ``concat2_rows_f32`` (compiled): a float32 CONCATENATION of two inputs, row by row in one
  pass over the output, where numpy copies each input into its slice in turn: two [2704, 96]
  into [2704, 192] 185 -> 140 us, 190 -> 145 us with the inputs and output out of cache (one
  input per call of a compiled copy: 171-211 us). The values are copied, so the results are the
  numpy kernel's bit for bit.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CHANNELS_LAST_F32", "CONCAT2_ROWS_F32", "by_planes", "channels_last_f32", "concat2_rows_f32"]

#: The signature ``channels_last_f32`` is compiled for.
CHANNELS_LAST_F32 = "void(Array(float32, 3, 'C', readonly=True), float32[:, :, ::1])"

#: The signature ``concat2_rows_f32`` is compiled for.
CONCAT2_ROWS_F32 = ("void(Array(float32, 2, 'C', readonly=True), Array(float32, 2, 'C', readonly=True), "
                    "float32[:, ::1])")


def by_planes(xt: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``xt`` (a transposed view whose other axes keep the input's order) into a fresh array
    of ``dtype``, one strided copy per index of its last axis (module doc)."""
    out = np.empty(xt.shape, dtype)
    for k in range(xt.shape[-1]):
        out[..., k] = xt[..., k]
    return out


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
