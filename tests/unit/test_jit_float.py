"""The compiled float32 kernels (``nnrt/ops/_jit_float.py``) against their numpy twins.

Each case prepares the same model twice, once with numba's kernels (the default when numba is
installed) and once with ``NNRT_JIT=0`` (the numpy reference the CTS also runs), and compares
the outputs: DEPTHWISE_CONV_2D on edge shapes (one-row and one-column inputs, stride larger than the
kernel, dilation, padding on every side, depth multipliers, one channel and many, batches, NCHW
through the caller's layout handling, filters and biases given at execution), fused
activations, NaN; HARD_SWISH bit for bit. ``NNRT_JIT=0`` must select the numpy kernels.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.ops import _jit, activations, conv, depthwise, pooling, reduce
from nnrt.ops._conv_core import CompiledDepthwise, Geometry, TiledTaps, compiled_depthwise
from nnrt.ops._jit_depthwise import DEPTHWISE_ROWS_F32, depthwise_rows_f32
from nnrt.ops._jit_float import bias_act_f32, prelu_f32, window_pixels_f32
from tests.unit.test_ops_conv import build

numba = pytest.importorskip("numba")


@contextmanager
def env_jit(value: str) -> Iterator[None]:
    """``NNRT_JIT`` set to ``value`` inside the block (decided afresh on entry and exit)."""
    before = os.environ.get("NNRT_JIT")
    os.environ["NNRT_JIT"] = value
    _jit.reset_for_tests()
    try:
        yield
    finally:
        if before is None:
            del os.environ["NNRT_JIT"]
        else:
            os.environ["NNRT_JIT"] = before
        _jit.reset_for_tests()


def _both(device: nnrt.CpuDevice, m: Model, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The model's first output with the compiled kernels and with the numpy ones (checking
    that the first run took a compiled loop and the second did not)."""
    calls: list[int] = []
    real = depthwise.compiled_depthwise

    def counting(*args: Any) -> CompiledDepthwise | None:
        run = real(*args)
        if run is None:
            return None

        def counted(*a: Any) -> Any:
            calls.append(1)
            return run(*a)

        return counted

    depthwise.compiled_depthwise = counting  # type: ignore[assignment]
    try:
        with _jit.forced(True):
            fast = device.prepare_model_sync(m).execute_sync(inputs).outputs[0]
        assert calls, "the compiled kernel did not run"
        calls.clear()
        with _jit.forced(False):
            ref = device.prepare_model_sync(m).execute_sync(inputs).outputs[0]
        assert not calls, "NNRT_JIT=0 ran the compiled kernel"
    finally:
        depthwise.compiled_depthwise = real  # type: ignore[assignment]
    return fast, ref


def _depthwise(x_dims: list[int], w: np.ndarray, b: np.ndarray, pads: tuple[int, int, int, int],
               stride: tuple[int, int], mult: int, act: int, nchw: bool, dil: tuple[int, int]) -> Model:
    return build(Op.DEPTHWISE_CONV_2D, x_dims, [w, b], [*pads, *stride, mult, act, nchw, *dil])


