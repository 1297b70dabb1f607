"""2-D pooling: AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D.

Signatures (NNAPI): explicit ``[input, pad_left, pad_right, pad_top, pad_bottom, stride_w,
stride_h, filter_w, filter_h, activation, (layout)]`` or implicit ``[input, padding scheme,
stride_w, stride_h, filter_w, filter_h, activation, (layout)]``. Padded positions never take
part: averages divide by the number of real input elements under the window, maxima ignore
the padding. The kernels work in NHWC (NCHW is viewed as NHWC and transposed back) and in real
numbers (float32 for float types, float64 for quantized ones, requantized by ``from_real``).
All three reductions are separable: the window is reduced along the height first (whole rows,
contiguous, and the data shrinks by the stride), then along the width, so a KHxKW window costs
KH+KW passes instead of KH*KW. With numba, float32 MAX_POOL_2D runs a compiled loop instead
(``_jit_float.window_pixels_f32`` taking maxima: one pass, activation included, identical), and
so does a float32 AVERAGE_POOL_2D (``average_pool_f32``: numpy's order of additions, identical
values up to the sign of a zero sum; a global one sums in float64 over blocks of pixels,
``_jit_pointwise.BlockMean``, as a 1x1 CONV_2D fused into it does: 0.12 ms on [1,112,112,64], the
numpy path's BLAS gemv 0.10-0.12, with the fused step bit for bit the unfused plan).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnrt.errors import NnrtError
from nnrt.ops._common import (
    activation_bounds,
    apply_activation,
    check_activation,
    check_padding_scheme,
    check_result_size,
    from_nchw,
    from_real,
    implicit_padding,
    int_param,
    to_nchw,
    to_real,
)
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import (
    AVERAGE_POOL_F32,
    BIAS_ACT_SUM_F32,
    WINDOW_PIXELS_F32,
    average_pool_f32,
    bias_act_sum_f32,
    window_pixels_f32,
)
from nnrt.ops._jit_pointwise import BlockMean
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["global_average_act"]

_TYPES = {
    Op.AVERAGE_POOL_2D: (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED),
    Op.MAX_POOL_2D: (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED),
    Op.L2_POOL_2D: (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16),
}


@dataclass(frozen=True, slots=True)
class _Geometry:
    top: int
    left: int
    stride_h: int
    stride_w: int
    k_h: int
    k_w: int
    out_h: int
    out_w: int
    act: int
    nchw: bool


def _geometry(call: OpCall, explicit: bool, args: tuple[Any, ...]) -> _Geometry:
    x = args[0]
    base = 10 if explicit else 7
    nchw = len(args) > base and bool(args[base])
    in_h, in_w = (x.shape[2], x.shape[3]) if nchw else (x.shape[1], x.shape[2])
    s = 5 if explicit else 2  # stride_w; then stride_h, filter_w, filter_h, activation
    sw, sh = int_param(call, args, s, "stride_w", 1), int_param(call, args, s + 1, "stride_h", 1)
    kw, kh = int_param(call, args, s + 2, "filter_w", 1), int_param(call, args, s + 3, "filter_h", 1)
    act = check_activation(call, args[s + 4], s + 4)
    if explicit:
        left, right = int_param(call, args, 1, "padding_left", 0), int_param(call, args, 2, "padding_right", 0)
        top, bottom = int_param(call, args, 3, "padding_top", 0), int_param(call, args, 4, "padding_bottom", 0)
    else:
        scheme = check_padding_scheme(call, args[1], 1)
        left, right = implicit_padding(scheme, in_w, sw, kw)
        top, bottom = implicit_padding(scheme, in_h, sh, kh)
    out_h = (in_h + top + bottom - kh) // sh + 1
    out_w = (in_w + left + right - kw) // sw + 1
    if (out_h <= 0 or out_w <= 0) and in_h > 0 and in_w > 0:
        call.fail(f"the {kh}x{kw} window does not fit the padded {in_h}x{in_w} input")
    return _Geometry(top, left, sh, sw, kh, kw, max(out_h, 0), max(out_w, 0), act, nchw)


def _window_view(x: np.ndarray, start: int, count: int, stride: int, axis: int) -> np.ndarray:
    idx: list[slice] = [slice(None)] * x.ndim
    idx[axis] = slice(start, start + (count - 1) * stride + 1, stride)
    return x[tuple(idx)]


def _reduce_axis(
    x: np.ndarray, axis: int, before: int, k: int, stride: int, out_n: int, pad_value: float, ufunc: np.ufunc
) -> np.ndarray:
    """Reduce ``k``-wide windows along ``axis`` (padded with ``pad_value``) -> ``out_n`` positions."""
    n = x.shape[axis]
    need = (out_n - 1) * stride + k
    if before == 0 and k <= n and out_n == 1:
        # One window along the axis (global pooling): one reduction over a reshaped view. Other
        # windows, overlapping or not, take k-1 ufunc calls over strided views (a reduction over
        # a middle axis of a reshape was 3-5x slower).
        view = _window_view(x, 0, out_n * k, 1, axis)
        split = (*x.shape[:axis], out_n, k, *x.shape[axis + 1 :])
        red: np.ndarray = ufunc.reduce(view.reshape(split), axis=axis + 1)
        return red
    if not before and need <= n:
        acc = np.array(_window_view(x, 0, out_n, stride, axis), copy=True)
        for j in range(1, k):
            ufunc(acc, _window_view(x, j, out_n, stride, axis), out=acc)
        return acc
    # Padding: no padded copy; each tap reduces only the output positions whose input is real.
    shape = list(x.shape)
    shape[axis] = out_n
    acc = np.full(shape, pad_value, dtype=x.dtype)
    idx: list[slice] = [slice(None)] * x.ndim
    for j in range(k):
        off = j - before
        lo, hi = max(0, (stride - 1 - off) // stride), min(out_n, (n - 1 - off) // stride + 1)
        if lo >= hi:
            continue
        idx[axis] = slice(lo, hi)
        dst = acc[tuple(idx)]
        ufunc(dst, _window_view(x, lo * stride + off, hi - lo, stride, axis), out=dst)
    return acc


def _is_global(x: np.ndarray, g: _Geometry) -> bool:
    """One window covering the whole (unpadded) image."""
    return (g.out_h == g.out_w == 1 and g.top == g.left == 0
            and g.k_h >= x.shape[1] and g.k_w >= x.shape[2] and g.stride_h >= 1 and g.stride_w >= 1)


def global_average_act(call: OpCall) -> int | None:
    """For a float32 AVERAGE_POOL_2D with constant parameters over an NHWC input of known shape
    whose one window covers the whole unpadded image (``_is_global``): its fused activation;
    else None. For a plan fusion that computes the mean itself (``execution._fuse_pool``)."""
    if call.type is not Op.AVERAGE_POOL_2D or call.inputs[0].type is not T.TENSOR_FLOAT32:
        return None
    dims = call.inputs[0].dimensions
    params = [call.const(i) for i in range(1, len(call.inputs))]
    if len(dims) != 4 or 0 in dims or any(v is None for v in params) or len(call.inputs) not in (7, 8, 10, 11):
        return None
    try:
        x = np.broadcast_to(np.float32(0), dims)
        g = _geometry(call, len(call.inputs) >= 10, (x, *params))
    except NnrtError:
        return None
    return g.act if not g.nchw and _is_global(x, g) else None


def _counts(in_n: int, before: int, k: int, stride: int, out_n: int) -> np.ndarray:
    """How many of each window's ``k`` taps fall inside the (unpadded) input."""
    start = np.arange(out_n) * stride - before
    return (np.minimum(start + k, in_n) - np.maximum(start, 0)).clip(min=0)


