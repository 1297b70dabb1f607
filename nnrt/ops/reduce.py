"""Reductions: MEAN, REDUCE_ALL/ANY/MAX/MIN/PROD/SUM, ARGMAX/ARGMIN and TOPK_V2.

MEAN and REDUCE_* take ``[input, axes (1-D TENSOR_INT32), keep_dims]`` (keep_dims is an
INT32 for MEAN, a BOOL for the others). Axes may be negative and may repeat; a reduction
that would leave a rank-0 result gives shape ``[1]``, as NNAPI does. Float sums and products
accumulate in float64 (float16 in float32); quantized MEAN and REDUCE_MAX/MIN compute in real
numbers and requantize to the output's parameters. ARGMAX/ARGMIN take ``[input, axis]`` and
give TENSOR_INT32 indices (first occurrence on ties). TOPK_V2 takes ``[input, k]`` and gives
the k largest values along the last axis, in decreasing order (lower index first on ties),
and their indices. Float32 MEAN over adjacent axes runs a compiled loop when numba is
available (``_jit_float.mean_f32``: one pass, float64 sums, no float64 copy of the input).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.ops._common import FLOAT_TYPES, QUANT8_TYPES, from_real, normalize_axis, same_quant, to_real
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import MEAN_F32, mean_f32
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.shape import by_shape
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []


def _axes(call: OpCall, axes: np.ndarray, rank: int, i: int = 1) -> tuple[int, ...]:
    """Sorted, deduplicated non-negative axes; fails on an axis outside [-rank, rank)."""
    return tuple(sorted({normalize_axis(call, a, rank, i) for a in np.asarray(axes).reshape(-1).tolist()}))


def _check_const_axes(call: OpCall) -> None:
    """Validate constant axes at preparation when the input's rank is known."""
    axes = call.const(1)
    rank = len(call.inputs[0].dimensions)
    if axes is not None and rank:
        _axes(call, axes, rank)


def _at_least_1d(x: np.ndarray) -> np.ndarray:
    return x.reshape(1) if x.ndim == 0 else x


# -- MEAN and REDUCE_* --------------------------------------------------------------------

_REDUCE_TYPES: dict[Op, tuple[T, ...]] = {
    Op.MEAN: (*FLOAT_TYPES, *QUANT8_TYPES),
    Op.REDUCE_ALL: (T.TENSOR_BOOL8,),
    Op.REDUCE_ANY: (T.TENSOR_BOOL8,),
    Op.REDUCE_MAX: (*FLOAT_TYPES, *QUANT8_TYPES),
    Op.REDUCE_MIN: (*FLOAT_TYPES, *QUANT8_TYPES),
    Op.REDUCE_PROD: FLOAT_TYPES,
    Op.REDUCE_SUM: FLOAT_TYPES,
}
_REDUCERS: dict[Op, Callable[..., np.ndarray]] = {
    Op.MEAN: np.mean,
    Op.REDUCE_ALL: np.all,
    Op.REDUCE_ANY: np.any,
    Op.REDUCE_MAX: np.max,
    Op.REDUCE_MIN: np.min,
    Op.REDUCE_PROD: np.prod,
    Op.REDUCE_SUM: np.sum,
}


def _extreme(dtype: np.dtype[Any], op: Op) -> Any:
    """The identity of REDUCE_MAX (the type's lowest value) or REDUCE_MIN (its highest)."""
    if dtype.kind == "f":
        return -np.inf if op is Op.REDUCE_MAX else np.inf
    info = np.iinfo(dtype)
    return info.min if op is Op.REDUCE_MAX else info.max


#: A reduction's plan: sorted axes, keep_dims, and for the compiled MEAN over adjacent axes
#: the input's extents before, over and after them and the output's shape.
_Adjacent = tuple[int, int, int, tuple[int, ...]]
_Plan = tuple[tuple[int, ...], bool, _Adjacent | None]