def _case(n: int, h: int, w: int, c: int, k: tuple[int, int], mult: int = 1, seed: int = 0
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    f = rng.standard_normal((1, *k, c * mult)).astype(np.float32)
    b = rng.standard_normal(c * mult).astype(np.float32)
    return x, f, b


# (n, h, w, c, (kh, kw), pads (l, r, t, b), strides (w, h), dilations (w, h), multiplier)
EDGE = {
    "one-row": (1, 1, 17, 8, (1, 3), (1, 1, 0, 0), (1, 1), (1, 1), 1),
    "one-column": (1, 19, 1, 8, (3, 1), (0, 0, 1, 1), (1, 1), (1, 1), 1),
    "temporal": (1, 1, 24, 64, (1, 24), (0, 0, 0, 0), (1, 1), (1, 1), 1),
    "stride-over-kernel": (1, 13, 14, 5, (2, 2), (0, 0, 0, 0), (3, 4), (1, 1), 1),
    "dilation": (1, 12, 11, 6, (3, 3), (2, 2, 2, 2), (1, 1), (2, 2), 1),
    "dilation-stride": (1, 15, 16, 4, (3, 2), (1, 2, 3, 0), (2, 3), (3, 2), 1),
    "pad-every-side": (1, 6, 7, 3, (3, 3), (2, 1, 3, 2), (1, 1), (1, 1), 1),
    "pad-wider-than-input": (1, 2, 2, 3, (3, 3), (3, 3, 3, 3), (2, 2), (1, 1), 1),
    "multiplier": (1, 9, 9, 3, (3, 3), (1, 1, 1, 1), (2, 2), (1, 1), 3),
    "one-channel": (1, 10, 10, 1, (5, 5), (2, 2, 2, 2), (1, 1), (1, 1), 1),
    "many-channels": (1, 5, 6, 600, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    "many-channels-stride": (1, 9, 9, 144, (3, 3), (0, 1, 0, 1), (2, 2), (1, 1), 1),
    "batch": (3, 7, 8, 16, (3, 3), (1, 1, 1, 1), (2, 1), (1, 1), 1),
    "mobile-5x5/2": (1, 32, 32, 48, (5, 5), (1, 2, 1, 2), (2, 2), (1, 1), 1),
    # 3x3 at column stride 1: the nine-tap pass over the range all taps reach, the row loop on
    # each side of it (rows over several BLOCK chunks, padding on one or every side).
    "3x3-wide-rows": (1, 7, 40, 32, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    "3x3-wide-rows-left-pad": (1, 6, 45, 24, (3, 3), (2, 0, 0, 1), (1, 2), (1, 1), 1),
    "3x3-wide-dilated": (1, 9, 30, 24, (3, 3), (2, 2, 2, 2), (1, 1), (2, 2), 1),
    "3x3-valid-odd": (2, 11, 37, 5, (3, 3), (0, 0, 0, 0), (1, 2), (1, 1), 1),
    # four output rows per pass where rows step as the dilation does (then two, then one)
    "3x3-rows-stride-dilation-2": (1, 23, 20, 16, (3, 3), (1, 1, 2, 2), (1, 2), (1, 2), 1),
    "3x3-rows-11": (2, 11, 9, 24, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    "mobile-112": (1, 112, 112, 32, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    # five columns wide at column stride 1, 80 channels or more, 12 columns or more:
    # ``depthwise_quads_f32`` (four pixels at a time where their taps are inside the input, one at
    # a time at the edges)
    "5x5-ppocr-3-rows": (1, 3, 26, 88, (5, 5), (2, 2, 2, 2), (1, 1), (1, 1), 1),
    "5x5-row-stride": (1, 6, 13, 96, (5, 5), (2, 2, 2, 2), (1, 2), (1, 1), 1),
    "5x5-batch-odd-channels": (2, 9, 13, 85, (5, 5), (2, 2, 2, 2), (1, 1), (1, 1), 1),
    "5x5-dilated-rows": (1, 12, 14, 80, (5, 5), (1, 3, 4, 4), (1, 1), (1, 2), 1),
    "5x5-narrower-than-filter": (1, 5, 4, 88, (5, 5), (2, 2, 2, 2), (1, 1), (1, 1), 1),
    "1x5-valid": (1, 4, 13, 88, (1, 5), (0, 0, 0, 0), (1, 1), (1, 1), 1),
    "5x5-multiplier": (1, 6, 14, 41, (5, 5), (2, 2, 2, 2), (1, 1), (1, 1), 2),
    "5x5-few-channels": (1, 6, 14, 24, (5, 5), (2, 2, 2, 2), (1, 1), (1, 1), 1),  # the row loop
    "5x5-dilated-columns": (1, 6, 14, 8, (5, 5), (4, 4, 2, 2), (1, 1), (2, 1), 1),
    # column stride 2: 3x3 from 32 channels one pass per pixel (``depthwise_nine_f32``), else and
    # 5x5 the pixel loop; odd widths, valid padding, dilated rows and columns, channel remainders
    "3x3/2-odd-width": (1, 9, 23, 32, (3, 3), (1, 1, 1, 1), (2, 2), (1, 1), 1),
    "3x3/2-valid": (2, 8, 30, 36, (3, 3), (0, 0, 0, 0), (2, 2), (1, 1), 1),
    "5x5/2-odd-width": (1, 11, 21, 24, (5, 5), (2, 2, 2, 2), (2, 2), (1, 1), 1),
    "3x3/2-dilated-rows": (1, 10, 17, 33, (3, 3), (1, 1, 2, 2), (2, 1), (1, 2), 1),
    "3x3/3-dilated-columns": (1, 13, 19, 32, (3, 3), (2, 1, 1, 2), (3, 2), (2, 1), 1),
    "3x3/2-few-channels": (1, 9, 23, 16, (3, 3), (1, 1, 1, 1), (2, 2), (1, 1), 1),
}


@pytest.mark.parametrize("name", sorted(EDGE))
@pytest.mark.parametrize("act", [0, 3])
@pytest.mark.parametrize("nchw", [False, True])
def test_depthwise_edge_shapes(device: nnrt.CpuDevice, name: str, act: int, nchw: bool) -> None:
    n, h, w, c, k, pads, stride, dil, mult = EDGE[name]
    x, f, b = _case(n, h, w, c, k, mult)
    dims = [n, c, h, w] if nchw else [n, h, w, c]
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    fast, ref = _both(device, _depthwise(dims, f, b, pads, stride, mult, act, nchw, dil), [xin])
    assert fast.shape == ref.shape
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)


geometry = st.fixed_dictionaries({
    "n": st.integers(1, 2), "h": st.integers(1, 9), "w": st.integers(1, 9), "c": st.integers(1, 40),
    "kh": st.integers(1, 5), "kw": st.integers(1, 5), "sh": st.integers(1, 4), "sw": st.integers(1, 4),
    "dh": st.integers(1, 3), "dw": st.integers(1, 3), "pads": st.tuples(*[st.integers(0, 3)] * 4),
    "mult": st.integers(1, 2), "act": st.sampled_from([0, 1, 2, 3]), "seed": st.integers(0, 2**16),
})  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(g=geometry)
def test_depthwise_random_geometry(device: nnrt.CpuDevice, g: dict[str, Any]) -> None:
    left, right, top, bottom = g["pads"]
    assume(g["h"] + top + bottom > (g["kh"] - 1) * g["dh"] and g["w"] + left + right > (g["kw"] - 1) * g["dw"])
    x, f, b = _case(g["n"], g["h"], g["w"], g["c"], (g["kh"], g["kw"]), g["mult"], g["seed"])
    m = _depthwise([g["n"], g["h"], g["w"], g["c"]], f, b, g["pads"], (g["sw"], g["sh"]), g["mult"], g["act"],
                   False, (g["dw"], g["dh"]))
    fast, ref = _both(device, m, [x])
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)


def test_depthwise_quads_special_values(device: nnrt.CpuDevice) -> None:
    """NaN and infinities through ``depthwise_quads_f32``'s four-pixel passes and its edges."""
    for k, stride in ((5, 1), (3, 1), (3, 2)):
        x, f, b = _case(1, 4, 21, 88, (k, k))
        x[0, 1, 9, 3], x[0, 2, 0, 5], x[0, 3, 12, 7] = np.nan, np.inf, -np.inf
        m = _depthwise([1, 4, 21, 88], f, b, (2, 2, 2, 2), (stride, stride), 1, 3, False, (1, 1))
        fast, ref = _both(device, m, [x])
        np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref))
        np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)


