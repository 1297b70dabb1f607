"""Shape and data-movement kernels: RESHAPE, CONCATENATION, SQUEEZE, EXPAND_DIMS, TRANSPOSE,
SLICE, STRIDED_SLICE, SPLIT, TILE, PACK, REVERSE, FILL, RANK (GATHER in ``gather``).

These operations move values without arithmetic, so every type computes in its own dtype.
Quantized outputs whose scale or zero point differ from an input's are requantized through
real numbers (CONCATENATION of inputs with different scales is the CTS case). Parameters
(shapes, axes, paddings) may be model inputs, so each operation has one *plan* function that
checks them against the input's shape and computes the output: it runs at preparation when
everything is known (so NNAPI's validation failures surface there) and again in the kernel.
Kernels always return fresh arrays; a result that would have rank 0 (everything squeezed or
shrunk) has shape [1], as NNAPI tensors have rank >= 1. The paddings (PAD, PAD_V2,
MIRROR_PAD), the space/depth/batch re-layouts and CHANNEL_SHUFFLE are in ``layout``, imported
at the bottom so they register with this family; it shares this module's helpers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import numpy as np

from nnrt.model import Operand
from nnrt.ops._common import check_result_size, normalize_axis, output_values, requantize, same_quant
from nnrt.ops._copies import CHANNELS_LAST_F32, CONCAT2_ROWS_F32, channels_last, channels_last_f32, concat2, concat2_rows_f32
from nnrt.ops._into import set_into, write
from nnrt.ops._jit import compiled
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = [
    "DATA_INT_TYPES",
    "DATA_TYPES",
    "all_const",
    "int_list",
    "known_dims",
    "same_io",
]

#: Float and 8-bit asymmetric quantized tensors: what most data-movement ops accept.
DATA_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
#: The same plus TENSOR_INT32.
DATA_INT_TYPES = (*DATA_TYPES, T.TENSOR_INT32)


# -- helpers shared with ``layout`` ----------------------------------------------------------


def known_dims(op: Operand) -> tuple[int, ...] | None:
    """The operand's dimensions when all are known (a scalar-free tensor), else None."""
    dims = op.dimensions
    if not dims or not all(dims):
        return None
    return dims


def int_list(call: OpCall, value: Any, i: int, size: int | None = None) -> list[int]:
    """A 1-D TENSOR_INT32 argument (input ``i``) as Python ints, optionally of a given length."""
    arr = np.asarray(value)
    if arr.ndim != 1:
        call.fail(f"input {i} must be a 1-D tensor, got shape {list(arr.shape)}")
    if size is not None and arr.shape[0] != size:
        call.fail(f"input {i} has {arr.shape[0]} elements; expected {size}")
    return [int(v) for v in arr.tolist()]


def all_const(call: OpCall, *inputs: int) -> bool:
    """True when every listed input is a constant or an omitted optional input."""
    return all(not call.has_input(i) or call.const(i) is not None for i in inputs)


P = TypeVar("P")


def by_shape(plan: Callable[[Any], P]) -> Callable[[Any], P]:
    """``plan(key)`` remembered per ``key`` (input shapes) for an operation whose parameters are
    all constants (``plan`` closes over them): the plan (validation included) runs once per
    shape, not on every execution (a few us of Python per step on a small streaming model)."""
    memo: dict[Hashable, P] = {}

    def planned(key: Any) -> P:
        hit = memo.get(key)
        if hit is None:
            hit = plan(key)
            if len(memo) < 16:
                memo[key] = hit
        return hit

    return planned


def same_io(call: OpCall, types: Sequence[T], n_in: int = 1) -> None:
    """Input 0 has one of ``types``; inputs 1..n_in-1 and every output have its type."""
    call.expect_type(0, *types)
    call.expect_same_type(0, *range(1, n_in), outputs=range(len(call.outputs)))


# -- RESHAPE -----------------------------------------------------------------------------------