@kernel(*_REDUCE_TYPES)
def prepare_reduce(call: OpCall) -> Kernel:
    call.expect_counts(3, 1)
    t = call.expect_type(0, *_REDUCE_TYPES[call.type])
    call.expect_same_type(0, outputs=[0])
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(1, 1)
    call.expect_type(2, T.INT32 if call.type is Op.MEAN else T.BOOL)
    _check_const_axes(call)
    reducer = _REDUCERS[call.type]
    in_op, out_op = call.inputs[0], call.outputs[0]
    accumulate = call.type in (Op.MEAN, Op.REDUCE_PROD, Op.REDUCE_SUM)
    unchanged = same_quant(in_op, out_op)
    if call.type in (Op.REDUCE_MAX, Op.REDUCE_MIN):  # an identity for empty axes (module doc)
        np_reducer, op_type = reducer, call.type

        def reducer(a: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
            return np.asarray(np_reducer(a, axis=axis, keepdims=keepdims, initial=_extreme(a.dtype, op_type)))

    fast = compiled(mean_f32, MEAN_F32) if call.type is Op.MEAN and t is T.TENSOR_FLOAT32 else None
    spatial_mean = call.type is Op.MEAN and t is T.TENSOR_FLOAT32

    def plan(shape: tuple[int, ...], axes: Any, keep_dims: int | bool) -> _Plan:
        """The checks and the path of a reduction over ``axes`` of an input of ``shape``."""
        ax = _axes(call, axes, len(shape))
        keep = bool(keep_dims)
        if call.type is Op.MEAN and any(shape[a] == 0 for a in ax):
            call.fail(f"input 0 has shape {list(shape)}: the mean over an empty axis has no value")
        if (fast is not None and ax and ax[-1] - ax[0] == len(ax) - 1
                and (math.prod(shape[ax[-1] + 1:]) > 1 or math.prod(shape[ax[0]:]) <= _SERIAL_MAX)):
            # adjacent axes with values after them: one compiled pass (over many innermost
            # values the compiled float64 sum is one serial chain, 3x slower than numpy's
            # pairwise sum: [1, 262144] 597 vs 209 us; those take the numpy path; a few, as
            # openWakeWord's [1, 128] means, take the loop: 1-2 us against np.mean's 6-9)
            lo, hi = ax[0], ax[-1] + 1
            out = (*shape[:lo], *((1,) * len(ax) if keep else ()), *shape[hi:])
            return ax, keep, (math.prod(shape[:lo]), math.prod(shape[lo:hi]), math.prod(shape[hi:]), out or (1,))
        return ax, keep, None

    def reduce(x: np.ndarray, ax: tuple[int, ...], keep: bool, adjacent: _Adjacent | None) -> np.ndarray:
        if adjacent is not None:
            assert fast is not None
            return _mean_adjacent(fast, x, adjacent)
        if t.is_quantized:
            if not accumulate and unchanged:  # MAX/MIN of the stored values
                return _at_least_1d(np.asarray(reducer(x, axis=ax, keepdims=keep)))
            real = reducer(to_real(x, in_op, np.float64), axis=ax, keepdims=keep)
            return _at_least_1d(from_real(np.asarray(real, dtype=np.float64), out_op))
        if spatial_mean and ax and x.ndim - 1 not in ax:
            return _at_least_1d(_mean_over_rows(x, ax, keep))
        if accumulate:
            wide = np.float64 if t is T.TENSOR_FLOAT32 else np.float32
            real = reducer(x.astype(wide), axis=ax, keepdims=keep)
            return _at_least_1d(np.asarray(real).astype(out_op.type.dtype))
        return _at_least_1d(np.asarray(reducer(x, axis=ax, keepdims=keep)))

    def run(x: np.ndarray, axes: np.ndarray, keep_dims: int | bool) -> np.ndarray:
        return reduce(x, *plan(x.shape, axes, keep_dims))

    const_axes, const_keep = call.const(1), call.const(2)
    if const_axes is None or const_keep is None:
        return run
    # Constant axes and keep_dims (the usual case): the checks and the path once per input
    # shape (openWakeWord's [1, 128] MEAN: 3.8 -> 1.7 us per call, CPU time).
    planned = by_shape(lambda shape: plan(shape, const_axes, const_keep))

    def run_const(x: np.ndarray, axes: np.ndarray, keep_dims: int | bool) -> np.ndarray:
        return reduce(x, *planned(x.shape))

    return run_const


#: Innermost values up to which a MEAN over the last axes takes the compiled loop.
_SERIAL_MAX = 4096


def _mean_adjacent(fn: Callable[..., None], x: np.ndarray, adjacent: _Adjacent) -> np.ndarray:
    """MEAN of float32 ``x`` over adjacent axes by the compiled ``_jit_float.mean_f32``:
    ``adjacent`` is the extents before, over and after the axes and the output's shape."""
    a, r, b, shape = adjacent
    out = np.empty((a, b), dtype=np.float32)
    if out.size:
        fn(np.ascontiguousarray(x).reshape(a, r, b), out)
    return out.reshape(shape)


def _mean_over_rows(x: np.ndarray, ax: tuple[int, ...], keep: bool) -> np.ndarray:
    """Float32 MEAN over axes that leave the last one (a global average pool over H, W): the
    float64 sums accumulated straight from the float32 values, without the float64 copy of the
    input (4x fewer bytes written; [1,80,80,96] 1.37 -> 0.37 ms). Each output adds its inputs in
    the same order as ``np.mean`` of the float64 copy (the reduced axes are outer ones: no
    pairwise blocks) and divides by the same count: the same bits (tested)."""
    total: np.ndarray = np.add.reduce(x, axis=ax, dtype=np.float64, keepdims=keep)  # type: ignore[call-overload]
    np.true_divide(total, int(np.prod([x.shape[a] for a in ax])), out=total)
    return total.astype(np.float32)


# -- ARGMAX, ARGMIN -----------------------------------------------------------------------


@kernel(Op.ARGMAX, Op.ARGMIN)
def prepare_arg(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    call.expect_type(0, *FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)
    call.expect_type(1, T.INT32)
    call.expect_output_type(0, T.TENSOR_INT32)
    axis = call.const(1)
    rank = len(call.inputs[0].dimensions)
    if axis is not None and rank:
        normalize_axis(call, axis, rank, 1)
    fn = np.argmax if call.type is Op.ARGMAX else np.argmin

    def run(x: np.ndarray, axis: int) -> np.ndarray:
        # Stored quantized values order like their real values (positive scale).
        return _at_least_1d(np.asarray(fn(x, axis=normalize_axis(call, axis, x.ndim, 1))).astype(np.int32))

    return run


# -- TOPK_V2 ------------------------------------------------------------------------------


@kernel(Op.TOPK_V2)
def prepare_topk(call: OpCall) -> Kernel:
    call.expect_counts(2, 2)
    call.expect_type(0, *FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)
    call.expect_type(1, T.INT32)
    call.expect_same_type(0, outputs=[0])
    call.expect_output_type(1, T.TENSOR_INT32)
    in_op, out_op = call.inputs[0], call.outputs[0]
    if not same_quant(in_op, out_op):
        call.fail("output 0 must have the input's scale and zero point")
    k_const = call.const(1)
    if k_const is not None and (k_const < 1 or (in_op.dimensions and 0 < in_op.dimensions[-1] < k_const)):
        call.fail(f"input 1: k = {k_const} is out of range")

    def run(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if x.ndim == 0:
            call.fail("input 0 must have rank at least 1")
        n = x.shape[-1]
        if not 1 <= k <= n:
            call.fail(f"input 1: k = {k} is out of range for a last dimension of {n}")
        # A stable ascending sort of the reversed row, read backwards: decreasing values,
        # lower original index first among equal values.
        order = np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
        indices = (n - 1 - order).astype(np.int32)
        values = np.take_along_axis(x, indices, axis=-1)
        return values, indices

    return run
