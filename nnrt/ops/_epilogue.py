"""The convolution epilogue hook, and the one-pass SiLU tail.

An *epilogue* (``Epilogue``) is elementwise work that a float32 CONV_2D over NHWC does on its own
output: a HARD_SWISH, an ADD of a residual (a tensor of the output's shape computed before)
and the ADD's fused activation, or a PRELU with a constant slope. The plan compiler makes one from the step that is a
convolution's only reader (``nnrt.execution._fuse_epilogue``) and passes it to the kernel per run
as its ``epilogue`` keyword; kernels that take the keyword say so with ``accept_epilogue``. Every
path of such a kernel applies it exactly once to each output element, with the same float32
operations as the successor's own kernel (bit for bit, tested):

* the blocked im2col and the pointwise paths fuse it into their compiled bias pass
  (``bias_hard_swish_f32``, ``bias_add_f32``, ``bias_prelu_f32``: one pass over the block while BLAS's result is in
  cache, where the two kernels made two passes over the whole tensor and a step between);
* Winograd (its output transform applies bias and activation) and the numpy paths
  (``NNRT_JIT=0``) apply it to the whole result afterwards (``Epilogue.after``: per block of
  Winograd's tile rows it measured 1.05-1.1x the separate step).

Measured against the separate steps, CPU time, the same shapes in one run (``benchmarks/
fusions.py`` has the per-model figures): HARD_SWISH after a 1x1 convolution 0.64-0.97 ([1,160,
160,8]->32 620 -> 400 us; [1,80,80,16]->64 273 -> 202), ADD 0.83-1.03. Not folded, because it
measured no gain: a SiLU (0.95-1.07 on the same shapes, also with the bias pass writing ``-x``
for ``exp``: the exponential is the cost, not the memory traffic), and work done by numpy calls
per block (chains of affine / hard-sigmoid links, a MUL by a constant: 1.07-1.2 on tensors of a
few 10 Ki values, the calls' overhead, and no gain on large ones).

SiLU, ``x * (1 / (1 + exp(-x)))``, as a step of its own (``_fuse``) is the LOGISTIC and MUL
kernels' float32 operations: with numba one pass of ``_jit_logistic.logistic_f32`` (the
LOGISTIC kernel's own function, with MUL's product; [1,52,52,96] 0.60 -> 0.39 ns per value,
CPU time, against numpy's exp and a compiled tail), without it numpy's five passes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnrt.ops._common import ACT_NONE, activation_bounds, apply_activation
from nnrt.ops._jit import compiled

__all__ = [
    "ADD",
    "BIAS_ADD_F32",
    "BIAS_PRELU_F32",
    "BIAS_HARD_SWISH_F32",
    "HARD_SWISH",
    "IDENTITY_AFFINES",
    "PRELU",
    "Epilogue",
    "accept_epilogue",
    "add",
    "bias_add_f32",
    "bias_hard_swish_f32",
    "bias_prelu_f32",
    "hard_swish",
    "prelu",
    "silu",
    "takes_epilogue",
]

#: Epilogue kinds: a HARD_SWISH; an ADD of a residual, then the ADD's fused activation; a PRELU
#: with a constant slope (one value or one per channel).
HARD_SWISH, ADD, PRELU = 1, 2, 3

#: The affines (s1, b1, s2, b2) of a HARD_SWISH alone: ``x * 1 + -0.0`` changes no value
#: (-0.0 and NaN included).
IDENTITY_AFFINES = (np.float32(1), np.float32(-0.0), np.float32(1), np.float32(-0.0))

#: Bounds that clamp nothing (lo > hi).
_NO_CLAMP = (np.float32(1), np.float32(0))

#: Each declared kernel -> the epilogue kinds it takes.
_takers: weakref.WeakKeyDictionary[Callable[..., Any], frozenset[int]] = weakref.WeakKeyDictionary()


def accept_epilogue(kernel: Callable[..., Any], kinds: frozenset[int] = frozenset({HARD_SWISH, ADD, PRELU})) -> None:
    """Declare that ``kernel`` takes an ``epilogue=`` keyword (module doc) of the ``kinds`` given."""
    _takers[kernel] = kinds


def takes_epilogue(kernel: Callable[..., Any] | None, kind: int | None = None) -> bool:
    """Whether ``kernel`` was declared with ``accept_epilogue`` (for epilogues of ``kind``)."""
    kinds = _takers.get(kernel) if kernel is not None else None
    return kinds is not None and (kind is None or kind in kinds)


@dataclass(frozen=True, slots=True)
class Epilogue:
    """Elementwise work on a convolution's output (module doc), made by ``hard_swish``,
    ``prelu`` or ``add``: ``kind``; ``rows``, the ADD's other operand as [N*OH*OW, Cout] rows or
    the PRELU's slope as [1, Cout]; the ADD's fused activation ``act`` and its bounds ``lo``,
    ``hi``; ``fast``, the compiled bias pass (None without numba); ``kernel``, the PRELU's own
    kernel with its slope (run on blocks by ``after`` when numba is not in use)."""

    kind: int
    rows: np.ndarray | None = None
    lo: np.float32 = _NO_CLAMP[0]
    hi: np.float32 = _NO_CLAMP[1]
    fast: Callable[..., None] | None = None
    kernel: Callable[[np.ndarray], np.ndarray] | None = None
    act: int = ACT_NONE
    affines: tuple[np.float32, ...] = ()
    #: A HARD_SWISH with no affine around it (each ``x * 1 + -0.0``, which changes no value):
    #: what a compiled depthwise loop applies to each finished output row (``depthwise``).
    plain_hard_swish: bool = False

    def with_bias(self, out: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, row0: int,
                  bias_act: Callable[..., Any]) -> None:
        """The convolution's bias and activation (``lo > hi``: none; ``bias_act`` is its
        compiled pass), then this epilogue, in one compiled pass over a C-contiguous float32
        [R, Cout] block of rows ``row0 ..``."""
        if self.fast is not None:
            if self.kind == HARD_SWISH:
                self.fast(out, bias, lo, hi, *self.affines)
            elif self.kind == PRELU and self.rows is not None:
                self.fast(out, bias, lo, hi, self.rows[0])
            elif self.rows is not None:
                self.fast(out, bias, lo, hi, self.rows[row0 : row0 + out.shape[0]], self.lo, self.hi)
            return
        bias_act(out, bias, lo, hi)
        res = self.after(out.reshape(1, 1, *out.shape)) if self.kind != ADD else self.after_rows(out, row0)
        if res is not out:
            np.copyto(out, res.reshape(out.shape))

    def after_rows(self, out: np.ndarray, row0: int) -> np.ndarray:
        """``after`` for an ADD on the block of rows ``row0 ..`` of the result."""
        assert self.rows is not None
        return add(self.act)(self.rows[row0 : row0 + out.shape[0]]).after(out)

    def after(self, out: np.ndarray) -> np.ndarray:
        """This epilogue on a whole C-contiguous float32 NHWC result whose bias and activation
        are applied (Winograd's, the numpy paths'): the result, ``out`` itself or a new array.
        An ADD adds in place; the others run the successor's own kernel (exact by construction:
        a copy back into ``out`` cost 1.05-1.1x the separate step)."""
        if self.kind == ADD and self.rows is not None:
            flat = out.reshape(-1, out.shape[-1])
            np.add(flat, self.rows, out=flat)
            apply_activation(flat, self.act)
            return out
        assert self.kernel is not None
        return self.kernel(out)


def hard_swish(affines: tuple[np.float32, ...], kernel: Callable[[np.ndarray], np.ndarray]) -> Epilogue:
    """A HARD_SWISH epilogue, ``x * s1 + b1`` before it and ``* s2 + b2`` after it (``affines``
    (s1, b1, s2, b2); ``(1, -0.0)`` changes no value); ``kernel`` the successor step's own."""
    plain = all(a.tobytes() == i.tobytes() for a, i in zip(affines, IDENTITY_AFFINES, strict=True))
    return Epilogue(HARD_SWISH, fast=compiled(bias_hard_swish_f32, BIAS_HARD_SWISH_F32), kernel=kernel,
                    affines=affines, plain_hard_swish=plain)