def test_depthwise_filter_and_bias_at_execution(device: nnrt.CpuDevice) -> None:
    """Filter and bias as model inputs (re-laid per execution), NaN and inf in the input."""
    x, f, b = _case(2, 6, 5, 7, (3, 3))
    x[0, 2, 3, 4], x[1, 0, 0, 1] = np.nan, np.inf
    m = Model()
    ins = [m.add_operand(T.TENSOR_FLOAT32, list(a.shape)) for a in (x, f, b)]
    for v in (1, 1, 1, 1, 1, 1, 1, 1):  # padding l r t b, strides, multiplier, RELU
        i = m.add_operand(T.INT32)
        m.set_operand_value(i, v)
        ins.append(i)
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 0])
    m.add_operation(Op.DEPTHWISE_CONV_2D, ins, [y])
    m.identify_inputs_and_outputs(ins[:3], [y])
    m.finish()
    fast, ref = _both(device, m, [x, f, b])
    assert np.isnan(fast).sum() == np.isnan(ref).sum() > 0
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_nnrt_jit_0_selects_numpy(value: str) -> None:
    with env_jit(value):
        assert not _jit.available()
        assert _jit.compiled(depthwise_rows_f32, DEPTHWISE_ROWS_F32) is None
        assert compiled_depthwise(1, 8) is None
    with env_jit("1"):
        assert _jit.available()
        fn = _jit.compiled(depthwise_rows_f32, DEPTHWISE_ROWS_F32)
        assert fn is not None and fn is _jit.compiled(depthwise_rows_f32, DEPTHWISE_ROWS_F32)
        assert len(fn.signatures) == 1  # type: ignore[attr-defined]  # compiled at the request, not at a call


