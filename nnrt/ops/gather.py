"""GATHER: slices of a tensor along one axis, picked by index. Part of the shape family (``shape``
imports this module so it registers, and holds the helpers it uses).

With constant axis and indices (every imported model) the indices are checked once per input
shape, at preparation when the shape is known, and a run is a copy of one basic slice when the
indices are one ascending run (a single index included), else ``np.take``: on silero VAD's
[2, 1, 128] state ``np.take`` with its bounds checks took 4-7 us per call, the slice about 1.
The result is always a fresh array, as every shape kernel's.
"""

from __future__ import annotations

import numpy as np

from nnrt.ops._common import normalize_axis, output_values, same_quant
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.shape import DATA_INT_TYPES, all_const, by_shape, known_dims, same_io
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []


@kernel(Op.GATHER)
def prepare_gather(call: OpCall) -> Kernel:
    call.expect_counts(3, 1)
    call.require_inputs()
    same_io(call, DATA_INT_TYPES)
    call.expect_type(1, T.INT32)
    call.expect_type(2, T.TENSOR_INT32)
    src, dst = call.inputs[0], call.outputs[0]
    if src.dimensions and all_const(call, 1):
        normalize_axis(call, call.const(1), len(src.dimensions), 1)

    def checked(x_shape: tuple[int, ...], axis: int, idx: np.ndarray) -> int:
        ax = normalize_axis(call, axis, len(x_shape), 1)
        if idx.size and (idx.min() < 0 or idx.max() >= x_shape[ax]):
            call.fail(f"input 2: indices must be in [0, {x_shape[ax]}) for axis {ax}")
        return ax

    def run(x: np.ndarray, axis: int, indices: np.ndarray) -> np.ndarray:
        idx = np.asarray(indices)
        return output_values(np.take(x, idx, axis=checked(x.shape, axis, idx)), src, dst)

    if not all_const(call, 1, 2) or not same_quant(src, dst):
        return run
    axis0, idx0 = call.const(1), np.asarray(call.const(2))
    # Constant indices forming one ascending run (a single index included) read a basic slice.
    run_of = idx0.size > 0 and bool(np.array_equal(idx0.reshape(-1), np.arange(idx0.size) + idx0.flat[0]))

    def gather_plan(shape: tuple[int, ...]) -> tuple[int, tuple[slice, ...] | None, tuple[int, ...]]:
        ax = checked(shape, axis0, idx0)
        key = (slice(None),) * ax + (slice(int(idx0.flat[0]), int(idx0.flat[0]) + idx0.size),) if run_of else None
        return ax, key, (*shape[:ax], *idx0.shape, *shape[ax + 1 :])

    planned = by_shape(gather_plan)
    if (dims := known_dims(src)) is not None:
        planned(tuple(dims))  # out-of-range indices fail at preparation

    def run_const(x: np.ndarray, axis: int, indices: np.ndarray) -> np.ndarray:
        # Checked once per input shape; a slice and its copy instead of ``np.take``, whose
        # bounds checks cost 4-7 us per call on silero VAD's [2, 1, 128] state.
        ax, key, shape = planned(x.shape)
        if key is None:
            return np.take(x, idx0, axis=ax)
        out = x[key].copy()
        return out if out.shape == shape else out.reshape(shape)

    return run_const
