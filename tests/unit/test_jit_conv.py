"""The compiled float32 CONV_2D (``nnrt/ops/_jit_conv.py``: blocked im2col and Winograd F(2x2, 3x3))
against the numpy kernel and a float64 reference.

Each model is prepared twice, with numba's kernels and with the numpy ones (what ``NNRT_JIT=0``
and the CTS run), on edge shapes: one-row and one-column inputs, stride larger than the kernel,
dilation, explicit asymmetric padding and padding wider than the input, NCHW, batches, few and
many channels, fused activations, NaN and inf in the input, a zero bias, filters and biases
given at execution, blocks that split output rows and images; plus Hypothesis geometries. The
im2col loop itself is compared element for element with numpy's window-view im2col, compiled and
as plain Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.ops import _jit, _jit_conv, _jit_planes, conv
from nnrt.ops._conv_core import Geometry, im2col, padded
from nnrt.ops._jit_conv import (
    IM2COL_ROWS_F32,
    PLANES_MAX_CHANNELS,
    PLANES_ROWS_F32,
    WINO_INPUT_F32,
    WINO_MIN_CHANNELS,
    WINO_OUTPUT_F32,
    WinogradConv,
    im2col_rows_f32,
    planes_blocks_f32,
    planes_rows_f32,
    winograd_input_f32,
    winograd_output_f32,
)
from tests.unit.test_ops_conv import build, ref_conv

numba = pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _winograd_for_few_output_channels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Winograd cases here have few output channels (small, quick shapes): Winograd takes
    them whatever ``WINO_MIN_BALANCE`` says, except in the test of that rule."""
    if "balance" not in request.node.name:
        monkeypatch.setattr(_jit_conv, "WINO_MIN_BALANCE", 0)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the compiled conv loops (im2col, planes, Winograd) called by CONV_2D kernels prepared from now on."""
    calls: list[str] = []
    watched = {im2col_rows_f32: "im2col", planes_rows_f32: "planes", planes_blocks_f32: "planes",
               winograd_input_f32: "winograd"}

    def patched(f: Any, signature: str) -> Any:
        got = _jit.compiled(f, signature)
        if f not in watched or got is None:
            return got

        def counted(*args: Any) -> None:
            calls.append(watched[f])
            got(*args)

        return counted

    monkeypatch.setattr(conv, "compiled", patched)
    monkeypatch.setattr(_jit_conv, "compiled", patched)
    monkeypatch.setattr(_jit_planes, "compiled", patched)
    line_conv = conv.line_conv

    def counted_line(*args: Any) -> Any:
        run = line_conv(*args)
        if run is None:
            return None

        def counted(x: np.ndarray) -> np.ndarray:
            calls.append("line")
            return run(x)

        return counted

    monkeypatch.setattr(conv, "line_conv", counted_line)
    return calls


def _path(cin: int) -> str:
    """The compiled loop a KxK CONV_2D (not Winograd's) gathers its taps with."""
    return "planes" if cin <= PLANES_MAX_CHANNELS else "im2col"


def _both(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, m: Model, inputs: list[np.ndarray],
          path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first output with the compiled kernels (checked to run ``path``: ``im2col``,
    ``planes`` or ``winograd``; by default the one ``_path`` gives for the input's channels;
    ``any``: whichever) and with the numpy ones."""
    path = path or _path(m.operands[m.operations[0].inputs[1]].dimensions[3])
    calls = _counting(monkeypatch)
    with _jit.forced(True):
        fast = device.prepare_model_sync(m).execute_sync(inputs).outputs[0]
    if path == "any":  # whichever the geometry gives, or none (a filter trimmed to 1x1)
        assert set(calls) <= {"im2col", "planes", "winograd", "line"}
    else:
        assert calls and set(calls) == {path}, f"the compiled {path} did not run alone: {set(calls)}"
    calls.clear()
    with _jit.forced(False):
        ref = device.prepare_model_sync(m).execute_sync(inputs).outputs[0]
    assert not calls
    return fast, ref


def _data(n: int, h: int, w: int, cin: int, cout: int, k: tuple[int, int], seed: int = 0
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, cin)).astype(np.float32)
    f = (rng.standard_normal((cout, *k, cin)) / np.sqrt(k[0] * k[1] * cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    return x, f, b


def _check(fast: np.ndarray, ref: np.ndarray, want: np.ndarray) -> None:
    assert fast.shape == ref.shape == want.shape
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fast, want, rtol=1e-4, atol=1e-4)


_CLAMP = {0: (-np.inf, np.inf), 1: (0, np.inf), 2: (-1, 1), 3: (0, 6)}

# (n, h, w, cin, cout, (kh, kw), pads (l, r, t, b), strides (w, h), dilations (w, h))
EDGE = {
    "one-row": (1, 1, 17, 8, 5, (1, 3), (1, 1, 0, 0), (1, 1), (1, 1)),
    "one-column": (1, 19, 1, 8, 6, (3, 1), (0, 0, 1, 1), (1, 1), (1, 1)),
    "one-row-padded": (1, 1, 2, 4, 3, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1)),
    "stride-over-kernel": (1, 13, 14, 5, 7, (2, 2), (0, 0, 0, 0), (3, 4), (1, 1)),
    "dilation": (1, 12, 11, 6, 4, (3, 3), (2, 2, 2, 2), (1, 1), (2, 2)),
    "dilation-stride": (1, 15, 16, 4, 9, (3, 2), (1, 2, 3, 0), (2, 3), (3, 2)),
    "asymmetric-pad": (1, 6, 7, 3, 8, (3, 3), (2, 1, 3, 0), (1, 1), (1, 1)),
    "pad-wider-than-input": (1, 2, 2, 3, 4, (3, 3), (3, 3, 3, 3), (2, 2), (1, 1)),
    "first-layer-3x3/2": (1, 33, 31, 3, 16, (3, 3), (1, 1, 1, 1), (2, 2), (1, 1)),
    "first-layer-5x5/2": (1, 24, 24, 3, 8, (5, 5), (1, 2, 1, 2), (2, 2), (1, 1)),
    "one-channel": (1, 10, 10, 1, 2, (5, 5), (2, 2, 2, 2), (1, 1), (1, 1)),
    "many-channels": (1, 5, 6, 200, 24, (3, 3), (1, 1, 1, 1), (1, 1), (2, 1)),
    "batch": (3, 7, 8, 16, 12, (3, 3), (1, 1, 1, 1), (2, 1), (1, 1)),
    "temporal-1x256": (1, 1, 576, 1, 9, (1, 256), (0, 0, 0, 0), (128, 1), (1, 1)),
}


@pytest.mark.parametrize("name", sorted(EDGE))
@pytest.mark.parametrize("act", [0, 1, 2, 3])
@pytest.mark.parametrize("nchw", [False, True])
def test_edge_shapes(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, name: str, act: int, nchw: bool
                     ) -> None:
    n, h, w, cin, cout, k, pads, stride, dil = EDGE[name]
    x, f, b = _data(n, h, w, cin, cout, k)
    dims = [n, cin, h, w] if nchw else [n, h, w, cin]
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    m = build(Op.CONV_2D, dims, [f, b], [*pads, *stride, act, nchw, *dil])
    line = nchw and h == 1 and k[0] == 1 and pads[2] == pads[3] == 0  # NCHW over one row (_conv_line)
    fast, ref = _both(device, monkeypatch, m, [xin], "line" if line else None)
    want = np.clip(ref_conv(x, f, b, pads, stride, dil), *_CLAMP[act]).astype(np.float32)
    _check(fast, ref, want.transpose(0, 3, 1, 2) if nchw else want)


@pytest.mark.parametrize("block_bytes", [64, 700, 4096])
@pytest.mark.parametrize("cin", [PLANES_MAX_CHANNELS, PLANES_MAX_CHANNELS + 1])
def test_blocks_split_rows_and_images(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch,
                                      block_bytes: int, cin: int) -> None:
    """Blocks of a few rows (im2col) or pixels (planes) start and end inside output rows and
    across images of a batch."""
    monkeypatch.setattr(_jit_conv, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(_jit_conv, "MIN_ROWS", 3)
    monkeypatch.setattr(_jit_conv, "PLANES_ROWS", block_bytes // 60)
    monkeypatch.setattr(_jit_conv, "PLANES_OUT_FLOATS", 0)
    x, f, b = _data(3, 9, 7, cin, 6, (3, 3), seed=3)
    m = build(Op.CONV_2D, [3, 9, 7, cin], [f, b], [1, 0, 2, 1, 1, 2, 1])
    fast, ref = _both(device, monkeypatch, m, [x])
    _check(fast, ref, np.clip(ref_conv(x, f, b, (1, 0, 2, 1), (1, 2), (1, 1)), 0, None).astype(np.float32))


@pytest.mark.parametrize("cin", [PLANES_MAX_CHANNELS, PLANES_MAX_CHANNELS + 1])
def test_result_owns_its_memory(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, cin: int) -> None:
    """The blocked convolution's result is an array of its own (not a view of its [P, Cout]
    blocks), so the execution hands a model output over without copying it: the output a caller
    gets is an array the kernel wrote (preparation may run the kernel too)."""
    x, f, b = _data(1, 9, 8, cin, 5, (3, 3), seed=4)
    m = build(Op.CONV_2D, [1, 9, 8, cin], [f, b], [1, 1, 1, 1, 2, 2, 3])
    made: list[np.ndarray] = []
    call = _jit_conv.Im2colConv.__call__

    def recorded(self: _jit_conv.Im2colConv, *args: Any, **kwargs: Any) -> np.ndarray:
        made.append(call(self, *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_jit_conv.Im2colConv, "__call__", recorded)
    fast, ref = _both(device, monkeypatch, m, [x])
    assert made and all(a.flags.owndata for a in made) and any(fast is a for a in made)
    _check(fast, ref, np.clip(ref_conv(x, f, b, (1, 1, 1, 1), (2, 2), (1, 1)), 0, 6).astype(np.float32))


# First layers for the compiled loop over planes blocks: (n, h, w, cin, cout, k, pads (l, r, t, b),
# strides (w, h), dilations (w, h), act); one row, one column, stride over kernel, dilation,
# asymmetric padding, batch 2, 1-4 input channels, odd output channels.
FIRST = {
    "3x3/2-relu6": (1, 23, 21, 3, 32, (3, 3), (1, 1, 1, 1), (2, 2), (1, 1), 3),
    "one-row": (1, 1, 19, 3, 7, (3, 3), (1, 1, 1, 1), (2, 2), (1, 1), 1),
    "one-column": (1, 17, 1, 2, 5, (3, 3), (1, 1, 1, 1), (2, 2), (1, 1), 0),
    "stride-over-kernel": (2, 13, 14, 1, 9, (2, 2), (0, 0, 0, 0), (3, 4), (1, 1), 2),
    "dilation": (1, 15, 16, 4, 11, (3, 3), (2, 1, 0, 3), (1, 2), (2, 3), 3),
    "5x5/2-asymmetric": (2, 20, 18, 3, 13, (5, 5), (1, 2, 2, 1), (2, 2), (1, 1), 0),
}


@pytest.mark.parametrize("name", sorted(FIRST))
def test_first_layer_blocks_in_one_call(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, blas: str,
                                        name: str) -> None:
    """With MKL's product the planes blocks run in one compiled call (``planes_blocks_f32``), with
    numpy's from Python; both give numpy's kernel's results, NaN where it gives NaN; several blocks."""
    monkeypatch.setattr(_jit_conv, "PLANES_ROWS", 16)
    monkeypatch.setattr(_jit_conv, "PLANES_OUT_FLOATS", 0)
    made: list[bool] = []
    make = _jit_planes.planes_blocks

    def recorded(mm: Any) -> Any:
        got = make(mm)
        made.append(got is not None)
        return got

    monkeypatch.setattr(_jit_conv, "planes_blocks", recorded)
    n, h, w, cin, cout, k, pads, stride, dil, act = FIRST[name]
    x, f, b = _data(n, h, w, cin, cout, k, seed=len(name))
    x[0, h // 2, w // 2, 0] = np.nan
    m = build(Op.CONV_2D, [n, h, w, cin], [f, b], [*pads, *stride, act, False, *dil])
    fast, ref = _both(device, monkeypatch, m, [x])
    assert made and all(made) == (blas == "mkl")
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref))
    want = np.clip(ref_conv(x, f, b, pads, stride, dil), *_CLAMP[act]).astype(np.float32)
    keep = ~np.isnan(want)
    np.testing.assert_allclose(fast[keep], ref[keep], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fast[keep], want[keep], rtol=1e-4, atol=1e-4)