def test_forced_overrides_the_environment() -> None:
    with env_jit("0"):
        with _jit.forced(True):
            assert _jit.available()
        assert not _jit.available()
    with _jit.forced(False):
        assert not _jit.available()


@pytest.mark.parametrize(("stride", "channels", "loop"), [
    (1, 24, "rows"), (1, 64, "rows"), (1, None, "rows"), (2, 8, "pixels"), (2, 64, "pixels"), (3, None, "pixels"),
    (None, 8, "pixels"),
])  # fmt: skip
def test_loop_choice(stride: int | None, channels: int | None, loop: str) -> None:
    with _jit.forced(True):
        run = compiled_depthwise(stride, channels)
    assert isinstance(run, partial) and run.func.__name__ == f"_depthwise_{loop}"


@pytest.mark.parametrize(("loop", "stride_w", "channels"), [("rows", 1, 3), ("rows", 1, 70), ("pixels", 2, 3),
                                                        ("pixels", 3, 70)])
def test_compiled_matches_uncompiled_python(loop: str, stride_w: int, channels: int) -> None:
    """The same loop run by the Python interpreter (slowly) agrees with its compiled form."""
    x, f, b = _case(2, 5, 6, channels, (3, 2))
    g = Geometry(top=1, bottom=0, left=0, right=1, stride_h=2, stride_w=stride_w, dil_h=1, dil_w=2, out_h=3,
                 out_w=4 // stride_w + 1, nchw=False, act=3, extra=1)
    with _jit.forced(True):
        run = compiled_depthwise(stride_w, channels)
    assert isinstance(run, partial) and run.func.__name__ == f"_depthwise_{loop}"
    python = partial(run.func, depthwise_rows_f32 if loop == "rows" else window_pixels_f32, None)
    taps, bias = TiledTaps(f[0]), TiledTaps(b[None, :])
    outs = [r(x.shape, taps, bias, 2, g)(x) for r in (run, python)]
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)


def _unary_model(op: Op, dims: list[int]) -> Model:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, dims)
    y = m.add_operand(T.TENSOR_FLOAT32, dims)
    m.add_operation(op, [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (2, 3, 5, 17), (1, 112, 112, 16)])
