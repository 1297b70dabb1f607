"""CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D and TRANSPOSE_CONV_2D through the public API:
straightforward numpy formulas (Hypothesis), per-channel quantization, and the bad signatures
NNAPI rejects with INVALID_ARGUMENT at preparation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import rejected

ACT_BOUNDS = {0: (-np.inf, np.inf), 1: (0.0, np.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


def build(op: Op, x_dims: list[int], tensors: list[np.ndarray], scalars: list[Any], *, t: T = T.TENSOR_FLOAT32) -> Model:
    """``op(x, *tensors, *scalars)`` with one float output of unknown shape; ints/bools typed."""
    m = Model()
    x = m.add_operand(t, x_dims)
    ins = [x]
    for v in tensors:
        i = m.add_operand(t, list(v.shape))
        m.set_operand_value(i, v)
        ins.append(i)
    for s in scalars:
        i = m.add_operand(T.BOOL if isinstance(s, bool) else T.INT32)
        m.set_operand_value(i, s)
        ins.append(i)
    y = m.add_operand(t, [0, 0, 0, 0])
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def ref_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, pads: tuple[int, int, int, int], s: tuple[int, int],
             d: tuple[int, int], groups: int = 1) -> np.ndarray:
    """NHWC x, filter [Cout, KH, KW, Cin/groups]; pads (left, right, top, bottom), s/d (w, h)."""
    left, right, top, bottom = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    cout, kh, kw, cg = w.shape
    oh = (xp.shape[1] - (kh - 1) * d[1] - 1) // s[1] + 1
    ow = (xp.shape[2] - (kw - 1) * d[0] - 1) // s[0] + 1
    out: np.ndarray = np.zeros((x.shape[0], oh, ow, cout)) + b
    per = cout // groups
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i * d[1] : i * d[1] + (oh - 1) * s[1] + 1 : s[1], j * d[0] : j * d[0] + (ow - 1) * s[0] + 1 : s[0]]
            for g in range(groups):
                o = slice(g * per, (g + 1) * per)
                out[..., o] += win[..., g * cg : (g + 1) * cg] @ w[o, i, j].T.astype(np.float64)
    return out


@settings(max_examples=30, deadline=None)
@given(
    cin=st.sampled_from([1, 3, 5]), cout=st.integers(1, 4), k=st.sampled_from([(1, 1), (3, 3), (2, 3)]),
    stride=st.integers(1, 2), dil=st.integers(1, 2), pad=st.integers(0, 1), nchw=st.booleans(),
    act=st.sampled_from([0, 1, 2, 3]), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_conv2d_explicit_matches_numpy(
    device: nnrt.CpuDevice, cin: int, cout: int, k: tuple[int, int], stride: int, dil: int, pad: int, nchw: bool,
    act: int, seed: int,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 6, 7, cin)).astype(np.float32)
    w = rng.standard_normal((cout, *k, cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    pads = (pad, pad + 1, pad, 0)
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    scalars = [*pads, stride, stride + 1, act, nchw, dil, dil]
    m = build(Op.CONV_2D, list(xin.shape), [w, b], scalars)
    out = device.prepare_model_sync(m).execute_sync([xin]).outputs[0]
    want = np.clip(ref_conv(x, w, b, pads, (stride, stride + 1), (dil, dil)), *ACT_BOUNDS[act])
    np.testing.assert_allclose(out.transpose(0, 2, 3, 1) if nchw else out, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(
    c=st.integers(1, 4), mult=st.integers(1, 2), stride=st.integers(1, 2), dil=st.integers(1, 2),
    scheme=st.sampled_from([1, 2]), act=st.sampled_from([0, 3]), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_depthwise_implicit_matches_numpy(
    device: nnrt.CpuDevice, c: int, mult: int, stride: int, dil: int, scheme: int, act: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 7, 6, c)).astype(np.float32)
    w = rng.standard_normal((1, 3, 3, c * mult)).astype(np.float32)
    b = rng.standard_normal(c * mult).astype(np.float32)
    m = build(Op.DEPTHWISE_CONV_2D, list(x.shape), [w, b], [scheme, stride, stride, mult, act, False, dil, dil])
    out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    # Same as a grouped conv with one group per input channel; SAME padding as NNAPI computes it.
    pads = [0, 0, 0, 0]
    if scheme == 1:
        for axis, size in ((0, 6), (2, 7)):
            total = max(((size + stride - 1) // stride - 1) * stride + 2 * dil + 1 - size, 0)
            pads[axis], pads[axis + 1] = total // 2, total - total // 2
    wg = w[0].transpose(2, 0, 1)[..., None]  # [C*mult, 3, 3, 1]
    want = ref_conv(x, wg, b, (pads[0], pads[1], pads[2], pads[3]), (stride, stride), (dil, dil), groups=c)
    np.testing.assert_allclose(out, np.clip(want, *ACT_BOUNDS[act]), rtol=1e-4, atol=1e-4)


def test_grouped_conv2d(device: nnrt.CpuDevice) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 5, 4)).astype(np.float32)
    w = rng.standard_normal((6, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    m = build(Op.GROUPED_CONV_2D, [1, 5, 5, 4], [w, b], [1, 1, 1, 1, 1, 1, 2, 0, False])
    out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    np.testing.assert_allclose(out, ref_conv(x, w, b, (1, 1, 1, 1), (1, 1), (1, 1), groups=2), rtol=1e-4, atol=1e-4)


def test_transpose_conv2d_is_the_adjoint_of_conv2d(device: nnrt.CpuDevice) -> None:
    # <conv(x), y> == <x, transpose_conv(y)> with the same filter (no bias, VALID padding).
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 7, 7, 3)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)  # conv: 3 -> 2 channels
    y = rng.standard_normal((1, 3, 3, 2)).astype(np.float32)
    conv_x = ref_conv(x, w, np.zeros(2, np.float32), (0, 0, 0, 0), (2, 2), (1, 1))
    wt = np.ascontiguousarray(w.transpose(3, 1, 2, 0))  # transpose conv: 2 -> 3 channels
    m = build(Op.TRANSPOSE_CONV_2D, [1, 3, 3, 2], [wt, np.zeros(3, np.float32)], [0, 0, 0, 0, 2, 2, 0, False])
    ty = device.prepare_model_sync(m).execute_sync([y]).outputs[0]
    assert ty.shape == (1, 7, 7, 3)
    np.testing.assert_allclose(np.sum(conv_x * y), np.sum(x * ty), rtol=1e-4)


def test_conv2d_per_channel_quant8(device: nnrt.CpuDevice) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 1], 0.5, 128)
    w = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [2, 1, 1, 1])
    m.set_operand_symm_per_channel_quant_params(w, 0, [0.5, 0.25])
    m.set_operand_value(w, np.array([2, 4], np.int8).reshape(2, 1, 1, 1))  # real 1.0 and 1.0
    b = m.add_operand(T.TENSOR_INT32, [2])
    m.set_operand_value(b, np.array([4, 8], np.int32))  # scales 0.25, 0.125 -> real 1.0 both
    ins = [x, w, b]
    for v in (2, 1, 1, 0):
        i = m.add_operand(T.INT32)
        m.set_operand_value(i, v)
        ins.append(i)
    y = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 2], 1.0, 100)
    m.add_operation(Op.CONV_2D, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    xq = np.array([130, 132, 126, 140], np.uint8).reshape(1, 2, 2, 1)  # real 1, 2, -1, 6
    out = device.prepare_model_sync(m).execute_sync([xq]).outputs[0]
    want = np.array([1, 2, -1, 6], np.float64) + 1.0 + 100
    np.testing.assert_array_equal(out[..., 0].ravel(), want)
    np.testing.assert_array_equal(out[..., 1].ravel(), want)


def test_conv2d_rejects_rank3_input(device: nnrt.CpuDevice) -> None:
    w, b = np.ones((1, 2, 2, 1), np.float32), np.zeros(1, np.float32)
    m = build(Op.CONV_2D, [1, 3, 3], [w, b], [0, 0, 0, 0, 1, 1, 0])
    rejected(device, m, "rank 3")


def test_depthwise_rejects_filter_dim0_not_1(device: nnrt.CpuDevice) -> None:
    w, b = np.zeros((2, 2, 2, 4), np.float32), np.zeros(4, np.float32)
    m = build(Op.DEPTHWISE_CONV_2D, [1, 3, 3, 2], [w, b], [0, 0, 0, 0, 1, 1, 2, 0, False])
    rejected(device, m, "dimension 0 must be 1")


def test_bad_signatures_are_rejected(device: nnrt.CpuDevice) -> None:
    w, b = np.ones((1, 2, 2, 1), np.float32), np.zeros(1, np.float32)
    rejected(device, lambda: build(Op.CONV_2D, [1, 3, 3, 1], [w, b], [1, 1, 1]), "takes")  # 6 inputs
    rejected(device, lambda: build(Op.CONV_2D, [1, 3, 3, 1], [w, b], [3, 1, 1, 0]), "padding scheme")
    rejected(device, lambda: build(Op.CONV_2D, [1, 3, 3, 1], [w, b], [1, 0, 1, 0]), ">= 1")  # stride 0
    rejected(device, lambda: build(Op.CONV_2D, [1, 3, 3, 1], [w, b], [1, 1, 1, 7]), "fused activation")
    rejected(device, lambda: build(Op.CONV_2D, [1, 3, 3, 2], [w, b], [1, 1, 1, 0]), "input channels")
    rejected(device, lambda: build(Op.GROUPED_CONV_2D, [1, 3, 3, 1], [w, b], [1, 1, 1, 1, 0]), "takes")  # no layout


@pytest.mark.parametrize("quantized", [False, True])
def test_conv2d_static_geometry_is_decoded_once(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch,
                                                quantized: bool) -> None:
    """With the input's shape and every parameter known at preparation, runs skip decoding the
    geometry; an input of unknown shape decodes it at run time; the outputs are the same."""
    from nnrt.ops import conv

    calls: list[bool] = []
    real = conv.run_geometry

    def counted(*args: Any) -> Any:
        calls.append(True)
        return real(*args)

    monkeypatch.setattr(conv, "run_geometry", counted)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 6, 5, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    t = T.TENSOR_FLOAT32
    if quantized:
        t, x = T.TENSOR_QUANT8_ASYMM, rng.integers(0, 256, x.shape).astype(np.uint8)
    outs = []
    for dims, per_run in (([1, 6, 5, 3], False), ([1, 0, 0, 3], True)):
        m = _conv_model(dims, w, b, t) if quantized else build(Op.CONV_2D, dims, [w, b], [1, 1, 1, 0, 1, 2, 1])
        prepared = device.prepare_model_sync(m)
        calls.clear()
        outs += [prepared.execute_sync([x]).outputs[0] for _ in range(2)]
        assert bool(calls) is per_run  # (the compiled int8 kernel remembers the last shape's geometry)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def _conv_model(dims: list[int], w: np.ndarray, b: np.ndarray, t: T) -> Model:
    """A quantized CONV_2D with the float filter and bias quantized (pads 1, 1, 1, 0; strides 1, 2; RELU)."""
    m = Model()
    x = m.add_operand(t, dims, 0.05, 128)
    wq = m.add_operand(t, list(w.shape), 0.02, 128)
    m.set_operand_value(wq, np.clip(np.round(w / 0.02) + 128, 0, 255).astype(np.uint8))
    bq = m.add_operand(T.TENSOR_INT32, list(b.shape), 0.05 * 0.02, 0)
    m.set_operand_value(bq, np.round(b / (0.05 * 0.02)).astype(np.int32))
    ins = [x, wq, bq]
    for v in (1, 1, 1, 0, 1, 2, 1):
        i = m.add_operand(T.INT32)
        m.set_operand_value(i, v)
        ins.append(i)
    y = m.add_operand(t, [0, 0, 0, 0], 0.1, 0)
    m.add_operation(Op.CONV_2D, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize(("dims", "k", "pads", "stride", "dil", "live"), [
    ([1, 1, 40, 16], (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), (1, 2, 0, 3)),  # one row: the middle filter row
    ([1, 9, 1, 8], (3, 5), (2, 2, 1, 1), (1, 1), (1, 1), (0, 3, 2, 3)),  # one column
    ([1, 2, 7, 4], (5, 3), (1, 1, 4, 0), (1, 2), (1, 1), (4, 5, 0, 3)),  # padding above wider than needed
    ([1, 1, 12, 4], (3, 3), (0, 0, 2, 2), (1, 1), (1, 2), (1, 2, 0, 3)),  # dilated rows
    ([1, 6, 6, 4], (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), None),  # every tap reads input
    ([1, 6, 6, 4], (3, 3), (0, 0, 0, 0), (2, 2), (1, 1), None),
])  # fmt: skip
@pytest.mark.parametrize("jit", [False, True])
def test_conv2d_drops_taps_that_read_only_padding(device: nnrt.CpuDevice, dims: list[int], k: tuple[int, int],
                                                  pads: tuple[int, int, int, int], stride: tuple[int, int],
                                                  dil: tuple[int, int], live: tuple[int, int, int, int] | None,
                                                  jit: bool) -> None:
    """Filter rows and columns that only ever meet padding are left out at preparation: the
    same outputs (up to rounding), numpy and compiled kernels alike."""
    from nnrt.ops import _jit, conv
    from tests.unit.test_jit_conv import ref_conv

    rng = np.random.default_rng(sum(dims))
    x = rng.standard_normal(dims).astype(np.float32)
    w = rng.standard_normal((6, *k, dims[3])).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    m = build(Op.CONV_2D, dims, [w, b], [*pads, *stride, 1, False, *dil])
    seen: list[Any] = []
    real = conv.live_taps

    def spy(*args: Any) -> Any:
        seen.append(real(*args))
        return seen[-1]

    with pytest.MonkeyPatch.context() as mp, _jit.forced(jit):
        mp.setattr(conv, "live_taps", spy)
        out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    assert seen == [live]
    want = np.maximum(ref_conv(x, w, b, pads, stride, dil), 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def ref_transpose_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, pads: tuple[int, int, int, int],
                       s: tuple[int, int]) -> np.ndarray:
    """NHWC x, filter [Cout, KH, KW, Cin], pads (left, right, top, bottom), s (w, h): every input
    pixel's taps added into the uncropped output (float64), cropped, plus the bias."""
    left, right, top, bottom = pads
    n, h, wd, _ = x.shape
    cout, kh, kw, _ = w.shape
    full = np.zeros((n, (h - 1) * s[1] + kh, (wd - 1) * s[0] + kw, cout))
    for i in range(h):
        for j in range(wd):
            full[:, i * s[1]:i * s[1] + kh, j * s[0]:j * s[0] + kw] += np.einsum(
                "nc,oabc->nabo", x[:, i, j].astype(np.float64), w.astype(np.float64))
    return full[:, top:full.shape[1] - bottom, left:full.shape[2] - right] + b


