"""The convolution epilogue hook, and the one-pass SiLU tail.

An *epilogue* (``Epilogue``) is elementwise work that a float32 CONV_2D over NHWC does on its own
output: a HARD_SWISH, or an ADD of a residual (a tensor of the output's shape computed before)
and the ADD's fused activation. The plan compiler makes one from the step that is a
convolution's only reader (``nnrt.execution._fuse_epilogue``) and passes it to the kernel per run
as its ``epilogue`` keyword; kernels that take the keyword say so with ``accept_epilogue``. Every
path of such a kernel applies it exactly once to each output element, with the same float32
operations as the successor's own kernel (bit for bit, tested):

* the blocked im2col and the pointwise paths fuse it into their compiled bias pass
  (``bias_epilogue_f32``: one pass over the block while BLAS's result is in
  cache, where the two kernels made two passes over the whole tensor and a step between);
* Winograd applies it to each block of output rows after its output transform; the numpy paths
  (``NNRT_JIT=0``) to the whole result (``Epilogue.after``).

Measured against the separate steps, CPU time, the same shapes in one run (``benchmarks/
fusions.py`` has the per-model figures): HARD_SWISH after a 1x1 convolution 0.64-0.97 ([1,160,
160,8]->32 620 -> 400 us; [1,80,80,16]->64 273 -> 202), ADD 0.83-1.03. Not folded, because it
measured no gain: a SiLU (0.95-1.07 on the same shapes, also with the bias pass writing ``-x``
for ``exp``: the exponential is the cost, not the memory traffic), and work done by numpy calls
per block (chains of affine / hard-sigmoid links, a MUL by a constant: 1.07-1.2 on tensors of a
few 10 Ki values, the calls' overhead, and no gain on large ones).

SiLU, ``x * (1 / (1 + exp(-x)))``, as a step of its own (``_fuse``) is the LOGISTIC and MUL
kernels' float32 operations: numpy's ``negative`` and ``exp`` (vectorized; a compiled loop's
scalar ``expf`` is slower and not bit for bit numpy's), then one compiled pass for the add, the
reciprocal and the product (``silu_tail_f32``: each rounded to float32 as numpy rounds it;
tested bit for bit) instead of numpy's three. Measured on 32-64 Ki values in cache (CPU time):
numpy's five passes 0.90 ns per value, these three 0.60.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnrt.ops._common import ACT_NONE, activation_bounds, apply_activation
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import UNARY_F32, hard_swish_f32

__all__ = [
    "ADD",
    "BIAS_EPILOGUE_F32",
    "HARD_SWISH",
    "SILU_OVER_F32",
    "SILU_TAIL_F32",
    "Epilogue",
    "accept_epilogue",
    "bias_epilogue_f32",
    "silu",
    "silu_over_f32",
    "silu_tail_f32",
    "takes_epilogue",
]

#: Epilogue kinds: a HARD_SWISH; an ADD of a residual, then the ADD's fused activation.
HARD_SWISH, ADD = 1, 2

#: The residual rows ``bias_epilogue_f32`` reads for a HARD_SWISH (never: one row for the signature).
_NO_ROWS = np.zeros((1, 1), np.float32)

_takers: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


def accept_epilogue(kernel: Callable[..., Any]) -> None:
    """Declare that ``kernel`` takes an ``epilogue=`` keyword (module doc)."""
    _takers.add(kernel)


def takes_epilogue(kernel: Callable[..., Any] | None) -> bool:
    """Whether ``kernel`` was declared with ``accept_epilogue``."""
    return kernel is not None and kernel in _takers


@dataclass(frozen=True, slots=True)
class Epilogue:
    """Elementwise work on a convolution's output (module doc): ``kind`` ``HARD_SWISH``, or
    ``ADD`` of ``residual`` (the other operand as [N*OH*OW, Cout] rows) then the fused
    activation ``act``."""

    kind: int
    residual: np.ndarray | None = None
    act: int = ACT_NONE

    def with_bias(self, out: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, row0: int,
                  bias_act: Callable[..., Any]) -> None:
        """The convolution's bias and activation (``lo > hi``: none; ``bias_act`` is its
        compiled pass), then this epilogue, in one compiled pass over a C-contiguous float32
        [R, Cout] block of rows ``row0 ..``."""
        fast = compiled(bias_epilogue_f32, BIAS_EPILOGUE_F32)
        if fast is not None:
            res = _NO_ROWS if self.residual is None else self.residual[row0 : row0 + out.shape[0]]
            fast(out, bias, lo, hi, res, *activation_bounds(self.act), self.kind)
            return
        bias_act(out, bias, lo, hi)
        self.after(out, row0)

    def after(self, out: np.ndarray, row0: int = 0) -> None:
        """This epilogue on a C-contiguous float32 [R, Cout] block of rows ``row0 ..`` whose bias
        and activation are applied (Winograd's blocks, the numpy paths' whole result)."""
        if self.residual is None:
            hard_swish_rows(out)
        else:
            np.add(out, self.residual[row0 : row0 + out.shape[0]], out=out)
            apply_activation(out, self.act)


def hard_swish_rows(rows: np.ndarray) -> None:
    """HARD_SWISH in place, as its kernel computes it (``activations``): the compiled loop when
    numba is in use (into scratch: a loop onto its own input does not vectorize), else the
    numpy calls ``x * clip(x + 3, 0, 6) / 6``."""
    t = np.empty(rows.shape, np.float32)
    fast = compiled(hard_swish_f32, UNARY_F32)
    if fast is not None:
        fast(rows.reshape(-1), t.reshape(-1))
        np.copyto(rows, t)
        return
    np.add(rows, np.float32(3), out=t)
    np.clip(t, np.float32(0), np.float32(6), out=t)
    np.multiply(t, rows, out=rows)
    np.divide(rows, np.float32(6), out=rows)


#: The signature ``bias_epilogue_f32`` is compiled for.
BIAS_EPILOGUE_F32 = (
    "void(float32[:, ::1], Array(float32, 1, 'C', readonly=True), float32, float32,"
    " Array(float32, 2, 'C', readonly=True), float32, float32, int64)"
)


def bias_epilogue_f32(out: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, res: np.ndarray,
                      lo2: np.float32, hi2: np.float32, kind: int) -> None:
    """``_jit_float.bias_act_f32`` (``out = clip(out + bias, lo, hi)``, ``lo > hi``: no clamp) then,
    in the same pass, the epilogue ``kind``: ``HARD_SWISH`` as ``_jit_float.hard_swish_f32``, or
    ``ADD``: ``+ res`` [P, C] clamped to [``lo2``, ``hi2``]. Each value rounded as the separate
    kernels round it (bit for bit; the loop-invariant branches are hoisted by the compiler)."""
    clamp, clamp2 = lo <= hi, lo2 <= hi2
    three, six, zero = np.float32(3), np.float32(6), np.float32(0)
    for p in range(out.shape[0]):
        o, r = out[p], res[p % res.shape[0]]
        for c in range(out.shape[1]):
            v = o[c] + bias[c]
            if clamp:
                if v < lo:
                    v = lo
                elif v > hi:
                    v = hi
            if kind == HARD_SWISH:
                t = v + three
                if t < zero:
                    t = zero
                elif t > six:
                    t = six
                v = t * v / six
            else:
                v = v + r[c]
                if clamp2:
                    if v < lo2:
                        v = lo2
                    elif v > hi2:
                        v = hi2
            o[c] = v


#: The signatures the SiLU tails are compiled for.
SILU_TAIL_F32 = "void(float32[::1], Array(float32, 1, 'C', readonly=True))"
SILU_OVER_F32 = "void(Array(float32, 1, 'C', readonly=True), float32[::1])"


def silu_tail_f32(y: np.ndarray, e: np.ndarray) -> None:
    """``y = y * (1 / (e + 1))`` in place, ``e = exp(-y)``: LOGISTIC's add and reciprocal and
    MUL's product, each rounded to float32 (no contraction without fastmath)."""
    one = np.float32(1)
    for i in range(y.shape[0]):
        y[i] = y[i] * (one / (e[i] + one))


