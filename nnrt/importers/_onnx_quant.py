"""ONNX quantization ops → NNAPI: QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul.

Activations are per-tensor uint8 (TENSOR_QUANT8_ASYMM) or int8 (TENSOR_QUANT8_ASYMM_SIGNED);
a quantized graph input gets its scale and zero point from the op that reads it
(``input_quant`` in ``_onnx``). Weights follow onnxruntime's NNAPI provider: per-tensor
weights of the activation's type as they are; int8 per-tensor weights under uint8
activations shifted by +128 into uint8 (zero point +128, same real values); per-channel int8
weights (zero point 0) as TENSOR_QUANT8_SYMM_PER_CHANNEL on the output-channel dim. Biases are
TENSOR_INT32 with scale input_scale x weight_scale (0 for per-channel weights, as NNAPI
wants). Per-axis quantization of a run-time tensor has no NNAPI form and is refused; constant
per-axis DequantizeLinear (QDQ weights) folds to float at import (``_onnx_fold``).
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._onnx import NodeCtx, Reject, Value, mapper
from nnrt.importers._onnx_nn import conv_operands, emit_conv, fully_connected
from nnrt.types import OperationType as Op

__all__: list[str] = []

_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


def _scalar_params(ctx: NodeCtx, s: int, z: int, what: str) -> tuple[float, int, np.dtype]:
    scale = ctx.const(s, f"{what} scale")
    zp = ctx.const(z, f"{what} zero point")
    if scale is None:
        raise Reject(f"{what} scale is required")
    if scale.size != 1 or (zp is not None and zp.size != 1):
        raise Reject(f"per-axis {what} quantization of a run-time tensor is not supported")
    dtype = np.dtype(np.uint8) if zp is None else zp.dtype
    if dtype not in _Q8:
        raise Reject(f"quantized type {dtype} is not supported (uint8 and int8 are)")
    value = float(scale.reshape(-1)[0])
    if not value > 0:
        raise Reject(f"{what} scale {value} must be positive")
    return value, 0 if zp is None else int(zp.reshape(-1)[0]), dtype


def _quantized_input(ctx: NodeCtx, i: int, s: int, z: int, what: str) -> Value:
    x = ctx.inp(i)
    scale, zp, dtype = _scalar_params(ctx, s, z, what)
    if x.quant is None or x.dtype != dtype:
        raise Reject(f"{what} is not a quantized {dtype} tensor")
    if abs(x.quant[0] - scale) > 1e-6 * scale or x.quant[1] != zp:
        raise Reject(f"{what} scale/zero point {scale}/{zp} differ from the tensor's {x.quant}")
    return x


@mapper("QuantizeLinear")
def _quantize(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    if x.dtype not in (np.float32, np.float16):
        raise Reject(f"input of type {x.dtype} is not supported")
    if ctx.has("saturate") and not ctx.i("saturate", 1):
        raise Reject("saturate=0 is not supported")
    scale, zp, dtype = _scalar_params(ctx, 1, 2, "QuantizeLinear")
    ctx.emit(Op.QUANTIZE, [x], dtype, x.shape, (scale, zp))


@mapper("DequantizeLinear")
def _dequantize(ctx: NodeCtx) -> None:
    x = _quantized_input(ctx, 0, 1, 2, "input 0")
    ctx.emit(Op.DEQUANTIZE, [x], np.dtype(np.float32), x.shape)


def _weights(ctx: NodeCtx, x: Value, w: np.ndarray, s: int, z: int) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(weights as stored, per-channel scales, zero point, per-channel?) in the form NNAPI takes with ``x``."""
    scales = ctx.const(s, "weight scale")
    zp_c = ctx.const(z, "weight zero point")
    assert scales is not None and x.quant is not None
    scales = scales.astype(np.float64).reshape(-1)
    zps = zp_c.reshape(-1).astype(np.int64) if zp_c is not None else np.zeros(1, np.int64)
    if w.dtype not in _Q8:
        raise Reject(f"weights of type {w.dtype} are not supported")
    if scales.size > 1:
        if w.dtype != np.int8 or (zps != 0).any():
            raise Reject("per-channel weights must be int8 with zero point 0 (NNAPI's SYMM_PER_CHANNEL)")
        return w, scales, 0, True
    zp = int(zps[0])
    if w.dtype == x.dtype:
        return w, scales, zp, False
    if x.dtype == np.uint8 and w.dtype == np.int8:  # +128 keeps the real values: (w + 128) - (zp + 128)
        return (w.astype(np.int16) + 128).astype(np.uint8), scales, zp + 128, False
    raise Reject("uint8 weights under int8 activations are not supported")


