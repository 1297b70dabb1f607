"""Sparse tensors: the experimental DENSIFY (TensorFlow Lite's sparsity format).

Signature: ``[values, traversal_order, block_map, dim_format, dimensions, seg_0, idx_0, ...,
seg_{n-1}, idx_{n-1}] -> [dense]``. The ``n`` stored dimensions are visited in
``traversal_order``; the first ``rank`` are the dense tensor's own dimensions, the remaining
``k = len(block_map)`` are block dimensions (``block_map[j]`` names the dimension block ``j``
subdivides). ``dim_format[i]`` is 0 (DENSE, ``dimensions[i]`` entries) or 1 (SPARSE_CSR,
entries ``idx_i[seg_i[p]:seg_i[p + 1]]`` under parent position ``p``). Segment and index
arrays of dense dimensions are unused (empty or omitted). Missing entries are zero (the zero
point for asymmetric quantized types).

The kernel walks the format level by level with whole-array operations instead of the
reference's recursion: at each level every parent position expands into its children in
order, which visits entries in the same order as a depth-first walk.
"""

from __future__ import annotations

import numpy as np

from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_DENSE, _SPARSE_CSR = 0, 1
_ZERO_POINT_TYPES = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_ASYMM)
_VALUE_TYPES = (
    T.TENSOR_FLOAT32,
    T.TENSOR_FLOAT16,
    T.TENSOR_INT32,
    T.TENSOR_BOOL8,
    T.TENSOR_QUANT8_ASYMM,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
    T.TENSOR_QUANT8_SYMM,
    T.TENSOR_QUANT16_SYMM,
    T.TENSOR_QUANT16_ASYMM,
)


def _dense_shape(call: OpCall, order: np.ndarray, block_map: np.ndarray, dims: np.ndarray) -> tuple[int, ...]:
    """The dense tensor's shape from the traversal order, block map and stored dimensions."""
    n, k = order.size, block_map.size
    rank = n - k
    if dims.size != n or rank < 1:
        call.fail(f"{dims.size} dimensions and {k} blocks for a traversal order of {n}")
    if sorted(order.tolist()) != list(range(n)):
        call.fail(f"traversal order {order.tolist()} is not a permutation of 0..{n - 1}")
    if k and (block_map.min() < 0 or block_map.max() >= rank):
        call.fail(f"block map {block_map.tolist()} names dimensions outside 0..{rank - 1}")
    if (dims < 0).any():
        call.fail(f"dimensions {dims.tolist()} must not be negative")
    shape = [0] * rank
    for i in range(rank):
        if order[i] >= rank:
            call.fail(f"traversal order {order.tolist()} visits a block dimension before a dense one")
        shape[order[i]] = int(dims[i])
    for i in range(rank, n):
        shape[int(block_map[order[i] - rank])] *= int(dims[i])
    return tuple(shape)


@kernel(Op.DENSIFY)
def prepare_densify(call: OpCall) -> Kernel:
    n_in = len(call.inputs)
    call.expect_counts(range(5, max(n_in, 5) + 1), 1)
    t = call.expect_type(0, *_VALUE_TYPES)
    call.expect_output_type(0, t)
    call.expect_rank(0, 1)
    order_dims = call.inputs[1].dimensions
    if len(order_dims) == 1 and order_dims[0] and n_in != 5 + 2 * order_dims[0]:
        call.fail(f"takes {5 + 2 * order_dims[0]} inputs for {order_dims[0]} stored dimensions, got {n_in}")
    if (n_in - 5) % 2:
        call.fail(f"takes 5 + 2 * n inputs, got {n_in}")
    for i in range(1, n_in):
        if i in (1, 3, 4) or call.has_input(i):
            call.expect_type(i, T.TENSOR_INT32)
            call.expect_rank(i, 1)
    in_op, out_op = call.inputs[0], call.outputs[0]
    fill = in_op.zero_point if t in _ZERO_POINT_TYPES else 0
    order, block_map, dims = call.const(1), call.const(2), call.const(4)
    if not call.has_input(2):
        block_map = np.zeros(0, dtype=np.int32)
    if order is not None and block_map is not None and dims is not None:
        _dense_shape(call, order, block_map, dims)

    def run(
        values: np.ndarray,
        order: np.ndarray,
        block_map: np.ndarray | None,
        fmt: np.ndarray,
        dims: np.ndarray,
        *meta: np.ndarray | None,
    ) -> np.ndarray:
        if block_map is None:  # an empty block map may arrive omitted (a zero-length constant)
            block_map = np.zeros(0, dtype=np.int32)
        shape = _dense_shape(call, order, block_map, dims)
        n = order.size
        rank = len(shape)
        if fmt.size != n or len(meta) != 2 * n:
            call.fail(f"dimension formats {fmt.tolist()} and {len(meta)} metadata arrays for {n} stored dimensions")
        # pos: position of each partial entry in its level's storage; idx: its coordinates so far.
        pos = np.zeros(1, dtype=np.int64)
        idx = np.zeros((1, 0), dtype=np.int64)
        for level in range(n):
            if fmt[level] == _DENSE:
                size = int(dims[level])
                child = np.arange(size, dtype=np.int64)
                pos = (pos[:, None] * size + child[None, :]).reshape(-1)
                coord = np.tile(child, idx.shape[0])
                idx = np.repeat(idx, size, axis=0)
            elif fmt[level] == _SPARSE_CSR:
                seg, ind = meta[2 * level], meta[2 * level + 1]
                if seg is None or ind is None or seg.size < (int(pos.max()) + 2 if pos.size else 1):
                    call.fail(f"sparse dimension {level} is missing its segments or indices")
                seg64 = seg.astype(np.int64)
                lo, hi = seg64[pos], seg64[pos + 1]
                counts = hi - lo
                if (counts < 0).any() or (hi > ind.size).any():
                    call.fail(f"segments of dimension {level} are not increasing or overrun the indices")
                starts = np.repeat(lo - np.cumsum(counts) + counts, counts)
                pos = starts + np.arange(int(counts.sum()), dtype=np.int64)
                coord = ind.astype(np.int64)[pos]
                idx = np.repeat(idx, counts, axis=0)
            else:
                call.fail(f"dimension {level} has format {int(fmt[level])}; expected 0 (DENSE) or 1 (SPARSE_CSR)")
            idx = np.concatenate([idx, coord[:, None]], axis=1)
        if pos.size and int(pos.max()) >= values.size:
            call.fail(f"the format addresses {int(pos.max()) + 1} values, only {values.size} given")
        orig = np.zeros((pos.size, rank), dtype=np.int64)
        orig[:, order[:rank]] = idx[:, :rank]
        for i in range(rank, n):
            j = int(order[i]) - rank
            d = int(block_map[j])
            block = int(dims[order[rank + j]])  # the reference's block size of block j
            orig[:, d] = orig[:, d] * block + idx[:, i]
        if pos.size and ((orig < 0).any() or (orig >= np.array(shape)).any()):
            call.fail("a sparse index lies outside the dense shape")
        out = np.full(shape, fill, dtype=out_op.type.dtype)
        if pos.size:
            out[tuple(orig.T)] = values[pos]
        return out

    return run