def test_special_values_and_zero_bias(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN and inf in the input reach the same outputs as numpy's; a zero bias adds nothing."""
    x, f, _ = _data(1, 8, 9, 4, 5, (3, 3), seed=1)
    x[0, 2, 3, 1], x[0, 6, 0, 2], x[0, 7, 8, 0] = np.nan, np.inf, -np.inf
    b = np.zeros(5, dtype=np.float32)
    for act in (0, 1, 3):
        m = build(Op.CONV_2D, [1, 8, 9, 4], [f, b], [1, 1, 1, 1, 1, 1, act])
        fast, ref = _both(device, monkeypatch, m, [x])
        np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref))
        np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)
        assert np.isnan(fast).any() and (act != 0 or np.isinf(fast).any())


def test_filter_and_bias_at_execution(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """Filter and bias as model inputs: the matrix is made per execution and the compiled path runs."""
    x, f, b = _data(2, 6, 5, 7, 3, (3, 2), seed=2)
    m = Model()
    ins = [m.add_operand(T.TENSOR_FLOAT32, list(a.shape)) for a in (x, f, b)]
    for v in (1, 0, 1, 1, 1, 2, 3):  # pads (l, r, t, b), strides (w, h), RELU6
        i = m.add_operand(T.INT32)
        m.set_operand_value(i, v)
        ins.append(i)
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 0, 0, 0])
    m.add_operation(Op.CONV_2D, ins, [y])
    m.identify_inputs_and_outputs(ins[:3], [y])
    m.finish()
    for scale in (1.0, -2.0):  # a second execution with other weights: nothing cached from the first
        fast, ref = _both(device, monkeypatch, m, [x, f * scale, b])
        want = np.clip(ref_conv(x, f * scale, b, (1, 0, 1, 1), (1, 2), (1, 1)), 0, 6).astype(np.float32)
        _check(fast, ref, want)


