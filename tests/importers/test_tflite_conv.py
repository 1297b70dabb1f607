"""TFLite convolutions, fully connected and pooling through nnrt.load, against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from tests.importers.tflite_builder import BO, OPT, S, TflModel, compare, opts

RNG = np.random.default_rng(13)


def _conv_model(kind: int, x_shape: list[int], w_shape: list[int], out_shape: list[int], option: object,
                opt_type: int) -> bytes:
    m = TflModel()
    g = m.main
    x = g.tensor(x_shape, name="input")
    w = g.const(RNG.standard_normal(w_shape).astype(np.float32), name="filter")
    ins = [x, w, g.const(RNG.standard_normal(w_shape[0] if kind == BO.CONV_2D else w_shape[3]), name="bias")]
    y = g.tensor(out_shape, name="output")
    g.op(kind, ins, [y], opt_type, option)
    g.io([x], [y])
    return m.build()


@pytest.mark.parametrize(("padding", "stride", "dilation", "act", "out_hw"), [
    (S.Padding.SAME, 1, 1, S.ActivationFunctionType.NONE, 8),
    (S.Padding.VALID, 2, 1, S.ActivationFunctionType.RELU, 3),
    (S.Padding.SAME, 1, 2, S.ActivationFunctionType.RELU6, 8),
    (S.Padding.VALID, 1, 1, S.ActivationFunctionType.RELU_N1_TO_1, 6),
    (S.Padding.SAME, 2, 1, S.ActivationFunctionType.RELU, 4),
])
def test_conv2d_float(device: nnrt.CpuDevice, padding: int, stride: int, dilation: int, act: int, out_hw: int) -> None:
    o = opts(S.Conv2DOptionsT, padding=padding, strideW=stride, strideH=stride, fusedActivationFunction=act,
             dilationWFactor=dilation, dilationHFactor=dilation)
    data = _conv_model(BO.CONV_2D, [1, 8, 8, 3], [4, 3, 3, 3], [1, out_hw, out_hw, 4], o, OPT.Conv2DOptions)
    compare(device, data, [RNG.standard_normal((1, 8, 8, 3)).astype(np.float32)])


def test_grouped_conv2d(device: nnrt.CpuDevice) -> None:
    o = opts(S.Conv2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1)
    data = _conv_model(BO.CONV_2D, [1, 5, 5, 4], [6, 3, 3, 2], [1, 5, 5, 6], o, OPT.Conv2DOptions)
    compare(device, data, [RNG.standard_normal((1, 5, 5, 4)).astype(np.float32)])


@pytest.mark.parametrize(("mult", "dilation", "stride"), [(1, 1, 1), (2, 1, 2), (1, 2, 1)])
def test_depthwise_float(device: nnrt.CpuDevice, mult: int, dilation: int, stride: int) -> None:
    o = opts(S.DepthwiseConv2DOptionsT, padding=S.Padding.SAME, strideW=stride, strideH=stride, depthMultiplier=mult,
             fusedActivationFunction=S.ActivationFunctionType.RELU, dilationWFactor=dilation,
             dilationHFactor=dilation)
    hw = 7 if stride == 1 else 4
    data = _conv_model(BO.DEPTHWISE_CONV_2D, [1, 7, 7, 3], [1, 3, 3, 3 * mult], [1, hw, hw, 3 * mult], o,
                       OPT.DepthwiseConv2DOptions)
    compare(device, data, [RNG.standard_normal((1, 7, 7, 3)).astype(np.float32)])


def _quant_conv(dtype: type, per_channel: bool, depthwise: bool = False) -> tuple[bytes, np.ndarray]:
    m = TflModel()
    g = m.main
    lo, hi = (0, 255) if dtype is np.uint8 else (-128, 127)
    zp_in, zp_out = (128, 120) if dtype is np.uint8 else (3, -5)
    x = g.tensor([1, 6, 6, 3], dtype, name="input", scale=0.05, zp=zp_in)
    cout = 3 if depthwise else 4
    w_shape = [1, 3, 3, cout] if depthwise else [cout, 3, 3, 3]
    if per_channel:
        w_scale = np.array([0.02, 0.03, 0.015, 0.04][:cout], np.float32)
        w = g.const(RNG.integers(-127, 128, w_shape), np.int8, name="filter", scale=w_scale, zp=0,
                    qdim=3 if depthwise else 0)
    else:
        w_scale = np.array([0.02], np.float32)
        wt = dtype if dtype is np.uint8 else np.int8
        w = g.const(RNG.integers(lo, hi + 1, w_shape), wt, name="filter", scale=0.02, zp=130 if wt is np.uint8 else 0)
    b_scale = (np.float32(0.05) * w_scale).astype(np.float32)
    b = g.const(RNG.integers(-500, 500, cout), np.int32, name="bias", scale=b_scale, zp=0, qdim=0)
    y = g.tensor([1, 6, 6, cout], dtype, name="output", scale=0.1, zp=zp_out)
    if depthwise:
        o = opts(S.DepthwiseConv2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1, depthMultiplier=1,
                 fusedActivationFunction=S.ActivationFunctionType.RELU6, dilationWFactor=1, dilationHFactor=1)
        g.op(BO.DEPTHWISE_CONV_2D, [x, w, b], [y], OPT.DepthwiseConv2DOptions, o)
    else:
        o = opts(S.Conv2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1, dilationWFactor=1,
                 dilationHFactor=1, fusedActivationFunction=S.ActivationFunctionType.RELU)
        g.op(BO.CONV_2D, [x, w, b], [y], OPT.Conv2DOptions, o)
    g.io([x], [y])
    return m.build(), RNG.integers(lo, hi + 1, (1, 6, 6, 3)).astype(dtype)


@pytest.mark.parametrize(("dtype", "per_channel", "depthwise"), [
    (np.int8, True, False), (np.int8, False, False), (np.uint8, False, False), (np.int8, True, True),
    (np.uint8, False, True),
])
def test_quantized_conv(device: nnrt.CpuDevice, dtype: type, per_channel: bool, depthwise: bool) -> None:
    data, x = _quant_conv(dtype, per_channel, depthwise)
    model = compare(device, data, [x])
    assert model[0].dtype == dtype


@pytest.mark.parametrize("keep", [False, True])
def test_fully_connected(device: nnrt.CpuDevice, keep: bool) -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([2, 3, 5], name="input")
    w = g.const(RNG.standard_normal((4, 5)), name="w")
    b = g.const(RNG.standard_normal(4), name="b")
    y = g.tensor([2, 3, 4] if keep else [6, 4], name="output")
    o = opts(S.FullyConnectedOptionsT, keepNumDims=keep, fusedActivationFunction=S.ActivationFunctionType.RELU)
    g.op(BO.FULLY_CONNECTED, [x, w, b], [y], OPT.FullyConnectedOptions, o)
    g.io([x], [y])
    out = compare(device, m.build(), [RNG.standard_normal((2, 3, 5)).astype(np.float32)])
    assert out[0].shape == ((2, 3, 4) if keep else (6, 4))


def test_fully_connected_hybrid_and_fp16_weights(device: nnrt.CpuDevice) -> None:
    """int8 weights with a float input get a DEQUANTIZE; float16 weights through DEQUANTIZE are folded."""
    m = TflModel()
    g = m.main
    x = g.tensor([1, 6], name="input")
    w16 = g.const(RNG.standard_normal((3, 6)), np.float16, name="w16")
    w32 = g.tensor([3, 6], name="w32")
    g.op(BO.DEQUANTIZE, [w16], [w32])
    h = g.tensor([1, 3], name="hidden")
    g.op(BO.FULLY_CONNECTED, [x, w32, -1], [h], OPT.FullyConnectedOptions, opts(S.FullyConnectedOptionsT))
    w8 = g.const(RNG.integers(-127, 128, (2, 3)), np.int8, name="w8", scale=0.01, zp=0)
    w8f = g.tensor([2, 3], name="w8f")
    g.op(BO.DEQUANTIZE, [w8], [w8f])
    y = g.tensor([1, 2], name="output")
    g.op(BO.FULLY_CONNECTED, [h, w8f, -1], [y], OPT.FullyConnectedOptions, opts(S.FullyConnectedOptionsT))
    g.io([x], [y])
    compare(device, m.build(), [RNG.standard_normal((1, 6)).astype(np.float32)])


@pytest.mark.parametrize("kind", [BO.AVERAGE_POOL_2D, BO.MAX_POOL_2D, BO.L2_POOL_2D])
@pytest.mark.parametrize("padding", [S.Padding.SAME, S.Padding.VALID])
def test_pooling(device: nnrt.CpuDevice, kind: int, padding: int) -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 7, 7, 2], name="input")
    hw = 4 if padding == S.Padding.SAME else 3
    y = g.tensor([1, hw, hw, 2], name="output")
    o = opts(S.Pool2DOptionsT, padding=padding, strideW=2, strideH=2, filterWidth=3, filterHeight=3,
             fusedActivationFunction=S.ActivationFunctionType.RELU6)
    g.op(kind, [x], [y], OPT.Pool2DOptions, o)
    g.io([x], [y])
    compare(device, m.build(), [RNG.standard_normal((1, 7, 7, 2)).astype(np.float32) * 4])


def test_quantized_pool_and_transpose_conv(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 4, 4, 2], np.int8, name="input", scale=0.1, zp=-3)
    p = g.tensor([1, 4, 4, 2], np.int8, name="pooled", scale=0.1, zp=-3)
    g.op(BO.AVERAGE_POOL_2D, [x], [p], OPT.Pool2DOptions,
         opts(S.Pool2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1, filterWidth=2, filterHeight=2))
    shape = g.const([1, 8, 8, 3], np.int32, name="output_shape")
    w = g.const(RNG.integers(-127, 128, (3, 3, 3, 2)), np.int8, name="w", scale=[0.02, 0.03, 0.01], qdim=0)
    b = g.const(RNG.integers(-100, 100, 3), np.int32, name="b", scale=np.float32(0.1) * np.array([0.02, 0.03, 0.01],
                np.float32))
    y = g.tensor([1, 8, 8, 3], np.int8, name="output", scale=0.05, zp=2)
    g.op(BO.TRANSPOSE_CONV, [shape, w, p, b], [y], OPT.TransposeConvOptions,
         opts(S.TransposeConvOptionsT, padding=S.Padding.SAME, strideW=2, strideH=2))
    g.io([x], [y])
    compare(device, m.build(), [RNG.integers(-128, 128, (1, 4, 4, 2)).astype(np.int8)], units=2)


@pytest.mark.parametrize("keep", [False, True])
def test_int8_fully_connected_with_per_channel_weights(device: nnrt.CpuDevice, keep: bool) -> None:
    """NNAPI's FULLY_CONNECTED has no per-channel weights: mapped to a 1x1 CONV_2D between reshapes."""
    m = TflModel()
    g = m.main
    x = g.tensor([2, 3, 6], np.int8, name="x", scale=0.05, zp=-2)
    scales = np.array([0.01, 0.02, 0.015, 0.03], np.float32)
    w = g.const(RNG.integers(-127, 128, (4, 6)), np.int8, name="w", scale=scales, qdim=0)
    b = g.const(RNG.integers(-300, 300, 4), np.int32, name="b", scale=np.float32(0.05) * scales)
    y = g.tensor([2, 3, 4] if keep else [6, 4], np.int8, name="y", scale=0.08, zp=3)
    g.op(BO.FULLY_CONNECTED, [x, w, b], [y], OPT.FullyConnectedOptions,
         opts(S.FullyConnectedOptionsT, keepNumDims=keep, fusedActivationFunction=S.ActivationFunctionType.RELU))
    g.io([x], [y])
    out = compare(device, m.build(), [RNG.integers(-128, 128, (2, 3, 6)).astype(np.int8)])
    assert out[0].shape == ((2, 3, 4) if keep else (6, 4))


def test_constants_are_views_of_the_loaded_file() -> None:
    """A float32 filter is not copied: its value's buffer is the one bytearray the file was read into."""
    from tests.importers.tflite_builder import load_bytes

    o = opts(S.Conv2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1)
    data = _conv_model(BO.CONV_2D, [1, 8, 8, 3], [4, 3, 3, 3], [1, 8, 8, 4], o, OPT.Conv2DOptions)
    model = load_bytes(data)
    (w,) = [op for op in model.operands if op.name == "filter"]
    assert w.lifetime is nnrt.OperandLifeTime.CONSTANT_POOL and isinstance(w.value, np.ndarray)
    base: object = w.value
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, memoryview) and base.nbytes == len(data)
    assert not w.value.flags.writeable