@kernel(Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D)
def prepare_pool2d(call: OpCall) -> Kernel:
    call.expect_counts((7, 8, 10, 11), 1)
    n = len(call.inputs)
    explicit = n >= 10
    t = call.expect_type(0, *_TYPES[call.type])
    call.expect_output_type(0, t)
    call.expect_rank(0, 4)
    base = 10 if explicit else 7
    for i in range(1, base):
        call.expect_type(i, T.INT32)
        v = call.const(i)
        if v is None:
            continue
        if i == base - 1:
            check_activation(call, v, i)
        elif not explicit and i == 1:
            check_padding_scheme(call, v, 1)
        elif v < (0 if explicit and i <= 4 else 1):
            call.fail(f"input {i} has invalid value {v}")
    if n > base:
        call.expect_type(base, T.BOOL)
    in_op, out_op = call.inputs[0], call.outputs[0]
    real = np.float64 if t.is_quantized else np.float32
    kind = call.type

    reduce_fn: Callable[[np.ndarray, _Geometry], np.ndarray]

    def window_sum(x: np.ndarray, g: _Geometry) -> np.ndarray:
        if _is_global(x, g):
            # Global average pooling: a matrix-vector product per image streams the input once
            # through BLAS, about 3x faster than a reduction over a reshaped view.
            nb, h, w, c = x.shape
            weights = np.full(h * w, 1.0 / (h * w), dtype=x.dtype)
            pooled: np.ndarray = np.matmul(weights, x.reshape(nb, h * w, c))
            return pooled.reshape(nb, 1, 1, c)
        s = _reduce_axis(x, 1, g.top, g.k_h, g.stride_h, g.out_h, 0.0, np.add)
        s = _reduce_axis(s, 2, g.left, g.k_w, g.stride_w, g.out_w, 0.0, np.add)
        ch = _counts(x.shape[1], g.top, g.k_h, g.stride_h, g.out_h)
        cw = _counts(x.shape[2], g.left, g.k_w, g.stride_w, g.out_w)
        cnt = np.maximum(ch[:, None] * cw[None, :], 1).astype(x.dtype)
        s /= cnt[:, :, None]
        return s

    if kind is Op.MAX_POOL_2D:

        def reduce_fn(x: np.ndarray, g: _Geometry) -> np.ndarray:
            m = _reduce_axis(x, 1, g.top, g.k_h, g.stride_h, g.out_h, -np.inf, np.maximum)
            return _reduce_axis(m, 2, g.left, g.k_w, g.stride_w, g.out_w, -np.inf, np.maximum)

    elif kind is Op.L2_POOL_2D:

        def reduce_fn(x: np.ndarray, g: _Geometry) -> np.ndarray:
            r: np.ndarray = np.sqrt(window_sum(np.square(x), g))
            return r

    else:
        reduce_fn = window_sum

    fast = compiled(window_pixels_f32, WINDOW_PIXELS_F32) if kind is Op.MAX_POOL_2D and t is T.TENSOR_FLOAT32 else None
    act_sum = compiled(bias_act_sum_f32, BIAS_ACT_SUM_F32) if kind is Op.AVERAGE_POOL_2D and t is T.TENSOR_FLOAT32 else None
    average = compiled(average_pool_f32, AVERAGE_POOL_F32) if kind is Op.AVERAGE_POOL_2D and t is T.TENSOR_FLOAT32 else None

    def run(x: np.ndarray, *params: Any) -> np.ndarray:
        args = (x, *params)
        if x.ndim != 4:
            call.fail(f"input has rank {x.ndim}; expected 4")
        g = _geometry(call, explicit, args)
        nb, c = x.shape[0], (x.shape[1] if g.nchw else x.shape[3])
        if nb == 0 or c == 0 or g.out_h == 0 or g.out_w == 0:
            shape = (nb, c, g.out_h, g.out_w) if g.nchw else (nb, g.out_h, g.out_w, c)
            return np.zeros(shape, dtype=t.dtype)
        check_result_size(call, (nb, g.out_h, g.out_w, c), t.dtype)  # padding can ask for any size
        xr = to_real(x, in_op, real)
        if g.nchw:
            xr = from_nchw(xr)
        if fast is not None:  # compiled max pool with the activation in the same pass
            res = np.empty((nb, g.out_h, g.out_w, c), dtype=np.float32)
            lo, hi = activation_bounds(g.act)
            window, start = np.empty((g.k_h, g.k_w, 0), np.float32), np.full(c, -np.inf, np.float32)
            fast(np.ascontiguousarray(xr), window, start, res, g.stride_h, g.stride_w, 1, 1, g.top, g.left, lo, hi, True, False)
            return np.ascontiguousarray(to_nchw(res)) if g.nchw else res
        if act_sum is not None and _is_global(xr, g):  # the sums a fused 1x1 CONV_2D makes (_fuse_pool)
            res = BlockMean(None, act_sum, activation_bounds(g.act))(xr)
            return np.ascontiguousarray(to_nchw(res)) if g.nchw else res
        if average is not None:
            res = np.empty((nb, g.out_h, g.out_w, c), dtype=np.float32)
            lo, hi = activation_bounds(g.act)
            average(np.ascontiguousarray(xr), res, g.k_h, g.k_w, g.stride_h, g.stride_w, g.top, g.left, lo, hi)
            return np.ascontiguousarray(to_nchw(res)) if g.nchw else res
        out = reduce_fn(xr, g)
        if t is T.TENSOR_FLOAT32:
            res = apply_activation(out, g.act)
        else:
            res = from_real(out, out_op, g.act)
        return np.ascontiguousarray(to_nchw(res)) if g.nchw else res

    return run
