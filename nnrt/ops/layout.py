"""Padding and re-layout kernels: PAD, PAD_V2, MIRROR_PAD, DEPTH_TO_SPACE, SPACE_TO_DEPTH,
BATCH_TO_SPACE_ND, SPACE_TO_BATCH_ND and CHANNEL_SHUFFLE. Part of the shape family (``shape``
imports this module so it registers, and holds the helpers both share).

PAD pads with a real 0 (the output's zero point when quantized); PAD_V2 with its pad value
(FLOAT32/FLOAT16 for float tensors, a raw quantized INT32 for quantized ones); MIRROR_PAD
reflects (mode 0, REFLECT: at most dim - 1 per side) or mirrors (mode 1, SYMMETRIC: at most
dim per side).

The four space/depth/batch ops take a 4-D NHWC tensor, or NCHW when their optional trailing BOOL is true
(FL3); they compute in NHWC and are each one reshape/transpose/reshape of the input, in its
own dtype. SPACE_TO_BATCH_ND pads with a real 0 (the zero point when quantized) before
re-laying. Quantized outputs are requantized when their scale or zero point differ from
the input's. Parameters may be model inputs, so they are checked when known at preparation
and again at run time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nnrt.ops._common import (
    ACT_NONE,
    check_result_size,
    from_nchw,
    normalize_axis,
    output_values,
    quant_range,
    requantize,
    to_nchw,
)
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import PAD_LAST_F32, pad_last_f32
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.shape import (
    DATA_INT_TYPES,
    DATA_TYPES,
    all_const,
    by_shape,
    int_list,
    known_dims,
    same_io,
)
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []


def _prepare_4d(call: OpCall, n_params: int) -> None:
    """Common checks: input 0 a 4-D data tensor, output of its type, optional layout BOOL last."""
    call.expect_counts((1 + n_params, 2 + n_params), 1)
    call.require_inputs(1 + n_params)
    call.expect_type(0, *DATA_TYPES)
    call.expect_same_type(0, outputs=[0])
    call.expect_rank(0, 4)
    if call.has_input(1 + n_params):
        call.expect_type(1 + n_params, T.BOOL)


def _nhwc_kernel(call: OpCall, body: Callable[..., np.ndarray], n_params: int) -> Kernel:
    """Wrap ``body(x_nhwc, *params)`` with layout handling and requantization.

    When the input's shape, the layout and the parameters are known, ``body`` first runs once
    on an empty input of that shape, so NNAPI's validation failures surface at preparation.
    """
    src, dst = call.inputs[0], call.outputs[0]
    dims = _nhwc_dims(call, n_params)
    params = [call.const(1 + k) for k in range(n_params)]
    if dims is not None and all(p is not None for p in params):
        body(np.empty(dims, src.type.dtype), *params)

    def run(x: np.ndarray, *args: Any) -> np.ndarray:
        params, nchw = args[:n_params], bool(args[n_params]) if len(args) > n_params else False
        if x.ndim != 4:
            call.fail(f"input 0 has rank {x.ndim}; expected 4")
        y = body(from_nchw(x) if nchw else x, *params)
        y = to_nchw(y) if nchw else y
        return requantize(y, src, dst)

    return run


def _nhwc_dims(call: OpCall, n_params: int) -> tuple[int, ...] | None:
    """The input's NHWC dimensions when known and the layout is a constant, else None."""
    dims = known_dims(call.inputs[0])
    if dims is None:
        return None
    if not call.has_input(1 + n_params):
        return dims
    nchw = call.const(1 + n_params)
    if nchw is None:
        return None
    return (dims[0], dims[2], dims[3], dims[1]) if nchw else dims


def _block(call: OpCall, value: Any, i: int) -> int:
    b = int(value)
    if b < 1:
        call.fail(f"input {i}: block size {b} must be at least 1")
    return b


# -- DEPTH_TO_SPACE / SPACE_TO_DEPTH -----------------------------------------------------------