def test_pointwise_and_quantized_keep_their_paths(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """1x1 filters keep the direct product (no im2col); float16 and quantized CONV_2D the numpy path."""
    calls = _counting(monkeypatch)
    x, f, b = _data(1, 6, 6, 8, 4, (1, 1))
    with _jit.forced(True):
        device.prepare_model_sync(build(Op.CONV_2D, [1, 6, 6, 8], [f, b], [0, 0, 0, 0, 1, 1, 0])).execute_sync([x])
        x3, f3, b3 = _data(1, 6, 6, 3, 4, (3, 3))
        m16 = build(Op.CONV_2D, [1, 6, 6, 3], [f3.astype(np.float16), b3.astype(np.float16)], [1, 1, 1, 1, 1, 1, 0],
                    t=T.TENSOR_FLOAT16)
        device.prepare_model_sync(m16).execute_sync([x3.astype(np.float16)])
    assert not calls


geometry = st.fixed_dictionaries({
    "n": st.integers(1, 2), "h": st.integers(1, 9), "w": st.integers(1, 9), "cin": st.integers(1, 20),
    "cout": st.integers(1, 20), "kh": st.integers(1, 4), "kw": st.integers(1, 4), "sh": st.integers(1, 4),
    "sw": st.integers(1, 4), "dh": st.integers(1, 3), "dw": st.integers(1, 3),
    "pads": st.tuples(*[st.integers(0, 3)] * 4), "act": st.sampled_from([0, 1, 2, 3]),
    "seed": st.integers(0, 2**16), "block": st.sampled_from([64, 1000, 1 << 20]),
})  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(g=geometry)
def test_random_geometry(device: nnrt.CpuDevice, g: dict[str, Any]) -> None:
    left, right, top, bottom = g["pads"]
    assume(g["kh"] * g["kw"] > 1)
    assume(g["h"] + top + bottom > (g["kh"] - 1) * g["dh"] and g["w"] + left + right > (g["kw"] - 1) * g["dw"])
    x, f, b = _data(g["n"], g["h"], g["w"], g["cin"], g["cout"], (g["kh"], g["kw"]), g["seed"])
    m = build(Op.CONV_2D, [g["n"], g["h"], g["w"], g["cin"]], [f, b],
              [*g["pads"], g["sw"], g["sh"], g["act"], False, g["dw"], g["dh"]])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_jit_conv, "BLOCK_BYTES", g["block"])
        mp.setattr(_jit_conv, "MIN_ROWS", 1)
        fast, ref = _both(device, mp, m, [x], path="any")
    want = np.clip(ref_conv(x, f, b, g["pads"], (g["sw"], g["sh"]), (g["dw"], g["dh"])), *_CLAMP[g["act"]])
    _check(fast, ref, want.astype(np.float32))


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(("shape", "k", "pads", "stride", "dil"), [
    ((2, 5, 6, 3), (3, 3), (1, 1, 1, 1), (1, 1), (1, 1)),
    ((1, 7, 9, 2), (2, 3), (0, 2, 1, 0), (3, 2), (1, 1)),
    ((1, 8, 8, 4), (3, 2), (2, 1, 2, 1), (1, 2), (2, 3)),
    # the planes' split rows: stride 2 first layers with odd sizes, padding wider than the
    # stride on every side, stride larger than the kernel, one row, one column, batches
    ((2, 11, 13, 3), (3, 3), (0, 1, 0, 1), (2, 2), (1, 1)),
    ((1, 9, 10, 3), (5, 5), (3, 4, 4, 3), (2, 2), (1, 1)),
    ((1, 10, 11, 1), (2, 2), (0, 0, 0, 0), (3, 4), (1, 1)),
    ((1, 1, 12, 3), (1, 3), (2, 1, 0, 0), (2, 1), (1, 1)),
    ((1, 12, 1, 2), (3, 1), (0, 0, 1, 1), (1, 2), (1, 1)),
    ((3, 7, 9, 3), (3, 3), (4, 0, 2, 3), (3, 2), (2, 1)),
])  # fmt: skip
def test_im2col_rows_match_window_view(compiled: bool, shape: tuple[int, int, int, int], k: tuple[int, int],
                                       pads: tuple[int, int, int, int], stride: tuple[int, int],
                                       dil: tuple[int, int]) -> None:
    """The loops, compiled or run as plain Python, write exactly numpy's window-view im2col rows
    (and their transpose, the planes), block by block from any first row."""
    n, h, w, c = shape
    left, right, top, bottom = pads
    oh = (h + top + bottom - (k[0] - 1) * dil[1] - 1) // stride[1] + 1
    ow = (w + left + right - (k[1] - 1) * dil[0] - 1) // stride[0] + 1
    g = Geometry(top, bottom, left, right, stride[1], stride[0], dil[1], dil[0], oh, ow, False, 0, 1)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = im2col(padded(x, g, *k), g, *k, ones=False)
    with _jit.forced(True):
        fn = _jit.compiled(im2col_rows_f32, IM2COL_ROWS_F32) if compiled else im2col_rows_f32
    assert fn is not None
    with _jit.forced(True):
        planes = _jit.compiled(planes_rows_f32, PLANES_ROWS_F32) if compiled else planes_rows_f32
    assert planes is not None
    args = (c, *k, stride[1], stride[0], dil[1], dil[0], top, left, oh, ow)
    got = np.full_like(want, np.nan)
    for p0 in range(0, want.shape[0], 5):
        fn(x.reshape(n, h, w * c), got[p0 : p0 + 5], p0, *args)
        block = np.full((want.shape[1], min(5, want.shape[0] - p0)), np.nan, dtype=np.float32)
        planes(x.reshape(n, h, w * c), block, p0, *args)
        np.testing.assert_array_equal(block.T, want[p0 : p0 + 5])
    np.testing.assert_array_equal(got, want)