def test_hard_swish_bit_identical(device: nnrt.CpuDevice, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, -3, 3, -0.0, 0, 6, -6, 1e38, -1e38, 2.9999998], dtype=np.float32)
    if x.size >= special.size:
        x.reshape(-1)[: special.size] = special
    fast, ref = _both_unary(device, _unary_model(Op.HARD_SWISH, list(shape)), x)
    assert fast.shape == ref.shape == x.shape and fast.dtype == np.float32
    np.testing.assert_array_equal(fast, ref)


def _both_unary(device: nnrt.CpuDevice, m: Model, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    outs = []
    for on in (True, False):
        with _jit.forced(on):
            prepared = device.prepare_model_sync(m)
        outs.append(prepared.execute_sync([x]).outputs[0])
    return outs[0], outs[1]


def test_hard_swish_takes_the_compiled_loop(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[bool] = []
    real = activations._compiled_unary

    def spy(fn: Any) -> Any:
        made.append(True)
        return real(fn)

    monkeypatch.setattr(activations, "_compiled_unary", spy)
    m = _unary_model(Op.HARD_SWISH, [5])
    x = np.array([-4, -1, 0, 1, 4], dtype=np.float32)
    with _jit.forced(False):
        device.prepare_model_sync(m)
    assert not made
    with _jit.forced(True):
        out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    assert made
    np.testing.assert_array_equal(out, np.array([0, -1 / 3, 0, 2 / 3, 4], dtype=np.float32))


def _mean_model(dims: list[int], axes: list[int], keep: int) -> Model:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, dims)
    a = m.add_operand(T.TENSOR_INT32, [len(axes)])
    m.set_operand_value(a, np.array(axes, dtype=np.int32))
    k = m.add_operand(T.INT32)
    m.set_operand_value(k, keep)
    y = m.add_operand(T.TENSOR_FLOAT32, [])
    m.add_operation(Op.MEAN, [x, a, k], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize(("shape", "axes"), [
    ((1, 12, 96, 8), [1, 2]), ((2, 5, 7, 33), [1, 2]), ((1, 20, 20, 384), [2, 1]), ((1, 3, 6, 5), [2, 3]),
    ((1, 128), [1]), ((4, 9), [0]), ((2, 3, 4), [0, 1, 2]), ((2, 3, 4, 5), [-3, -2]), ((3, 1, 1, 7), [1, 2, 1]),
    ((2, 3, 4, 5), [1, 3]), ((5,), [0]), ((2, 0, 3), [2]),
])  # fmt: skip
@pytest.mark.parametrize("keep", [0, 1])
def test_mean_matches_numpy(device: nnrt.CpuDevice, shape: tuple[int, ...], axes: list[int], keep: int) -> None:
    """Adjacent axes take the compiled loop ([1, 3] stays numpy); float64 sums round to the same float32."""
    rng = np.random.default_rng(len(shape) + sum(shape))
    x = (rng.standard_normal(shape) * 100).astype(np.float32)
    fast, ref = _both_unary(device, _mean_model(list(shape), axes, keep), x)
    assert fast.shape == ref.shape
    np.testing.assert_allclose(fast, ref, rtol=2e-7, atol=0)


def test_mean_special_values(device: nnrt.CpuDevice) -> None:
    x = np.ones((1, 4, 4, 3), dtype=np.float32)
    x[0, 1, 2, 0], x[0, 3, 3, 1], x[0, 0, 0, 2], x[0, 2, 2, 2] = np.nan, np.inf, 3e38, 3e38
    fast, ref = _both_unary(device, _mean_model([1, 4, 4, 3], [1, 2], 1), x)
    np.testing.assert_array_equal(fast, ref)  # NaN, inf, and a float32 overflow avoided by float64 sums


def test_a_function_numba_cannot_compile_falls_back_to_numpy() -> None:
    from structlog.testing import capture_logs

    with _jit.forced(True), capture_logs() as logs:
        assert _jit.compiled(_not_compilable, "int64(int64)") is None
        assert _jit.compiled(_not_compilable, "int64(int64)") is None  # remembered, logged once
    assert [e["event"] for e in logs] == ["jit.compile_failed"]
    assert logs[0]["function"] == "_not_compilable" and logs[0]["log_level"] == "warning"


def _not_compilable(n: int) -> int:
    return len({object(): n})


# many innermost values stay numpy: a serial float64 sum there is 3x slower than numpy's pairwise one
@pytest.mark.parametrize(("shape", "axes", "compiled_loop"), [
    ((2, 3, 4, 5), [1, 2], True), ((2, 3, 4, 5), [2], True), ((2, 3, 4, 5), [3], True), ((2, 3, 4, 5), [2, 3], True),
    ((2, 3, 4, 5), [1, 3], False), ((1, 2, 5000), [2], False), ((1, 2, 5000), [1], True), ((1, 128), [1], True),
])  # fmt: skip
def test_mean_takes_the_compiled_loop_for_adjacent_axes(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch,
                                                         shape: tuple[int, ...], axes: list[int],
                                                         compiled_loop: bool) -> None:
    calls: list[bool] = []
    real = reduce._mean_adjacent

    def spy(*args: Any) -> np.ndarray:
        calls.append(True)
        return real(*args)

    monkeypatch.setattr(reduce, "_mean_adjacent", spy)
    x = (np.arange(math.prod(shape), dtype=np.float32) % 97).reshape(shape)
    with _jit.forced(True):
        out = device.prepare_model_sync(_mean_model(list(shape), axes, 0)).execute_sync([x]).outputs[0]
    assert bool(calls) is compiled_loop
    np.testing.assert_allclose(out, x.mean(axis=tuple(axes)), rtol=2e-7, atol=0)


def _count_compiled(monkeypatch: pytest.MonkeyPatch, module: Any, fn: Any) -> list[bool]:
    """Calls of ``fn``'s compiled form by kernels that ``module`` prepares (none while numba is off)."""
    calls: list[bool] = []

    def patched(f: Any, signature: str) -> Any:
        got = _jit.compiled(f, signature)
        if f is not fn or got is None:
            return got

        def counted(*args: Any) -> None:
            calls.append(True)
            got(*args)

        return counted

    monkeypatch.setattr(module, "compiled", patched)
    return calls


def _prelu_model(dims: list[int], slope: np.ndarray, out_dims: list[int]) -> Model:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, dims)
    a = m.add_operand(T.TENSOR_FLOAT32, list(slope.shape))
    m.set_operand_value(a, slope)
    y = m.add_operand(T.TENSOR_FLOAT32, out_dims)
    m.add_operation(Op.PRELU, [x, a], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize(("shape", "slope_shape", "compiled_loop"), [
    ((1, 64, 64, 32), (32,), True), ((2, 5, 7, 3), (1, 1, 3), True), ((4, 6), (1,), True), ((9,), (9,), True),
    ((1, 8, 8, 16), (8, 1, 16), False), ((1, 4, 4, 1), (5,), False), ((0, 3), (3,), False),
])  # fmt: skip
@pytest.mark.parametrize("slopes", ["below 1", "mixed"])
def test_prelu_bit_identical(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...],
                             slope_shape: tuple[int, ...], compiled_loop: bool, slopes: str) -> None:
    """Per-channel or single slopes take the compiled loop, others stay numpy; equal either way
    (NaN, inf, zero and negative slopes included)."""
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -1e38], dtype=np.float32)
    if x.size >= special.size:
        x.reshape(-1)[: special.size] = special
    slope = rng.uniform(0.05, 0.9, slope_shape).astype(np.float32)
    if slopes == "mixed":
        slope.reshape(-1)[:3] = np.array([0, -0.5, 2.5], dtype=np.float32)[: slope.size]
    out_shape = list(np.broadcast_shapes(shape, slope_shape))
    calls = _count_compiled(monkeypatch, activations, prelu_f32)
    fast, ref = _both_unary(device, _prelu_model(list(shape), slope, out_shape), x)
    assert bool(calls) is compiled_loop
    assert fast.shape == ref.shape == tuple(out_shape)
    np.testing.assert_array_equal(fast, ref)