def silu_over_f32(x: np.ndarray, e: np.ndarray) -> None:
    """``e = x * (1 / (e + 1))``, ``e = exp(-x)`` on entry (``silu_tail_f32`` into ``e``). Each
    loop reads and writes one array at one index: a loop writing an array that may alias the
    one it reads does not vectorize."""
    one = np.float32(1)
    for i in range(x.shape[0]):
        e[i] = x[i] * (one / (e[i] + one))


def silu(x: np.ndarray, out: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """``out = x * (1 / (1 + exp(-x)))`` for C-contiguous float32 ``x`` and ``out`` of one size,
    the LOGISTIC then MUL kernels' float32 operations; ``out`` is ``x`` itself (then ``scratch``,
    as large, holds ``exp(-x)``) or an array that does not overlap it."""
    xf, of = x.reshape(-1), out.reshape(-1)
    same = out is x or np.may_share_memory(xf, of)
    e = scratch.reshape(-1) if same and scratch is not None else of if not same else np.empty_like(xf)
    np.negative(xf, out=e)
    np.exp(e, out=e)
    if same:
        tail = compiled(silu_tail_f32, SILU_TAIL_F32, error_model="numpy")
        if tail is not None:
            tail(of, e)
            return
    else:
        over = compiled(silu_over_f32, SILU_OVER_F32, error_model="numpy")
        if over is not None:
            over(xf, e)
            return
    e += np.float32(1)
    np.reciprocal(e, out=e)
    np.multiply(xf, e, out=of)