@pytest.mark.parametrize(("dims", "k", "pads", "act", "nchw"), [
    ([1, 5, 4, 3], (2, 2), (0, 0, 0, 0), 0, False),  # PP-OCR det's upsampling: taps placed in one pass
    ([2, 3, 6, 4], (2, 3), (0, 0, 0, 0), 1, False),  # batch 2, KH != KW
    ([1, 4, 4, 2], (2, 2), (1, 0, 1, 1), 3, False),  # cropped by the padding
    ([2, 4, 3, 5], (2, 2), (0, 1, 0, 1), 0, True),  # NCHW
    ([1, 4, 4, 3], (3, 3), (0, 0, 0, 0), 0, False),  # 3x3 stride 3: non-overlapping too
    ([1, 4, 4, 3], (3, 2), (1, 1, 0, 0), 2, False),  # filter 3 > stride 2: the general path
])
@pytest.mark.parametrize("jit", [False, True])
def test_transpose_conv2d_filter_equal_to_stride(device: nnrt.CpuDevice, dims: list[int], k: tuple[int, int],
                                                 pads: tuple[int, int, int, int], act: int, nchw: bool, jit: bool) -> None:
    from nnrt.ops import _jit

    rng = np.random.default_rng(3)
    cin, cout = dims[1] if nchw else dims[3], 4
    w = rng.standard_normal((cout, k[0], k[1], cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    stride = (2, 2) if k == (3, 2) else (k[1], k[0])
    x = rng.standard_normal(dims).astype(np.float32)
    m = build(Op.TRANSPOSE_CONV_2D, dims, [w, b], [*pads, *stride, act, nchw])
    with _jit.forced(jit):
        got = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    xn = x.transpose(0, 2, 3, 1) if nchw else x
    want = np.clip(ref_transpose_conv(xn, w, b, pads, stride), *ACT_BOUNDS[act])
    assert got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got.transpose(0, 2, 3, 1) if nchw else got, want, rtol=1e-5, atol=1e-5)


def test_transpose_conv2d_placed_taps_compiled_equal_numpy() -> None:
    from nnrt.ops import _jit
    from nnrt.ops.conv_transpose import PLACE_TAPS_F32, _place_taps, place_taps_f32

    fast = _jit.compiled(place_taps_f32, PLACE_TAPS_F32)
    if fast is None:
        pytest.skip("numba is not in use (NNRT_JIT=0 or not installed)")
    rng = np.random.default_rng(4)
    cols = rng.standard_normal((2, 3, 5, 2, 3, 4)).astype(np.float32)
    cols[0, 0, 0] = np.float32(np.nan)
    bias = rng.standard_normal(4).astype(np.float32)
    a, b = _place_taps(cols, bias, fast), _place_taps(cols, bias, None)
    assert a.shape == (2, 6, 15, 4)
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))  # bit for bit, NaN included