def prelu(slope: np.ndarray, kernel: Callable[[np.ndarray], np.ndarray]) -> Epilogue:
    """A PRELU epilogue: ``slope`` one float32 value per output channel, ``kernel`` the PRELU
    kernel with its slope operand."""
    return Epilogue(PRELU, slope.reshape(1, -1), fast=compiled(bias_prelu_f32, BIAS_PRELU_F32), kernel=kernel)


def add(act: int) -> Callable[[np.ndarray], Epilogue]:
    """The maker of ADD epilogues with the fused activation ``act``, given the other operand as
    [N*OH*OW, Cout] float32 rows (one per run; the compiled pass is looked up once, here)."""
    lo, hi = activation_bounds(act)
    fast = compiled(bias_add_f32, BIAS_ADD_F32)

    def make(rows: np.ndarray) -> Epilogue:
        return Epilogue(ADD, rows, lo, hi, fast, None, act)

    return make


#: The signatures the fused bias passes are compiled for.
BIAS_HARD_SWISH_F32 = (
    "void(float32[:, ::1], Array(float32, 1, 'C', readonly=True), float32, float32, float32, float32, float32,"
    " float32)"
)
BIAS_ADD_F32 = (
    "void(float32[:, ::1], Array(float32, 1, 'C', readonly=True), float32, float32,"
    " Array(float32, 2, 'C', readonly=True), float32, float32)"
)
BIAS_PRELU_F32 = (
    "void(float32[:, ::1], Array(float32, 1, 'C', readonly=True), float32, float32,"
    " Array(float32, 1, 'C', readonly=True))"
)

