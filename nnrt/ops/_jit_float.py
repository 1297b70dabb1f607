"""Compiled float32 kernels (numba): the loops themselves, written as plain annotated Python.

Every function here is valid numpy/Python (mypy checks it, and it runs uncompiled, slowly) and
is written for numba's ``njit``: ``nnrt.ops._jit.compiled`` turns it into a native function
when numba is installed and enabled. The numpy kernels in the op modules stay the reference;
each function here has a numpy twin it is tested against (``tests/unit/test_jit_float.py``).

How the loops are shaped (``benchmarks/kernels.py`` measures them against numpy and ONNX
Runtime):

* Inner loops run over one contiguous range of a *slice* (``a[lo:hi]`` indexed from 0). An
  index such as ``x[k + offset]`` with a possibly negative ``offset`` makes numba check for
  Python's negative-index wraparound on every element, which stops LLVM from vectorizing
  (measured 0.76 against 0.063 ns per multiply-add).
* Depthwise convolution works on NHWC rows flattened to ``[W*C]``: for stride 1, the input
  values one tap multiplies with a whole output row are one contiguous range, so one loop
  covers ``OW*C`` products with the weights tiled to a block of whole pixels. For stride
  ``s > 1`` every input row is first split into ``s`` column phases (columns p, p+s, ...),
  after which the same holds. The bias starts each output row and the fused activation ends
  it while the row is still in cache.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK", "DEPTHWISE_F32", "depthwise_f32"]

#: Length (in floats) to which a depthwise kernel's per-tap weights are tiled (whole pixels):
#: the chunk of an output row done with all taps at once. Long enough for the vectorized loop,
#: short enough that the chunk, its input ranges and the weights stay in L1.
BLOCK = 512

#: The one signature ``depthwise_f32`` is compiled for (at preparation, see ``_jit.compiled``).
#: Inputs are typed read-only: constants and callers' buffers often are, and numba passes a
#: writable array where a read-only one is expected (not the reverse).
DEPTHWISE_F32 = (
    "void(Array(float32, 4, 'C', readonly=True), Array(float32, 3, 'C', readonly=True),"
    " Array(float32, 1, 'C', readonly=True), Array(int64, 2, 'C', readonly=True), float32[:, :, ::1],"
    " int64, int64, int64, float32, float32)"
)


def depthwise_f32(
    xs: np.ndarray,
    wt: np.ndarray,
    bt: np.ndarray,
    cols: np.ndarray,
    out: np.ndarray,
    stride_h: int,
    dil_h: int,
    top: int,
    lo: np.float32,
    hi: np.float32,
) -> None:
    """Depthwise convolution (depth multiplier 1) of float32 NHWC input into ``out``, plus bias
    and fused activation. The caller (``_conv_core.depthwise_compiled``) lays out:

    * ``xs`` [N, H, SW, WQ*C]: the input split by column phase for the column stride SW
      (``xs[n, y, p, m*C + c] = x[n, y, m*SW + p, c]``; for stride 1 simply ``x`` reshaped);
    * ``wt`` [KH, KW, B*C]: each tap's weights tiled to B pixels (``bt`` [B*C]: the bias);
    * ``cols`` [KW, 4]: per tap column, the phase it reads, its shift in ``xs`` (floats), and
      the first and last (exclusive) output positions (floats of an output row) it reaches;
    * ``out`` [N, OH, OW*C], written in full.

    Rows ``iy = oy*stride_h - top + i*dil_h`` outside the input read zero. The fused
    activation clamps to [``lo``, ``hi``]; ``lo > hi`` means none. NaN stays NaN (``np.clip``).
    """
    n, h = xs.shape[0], xs.shape[1]
    kh, kw, block = wt.shape
    oh, length = out.shape[1], out.shape[2]
    clamp = lo <= hi
    for b in range(n):
        for oy in range(oh):
            o = out[b, oy]
            for start in range(0, length, block):
                seg = min(block, length - start)
                dst = o[start : start + seg]
                dst[:] = bt[:seg]
                for i in range(kh):
                    iy = oy * stride_h - top + i * dil_h
                    if iy < 0 or iy >= h:
                        continue
                    for j in range(kw):
                        k0, k1 = max(start, cols[j, 2]), min(start + seg, cols[j, 3])
                        if k1 <= k0:
                            continue
                        src = xs[b, iy, cols[j, 0], k0 + cols[j, 1] : k1 + cols[j, 1]]
                        part = o[k0:k1]
                        ws = wt[i, j, k0 - start : k1 - start]
                        for t in range(k1 - k0):
                            part[t] += src[t] * ws[t]
                if clamp:
                    for t in range(seg):
                        v = dst[t]
                        if v < lo:
                            dst[t] = lo
                        elif v > hi:
                            dst[t] = hi