# Winograd F(2x2, 3x3): (n, h, w, cin, cout, pads (l, r, t, b)); odd and even output sizes,
# tiles cut at every edge, asymmetric padding, batches, many blocks.
WINO = {
    "even": (1, 8, 10, WINO_MIN_CHANNELS, 16, (1, 1, 1, 1)),
    "odd": (1, 9, 11, 64, 8, (1, 1, 1, 1)),
    "valid": (1, 10, 12, 50, 5, (0, 0, 0, 0)),
    "asymmetric": (1, 9, 10, 48, 12, (2, 0, 0, 3)),
    "batch": (3, 9, 8, 56, 20, (1, 1, 1, 1)),
    "many-tile-rows": (2, 40, 33, 96, 24, (1, 1, 1, 1)),
}


@pytest.mark.parametrize("name", sorted(WINO))
@pytest.mark.parametrize("act", [0, 1, 2, 3])
@pytest.mark.parametrize("nchw", [False, True])
def test_winograd_shapes(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, name: str, act: int,
                         nchw: bool) -> None:
    n, h, w, cin, cout, pads = WINO[name]
    x, f, b = _data(n, h, w, cin, cout, (3, 3), seed=len(name))
    dims = [n, cin, h, w] if nchw else [n, h, w, cin]
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    m = build(Op.CONV_2D, dims, [f, b], [*pads, 1, 1, act, nchw])
    fast, ref = _both(device, monkeypatch, m, [xin], path="winograd")
    want = np.clip(ref_conv(x, f, b, pads, (1, 1), (1, 1)), *_CLAMP[act]).astype(np.float32)
    _check(fast, ref, want.transpose(0, 3, 1, 2) if nchw else want)


