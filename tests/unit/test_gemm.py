"""The float32 product backends (``nnrt/ops/_gemm.py``): MKL's ``cblas_sgemm`` against numpy's
``matmul`` on edge shapes and layouts, the choice of backend (``NNRT_BLAS``, MKL absent, numba
off), and every kernel that makes its products through it (1x1 blocks, the fused 1x1 + global
pool, im2col and first-layer blocks, Winograd, the strided 1x1, FULLY_CONNECTED, BATCH_MATMUL,
LSTM) prepared with each backend: the same results within float32 rounding, and the chosen
backend's products actually made.

The MKL cases need the ``mkl`` distribution and numba (the ``fast`` and ``test`` extras); the
``blas`` fixture (``tests/conftest.py``) skips them where MKL is not installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt._log import reload_vlog
from nnrt.execution import _fuse_pool
from nnrt.ops import _gemm, _jit, _jit_conv, conv, conv_transpose, dense, lstm
from nnrt.ops._jit_conv import winograd_filter
from tests.unit.test_ops_conv import build, ref_conv
from tests.unit.test_ops_dense import bmm_model, fc_model
from tests.unit.test_ops_lstm import make, run_unidirectional

numba = pytest.importorskip("numba")


@pytest.fixture
def mkl() -> Iterator[_gemm.Product]:
    """MKL's compiled product (skips where MKL is not installed)."""
    with _jit.forced(True), _gemm.forced("mkl"):
        if _gemm.backend() != "mkl":
            pytest.skip("MKL (the fast extra) is not installed")
        yield _gemm.product()


