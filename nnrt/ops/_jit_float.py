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

__all__ = ["DEPTHWISE_F32", "depthwise_f32"]

#: Length (in floats) to which a depthwise kernel tiles its per-tap weights: whole pixels,
#: enough for the vectorized loop to run long between block boundaries.
_BLOCK = 512

#: The one signature ``depthwise_f32`` is compiled for (at preparation, see ``_jit.compiled``).
#: Inputs are typed read-only: constants and callers' buffers often are, and numba passes a
#: writable array where a read-only one is expected (not the reverse).
DEPTHWISE_F32 = (
    "void(Array(float32, 4, 'C', readonly=True), int64, Array(float32, 3, 'C', readonly=True),"
    " Array(float32, 1, 'C', readonly=True), float32[:, :, :, ::1],"
    " int64, int64, int64, int64, int64, float32, float32)"
)


def depthwise_f32(
    xs: np.ndarray,
    width: int,
    w: np.ndarray,
    bias: np.ndarray,
    out: np.ndarray,
    stride_h: int,
    dil_h: int,
    dil_w: int,
    top: int,
    left: int,
    lo: np.float32,
    hi: np.float32,
) -> None:
    """Depthwise convolution (depth multiplier 1) of float32 NHWC input into ``out``.

    ``xs`` [N, H, SW, WQ*C] is the input of ``width`` columns split by column phase for the
    column stride SW (``xs[n, y, p, m*C + c] = x[n, y, m*SW + p, c]``; for stride 1 simply
    ``x`` reshaped). ``w`` [KH, KW, C], ``bias`` [C] and ``out`` [N, OH, OW, C] are C-contiguous
    float32; ``out`` is written in full (OH and OW are its own dimensions). ``top``/``left`` are
    the padding before the first row and column (padding after the last follows from ``out``'s
    size; padded positions read zero). The fused activation clamps to [``lo``, ``hi``];
    ``lo > hi`` means none. NaN stays NaN, as with ``np.clip``.

    Each output row is done in chunks of whole pixels (``_BLOCK`` floats): the chunk, the input
    ranges its taps read and the tiled weights stay in L1 (a whole row per tap streams from L2:
    measured 7.5 GMAC/s).
    """
    n, h, sw = xs.shape[0], xs.shape[1], xs.shape[2]
    kh, kw, c = w.shape
    oh, ow = out.shape[1], out.shape[2]
    length = ow * c
    reps = max(1, min(ow, (_BLOCK + c - 1) // c))
    block = reps * c
    wt = np.empty((kh, kw, block), dtype=np.float32)
    bt = np.empty(block, dtype=np.float32)
    for r in range(reps):
        bt[r * c : (r + 1) * c] = bias
        for i in range(kh):
            for j in range(kw):
                wt[i, j, r * c : (r + 1) * c] = w[i, j]
    # per tap column j: the phase it reads, its shift in pixels, its valid output columns
    phase = np.empty(kw, dtype=np.int64)
    shift = np.empty(kw, dtype=np.int64)
    first = np.empty(kw, dtype=np.int64)
    last = np.empty(kw, dtype=np.int64)
    for j in range(kw):
        off = j * dil_w - left
        p = off % sw
        q = (off - p) // sw
        phase[j], shift[j] = p, q * c
        first[j] = max(0, -q) * c
        last[j] = min(ow, (width - p + sw - 1) // sw - q) * c
    clamp = lo <= hi
    for b in range(n):
        ob = out[b].reshape(oh, length)
        for oy in range(oh):
            o = ob[oy]
            for start in range(0, length, block):
                seg = min(block, length - start)
                dst = o[start : start + seg]
                dst[:] = bt[:seg]
                for i in range(kh):
                    iy = oy * stride_h - top + i * dil_h
                    if iy < 0 or iy >= h:
                        continue
                    for j in range(kw):
                        k0, k1 = max(start, first[j]), min(start + seg, last[j])
                        if k1 <= k0:
                            continue
                        src = xs[b, iy, phase[j], k0 + shift[j] : k1 + shift[j]]
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