@pytest.mark.parametrize("own_copy", [False, True])
def test_winograd_small_blocks(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, own_copy: bool) -> None:
    """One tile row per block; the padded input in the thread's scratch or (large) its own buffer."""
    monkeypatch.setattr(_jit_conv, "WINO_BLOCK_BYTES", 1)
    if own_copy:
        monkeypatch.setattr(_jit_conv, "SCRATCH_MAX", 0)
    x, f, b = _data(2, 9, 8, 48, 6, (3, 3), seed=9)
    fast, ref = _both(device, monkeypatch, build(Op.CONV_2D, [2, 9, 8, 48], [f, b], [1, 1, 1, 1, 1, 1, 3]), [x],
                      path="winograd")
    _check(fast, ref, np.clip(ref_conv(x, f, b, (1, 1, 1, 1), (1, 1), (1, 1)), 0, 6).astype(np.float32))


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf, 3e37])
def test_winograd_leaves_special_values_to_im2col(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch,
                                                  special: float) -> None:
    """An input with NaN, inf or a huge value runs the im2col path (the same special values as
    numpy's kernel); the same model takes Winograd on finite inputs."""
    x, f, b = _data(1, 9, 8, 48, 6, (3, 3), seed=9)
    m = build(Op.CONV_2D, [1, 9, 8, 48], [f, b], [1, 1, 1, 1, 1, 1, 3])
    calls = _counting(monkeypatch)
    with _jit.forced(True):
        prepared = device.prepare_model_sync(m)
        prepared.execute_sync([x])
        assert set(calls) == {"winograd"}
        calls.clear()
        x[0, 4, 3, 7] = special
        fast = prepared.execute_sync([x]).outputs[0]
        assert set(calls) == {"im2col"}
    with _jit.forced(False):
        ref = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref))
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("hw", [(1, 11), (12, 1), (3, 40), (7, 9)])
def test_winograd_not_on_small_outputs(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch,
                                       hw: tuple[int, int]) -> None:
    """Fewer than ``WINO_MIN_SIZE`` output rows or columns: im2col (one-row inputs also lose
    the filter rows that read only padding)."""
    x, f, b = _data(1, *hw, 48, 5, (3, 3), seed=hw[0])
    m = build(Op.CONV_2D, [1, *hw, 48], [f, b], [1, 1, 1, 1, 1, 1, 0])
    fast, ref = _both(device, monkeypatch, m, [x], path="im2col")
    _check(fast, ref, ref_conv(x, f, b, (1, 1, 1, 1), (1, 1), (1, 1)).astype(np.float32))