def _weight_value(w: np.ndarray, scales: np.ndarray, zp: int, per_channel: bool, dim: int, sl: slice) -> Value:
    arr = np.ascontiguousarray(w)
    if per_channel:
        return Value(arr.dtype, arr.shape, const=arr, channel=(dim, tuple(float(v) for v in scales[sl])))
    return Value(arr.dtype, arr.shape, const=arr, quant=(float(scales[0]), zp))


def _bias_value(bias: np.ndarray, x_scale: float, scales: np.ndarray, per_channel: bool, sl: slice) -> Value:
    b = np.ascontiguousarray(bias[sl].astype(np.int32))
    return Value(b.dtype, b.shape, const=b, int_scale=0.0 if per_channel else x_scale * float(scales[0]))


@mapper("QLinearConv")
def _qlinear_conv(ctx: NodeCtx) -> None:
    x, w_oihw, was_1d = conv_operands(ctx, 3, quantized=True)
    _quantized_input(ctx, 0, 1, 2, "x")
    y_scale, y_zp, y_dtype = _scalar_params(ctx, 6, 7, "y")
    if y_dtype != x.dtype:
        raise Reject(f"output type {y_dtype} differs from the input's {x.dtype}")
    assert x.quant is not None
    w, scales, zp, per_channel = _weights(ctx, x, w_oihw, 4, 5)
    if per_channel and scales.size != w.shape[0]:
        raise Reject(f"{scales.size} weight scales for {w.shape[0]} output channels")
    if ctx.i("group", 1) > 1 and per_channel and (ctx.ints("dilations") or [1, 1]) != [1, 1]:
        raise Reject("dilated grouped convolution with per-channel weights is not supported")
    b = ctx.const(8, "bias")
    bias = b if b is not None else np.zeros(w.shape[0], np.int32)
    x_scale = x.quant[0]
    emit_conv(ctx, x, w, lambda arr, dim, sl: _weight_value(arr, scales, zp, per_channel, dim, sl),
              lambda sl: _bias_value(bias, x_scale, scales, per_channel, sl), was_1d=was_1d,
              out_type=(y_dtype, (y_scale, y_zp)))


@mapper("QLinearMatMul")
def _qlinear_matmul(ctx: NodeCtx) -> None:
    a = _quantized_input(ctx, 0, 1, 2, "a")
    y_scale, y_zp, y_dtype = _scalar_params(ctx, 6, 7, "y")
    bq = ctx.const(3, "b")
    assert bq is not None and a.quant is not None and a.shape is not None
    if bq.ndim != 2 or a.need_rank("QLinearMatMul") < 2:
        raise Reject("only a 2-D constant B and an A of rank >= 2 are supported (FULLY_CONNECTED)")
    if y_dtype != a.dtype:
        raise Reject(f"output type {y_dtype} differs from the input's {a.dtype}")
    w, scales, zp, per_channel = _weights(ctx, a, bq, 4, 5)
    if per_channel:
        raise Reject("per-column B quantization is not supported (FULLY_CONNECTED takes per-tensor weights)")
    everything = slice(0, w.shape[1])
    weights = _weight_value(np.ascontiguousarray(w.T), scales, zp, False, 0, everything)
    bias = _bias_value(np.zeros(w.shape[1], np.int32), a.quant[0], scales, False, everything)
    fully_connected(ctx, a, weights, bias, (*a.shape[:-1], w.shape[1]), out_type=(y_dtype, (y_scale, y_zp)))
