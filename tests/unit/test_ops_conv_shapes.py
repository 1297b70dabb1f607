"""The fast convolution paths (``nnrt/ops/_conv_core.py``) against plain numpy on edge shapes.

CONV_2D and DEPTHWISE_CONV_2D on one-row and one-column inputs, kernels larger than the
input, strides larger than the kernel, dilations, asymmetric padding, batches, NCHW, few
outputs with many taps (the direct contraction), depth multipliers, and quantized inputs with
per-tensor and per-channel filters (compared with the real-number formula, within the one
quantization step the CTS allows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.unit.test_ops_conv import ACT_BOUNDS, build, ref_conv

geometry = st.fixed_dictionaries({
    "n": st.integers(1, 2), "h": st.integers(1, 8), "w": st.integers(1, 8),
    "kh": st.integers(1, 4), "kw": st.integers(1, 4), "sh": st.integers(1, 4), "sw": st.integers(1, 4),
    "dh": st.integers(1, 3), "dw": st.integers(1, 3), "pads": st.tuples(*[st.integers(0, 2)] * 4),
    "nchw": st.booleans(), "act": st.sampled_from([0, 1, 2, 3]), "seed": st.integers(0, 2**16),
})  # fmt: skip


def _out_size(g: dict[str, Any]) -> tuple[int, int]:
    left, right, top, bottom = g["pads"]
    oh = (g["h"] + top + bottom - (g["kh"] - 1) * g["dh"] - 1) // g["sh"] + 1
    ow = (g["w"] + left + right - (g["kw"] - 1) * g["dw"] - 1) // g["sw"] + 1
    return oh, ow


def _scalars(g: dict[str, Any], mult: int | None = None) -> list[Any]:
    extra = [] if mult is None else [mult]
    return [*g["pads"], g["sw"], g["sh"], *extra, g["act"], g["nchw"], g["dw"], g["dh"]]


def _run(device: nnrt.CpuDevice, m: Model, x: np.ndarray, nchw: bool) -> np.ndarray:
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    out: np.ndarray = device.prepare_model_sync(m).execute_sync([xin]).outputs[0]
    return out.transpose(0, 2, 3, 1) if nchw else out


def _in_dims(g: dict[str, Any], c: int) -> list[int]:
    return [g["n"], c, g["h"], g["w"]] if g["nchw"] else [g["n"], g["h"], g["w"], c]


def _float_case(g: dict[str, Any], c: int, w_shape: tuple[int, ...], outs: int) -> tuple[np.ndarray, ...]:
    """Random NHWC input, filter and bias (``outs`` channels) for ``g``."""
    assume(min(_out_size(g)) > 0)
    rng = np.random.default_rng(g["seed"])
    x = rng.standard_normal((g["n"], g["h"], g["w"], c)).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(outs).astype(np.float32)
    return x, w, b


@settings(max_examples=60, deadline=None)
@given(g=geometry, cin=st.integers(1, 6), cout=st.integers(1, 3))
def test_conv2d_edge_shapes(device: nnrt.CpuDevice, g: dict[str, Any], cin: int, cout: int) -> None:
    x, w, b = _float_case(g, cin, (cout, g["kh"], g["kw"], cin), cout)
    m = build(Op.CONV_2D, _in_dims(g, cin), [w, b], _scalars(g))
    want = np.clip(ref_conv(x, w, b, g["pads"], (g["sw"], g["sh"]), (g["dw"], g["dh"])), *ACT_BOUNDS[g["act"]])
    np.testing.assert_allclose(_run(device, m, x, g["nchw"]), want, rtol=1e-4, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(g=geometry, c=st.integers(1, 5), mult=st.integers(1, 3))
def test_depthwise_edge_shapes(device: nnrt.CpuDevice, g: dict[str, Any], c: int, mult: int) -> None:
    x, w, b = _float_case(g, c, (1, g["kh"], g["kw"], c * mult), c * mult)
    m = build(Op.DEPTHWISE_CONV_2D, _in_dims(g, c), [w, b], _scalars(g, mult))
    wg = w[0].transpose(2, 0, 1)[..., None]  # one group per input channel
    want = ref_conv(x, wg, b, g["pads"], (g["sw"], g["sh"]), (g["dw"], g["dh"]), groups=c)
    np.testing.assert_allclose(_run(device, m, x, g["nchw"]), np.clip(want, *ACT_BOUNDS[g["act"]]), rtol=1e-4, atol=1e-4)


def test_single_row_depthwise_is_one_contraction_of_all_taps(device: nnrt.CpuDevice) -> None:
    """[1, K, 1, C] -> [1, 1, 1, C] (a temporal convolution), and the same with a batch of 3."""
    rng = np.random.default_rng(5)
    for n in (1, 3):
        x = rng.standard_normal((n, 24, 1, 64)).astype(np.float32)
        w = rng.standard_normal((1, 24, 1, 64)).astype(np.float32)
        b = rng.standard_normal(64).astype(np.float32)
        m = build(Op.DEPTHWISE_CONV_2D, list(x.shape), [w, b], [0, 0, 0, 0, 1, 1, 1, 0])
        out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
        want = (x.astype(np.float64) * w).sum(axis=1, keepdims=True) + b
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


# -- quantized --------------------------------------------------------------------------------


def _quant_model(op: Op, t: T, x_dims: list[int], xq: tuple[float, int], wq: np.ndarray, w_scales: np.ndarray | None,
                 w_q: tuple[float, int], bias: np.ndarray, scalars: list[Any], yq: tuple[float, int]) -> Model:
    m = Model()
    x = m.add_operand(t, x_dims, *xq)
    if w_scales is not None:
        wi = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, list(wq.shape))
        m.set_operand_symm_per_channel_quant_params(wi, 3 if op is Op.DEPTHWISE_CONV_2D else 0, list(w_scales))
    else:
        wi = m.add_operand(t, list(wq.shape), *w_q)
    m.set_operand_value(wi, wq)
    bi = m.add_operand(T.TENSOR_INT32, [len(bias)])
    m.set_operand_value(bi, bias)
    ins = [x, wi, bi]
    for s in scalars:
        i = m.add_operand(T.BOOL if isinstance(s, bool) else T.INT32)
        m.set_operand_value(i, s)
        ins.append(i)
    y = m.add_operand(t, [0, 0, 0, 0], *yq)
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@settings(max_examples=50, deadline=None)
@given(g=geometry, c=st.integers(1, 4), cout=st.integers(1, 3), depthwise=st.booleans(), per_channel=st.booleans(),
       signed=st.booleans(), big=st.booleans())
def test_quantized_conv_edge_shapes(device: nnrt.CpuDevice, g: dict[str, Any], c: int, cout: int, depthwise: bool,
                                    per_channel: bool, signed: bool, big: bool) -> None:
    """Within one step of the real-number result; ``big`` uses many input channels (float64 sums)."""
    assume(min(_out_size(g)) > 0)
    rng = np.random.default_rng(g["seed"])
    if big and not depthwise:
        c = 300  # 300 * taps * 255 * 127 exceeds float32's exact integers
    t = T.TENSOR_QUANT8_ASYMM_SIGNED if signed else T.TENSOR_QUANT8_ASYMM
    lo, hi = (-128, 127) if signed else (0, 255)
    xq, yq = (0.1, int(rng.integers(lo, hi))), (0.05 * (1 + 10 * big), int(rng.integers(lo, hi)))
    co = c if depthwise else cout
    wshape = (1, g["kh"], g["kw"], c) if depthwise else (cout, g["kh"], g["kw"], c)
    x = rng.integers(lo, hi + 1, (g["n"], g["h"], g["w"], c)).astype(t.dtype)
    if per_channel:
        wq = rng.integers(-127, 128, wshape).astype(np.int8)
        scales = rng.uniform(0.002, 0.02, co)
        w_real = wq * (scales if depthwise else scales[:, None, None, None])
        w_q: tuple[float, int] = (0.0, 0)
    else:
        w_q = (0.01, int(rng.integers(lo, hi)))
        wq = rng.integers(lo, hi + 1, wshape).astype(t.dtype)
        scales = None
        w_real = (wq.astype(np.float64) - w_q[1]) * w_q[0]
    bias = rng.integers(-500, 500, co).astype(np.int32)
    b_real = bias * xq[0] * (scales if per_channel else w_q[0])
    op = Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D
    m = _quant_model(op, t, _in_dims(g, c), xq, wq, scales, w_q, bias, _scalars(g, 1 if depthwise else None), yq)
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if g["nchw"] else x
    out = device.prepare_model_sync(m).execute_sync([xin]).outputs[0]
    out = out.transpose(0, 2, 3, 1) if g["nchw"] else out
    x_real = (x.astype(np.float64) - xq[1]) * xq[0]
    if depthwise:
        wg = w_real[0].transpose(2, 0, 1)[..., None]
        real = ref_conv(x_real, wg, b_real, g["pads"], (g["sw"], g["sh"]), (g["dw"], g["dh"]), groups=c)
    else:
        real = ref_conv(x_real, w_real, b_real, g["pads"], (g["sw"], g["sh"]), (g["dw"], g["dh"]))
    real = np.clip(real, *ACT_BOUNDS[g["act"]])
    want = np.clip(np.trunc(real / yq[0] + np.copysign(0.5, real)) + yq[1], lo, hi)
    assert np.abs(out.astype(np.int64) - want).max() <= 1