@pytest.mark.parametrize(("k", "stride", "dil", "cin", "path"), [
    ((3, 3), (1, 1), (1, 1), WINO_MIN_CHANNELS - 1, "im2col"), ((3, 3), (2, 2), (1, 1), 64, "im2col"),
    ((3, 3), (1, 1), (2, 2), 64, "im2col"), ((5, 5), (1, 1), (1, 1), 64, "im2col"),
    ((3, 3), (1, 1), (1, 1), WINO_MIN_CHANNELS, "winograd"),
])  # fmt: skip
def test_winograd_only_where_it_pays(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, k: tuple[int, int],
                                     stride: tuple[int, int], dil: tuple[int, int], cin: int, path: str) -> None:
    x, f, b = _data(1, 9, 9, cin, 4, k, seed=cin)
    m = build(Op.CONV_2D, [1, 9, 9, cin], [f, b], [2, 2, 2, 2, *stride, 0, False, *dil])
    fast, ref = _both(device, monkeypatch, m, [x], path=path)
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("cin", "cout", "path"), [(96, 24, "im2col"), (48, 16, "im2col"), (48, 48, "winograd"),
                                                   (128, 32, "winograd"), (47, 200, "im2col")])
def test_winograd_balance_of_channels(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, cin: int, cout: int,
                                      path: str) -> None:
    """Winograd only where ``Cin * Cout / (Cin + Cout)`` reaches ``WINO_MIN_BALANCE`` (24), from
    ``WINO_MIN_CHANNELS`` input channels: few output channels do not pay for its transforms."""
    x, f, b = _data(1, 10, 10, cin, cout, (3, 3), seed=cin + cout)
    m = build(Op.CONV_2D, [1, 10, 10, cin], [f, b], [1, 1, 1, 1, 1, 1, 0])
    fast, ref = _both(device, monkeypatch, m, [x], path=path)
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)


