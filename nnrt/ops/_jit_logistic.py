"""A compiled float32 logistic, ``1 / (1 + exp(-x))``, whose loops LLVM vectorizes.

numpy's float32 ``exp`` is one pass of its own (0.34 ns per value with AVX-512) and a compiled
loop calling ``math.exp`` calls libm's scalar ``expf`` per value: neither fuses with the add,
the reciprocal and a SiLU's product. ``logistic_f32`` computes ``exp(-x)`` itself with
arithmetic LLVM vectorizes, per block of ``_CHUNK`` values (two loops, the block in cache):

* ``t = -x`` clamped to [-30, 88.75] (NaN to 88.75; NaN is restored at the end, ``x``'s own);
  ``k = round(t / ln 2)`` by the 1.5 * 2^23 addition (round to nearest, in float32);
  ``r = t - k ln2_hi - k ln2_lo`` (Cody-Waite: ``k * ln2_hi`` is exact for |k| <= 256);
* ``exp(r)`` on |r| <= ln2 / 2 by Cephes' degree-6 polynomial (``expf``: 1 + r + r^2 P(r));
* ``2^(k-1)`` as the float32 whose bits are ``(k + 126) << 23`` (an int32 block seen as
  float32: the first loop writes the bits, the second reads the floats), times ``2 exp(r)``
  (``k`` reaches 128 at t = 88.75; doubling is exact), which overflows to inf past
  ``ln(FLT_MAX)`` as ``exp`` does;
* ``1 / (1 + e)``: exactly 0 where ``exp(-x)`` overflows (x < -88.72) and exactly 1 where it
  is below half an ulp of 1 (x > 16.7), as numpy's formula gives.

Error against a float64 logistic, every float32 in [-100, 100] on a dense grid (tested in
``tests/unit/test_jit_logistic.py``): at most 2 ulp where the result is a normal float (numpy's
formula: 2 ulp as well); the CTS tolerance for LOGISTIC float32 is far wider. It is not
bit-identical to numpy's formula, so the numpy formula stays the reference without numba
(``NNRT_JIT=0``), and LOGISTIC and the fused SiLU both use this function when numba is in use
(``mul``: the SiLU's product ``x * logistic(x)``, rounded as MUL rounds it), so the fused and
the unfused plans give the same bits in either mode.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnrt.ops._jit import compiled

__all__ = ["LOGISTIC_F32", "compiled_logistic", "logistic_f32"]

#: Values per block: the two block buffers (8 KiB) stay in L1.
_CHUNK = 1024

#: The signature ``logistic_f32`` is compiled for.
LOGISTIC_F32 = "void(Array(float32, 2, 'C', readonly=True), float32[:, ::1], int64, boolean)"


def logistic_f32(x: np.ndarray, out: np.ndarray, off: int, mul: bool) -> None:
    """``out[:, off:off + L] = 1 / (1 + exp(-x))`` (times ``x`` when ``mul``) for float32 ``x``
    [R, L] and ``out`` [R, S] (module doc): a flat array is one row (``x.reshape(1, -1)``, off
    0); rows of a wider ``out`` are a CONCATENATION's slice written in place
    (``nnrt.execution._concat_in_place``: [2704, 48] of [2704, 96] 63 us against 48 us for
    the same values contiguous). ``out`` may be ``x`` itself (neither loop reads the array it
    writes)."""
    f = np.float32
    lo, hi = f(-30.0), f(88.75)
    log2e, magic = f(1.44269504088896341), f(12582912.0)
    ln2_hi, ln2_lo = f(0.693359375), f(-2.12194440e-4)
    # Cephes' coefficients doubled (exactly): the polynomial gives 2 exp(r).
    p0, p1, p2 = f(2 * 1.9875691500e-4), f(2 * 1.3981999507e-3), f(2 * 8.3334519073e-3)
    p3, p4, p5 = f(2 * 4.1665795894e-2), f(2 * 1.6666665459e-1), f(2 * 5.0000001201e-1)
    one, two = f(1.0), f(2.0)
    n = x.shape[1]
    rb = np.empty(_CHUNK, np.float32)
    xb = np.empty(_CHUNK, np.float32)
    kb = np.empty(_CHUNK, np.int32)
    sb = kb.view(np.float32)
    for row in range(x.shape[0]):
        xr = x[row]
        orow = out[row, off:off + n]
        for s in range(0, n, _CHUNK):
            m = min(_CHUNK, n - s)
            xs = xr[s:s + m]
            for i in range(m):
                v = xs[i]
                t = -v
                t = t if t < hi else hi
                t = t if t > lo else lo
                kf = (t * log2e + magic) - magic
                rb[i] = (t - kf * ln2_hi) - kf * ln2_lo
                kb[i] = (np.int32(kf) + np.int32(126)) << np.int32(23)
                xb[i] = v
            os = orow[s:s + m]
            for i in range(m):
                r = rb[i]
                v = xb[i]
                q = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
                e = (((q * r) * r + (r + r)) + two) * sb[i]
                y = one / (one + e)
                y = y if v == v else v
                os[i] = y * v if mul else y


def compiled_logistic() -> Callable[[np.ndarray, np.ndarray, int, bool], None] | None:
    """``logistic_f32`` compiled (``None`` without numba). Contraction (fused multiply-adds)
    is its only fast-math flag: it keeps NaN and inf, and halved the time (0.48 -> 0.38 ns per
    value); ``error_model="numpy"`` lets the reciprocal vectorize."""
    return compiled(logistic_f32, LOGISTIC_F32, frozenset({"contract"}), error_model="numpy")
