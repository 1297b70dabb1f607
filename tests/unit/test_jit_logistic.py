"""``_jit_logistic.logistic_f32``: the error bound against a float64 logistic on a dense grid of
float32 values and on specials, exact 0 / 1 where numpy's formula gives them, any size and in
place, and the LOGISTIC kernel taking it with numba and numpy's formula without."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.ops import _jit
from nnrt.ops._jit_logistic import compiled_logistic, logistic_f32
from nnrt.ops.activations import _logistic
from tests.helpers import first_output, single_op_model

pytestmark = pytest.mark.skipif(not _jit.available(), reason="numba is not installed")

F32 = np.float32
_TINY = float(np.finfo(F32).tiny)


def _ulps(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|got - logistic(x)| in float32 ulps of the float64 logistic, where that is a normal float."""
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    keep = ref >= _TINY
    return np.abs(got[keep].astype(np.float64) - ref[keep]) / np.spacing(ref[keep].astype(F32)).astype(np.float64)


def _grid(step: int) -> np.ndarray:
    """Every ``step``-th float32 in [0, 100] by bits, and their negatives."""
    a = np.arange(0, F32(100).view(np.int32) + 1, step, dtype=np.int32).view(F32)
    return np.concatenate([a, -a])


def _fast() -> Callable[[np.ndarray, np.ndarray, bool], None]:
    """The compiled logistic over flat arrays (each one row)."""
    fast = compiled_logistic()
    assert fast is not None
    return lambda x, out, mul: fast(x.reshape(1, -1), out.reshape(1, -1), 0, mul)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_within_2_5_ulp_on_a_dense_grid_and_0_1_where_numpy_gives_them() -> None:
    fast = _fast()
    x = _grid(101)  # 22 M values
    got = np.empty_like(x)
    fast(x, got, False)
    assert _ulps(got, x).max() <= 2.5
    with np.errstate(all="ignore"):
        ref = _logistic(x)  # numpy's formula: 0 past exp's overflow, 1 once exp(-x) < ulp(1) / 2
    assert _ulps(ref, x).max() <= 4  # the formula itself: 3.6
    np.testing.assert_array_equal(got == 0, ref == 0)
    np.testing.assert_array_equal(got == 1, ref == 1)
    assert np.all((got >= 0) & (got <= 1))


def test_specials() -> None:
    fast = _fast()
    nan = np.array([np.nan], F32).view(np.uint32) | np.uint32(0x1234)
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1e-39, -1e-39, 100, -100, 3e38, -3e38], F32)
    x = np.concatenate([x, nan.view(F32)])
    got = np.empty_like(x)
    fast(x, got, False)
    np.testing.assert_array_equal(got[:-1], np.array([0.5] * 2 + [1, 0] + [0.5] * 4 + [1, 0, 1, 0], F32))
    assert got[-1:].view(np.uint32)[0] == nan[0]  # NaN is x's own
    fast(x, got, True)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got[:-1], x[:-1] * np.array([0.5] * 2 + [1, 0] + [0.5] * 4 + [1, 0, 1, 0], F32))
    assert np.isnan(got[-1])


@pytest.mark.parametrize("n", [0, 1, 7, 1023, 1024, 1025, 5000])
def test_any_size_in_place_and_as_plain_python(n: int) -> None:
    fast = _fast()
    x = np.random.default_rng(n).standard_normal(n).astype(F32) * F32(20)
    want = np.empty_like(x)
    fast(x, want, True)
    same = x.copy()
    fast(same, same, True)
    np.testing.assert_array_equal(same.view(np.uint32), want.view(np.uint32))
    small = x[:300]
    py = np.empty_like(small)
    logistic_f32(small.reshape(1, -1), py.reshape(1, -1), 0, False)  # as Python: no fused multiply-adds, the same bound
    assert small.size == 0 or _ulps(py, small).max() <= 2.5


@pytest.mark.parametrize("jit", [True, False])
def test_the_logistic_kernel_takes_it_with_numba(device: nnrt.CpuDevice, jit: bool) -> None:
    x = np.random.default_rng(1).standard_normal((2, 40, 30)).astype(F32) * F32(8)
    with _jit.forced(jit):
        got = first_output(device, single_op_model(Op.LOGISTIC, T.TENSOR_FLOAT32, [2, 40, 30]), x)
    if jit:
        want = np.empty_like(x)
        _fast()(x.reshape(-1), want.reshape(-1), False)
    else:
        want = _logistic(x)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize(("rows", "width", "off", "wide"), [(2704, 48, 48, 96), (7, 1500, 0, 1600), (3, 5, 2, 9), (1, 0, 0, 4)])
def test_rows_of_a_wider_output(rows: int, width: int, off: int, wide: int) -> None:
    """Rows written at an offset of a wider array (a CONCATENATION's slice) get the flat
    array's bits, and the columns around them are untouched."""
    fast = compiled_logistic()
    assert fast is not None
    x = np.random.default_rng(rows).standard_normal((rows, width)).astype(F32) * F32(10)
    flat = np.empty_like(x)
    _fast()(x, flat, True)
    out = np.full((rows, wide), F32(7))
    fast(x, out, off, True)
    np.testing.assert_array_equal(out[:, off:off + width].view(np.uint32), flat.view(np.uint32))
    assert (np.delete(out, np.s_[off:off + width], axis=1) == 7).all()