wino_geometry = st.fixed_dictionaries({
    "n": st.integers(1, 2), "h": st.integers(10, 16), "w": st.integers(10, 16), "cin": st.integers(48, 64),
    "cout": st.integers(1, 9), "pads": st.tuples(*[st.integers(0, 2)] * 4), "act": st.sampled_from([0, 1, 2, 3]),
    "seed": st.integers(0, 2**16), "block": st.sampled_from([1, 5000, 1 << 20]),
})  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(g=wino_geometry)
def test_winograd_random_geometry(device: nnrt.CpuDevice, g: dict[str, Any]) -> None:
    left, right, top, bottom = g["pads"]
    assume(g["h"] + top + bottom > 2 and g["w"] + left + right > 2)
    x, f, b = _data(g["n"], g["h"], g["w"], g["cin"], g["cout"], (3, 3), g["seed"])
    m = build(Op.CONV_2D, [g["n"], g["h"], g["w"], g["cin"]], [f, b], [*g["pads"], 1, 1, g["act"]])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_jit_conv, "WINO_BLOCK_BYTES", g["block"])
        fast, ref = _both(device, mp, m, [x], path="winograd")
    want = np.clip(ref_conv(x, f, b, g["pads"], (1, 1), (1, 1)), *_CLAMP[g["act"]])
    _check(fast, ref, want.astype(np.float32))