@pytest.mark.parametrize(("n", "hw", "cin", "cout", "pads", "stride", "nchw"), [
    (1, (16, 16), 32, 64, (0, 0, 0, 0), (1, 1), False), (2, (5, 7), 3, 5, (1, 0, 2, 1), (2, 3), False),
    (1, (1, 9), 8, 1, (0, 0, 0, 0), (1, 1), False), (1, (6, 6), 4, 8, (0, 0, 0, 0), (1, 1), True),
])  # fmt: skip
@pytest.mark.parametrize("act", [0, 1, 2, 3])
def test_pointwise_conv_bias_and_activation(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, n: int,
                                            hw: tuple[int, int], cin: int, cout: int,
                                            pads: tuple[int, int, int, int], stride: tuple[int, int], nchw: bool,
                                            act: int, blas: str) -> None:
    """A float32 1x1 CONV_2D adds bias and activation in one compiled pass (NHWC); bit-identical
    with numpy's products, within float32 rounding with MKL's (``_gemm``)."""
    rng = np.random.default_rng(cin * cout)
    x = (rng.standard_normal((n, *hw, cin)) * 3).astype(np.float32)
    x.reshape(-1)[:3] = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
    w = rng.standard_normal((cout, 1, 1, cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    dims = [n, cin, *hw] if nchw else [n, *hw, cin]
    m = build(Op.CONV_2D, dims, [w, b], [*pads, *stride, act, nchw])
    calls = _count_compiled(monkeypatch, conv, bias_act_f32)
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    fast, ref = _both_unary(device, m, xin)
    assert bool(calls) is not nchw
    if blas == "numpy" or nchw:
        np.testing.assert_array_equal(fast, ref)
    else:
        np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-6)


def _pool_model(dims: list[int], scalars: list[Any], op: Op = Op.MAX_POOL_2D) -> Model:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, dims)
    ins = [x]
    for v in scalars:
        i = m.add_operand(T.BOOL if isinstance(v, bool) else T.INT32)
        m.set_operand_value(i, v)
        ins.append(i)
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 0])
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