@kernel(Op.DEPTH_TO_SPACE)
def prepare_depth_to_space(call: OpCall) -> Kernel:
    _prepare_4d(call, 1)
    call.expect_type(1, T.INT32)

    def body(x: np.ndarray, block: int) -> np.ndarray:
        bs = _block(call, block, 1)
        n, h, w, c = x.shape
        if c % (bs * bs):
            call.fail(f"input 0: depth {c} is not a multiple of block size {bs} squared")
        co = c // (bs * bs)
        return x.reshape(n, h, w, bs, bs, co).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * bs, w * bs, co)

    return _nhwc_kernel(call, body, 1)


@kernel(Op.SPACE_TO_DEPTH)
def prepare_space_to_depth(call: OpCall) -> Kernel:
    _prepare_4d(call, 1)
    call.expect_type(1, T.INT32)

    def body(x: np.ndarray, block: int) -> np.ndarray:
        bs = _block(call, block, 1)
        n, h, w, c = x.shape
        if h % bs or w % bs:
            call.fail(f"input 0: height {h} and width {w} are not multiples of block size {bs}")
        y = x.reshape(n, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
        return y.reshape(n, h // bs, w // bs, bs * bs * c)

    return _nhwc_kernel(call, body, 1)


# -- BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND -----------------------------------------------------


def _block_shape(call: OpCall, value: Any) -> tuple[int, int]:
    bh, bw = int_list(call, value, 1, 2)
    if bh < 1 or bw < 1:
        call.fail(f"input 1: block shape {[bh, bw]} must be at least 1 in each dimension")
    return bh, bw


@kernel(Op.BATCH_TO_SPACE_ND)
def prepare_batch_to_space(call: OpCall) -> Kernel:
    _prepare_4d(call, 1)
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(1, 1)

    def body(x: np.ndarray, block: Any) -> np.ndarray:
        bh, bw = _block_shape(call, block)
        n, h, w, c = x.shape
        if n % (bh * bw):
            call.fail(f"input 0: batch {n} is not a multiple of the block shape's product {bh * bw}")
        no = n // (bh * bw)
        return x.reshape(bh, bw, no, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(no, h * bh, w * bw, c)

    return _nhwc_kernel(call, body, 1)


def _paddings(call: OpCall, value: Any) -> list[tuple[int, int]]:
    arr = np.asarray(value)
    if arr.shape != (2, 2):
        call.fail(f"input 2 has shape {list(arr.shape)}; expected [2, 2]")
    pads = [(int(a), int(b)) for a, b in arr.tolist()]
    if any(p < 0 for pair in pads for p in pair):
        call.fail(f"input 2: paddings {pads} must not be negative")
    return pads


@kernel(Op.SPACE_TO_BATCH_ND)
def prepare_space_to_batch(call: OpCall) -> Kernel:
    _prepare_4d(call, 2)
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(1, 1)
    call.expect_type(2, T.TENSOR_INT32)
    call.expect_rank(2, 2)
    src = call.inputs[0]
    # The padding is a real 0: the input's zero point (the kernel requantizes afterwards).
    fill = src.zero_point if src.type.is_quantized else 0

    def body(x: np.ndarray, block: Any, paddings: Any) -> np.ndarray:
        bh, bw = _block_shape(call, block)
        (pt, pb), (pl, pr) = _paddings(call, paddings)
        n, h, w, c = x.shape
        hp, wp = h + pt + pb, w + pl + pr
        if hp % bh or wp % bw:
            call.fail(f"padded height {hp} and width {wp} are not multiples of the block shape {[bh, bw]}")
        y = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
        y = y.reshape(n, hp // bh, bh, wp // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
        return y.reshape(bh * bw * n, hp // bh, wp // bw, c)

    return _nhwc_kernel(call, body, 2)


# -- PAD / PAD_V2 / MIRROR_PAD -----------------------------------------------------------------


def _pad_plan(call: OpCall, shape: Sequence[int], paddings: Any, limit: int | None = None) -> list[tuple[int, int]]:
    """Paddings ([rank, 2], non-negative) as (before, after) pairs; at most ``dim - limit`` per side."""
    rank = len(shape)
    arr = np.asarray(paddings)
    if arr.shape != (rank, 2):
        call.fail(f"input 1 has shape {list(arr.shape)}; expected [{rank}, 2]")
    pads = [(int(a), int(b)) for a, b in arr.tolist()]
    for d, (a, b) in enumerate(pads):
        if a < 0 or b < 0:
            call.fail(f"input 1: paddings {[a, b]} of axis {d} must not be negative")
        if limit is not None and max(a, b) > shape[d] - limit:
            call.fail(f"input 1: paddings {[a, b]} of axis {d} are too large for dimension {shape[d]}")
    return pads


@kernel(Op.PAD, Op.PAD_V2)
def prepare_pad(call: OpCall) -> Kernel:
    v2 = call.type is Op.PAD_V2
    call.expect_counts(3 if v2 else 2, 1)
    call.require_inputs()
    t = call.expect_type(0, *DATA_TYPES)
    call.expect_same_type(0, outputs=[0])
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(1, 2)
    if v2:
        call.expect_type(2, {T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_FLOAT16: T.FLOAT16}.get(t, T.INT32))
    call.expect_rank(0, 1, 2, 3, 4)
    src, dst = call.inputs[0], call.outputs[0]
    if src.dimensions and all_const(call, 1):
        _pad_plan(call, src.dimensions, call.const(1))
    # PAD pads with a real 0: the output's zero point when quantized.
    default = dst.zero_point if t.is_quantized else 0
    qmin, qmax = quant_range(ACT_NONE, dst.scale, dst.zero_point, t) if t.is_quantized else (0, 0)
    last = compiled(pad_last_f32, PAD_LAST_F32) if t is T.TENSOR_FLOAT32 else None

    def run(x: np.ndarray, paddings: np.ndarray, value: Any = None) -> np.ndarray:
        pads = _pad_plan(call, x.shape, paddings)
        shape = [d + lo + hi for d, (lo, hi) in zip(x.shape, pads)]
        check_result_size(call, shape, dst.type.dtype)
        fill = default if value is None else value
        if t.is_quantized and not qmin <= int(fill) <= qmax:
            call.fail(f"input 2: pad value {fill} is out of range for {t.name}")
        if last is not None and x.ndim and x.size and not any(lo or hi for lo, hi in pads[:-1]):
            out = np.empty(shape, np.float32)
            last(np.ascontiguousarray(x).reshape(-1, x.shape[-1]), out.reshape(-1, shape[-1]), pads[-1][0],
                 np.float32(fill))
            return out
        return pad_copy(output_values(x, src, dst), pads, fill)

    return run


def pad_copy(x: np.ndarray, pads: Sequence[tuple[int, int]], fill: Any) -> np.ndarray:
    """``np.pad(x, pads, constant_values=fill)`` in one fresh array: the border slabs filled, the
    inside copied once (np.pad's generic path takes 1.5-2.5x as long on NHWC tensors)."""
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pads, strict=True))
    out = np.empty(shape, x.dtype)
    for axis, (lo, hi) in enumerate(pads):
        before = (slice(None),) * axis
        if lo:
            out[(*before, slice(0, lo))] = fill
        if hi:
            out[(*before, slice(shape[axis] - hi, None))] = fill
    out[tuple(slice(lo, lo + d) for d, (lo, _) in zip(x.shape, pads, strict=True))] = x
    return out


_MIRROR_MODES = {0: ("reflect", 1), 1: ("symmetric", 0)}


@functools.lru_cache(maxsize=256)
def _mirror_index(size: int, lo: int, hi: int, symmetric: bool) -> np.ndarray:
    """Source positions of one mirror-padded axis: ``lo`` mirrored before the ``size`` values,
    ``hi`` after (REFLECT leaves the edge value out of the mirror, SYMMETRIC repeats it)."""
    i = np.arange(-lo, size + hi)
    edge = 1 if symmetric else 0
    idx = np.where(i < 0, -i - edge, np.where(i >= size, 2 * size - 2 + edge - i, i))
    idx.flags.writeable = False
    return idx


@kernel(Op.MIRROR_PAD)
def prepare_mirror_pad(call: OpCall) -> Kernel:
    call.expect_counts(3, 1)
    call.require_inputs()
    same_io(call, DATA_INT_TYPES)
    call.expect_type(1, T.TENSOR_INT32)
    call.expect_rank(1, 2)
    call.expect_type(2, T.INT32)
    src, dst = call.inputs[0], call.outputs[0]

    def plan(shape: Sequence[int], paddings: Any, mode: Any) -> list[tuple[int, np.ndarray]]:
        """(axis, source positions) of each padded axis, after the checks."""
        if int(mode) not in _MIRROR_MODES:
            call.fail(f"input 2: mode {mode} is not REFLECT (0) or SYMMETRIC (1)")
        name, limit = _MIRROR_MODES[int(mode)]
        pads = _pad_plan(call, shape, paddings, limit)
        check_result_size(call, [d + lo + hi for d, (lo, hi) in zip(shape, pads)], dst.type.dtype)
        return [(axis, _mirror_index(shape[axis], lo, hi, name == "symmetric"))
                for axis, (lo, hi) in enumerate(pads) if lo or hi]

    dims = known_dims(src)
    fixed = None
    if all_const(call, 1, 2):
        if dims is not None:
            plan(dims, call.const(1), call.const(2))
        fixed = by_shape(lambda shape: plan(shape, call.const(1), call.const(2)))

    def run(x: np.ndarray, paddings: np.ndarray, mode: int) -> np.ndarray:
        gathers = fixed(x.shape) if fixed is not None else plan(x.shape, paddings, mode)
        y = output_values(x, src, dst)
        # One gather per padded axis, as np.pad mirrors axis by axis (its generic path took
        # 30-40 us for silero's [1, 1, 512] input).
        for axis, idx in gathers:
            y = np.take(y, idx, axis=axis)
        return y if y is not x else y.copy()

    return run


# -- CHANNEL_SHUFFLE ---------------------------------------------------------------------------


def _shuffle_plan(call: OpCall, shape: Sequence[int], groups: Any, axis: Any) -> tuple[int, int]:
    if len(shape) > 4:
        call.fail(f"input 0 has rank {len(shape)}; CHANNEL_SHUFFLE supports ranks up to 4")
    ax = normalize_axis(call, axis, len(shape), 2)
    g = int(groups)
    if g < 1 or shape[ax] % g:
        call.fail(f"input 1: {g} groups do not divide dimension {ax} of size {shape[ax]}")
    return g, ax


@kernel(Op.CHANNEL_SHUFFLE)
def prepare_channel_shuffle(call: OpCall) -> Kernel:
    call.expect_counts(3, 1)
    call.require_inputs()
    call.expect_type(0, *DATA_TYPES)
    call.expect_same_type(0, outputs=[0])
    call.expect_type(1, T.INT32)
    call.expect_type(2, T.INT32)
    src, dst = call.inputs[0], call.outputs[0]
    dims = known_dims(src)
    if dims is not None and call.const(1) is not None and call.const(2) is not None:
        _shuffle_plan(call, dims, call.const(1), call.const(2))

    def run(x: np.ndarray, groups: int, axis: int) -> np.ndarray:
        g, ax = _shuffle_plan(call, x.shape, groups, axis)
        split = (*x.shape[:ax], g, x.shape[ax] // g, *x.shape[ax + 1 :])
        y = np.swapaxes(x.reshape(split), ax, ax + 1).reshape(x.shape)
        return requantize(y, src, dst)

    return run