# Each pass below is ``_jit_float.bias_act_f32`` (``out = clip(out + bias, lo, hi)``, ``lo > hi``:
# no clamp) followed, on the same value, by the successor's float32 operations, each rounded
# as the separate kernels round it (bit for bit, tested). One function per successor: a
# branch on the kind inside the loop kept it from vectorizing (ADD on [9216, 16]: 41 -> 27 us).


def bias_hard_swish_f32(out: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, s1: np.float32,
                        b1: np.float32, s2: np.float32, b2: np.float32) -> None:
    """The bias pass, then ``x * s1 + b1`` (``_fuse_chain.affine_f32``), HARD_SWISH as
    ``_jit_float.hard_swish_f32``, ``* s2 + b2``."""
    clamp = lo <= hi
    three, six, zero = np.float32(3), np.float32(6), np.float32(0)
    for p in range(out.shape[0]):
        o = out[p]
        for c in range(out.shape[1]):
            v = o[c] + bias[c]
            if clamp:
                v = lo if v < lo else (hi if v > hi else v)
            v = v * s1 + b1
            t = v + three
            t = zero if t < zero else (six if t > six else t)
            o[c] = (t * v / six) * s2 + b2


def bias_add_f32(out: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, res: np.ndarray,
                 lo2: np.float32, hi2: np.float32) -> None:
    """The bias pass, then ``+ res`` [P, C] clamped to [``lo2``, ``hi2``] (none when ``lo2 > hi2``)."""
    clamp, clamp2 = lo <= hi, lo2 <= hi2
    for p in range(out.shape[0]):
        o, r = out[p], res[p]
        for c in range(out.shape[1]):
            v = o[c] + bias[c]
            if clamp:
                v = lo if v < lo else (hi if v > hi else v)
            v = v + r[c]
            if clamp2:
                v = lo2 if v < lo2 else (hi2 if v > hi2 else v)
            o[c] = v


def bias_prelu_f32(out: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, slope: np.ndarray) -> None:
    """The bias pass, then PRELU with one ``slope`` per channel as ``_jit_float.prelu_f32``."""
    clamp = lo <= hi
    zero = np.float32(0)
    for p in range(out.shape[0]):
        o = out[p]
        for c in range(out.shape[1]):
            v = o[c] + bias[c]
            if clamp:
                v = lo if v < lo else (hi if v > hi else v)
            o[c] = v if v >= zero else v * slope[c]


def silu(x: np.ndarray, out: np.ndarray, scratch: np.ndarray | None = None,
         logistic: Callable[[np.ndarray, np.ndarray, int, bool], None] | None = None) -> None:
    """``out = x * (1 / (1 + exp(-x)))`` for C-contiguous float32 ``x`` and ``out`` of one size,
    the LOGISTIC then MUL kernels' float32 operations: ``logistic``, the compiled
    ``logistic_f32`` the LOGISTIC kernel runs (``_jit_logistic.compiled_logistic()``, asked at
    preparation as the kernel asks), in one pass; numpy's formula when it is None. ``out`` is
    ``x`` itself (then ``scratch``, as large, holds ``exp(-x)`` for numpy) or an array that does
    not overlap it."""
    xf, of = x.reshape(-1), out.reshape(-1)
    if logistic is not None:
        logistic(xf.reshape(1, -1), of.reshape(1, -1), 0, True)
        return
    same = out is x or np.may_share_memory(xf, of)
    e = scratch.reshape(-1) if same and scratch is not None else of if not same else np.empty_like(xf)
    np.negative(xf, out=e)
    np.exp(e, out=e)
    e += np.float32(1)
    np.reciprocal(e, out=e)
    np.multiply(xf, e, out=of)