POOL_GEOMETRIES = [
    ((1, 112, 112, 32), (0, 1, 0, 1), (2, 2), (3, 3), False), ((2, 7, 9, 5), (2, 2, 1, 1), (1, 1), (3, 5), False),
    ((1, 1, 10, 3), (0, 0, 0, 0), (3, 1), (4, 1), False), ((1, 4, 4, 2), (3, 3, 3, 3), (2, 2), (2, 2), False),
    ((1, 6, 6, 4), (0, 0, 0, 0), (1, 1), (6, 6), False), ((1, 9, 8, 3), (1, 0, 1, 0), (2, 3), (3, 3), True),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "pads", "stride", "k", "nchw"), POOL_GEOMETRIES)
@pytest.mark.parametrize("act", [0, 1, 3])
def test_max_pool_identical(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...],
                            pads: tuple[int, int, int, int], stride: tuple[int, int], k: tuple[int, int], nchw: bool,
                            act: int) -> None:
    """Padding only on some sides, windows wider than the input or only over padding, strides
    above the window, NCHW, NaN/inf: the compiled loop gives the numpy kernel's values exactly."""
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[:4] = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=np.float32)
    x.reshape(-1)[-2] = np.nan
    dims = [shape[0], shape[3], shape[1], shape[2]] if nchw else list(shape)
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    calls = _count_compiled(monkeypatch, pooling, window_pixels_f32)
    fast, ref = _both_unary(device, _pool_model(dims, [*pads, *stride, *k, act, nchw]), xin)
    assert calls
    assert fast.shape == ref.shape
    np.testing.assert_array_equal(fast, ref)