def _reshape_plan(call: OpCall, size: int, shape: Any) -> tuple[int, ...]:
    dims = int_list(call, shape, 1)
    if sum(d == -1 for d in dims) > 1:
        call.fail(f"input 1: shape {dims} has more than one -1")
    if any(d < -1 for d in dims):
        call.fail(f"input 1: shape {dims} has a negative dimension")
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or size % known:
            call.fail(f"input 1: shape {dims} does not fit the input's {size} elements")
        dims = [size // known if d == -1 else d for d in dims]
    elif known != size:
        call.fail(f"input 1: shape {dims} has {known} elements; the input has {size}")
    return tuple(dims)


@kernel(Op.RESHAPE)
def prepare_reshape(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    call.require_inputs()
    same_io(call, DATA_INT_TYPES)
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(1, 1)
    src, dst = call.inputs[0], call.outputs[0]
    dims = known_dims(src)
    if dims is not None and all_const(call, 1):
        _reshape_plan(call, math.prod(dims), call.const(1))

    def run(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        return requantize(x, src, dst).reshape(_reshape_plan(call, x.size, shape))

    if not all_const(call, 1) or not same_quant(src, dst):
        return run
    planned = by_shape(lambda size: _reshape_plan(call, size, call.const(1)))

    def run_same(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        return x.reshape(planned(x.size)).copy()

    return run_same


# -- CONCATENATION -----------------------------------------------------------------------------


def _concat_plan(call: OpCall, shapes: Sequence[Sequence[int]], axis: Any) -> int:
    """Check the inputs' shapes (0 = unknown) against each other; return the axis."""
    rank = len(shapes[0])
    if rank > 4:
        call.fail(f"input 0 has rank {rank}; CONCATENATION supports ranks up to 4")
    ax = normalize_axis(call, axis, rank, len(shapes))
    for k, s in enumerate(shapes[1:], 1):
        if len(s) != rank:
            call.fail(f"input {k} has rank {len(s)}; input 0 has rank {rank}")
        for d, (a, b) in enumerate(zip(shapes[0], s)):
            if d != ax and a and b and a != b:
                call.fail(f"input {k} has dimension {d} of {b}; input 0 has {a}")
    return ax


@kernel(Op.CONCATENATION)
def prepare_concatenation(call: OpCall) -> Kernel:
    n = len(call.inputs) - 1
    call.expect_counts(max(n + 1, 2), 1)
    call.require_inputs()
    same_io(call, DATA_TYPES, n)
    call.expect_type(n, T.INT32)
    srcs, dst = call.inputs[:n], call.outputs[0]
    if all(op.dimensions for op in srcs) and all_const(call, n):
        _concat_plan(call, [op.dimensions for op in srcs], call.const(n))
    if dst.dimensions and len(dst.dimensions) > 4:
        call.fail(f"output 0 has rank {len(dst.dimensions)}; CONCATENATION supports ranks up to 4")

    def run(*args: Any) -> np.ndarray:
        xs: tuple[np.ndarray, ...] = args[:n]
        ax = _concat_plan(call, [x.shape for x in xs], args[n])
        return np.concatenate([output_values(x, op, dst) for x, op in zip(xs, srcs)], axis=ax)

    if not all_const(call, n) or not all(same_quant(op, dst) for op in srcs):
        return run
    planned = by_shape(lambda shapes: _concat_plan(call, shapes, call.const(n)))

    def run_same(*args: Any) -> np.ndarray:
        xs: tuple[np.ndarray, ...] = args[:n]
        return np.concatenate(xs, axis=planned(tuple([x.shape for x in xs])))

    fast = compiled(concat2_rows_f32, CONCAT2_ROWS_F32) if dst.type is T.TENSOR_FLOAT32 else None

    def run_pair(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:  # a streaming state and a frame
        ax = planned((a.shape, b.shape))
        if fast is None or a.dtype != np.float32 or b.dtype != np.float32 or not a.size or not b.size:
            return np.concatenate((a, b), axis=ax)
        return concat2(fast, a, b, ax)  # one pass over the output

    return run_pair if n == 2 else run_same


# -- SQUEEZE / EXPAND_DIMS ---------------------------------------------------------------------


def _squeeze_plan(call: OpCall, shape: Sequence[int], axes: Any) -> tuple[int, ...]:
    rank = len(shape)
    if rank > 4:
        call.fail(f"input 0 has rank {rank}; SQUEEZE supports ranks up to 4")
    if axes is None or np.asarray(axes).size == 0:
        return tuple(d for d in shape if d != 1) or (1,)
    drop = {normalize_axis(call, a, rank, 1) for a in int_list(call, axes, 1)}
    for a in sorted(drop):
        if shape[a] != 1:
            call.fail(f"input 1: dimension {a} has size {shape[a]}; only dimensions of size 1 can be squeezed")
    return tuple(d for k, d in enumerate(shape) if k not in drop) or (1,)


@kernel(Op.SQUEEZE)
def prepare_squeeze(call: OpCall) -> Kernel:
    call.expect_counts((1, 2), 1)
    call.require_inputs(1)
    same_io(call, DATA_TYPES)
    if call.has_input(1):
        call.expect_type(1, T.TENSOR_INT32)
        call.expect_rank(1, 1)
    src, dst = call.inputs[0], call.outputs[0]
    dims = known_dims(src)
    if dims is not None and all_const(call, 1):
        _squeeze_plan(call, dims, call.const(1) if call.has_input(1) else None)

    def run(x: np.ndarray, axes: Any = None) -> np.ndarray:
        return requantize(x, src, dst).reshape(_squeeze_plan(call, x.shape, axes))

    return run


@kernel(Op.EXPAND_DIMS)
def prepare_expand_dims(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    call.require_inputs()
    same_io(call, DATA_INT_TYPES)
    call.expect_type(1, T.INT32)
    src, dst = call.inputs[0], call.outputs[0]
    if src.dimensions and all_const(call, 1):
        normalize_axis(call, call.const(1), len(src.dimensions) + 1, 1)

    def run(x: np.ndarray, axis: int) -> np.ndarray:
        return np.expand_dims(requantize(x, src, dst), normalize_axis(call, axis, x.ndim + 1, 1))

    return run


# -- TRANSPOSE ---------------------------------------------------------------------------------


def _transpose_plan(call: OpCall, rank: int, perm: Any) -> tuple[int, ...]:
    if rank > 4:
        call.fail(f"input 0 has rank {rank}; TRANSPOSE supports ranks up to 4")
    if perm is None or np.asarray(perm).size == 0:
        return tuple(range(rank - 1, -1, -1))
    p = int_list(call, perm, 1, rank)
    if sorted(p) != list(range(rank)):
        call.fail(f"input 1: {p} is not a permutation of the {rank} axes")
    return tuple(p)


@kernel(Op.TRANSPOSE)
def prepare_transpose(call: OpCall) -> Kernel:
    call.expect_counts((1, 2), 1)
    call.require_inputs(1)
    same_io(call, DATA_TYPES)
    if call.has_input(1):
        call.expect_type(1, T.TENSOR_INT32)
        call.expect_rank(1, 1)
    src, dst = call.inputs[0], call.outputs[0]
    if src.dimensions and all_const(call, 1):
        _transpose_plan(call, len(src.dimensions), call.const(1) if call.has_input(1) else None)

    same = same_quant(src, dst)
    last = compiled(channels_last_f32, CHANNELS_LAST_F32) if dst.type is T.TENSOR_FLOAT32 else None

    def run(x: np.ndarray, perm: Any = None) -> np.ndarray:
        p = _transpose_plan(call, x.ndim, perm)
        v = x.transpose(p)
        if same and v.ndim > 1 and 2 <= v.shape[-1] <= _SHORT_LAST and v.size >= _SHORT_MIN and v.strides[-1] != v.itemsize:
            out = np.empty(v.shape, dst.type.dtype)
            for k in range(v.shape[-1]):  # one strided copy per index of the short last axis
                out[..., k] = v[..., k]
            return out
        if last is not None and same and p == (0, 2, 3, 1) and x.dtype == np.float32 and v.size >= _SHORT_MIN:
            return channels_last(last, x)  # NCHW -> NHWC of a feature map
        return requantize(v, src, dst)

    return run


#: A TRANSPOSE whose result's last axis is this short (NCHW -> NHWC of an RGB image) and that
#: has this many values at least copies one index of that axis at a time: numpy's copy of the
#: whole view makes an inner loop of 2-4 values ([1,3,224,224] 136 -> 40 us, [1,3,48,192] 26 -> 8,
#: [1,2,128,128] 44 -> 9, [1,4,128,128] 49 -> 19; with 8 it lost, [2,8,32,32] 6.6 -> 11.6).
_SHORT_LAST, _SHORT_MIN = 4, 4096


# -- SLICE / STRIDED_SLICE ---------------------------------------------------------------------


def _slice_plan(call: OpCall, shape: Sequence[int], begin: Any, size: Any) -> tuple[slice, ...]:
    rank = len(shape)
    b = int_list(call, begin, 1, rank)
    s = int_list(call, size, 2, rank)
    out = []
    for d, (dim, start, n) in enumerate(zip(shape, b, s)):
        if n == -1:
            n = dim - start
        if start < 0 or n < 0 or start + n > dim:
            call.fail(f"axis {d}: begin {start} and size {s[d]} do not fit dimension {dim}")
        out.append(slice(start, start + n))
    return tuple(out)


@kernel(Op.SLICE)
def prepare_slice(call: OpCall) -> Kernel:
    call.expect_counts(3, 1)
    call.require_inputs()
    same_io(call, DATA_INT_TYPES)
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_type(2, T.TENSOR_INT32)
    src, dst = call.inputs[0], call.outputs[0]
    dims = known_dims(src)
    if dims is not None and all_const(call, 1, 2):
        _slice_plan(call, dims, call.const(1), call.const(2))

    def run(x: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
        return requantize(x[_slice_plan(call, x.shape, begin, size)], src, dst)

    if not all_const(call, 1, 2) or not same_quant(src, dst):
        return run
    planned = by_shape(lambda shape: _slice_plan(call, shape, call.const(1), call.const(2)))

    def run_same(x: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
        return x[planned(x.shape)].copy()

    return run_same


def _clamp_index(index: int, dim: int, forward: bool) -> int:
    """NNAPI's clamped begin/end index of a strided slice."""
    if forward:
        return dim if index >= dim else min(max(index, -dim), dim) % dim
    return -1 if index < -dim else min(index, dim - 1) % dim


def _strided_plan(
    call: OpCall, shape: Sequence[int], begin: Any, end: Any, strides: Any, masks: tuple[Any, Any, Any]
) -> tuple[tuple[slice, ...], tuple[int, ...]]:
    """(per-axis slices, output shape) of a strided slice."""
    rank = len(shape)
    if rank > 4:
        call.fail(f"input 0 has rank {rank}; STRIDED_SLICE supports ranks up to 4")
    b, e, st = int_list(call, begin, 1, rank), int_list(call, end, 2, rank), int_list(call, strides, 3, rank)
    begin_mask, end_mask, shrink_mask = (int(m) for m in masks)
    slices, out_shape = [], []
    for d, dim in enumerate(shape):
        stride = st[d]
        if stride == 0:
            call.fail(f"input 3: stride of axis {d} is 0")
        fwd = stride > 0
        start = (0 if fwd else dim - 1) if begin_mask >> d & 1 else _clamp_index(b[d], dim, fwd)
        stop = (dim if fwd else -1) if end_mask >> d & 1 else _clamp_index(e[d], dim, fwd)
        n = max(-(-(stop - start) // stride), 0)
        if shrink_mask >> d & 1:
            if not fwd:
                call.fail(f"axis {d} is shrunk (shrink_axis_mask) but has a negative stride {stride}")
            if n != 1:
                call.fail(f"axis {d} is shrunk (shrink_axis_mask) but its slice has {n} elements, not 1")
        else:
            out_shape.append(n)
        last = start + n * stride
        slices.append(slice(start, last if last >= 0 else None, stride))
    return tuple(slices), tuple(out_shape) or (1,)


@kernel(Op.STRIDED_SLICE)
def prepare_strided_slice(call: OpCall) -> Kernel:
    call.expect_counts(7, 1)
    call.require_inputs()
    same_io(call, DATA_TYPES)
    for i in (1, 2, 3):
        call.expect_type(i, T.TENSOR_INT32)
        call.expect_rank(i, 1)
    for i in (4, 5, 6):
        call.expect_type(i, T.INT32)
    src, dst = call.inputs[0], call.outputs[0]
    dims = known_dims(src)
    if dims is not None and all_const(call, 1, 2, 3, 4, 5, 6):
        masks = (call.const(4), call.const(5), call.const(6))
        _, shape = _strided_plan(call, dims, call.const(1), call.const(2), call.const(3), masks)
        if dst.dimensions and len(dst.dimensions) != len(shape):
            call.fail(f"output 0 has rank {len(dst.dimensions)}; the slice has shape {list(shape)}")

    def run(x: np.ndarray, begin: Any, end: Any, strides: Any, bm: int, em: int, sm: int) -> np.ndarray:
        slices, shape = _strided_plan(call, x.shape, begin, end, strides, (bm, em, sm))
        return requantize(x[slices], src, dst).reshape(shape)

    if not all_const(call, 1, 2, 3, 4, 5, 6) or not same_quant(src, dst):
        return run
    b0, e0, s0 = call.const(1), call.const(2), call.const(3)
    masks0 = (call.const(4), call.const(5), call.const(6))
    planned = by_shape(lambda shape: _strided_plan(call, shape, b0, e0, s0, masks0))

    def run_same(x: np.ndarray, begin: Any, end: Any, strides: Any, bm: int, em: int, sm: int) -> np.ndarray:
        slices, shape = planned(x.shape)
        out = x[slices].copy()
        return out if out.shape == shape else out.reshape(shape)

    def into(out: np.ndarray, x: np.ndarray, *params: Any) -> None:
        """``run_same``'s values copied straight into ``out`` (``nnrt.ops._into``)."""
        slices, shape = planned(x.shape)
        part = x[slices]
        write(out, part if part.shape == shape else part.reshape(shape), call.label)

    set_into(run_same, into)
    return run_same


# -- SPLIT / PACK ------------------------------------------------------------------------------


def _split_plan(call: OpCall, shape: Sequence[int], axis: Any, num: Any) -> int:
    ax = normalize_axis(call, axis, len(shape), 1)
    n = int(num)
    if n != len(call.outputs):
        call.fail(f"input 2: {n} splits but the operation has {len(call.outputs)} outputs")
    if n <= 0 or shape[ax] % n:
        call.fail(f"input 2: dimension {ax} of size {shape[ax]} cannot be split into {n} equal parts")
    return ax


@kernel(Op.SPLIT)
def prepare_split(call: OpCall) -> Kernel:
    call.expect_counts(3, max(len(call.outputs), 1))
    call.require_inputs()
    same_io(call, DATA_INT_TYPES)
    call.expect_type(1, T.INT32)
    call.expect_type(2, T.INT32)
    src, dsts = call.inputs[0], call.outputs
    dims = known_dims(src)
    if dims is not None and all_const(call, 1, 2):
        _split_plan(call, dims, call.const(1), call.const(2))

    def run(x: np.ndarray, axis: int, num: int) -> tuple[np.ndarray, ...] | np.ndarray:
        ax = _split_plan(call, x.shape, axis, num)
        parts = tuple(requantize(p, src, d) for p, d in zip(np.split(x, len(dsts), axis=ax), dsts))
        return parts[0] if len(parts) == 1 else parts  # (one output: the array, as every such kernel)

    if not all_const(call, 1, 2) or not all(same_quant(src, d) for d in dsts):
        return run
    axis0, num0 = call.const(1), call.const(2)

    def parts(shape: tuple[int, ...]) -> tuple[tuple[slice, ...], ...]:
        ax = _split_plan(call, shape, axis0, num0)
        step = shape[ax] // len(dsts)
        return tuple((slice(None),) * ax + (slice(k * step, (k + 1) * step),) for k in range(len(dsts)))

    planned = by_shape(parts)

    def run_same(x: np.ndarray, axis: int, num: int) -> tuple[np.ndarray, ...] | np.ndarray:
        # The parts as basic slices, planned once per input shape (``np.split`` takes 10-20 us
        # of Python for four parts of a [1, 512] tensor; these copies about 0.4 us each).
        parts = tuple(x[key].copy() for key in planned(x.shape))
        return parts[0] if len(parts) == 1 else parts

    return run_same


@kernel(Op.PACK)
def prepare_pack(call: OpCall) -> Kernel:
    n = len(call.inputs) - 1
    call.expect_counts(max(n + 1, 2), 1)
    call.require_inputs()
    call.expect_type(0, T.INT32)
    call.expect_type(1, *DATA_INT_TYPES)
    call.expect_same_type(1, *range(2, n + 1), outputs=[0])
    srcs, dst = call.inputs[1:], call.outputs[0]
    if srcs[0].dimensions and all_const(call, 0):
        normalize_axis(call, call.const(0), len(srcs[0].dimensions) + 1, 0)

    def run(axis: int, *xs: np.ndarray) -> np.ndarray:
        for k, x in enumerate(xs[1:], 2):
            if x.shape != xs[0].shape:
                call.fail(f"input {k} has shape {list(x.shape)}; input 1 has {list(xs[0].shape)}")
        ax = normalize_axis(call, axis, xs[0].ndim + 1, 0)
        return np.stack([output_values(x, op, dst) for x, op in zip(xs, srcs)], axis=ax)

    return run


# -- TILE / REVERSE / GATHER -------------------------------------------------------------------


@kernel(Op.TILE)
def prepare_tile(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    call.require_inputs()
    same_io(call, DATA_INT_TYPES)
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(1, 1)
    src, dst = call.inputs[0], call.outputs[0]

    def reps_of(rank: int, multiples: Any) -> list[int]:
        reps = int_list(call, multiples, 1, rank)
        if any(r < 0 for r in reps):
            call.fail(f"input 1: multiples {reps} must not be negative")
        return reps

    if src.dimensions and all_const(call, 1):
        reps_of(len(src.dimensions), call.const(1))

    def run(x: np.ndarray, multiples: np.ndarray) -> np.ndarray:
        reps = reps_of(x.ndim, multiples)
        check_result_size(call, [d * r for d, r in zip(x.shape, reps)], dst.type.dtype)
        return np.tile(output_values(x, src, dst), reps)

    return run


@kernel(Op.REVERSE)
def prepare_reverse(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    call.require_inputs()
    same_io(call, DATA_INT_TYPES)
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(1, 1)
    src, dst = call.inputs[0], call.outputs[0]

    def axes_of(rank: int, axes: Any) -> tuple[int, ...]:
        got = tuple(normalize_axis(call, a, rank, 1) for a in int_list(call, axes, 1))
        if len(got) != 1:
            call.fail(f"input 1 has {len(got)} axes; REVERSE takes exactly one")
        return got

    if src.dimensions and all_const(call, 1):
        axes_of(len(src.dimensions), call.const(1))

    def run(x: np.ndarray, axes: np.ndarray) -> np.ndarray:
        return requantize(np.flip(x, axes_of(x.ndim, axes)), src, dst)

    return run


# -- FILL / RANK -------------------------------------------------------------------------------

_FILL_VALUE_TYPES = {T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_FLOAT16: T.FLOAT16, T.TENSOR_INT32: T.INT32}


@kernel(Op.FILL)
def prepare_fill(call: OpCall) -> Kernel:
    call.expect_counts(2, 1)
    call.require_inputs()
    call.expect_type(0, T.TENSOR_INT32)
    call.expect_rank(0, 1)
    t = call.expect_output_type(0, *_FILL_VALUE_TYPES)
    call.expect_type(1, _FILL_VALUE_TYPES[t])
    dtype = t.dtype

    def shape_of(dims: Any) -> list[int]:
        shape = int_list(call, dims, 0)
        if any(d < 0 for d in shape):
            call.fail(f"input 0: dimensions {shape} must not be negative")
        return shape

    if all_const(call, 0):
        shape_of(call.const(0))

    def run(dims: np.ndarray, value: Any) -> np.ndarray:
        shape = shape_of(dims)
        check_result_size(call, shape, dtype)
        return np.full(shape, value, dtype=dtype)

    return run


@kernel(Op.RANK)
def prepare_rank(call: OpCall) -> Kernel:
    call.expect_counts(1, 1)
    call.require_inputs()
    if not call.inputs[0].type.is_tensor:
        call.fail(f"input 0 has type {call.inputs[0].type.name}; expected a tensor")
    call.expect_output_type(0, T.INT32)

    def run(x: np.ndarray) -> np.ndarray:
        return np.array(np.ndim(x), dtype=np.int32)

    return run


from nnrt.ops import gather as _gather  # noqa: E402,F401
from nnrt.ops import layout as _layout  # noqa: E402,F401