@pytest.fixture
def fresh_choice(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The backend decided again inside the test (its decision logged), and again after it."""
    monkeypatch.delenv(_gemm.BLAS_ENV, raising=False)
    _gemm.reset_for_tests()
    reload_vlog("compilation")
    yield
    reload_vlog()
    _gemm.reset_for_tests()


def _close(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``got`` is ``a @ b`` within float32 rounding of a sum of ``K`` products."""
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.all(np.abs(got - want) <= 1e-6 * (a.shape[1] + 1) * bound + 1e-30)


SHAPES = [(1, 1, 1), (1, 7, 3), (5, 1, 4), (3, 5, 1), (1, 1, 9), (17, 33, 19), (300, 27, 32), (64, 100, 7)]


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_sgemm_layouts_and_edge_shapes(mkl: _gemm.Product, m: int, k: int, n: int) -> None:
    """Row-major, transposed, strided (copied), reversed (copied) and read-only operands; a
    column-major output (through a temporary)."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    wide = rng.standard_normal((m, 2 * k + 3)).astype(np.float32)
    wide[:, : 2 * k : 2] = a
    ro = b.copy()
    ro.flags.writeable = False
    for x, y in [(a, b), (np.asfortranarray(a), b), (a, np.asfortranarray(b)), (wide[:, : 2 * k : 2], b),
                 (wide[:, 1 : k + 1], ro), (a[::-1], b), (a, b[:, ::-1])]:
        out = np.full((m, n), np.nan, dtype=np.float32)
        mkl(x, y, out)
        _close(out, x, y)
    out_f = np.empty((n, m), dtype=np.float32).T
    mkl(a, b, out_f)
    _close(out_f, a, b)


@pytest.mark.parametrize(("m", "k", "n"), [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0)])
def test_sgemm_zero_sizes(mkl: _gemm.Product, m: int, k: int, n: int) -> None:
    """An empty product writes nothing; K = 0 gives zeros, as numpy does."""
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    out = np.full((m, n), 7.0, dtype=np.float32)
    mkl(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a, b))


def test_sgemm_bits_do_not_depend_on_alignment(mkl: _gemm.Product) -> None:
    """The same values at other addresses (offsets of 1-15 floats) give the same bits: fused
    and unfused plans put a product's block in different buffers (CBWR, module doc)."""
    rng = np.random.default_rng(5)
    for m, k, n in [(1000, 27, 32), (513, 200, 37), (1024, 64, 128), (3, 1000, 17)]:
        a0, b0 = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
        first = None
        for off in range(0, 16, 3):
            a = np.empty(a0.size + 16, np.float32)[off : off + a0.size].reshape(m, k)
            b = np.empty(b0.size + 16, np.float32)[15 - off : 15 - off + b0.size].reshape(k, n)
            out = np.empty(m * n + 16, np.float32)[off // 2 : off // 2 + m * n].reshape(m, n)
            a[...], b[...] = a0, b0
            mkl(a, b, out)
            if first is None:
                first = out.copy()
            np.testing.assert_array_equal(out, first)


@pytest.mark.parametrize(("batch", "m", "k", "n"), [(16, 50, 20, 30), (1, 1, 1, 1), (36, 7, 48, 5), (0, 3, 4, 5),
                                                    (4, 0, 4, 5), (4, 3, 0, 5)])
def test_batched_sgemm(mkl: _gemm.Product, batch: int, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(batch + m + k + n)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    with _jit.forced(True), _gemm.forced("mkl"):
        bm = _gemm.batched_product()
    out = np.full((batch, m, n), np.nan, dtype=np.float32)
    bm(a, b, out)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * max(k, 1))


def test_matmul_helpers_take_numpy_for_other_dtypes(mkl: _gemm.Product) -> None:
    """``matmul`` and ``matmul_into`` hand float64, broadcast or rank-3 operands to numpy."""
    a64, b64 = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(_gemm.matmul(mkl, a64, b64), a64 @ b64)
    a3 = np.ones((2, 2, 3), np.float32)
    np.testing.assert_array_equal(_gemm.matmul(mkl, a3, b64.astype(np.float32)), a3 @ b64.astype(np.float32))
    out = np.empty((2, 4))
    assert _gemm.matmul_into(mkl, a64, b64, out) is out
    np.testing.assert_array_equal(out, a64 @ b64)


def test_backend_is_mkl_when_installed(fresh_choice: None) -> None:
    """Unset ``NNRT_BLAS``: MKL when it is found (and numba is in use), logged once."""
    path = _gemm.find_library()
    with capture_logs() as logs, _jit.forced(True):
        name = _gemm.backend()
    assert name == ("mkl" if path is not None else "numpy")
    events = [e for e in logs if e["event"] == "gemm.mkl"]
    assert len(events) == 1 and events[0]["loaded"] is (path is not None)


def test_library_absent_falls_back_to_numpy(fresh_choice: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No MKL to be found: numpy's products, and the reason logged."""
    monkeypatch.setattr(_gemm, "find_library", lambda: None)
    with capture_logs() as logs, _jit.forced(True):
        assert _gemm.backend() == "numpy"
        assert _gemm.product() is _gemm._numpy_product
        assert _gemm.batched_product() is _gemm._numpy_product
    assert [e["detail"] for e in logs if e["event"] == "gemm.mkl"] == ["MKL is not installed (pip install mkl)"]


def test_a_broken_library_falls_back_to_numpy(fresh_choice: None, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Any) -> None:
    """A file that is not a loadable MKL: numpy's products, no exception."""
    bad = tmp_path / "libmkl_rt.so.3"
    bad.write_bytes(b"not a library")
    monkeypatch.setattr(_gemm, "find_library", lambda: str(bad))
    with capture_logs() as logs, _jit.forced(True):
        assert _gemm.backend() == "numpy"
    assert [e["loaded"] for e in logs if e["event"] == "gemm.mkl"] == [False]


def test_an_mkl_loaded_before_keeps_its_settings(fresh_choice: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """MKL already in the process (an MKL-built numpy): used, its settings left alone, said so."""
    path = _gemm.find_library()
    if path is None:
        pytest.skip("MKL is not installed")
    monkeypatch.setattr(_gemm, "_ours", set())
    monkeypatch.setattr(_gemm, "_loaded_already", lambda p: True)
    with capture_logs() as logs, _jit.forced(True):
        assert _gemm.backend() == "mkl"
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["gemm.mkl_shared"]


@pytest.mark.parametrize("value", ["numpy", "OpenBLAS", " numpy "])
def test_nnrt_blas_numpy_switch(fresh_choice: None, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """``NNRT_BLAS=numpy`` keeps numpy's products without even looking for MKL."""
    monkeypatch.setenv(_gemm.BLAS_ENV, value)
    monkeypatch.setattr(_gemm, "find_library", lambda: pytest.fail("looked for MKL"))
    with _jit.forced(True):
        assert _gemm.backend() == "numpy"
        assert _gemm.product() is _gemm._numpy_product


def test_numba_off_means_numpy_products(mkl: _gemm.Product) -> None:
    """Under ``NNRT_JIT=0`` (numba off) the products are numpy's: the reference kernels."""
    with _jit.forced(False):
        assert _gemm.backend() == "numpy"
        assert _gemm.product() is _gemm._numpy_product


def test_forced_numpy_inside_mkl(mkl: _gemm.Product) -> None:
    with _gemm.forced("numpy"):
        assert _gemm.product() is _gemm._numpy_product
    assert _gemm.product() is mkl


def test_find_library_uses_the_distribution_files() -> None:
    """The installed ``mkl`` distribution lists its runtime library (when it is installed)."""
    path = _gemm.find_library()
    if path is None:
        pytest.skip("MKL is not installed")
    assert "mkl_rt" in path


# -- every product site, with each backend -----------------------------------------------------


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[str]:
    """Which backend's products ``module.name`` (``product`` or ``batched_product``) hands to
    the kernels prepared from now on, one entry per product made."""
    calls: list[str] = []
    real: Callable[[], _gemm.Product] = getattr(module, name)

    def patched() -> _gemm.Product:
        fn = real()
        tag = "numpy" if fn is _gemm._numpy_product else "mkl"

        def counted(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
            calls.append(tag)
            fn(a, b, out)

        return counted

    monkeypatch.setattr(module, name, patched)
    return calls


def _run_both(device: nnrt.CpuDevice, m: Model, inputs: list[np.ndarray], calls: list[str], blas: str,
              ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """All outputs with the compiled kernels and ``blas``'s products (checked to be made), and
    with the numpy kernels."""
    with _jit.forced(True):
        fast = list(device.prepare_model_sync(m).execute_sync(inputs).outputs)
    assert calls and set(calls) == {blas}
    with _jit.forced(False):
        ref = list(device.prepare_model_sync(m).execute_sync(inputs).outputs)
    return fast, ref


def _conv_case(cin: int, cout: int, k: int, hw: tuple[int, int], stride: int = 1, pad: int = 0, seed: int = 0,
               ) -> tuple[Model, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, *hw, cin)).astype(np.float32)
    w = (rng.standard_normal((cout, k, k, cin)) / np.sqrt(k * k * cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    m = build(Op.CONV_2D, [1, *hw, cin], [w, b], [pad, pad, pad, pad, stride, stride, 3])
    return m, [x]


CONV_CASES = {
    "1x1 blocks": ((40, 24, 1, (48, 48)), conv, "product"),
    "1x1 strided": ((16, 8, 1, (9, 9), 2), conv, "product"),
    "im2col": ((24, 16, 3, (17, 13), 2, 1), conv, "product"),
    "first layer": ((3, 16, 3, (33, 33), 2, 1), conv, "product"),
    "winograd": ((64, 48, 3, (12, 12), 1, 1), _jit_conv, "batched_product"),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_products(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, blas: str, case: str) -> None:
    args, module, name = CONV_CASES[case]
    m, xs = _conv_case(*args)  # type: ignore[arg-type]
    calls = _spy(monkeypatch, module, name)
    (fast,), (ref,) = _run_both(device, m, xs, calls, blas)
    np.testing.assert_allclose(fast, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(("k", "stride", "pads"), [(2, 2, (0, 0, 0, 0)), (3, 2, (1, 0, 1, 0)), (3, 1, (1, 1, 1, 1))])
def test_transpose_conv_products(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, blas: str, k: int,
                                 stride: int, pads: tuple[int, int, int, int]) -> None:
    """TRANSPOSE_CONV_2D's product (taps placed without overlap when the filter is the stride,
    scattered and summed otherwise) with the backend's products, against the numpy kernels."""
    rng = np.random.default_rng(k + stride)
    x = rng.standard_normal((2, 7, 5, 12)).astype(np.float32)
    w = rng.standard_normal((9, k, k, 12)).astype(np.float32)
    b = rng.standard_normal(9).astype(np.float32)
    m = build(Op.TRANSPOSE_CONV_2D, [2, 7, 5, 12], [w, b], [*pads, stride, stride, 0, False])
    calls = _spy(monkeypatch, conv_transpose, "product")
    (fast,), (ref,) = _run_both(device, m, [x], calls, blas)
    np.testing.assert_allclose(fast, ref, rtol=2e-5, atol=2e-5)


def test_fused_pointwise_and_global_pool(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, blas: str) -> None:
    """The 1x1 convolution computed by the global pool's step (``_fuse_pool``) with the
    backend's products; bit for bit the unfused plan's is ``tests/unit/test_fuse_pool.py``."""
    from tests.unit.test_fuse_pool import Case, _model  # a 1x1 CONV_2D -> global AVERAGE_POOL_2D model

    m = _model(Case(shape=(1, 40, 40, 24), cout=40))
    x = np.random.default_rng(4).standard_normal((1, 40, 40, 24)).astype(np.float32)
    calls = _spy(monkeypatch, _fuse_pool, "product")
    (fast,), (ref,) = _run_both(device, m, [x], calls, blas)
    np.testing.assert_allclose(fast, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(("batch", "size", "units"), [(1, 1, 1), (1, 300, 17), (7, 64, 48), (0, 5, 3)])
def test_fully_connected_products(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, blas: str,
                                  batch: int, size: int, units: int) -> None:
    rng = np.random.default_rng(size)
    w = rng.standard_normal((units, size)).astype(np.float32)
    b = rng.standard_normal(units).astype(np.float32)
    x = rng.standard_normal((batch, size)).astype(np.float32)
    calls = _spy(monkeypatch, dense, "product")
    with _jit.forced(True):
        fast = device.prepare_model_sync(fc_model([batch, size], w, b, 1)).execute_sync([x]).outputs[0]
    assert set(calls) <= {blas}
    want = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
    np.testing.assert_allclose(fast, want, rtol=1e-5, atol=1e-5)
    assert fast.shape == (batch, units) and fast.dtype == np.float32


def test_batch_matmul_products(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, blas: str) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((5, 33)).astype(np.float32), rng.standard_normal((9, 33)).astype(np.float32)
    calls = _spy(monkeypatch, dense, "product")
    with _jit.forced(True):
        out = device.prepare_model_sync(bmm_model([5, 33], [9, 33], False, True)).execute_sync([a, b]).outputs[0]
    assert calls and set(calls) == {blas}
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.T, rtol=1e-5, atol=1e-5)


def test_lstm_products(monkeypatch: pytest.MonkeyPatch, blas: str) -> None:
    """The input projection, the recurrent products and the projection layer."""
    rng = np.random.default_rng(9)
    p = make(rng, 20, 16, 12)
    x = rng.standard_normal((6, 2, 20)).astype(np.float32)
    h, c = np.zeros((2, 12), np.float32), np.zeros((2, 16), np.float32)
    calls = _spy(monkeypatch, lstm, "product")
    with _jit.forced(True):
        fast = run_unidirectional(p, x, h, c, 4)
    assert calls and set(calls) == {blas}
    with _jit.forced(False), _gemm.forced("numpy"):
        ref = run_unidirectional(p, x, h, c, 4)
    for got, want in zip(fast, ref, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_float16_and_quantized_convolutions_keep_numpy(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch,
                                                        blas: str) -> None:
    """Only float32 kernels take the backend's products."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 1, 1, 3)).astype(np.float16)
    b = rng.standard_normal(4).astype(np.float16)
    m = build(Op.CONV_2D, [1, 5, 5, 3], [w, b], [0, 0, 0, 0, 1, 1, 0], t=T.TENSOR_FLOAT16)
    calls = _spy(monkeypatch, conv, "product")
    x = rng.standard_normal((1, 5, 5, 3)).astype(np.float16)
    with _jit.forced(True):
        out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    assert calls == []
    assert out.dtype == np.float16


# -- subnormal constants --------------------------------------------------------------------------

TINY = np.finfo(np.float32).tiny


def test_flush_subnormals() -> None:
    """Subnormals become zeros of their sign; normal values, zeros, inf and NaN stay; an array
    without subnormals (or not float32) is returned as it is."""
    a = np.array([1e-40, -1e-40, TINY, -TINY, 0.0, -0.0, 1.0, np.inf, np.nan, 5e-45], np.float32)
    got = _gemm.flush_subnormals(a)
    np.testing.assert_array_equal(got, [0, 0, TINY, -TINY, 0, 0, 1, np.inf, np.nan, 0])
    np.testing.assert_array_equal(np.signbit(got), [False, True, False, True, False, True, False, False, False, False])
    assert a[0] == np.float32(1e-40)  # the input is left alone
    normal = np.array([1.0, -TINY, 0.0], np.float32)
    assert _gemm.flush_subnormals(normal) is normal
    wide = np.array([1e-40], np.float64)
    assert _gemm.flush_subnormals(wide) is wide


def _with_subnormals(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal values with a third of them replaced by subnormals (as PaddleOCR's filters have)."""
    w = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < 0.33
    w[mask] = (rng.random(int(mask.sum())) * 1e-39).astype(np.float32)
    assert np.any((w != 0) & (np.abs(w) < TINY))
    return w


@pytest.mark.parametrize("k", [1, 3])
def test_conv_filters_lose_their_subnormals(device: nnrt.CpuDevice, blas: str, k: int) -> None:
    """The prepared filter matrix has no subnormals; the results are the float64 convolution's."""
    rng = np.random.default_rng(k)
    w, b = _with_subnormals(rng, (8, k, k, 64)), rng.standard_normal(8).astype(np.float32)
    x = rng.standard_normal((1, 9, 9, 64)).astype(np.float32)
    mat = conv.conv_matrix(w, b)
    assert not np.any((mat != 0) & (np.abs(mat) < TINY))
    m = build(Op.CONV_2D, [1, 9, 9, 64], [w, b], [k // 2] * 4 + [1, 1, 0])
    for jit in (True, False):
        with _jit.forced(jit):
            out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
        want = ref_conv(x, w, b, (k // 2,) * 4, (1, 1), (1, 1))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("jit", [True, False])
def test_depthwise_filters_and_biases_lose_their_subnormals(device: nnrt.CpuDevice, jit: bool) -> None:
    """A constant depthwise filter's and bias's subnormals are flushed at preparation (every
    product with a subnormal tap takes a microcode assist; PP-OCRv4 det has 24 such taps,
    PP-OCRv3 det 72 such biases): the same bits as with those values zeroed, and a zero input
    gives zeros, not the subnormal bias."""
    rng = np.random.default_rng(7)
    w, b = _with_subnormals(rng, (1, 3, 3, 16)), _with_subnormals(rng, (16,))
    flat_w = np.where(np.abs(w) < TINY, np.float32(0), w)
    flat_b = np.where(np.abs(b) < TINY, np.float32(0), b)
    x = rng.standard_normal((1, 9, 9, 16)).astype(np.float32)
    params = [1, 1, 1, 1, 1, 1, 1, 0]
    with _jit.forced(jit):
        got = device.prepare_model_sync(build(Op.DEPTHWISE_CONV_2D, [1, 9, 9, 16], [w, b], params))
        want = device.prepare_model_sync(build(Op.DEPTHWISE_CONV_2D, [1, 9, 9, 16], [flat_w, flat_b], params))
        np.testing.assert_array_equal(got.execute_sync([x]).outputs[0], want.execute_sync([x]).outputs[0])
        zero = got.execute_sync([np.zeros_like(x)]).outputs[0]
    assert not np.any((zero != 0) & (np.abs(zero) < TINY))


def test_winograd_and_dense_weights_lose_their_subnormals(device: nnrt.CpuDevice) -> None:
    rng = np.random.default_rng(1)
    u = winograd_filter(_with_subnormals(rng, (8, 3, 3, 48)) * np.float32(1e-6))
    assert not np.any((u != 0) & (np.abs(u) < TINY))
    w = _with_subnormals(rng, (5, 30))
    b = np.zeros(5, np.float32)
    x = rng.standard_normal((2, 30)).astype(np.float32)
    out = device.prepare_model_sync(fc_model([2, 30], w, b)).execute_sync([x]).outputs[0]
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-5)
    packed = lstm._packed([w, None, w])
    assert not np.any((packed != 0) & (np.abs(packed) < TINY))
