"""CONV_2D over one row in NCHW: a 1-D convolution as one product in the operation's own layout.

ONNX audio models (silero VAD: an STFT as a strided convolution, then four encoder layers and a
1x1 decoder) run 1-D convolutions, which the importer writes as NCHW CONV_2D over [N, C, 1, T]
with [Cout, 1, k, Cin] filters. The general path turns such an input to NHWC, runs im2col in
blocks sized for images, and turns the result back: on silero's [1, 129, 1, 3] -> [1, 128, 1, 3]
layer 14.5 us, most of it layout work and Python around tiny arrays. Here, for a constant
float32 filter and bias and an input shape known at preparation (``line_conv``), a run is:

* the input row zero-padded to exactly the extent the taps read (or the input itself),
* the taps as a strided window [T_out, Cin, k] copied into the rows [T_out, Cin*k],
* one product [T_out, Cin*k] x [Cin*k, Cout] (``_gemm``: MKL's or numpy's) per batch item,
  the bias and the fused activation in place, and the [T_out, Cout] result turned to NCHW.

The filter matrix is laid out once (subnormal weights flushed, as for every constant float32
filter). Values differ from the reference kernel by the products' rounding only; NaN and
infinities propagate as numpy's (the activation is ``apply_activation``). It is taken only with
the compiled kernels (``NNRT_JIT=0`` keeps the numpy reference) and only when the run's input
has the prepared shape.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnrt.ops._common import apply_activation
from nnrt.ops._conv_core import Geometry
from nnrt.ops._gemm import Product, flush_subnormals

__all__ = ["line_conv"]

_F32 = np.dtype(np.float32)


def line_conv(w: np.ndarray, b: np.ndarray, g: Geometry | None, shape: tuple[int, ...] | None,
              mm: Product | None) -> Callable[[np.ndarray], np.ndarray] | None:
    """The run of a float32 CONV_2D over ``shape`` = [N, Cin, 1, W] (NCHW) with the constant
    filter ``w`` [Cout, 1, k, Cin] and bias ``b``, or None when the layer is not such a line
    (another layout, a filter or input taller than one row, vertical padding, no product)."""
    if g is None or shape is None or mm is None or not g.nchw or len(shape) != 4:
        return None
    if w.dtype != _F32 or b.dtype != _F32 or w.ndim != 4 or w.shape[1] != 1 or shape[2] != 1:
        return None
    if g.out_h != 1 or g.top or g.bottom or g.out_w <= 0 or shape[0] == 0:
        return None
    n, cin, _, width = shape
    cout, _, k, _ = w.shape
    s, dil, left, ow = g.stride_w, g.dil_w, g.left, g.out_w
    extent = (ow - 1) * s + (k - 1) * dil + 1  # padded input values the taps read
    kept = min(width, extent - left)  # input values within it
    if kept <= 0:
        return None
    # [Cin*k, Cout]: the product runs as [T_out, Cin*k] x [Cin*k, Cout], MKL's fast shape (the
    # [Cout, Cin*k] x [Cin*k, T_out] product with T_out of 1-3 took 3x as long, 10 against 3 us).
    wmat = flush_subnormals(np.ascontiguousarray(w[:, 0].transpose(2, 1, 0).reshape(cin * k, cout)))
    bias = b.copy()
    pad = left > 0 or extent > width
    item = _F32.itemsize

    def run(x: np.ndarray) -> np.ndarray:
        if pad:
            xp = np.zeros((n, cin, extent), _F32)
            xp[:, :, left : left + kept] = x.reshape(n, cin, width)[:, :, :kept]
        else:
            xp = np.ascontiguousarray(x).reshape(n, cin, width)
        row = xp.shape[2] * item
        taps = np.ndarray((n, ow, cin, k), _F32, xp, 0, (cin * row, s * item, row, dil * item))
        cols = taps.reshape(n, ow, cin * k)  # a copy: the im2col rows, one per output position
        res = np.empty((n, ow, cout), _F32)
        for i in range(n):
            mm(cols[i], wmat, res[i])
        res += bias
        apply_activation(res, g.act)
        return np.ascontiguousarray(res.transpose(0, 2, 1)).reshape(n, cout, 1, ow)

    return run
