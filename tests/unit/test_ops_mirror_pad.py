"""MIRROR_PAD (one gather per padded axis) against ``np.pad``'s reflect and symmetric modes.

Ranks 1-4, axes of one value, the largest paddings each mode allows (REFLECT: size - 1,
SYMMETRIC: size), no padding at all, float32, int32 and 8-bit tensors, paddings constant or
given at execution, and paddings too large rejected with INVALID_ARGUMENT.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op

MODES = {0: "reflect", 1: "symmetric"}


def mirror_pad(x: np.ndarray, pads: np.ndarray, mode: int, t: T, const_pads: bool) -> np.ndarray:
    m = Model()
    q = (0.5, 3) if t is T.TENSOR_QUANT8_ASYMM else (0.0, 0)
    xi = m.add_operand(t, list(x.shape), *q)
    pi = m.add_operand(T.TENSOR_INT32, [x.ndim, 2])
    if const_pads:
        m.set_operand_value(pi, pads)
    mi = m.add_operand(T.INT32)
    m.set_operand_value(mi, mode)
    y = m.add_operand(t, [d + lo + hi for d, (lo, hi) in zip(x.shape, pads.tolist())], *q)
    m.add_operation(Op.MIRROR_PAD, [xi, pi, mi], [y])
    m.identify_inputs_and_outputs([xi] if const_pads else [xi, pi], [y])
    m.finish()
    feeds = [x] if const_pads else [x, pads]
    out: np.ndarray = nnrt.CpuDevice().prepare_model_sync(m).execute_sync(feeds).outputs[0]
    return out


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    mode = draw(st.sampled_from([0, 1]))
    shape = draw(st.lists(st.integers(1 + (mode == 0), 5), min_size=1, max_size=4))
    limit = 1 if mode == 0 else 0
    pads = [[draw(st.integers(0, d - limit)), draw(st.integers(0, d - limit))] for d in shape]
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * 1.5 - 7
    return x, np.asarray(pads, np.int32), mode


@settings(max_examples=40, deadline=None)
@given(cases(), st.sampled_from([T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM]), st.booleans())
def test_matches_np_pad(case: tuple[np.ndarray, np.ndarray, int], t: T, const_pads: bool) -> None:
    x, pads, mode = case
    x = x.astype(t.dtype) if t is T.TENSOR_FLOAT32 else (np.abs(x) % 200).astype(t.dtype)
    got = mirror_pad(x, pads, mode, t, const_pads)
    want = np.pad(x, pads.tolist(), mode=MODES[mode])  # type: ignore[call-overload]
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, want)


def test_edges_and_no_padding() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for mode, limit in ((0, 1), (1, 0)):
        pads = np.asarray([[1 - limit, 1 - limit], [3 - limit, 3 - limit], [4 - limit, 0]], np.int32)
        got = mirror_pad(x, pads, mode, T.TENSOR_FLOAT32, True)
        np.testing.assert_array_equal(got, np.pad(x, pads.tolist(), mode=MODES[mode]))  # type: ignore[call-overload]
    same = mirror_pad(x, np.zeros((3, 2), np.int32), 0, T.TENSOR_FLOAT32, True)
    np.testing.assert_array_equal(same, x)
    one = np.asarray([[5.0]], np.float32)  # a single value mirrored symmetrically: repeated
    np.testing.assert_array_equal(mirror_pad(one, np.asarray([[1, 1], [1, 0]], np.int32), 1, T.TENSOR_FLOAT32, True),
                                  np.full((3, 2), 5.0, np.float32))


@pytest.mark.parametrize(("mode", "pad"), [(0, 3), (1, 4)])
def test_paddings_too_large_are_rejected(mode: int, pad: int) -> None:
    x = np.zeros((2, 3), np.float32)
    pads = np.asarray([[0, 0], [pad, 0]], np.int32)
    with pytest.raises(nnrt.InvalidArgumentError, match="too large for dimension 3") as info:
        mirror_pad(x, pads, mode, T.TENSOR_FLOAT32, True)
    assert info.value.status is nnrt.ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(nnrt.NnrtError, match="too large for dimension 3"):  # the same check at execution
        mirror_pad(x, pads, mode, T.TENSOR_FLOAT32, False)