def test_depthwise_remembered_geometry_per_shape(device: nnrt.CpuDevice) -> None:
    """A layer run on inputs of different sizes (an input of unknown dimensions) decodes each
    size's geometry once and keeps them apart; a filter that does not fit still fails after a
    good run."""
    _, f, b = _case(1, 9, 7, 6, (3, 3))
    m = _depthwise([0, 0, 0, 0], f, b, (1, 1, 1, 1), (2, 1), 1, 3, False, (1, 1))
    prepared = device.prepare_model_sync(m)
    with _jit.forced(False):
        reference = device.prepare_model_sync(m)
    for shape in [(1, 9, 7, 6), (1, 4, 11, 6), (1, 9, 7, 6), (2, 1, 1, 6)]:
        xs = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        got, want = (p.execute_sync([xs]).outputs[0] for p in (prepared, reference))
        assert got.shape == want.shape == (shape[0], shape[1], (shape[2] + 1) // 2, 6)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(nnrt.InvalidArgumentError, match="input channels"):
        prepared.execute_sync([np.zeros((1, 9, 7, 5), np.float32)])


def test_prelu_remembered_shapes_still_checked(device: nnrt.CpuDevice) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 0])
    a = m.add_operand(T.TENSOR_FLOAT32, [1, 1, 3])
    m.set_operand_value(a, np.array([[[0.5, -2.0, 0.25]]], dtype=np.float32))
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 0])
    m.add_operation(Op.PRELU, [x, a], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    prepared = device.prepare_model_sync(m)
    for shape in [(1, 2, 2, 3), (2, 5, 1, 3), (1, 2, 2, 3)]:
        xs = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        out = prepared.execute_sync([xs]).outputs[0]
        np.testing.assert_array_equal(out, np.where(xs >= 0, xs, xs * np.array([0.5, -2.0, 0.25], np.float32)))
    with pytest.raises(nnrt.InvalidArgumentError):
        prepared.execute_sync([np.zeros((1, 2, 2, 4), np.float32)])


def _closure_value(fn: Any, name: str) -> Any:
    """The variable ``name`` a kernel closes over (looked for through wrapping closures too)."""
    seen, todo = set(), [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen or not callable(f):
            continue
        seen.add(id(f))
        code, cells = getattr(f, "__code__", None), getattr(f, "__closure__", None) or ()
        for var, cell in zip(code.co_freevars if code else (), cells):
            if var == name:
                return cell.cell_contents
            todo.append(cell.cell_contents)
        todo.extend(getattr(f, attr) for attr in ("func", "__wrapped__") if hasattr(f, attr))
    raise AssertionError(f"no {name} in the kernel's closures")


def test_prelu_single_slope_rows_stay_few_over_many_widths(device: nnrt.CpuDevice) -> None:
    """A single slope fits inputs of any width; a dynamic model seeing many widths (an audio
    stream's frames) keeps a few slope rows, not one per width seen (memory growing without
    bound), and every width still gets the right values."""
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [0, 0])
    a = m.add_operand(T.TENSOR_FLOAT32, [1])
    m.set_operand_value(a, np.array([0.25], dtype=np.float32))
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 0])
    m.add_operation(Op.PRELU, [x, a], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    with _jit.forced(True):
        prepared = device.prepare_model_sync(m)
    for width in range(1, 41):
        xs = np.linspace(-1, 1, 2 * width, dtype=np.float32).reshape(2, width)
        out = prepared.execute_sync([xs]).outputs[0]
        np.testing.assert_array_equal(out, np.where(xs >= 0, xs, xs * np.float32(0.25)))
    rows = _closure_value(prepared.plan.steps[0].fn, "rows_of")
    assert 0 < len(rows) <= 8