def test_winograd_loops_run_as_plain_python() -> None:
    """The transforms, uncompiled, give what the compiled ones give (they are valid Python)."""
    x, f, b = _data(1, 5, 4, 3, 2, (3, 3), seed=4)
    g = Geometry(1, 1, 1, 1, 1, 1, 1, 1, 5, 4, False, 3, 1)
    with _jit.forced(True):
        fin = _jit.compiled(winograd_input_f32, WINO_INPUT_F32)
        fout = _jit.compiled(winograd_output_f32, WINO_OUTPUT_F32)
    assert fin is not None and fout is not None
    lo, hi = np.float32(0), np.float32(6)
    fast = WinogradConv(f, b, fin, fout)(x, g, lo, hi)
    slow = WinogradConv(f, b, winograd_input_f32, winograd_output_f32)(x, g, lo, hi)
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_allclose(slow, np.clip(ref_conv(x, f, b, (1, 1, 1, 1), (1, 1), (1, 1)), 0, 6), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1, 1, 50), (2, 3, 5, 16)])
@pytest.mark.parametrize("act", [0, 3])
def test_plain_pointwise_matches_numpy(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch,
                                       shape: tuple[int, int, int, int], act: int, blas: str) -> None:
    """A constant 1x1 CONV_2D without stride or padding runs as one product and the compiled
    bias pass, prepared once: bit-identical to numpy's kernel with numpy's products, within
    float32 rounding with MKL's (``_gemm``)."""
    x, f, b = _data(*shape, 7, (1, 1), seed=shape[3])
    m = build(Op.CONV_2D, list(shape), [f, b], [0, 0, 0, 0, 1, 1, act])
    spy: list[Any] = []
    real = conv.plain_pointwise
    monkeypatch.setattr(conv, "plain_pointwise", lambda *a: spy.append(real(*a)) or spy[-1])
    with _jit.forced(True):
        fast = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    assert spy and spy[-1] is not None
    with _jit.forced(False):
        ref = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    if blas == "numpy":
        np.testing.assert_array_equal(fast, ref)
    else:
        np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-6)


# (n, w, cin, cout, kw, pads (l, r), stride, dilation): CONV_2D over [N, Cin, 1, W] in NCHW
LINES = {
    "silero-encoder": (1, 3, 129, 128, 3, (1, 1), 1, 1),
    "stride-2": (1, 3, 128, 64, 3, (1, 1), 2, 1),
    "one-step": (1, 1, 64, 128, 3, (1, 1), 1, 1),
    "stft": (1, 576, 1, 258, 256, (0, 0), 128, 1),
    "pointwise": (1, 1, 128, 1, 1, (0, 0), 1, 1),
    "batch-odd-channels": (2, 7, 5, 3, 3, (2, 0), 2, 2),
    "pad-beyond-input": (1, 2, 3, 4, 5, (4, 4), 3, 1),
    "right-cut": (2, 9, 4, 6, 2, (0, 0), 4, 1),
}


@pytest.mark.parametrize("name", sorted(LINES))
@pytest.mark.parametrize("act", [0, 1, 3])
def test_line_conv_matches_numpy(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, name: str, act: int) -> None:
    """A CONV_2D over one NCHW row (``_conv_line``) gives the numpy kernel's values within
    rounding, NaN and infinities where numpy has them, on batches, one step, odd channels,
    strides, dilations and padding wider than the input; a run of another shape takes the
    general path."""
    n, w, cin, cout, kw, (left, right), stride, dil = LINES[name]
    x, f, b = _data(n, 1, w, cin, cout, (1, kw), seed=5)
    x[0, 0, 0, 0], x[-1, 0, -1, -1] = np.nan, np.inf
    m = build(Op.CONV_2D, [n, cin, 1, w], [f, b], [left, right, 0, 0, stride, 1, act, True, dil, 1])
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    fast, ref = _both(device, monkeypatch, m, [xin], "line")
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(fast), np.isinf(ref))
    ok = np.isfinite(ref)
    want = np.clip(ref_conv(x, f, b, (left, right, 0, 0), (stride, 1), (dil, 1)), *_CLAMP[act]).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(fast[ok], ref[ok], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fast[ok], want[ok], rtol=1e-4, atol=1e-4)
    assert fast.flags.c_contiguous and fast.flags.owndata


def test_line_conv_only_for_the_prepared_shape(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """An input whose dimensions are known only at run time keeps the general path."""
    x, f, b = _data(1, 1, 6, 4, 3, (1, 3), seed=6)
    m = build(Op.CONV_2D, [0, 4, 1, 0], [f, b], [1, 1, 0, 0, 1, 1, 0, True, 1, 1])
    fast, ref = _both(device, monkeypatch, m, [np.ascontiguousarray(x.transpose(0, 3, 1, 2))])  # not "line"
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)
