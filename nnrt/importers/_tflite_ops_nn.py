"""TFLite → NNAPI mappers for the weighted and windowed ops: convolutions, fully connected,
pooling, softmax, normalizations and batch matmul.

The delegate's rules: padding is the flatbuffer enum + 1 (SAME 0 → 1, VALID 1 → 2); strides
and dilations go as (w, h); a conv whose input has more channels than the filter becomes
GROUPED_CONV_2D; a missing bias becomes a zero bias (int32 with scale input x filter for
quantized ops); a quantized bias is re-declared with scale input_scale x filter_scale (0 for
per-channel filters, whose effective scale is per channel); float inputs with quantized
weights (hybrid ops) get a DEQUANTIZE in front of the weights, and float16 constant weights
a CAST to float32 (kept float16 in the model; preparation folds the CAST once).
FULLY_CONNECTED with ``keep_num_dims`` is followed by a RESHAPE to the kept dimensions.
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._flatbuf import Table
from nnrt.importers._tflite_graph import Graph, Unsupported, mapper
from nnrt.importers._tflite_schema import TT, TflOp
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["float_weights", "options"]

_CONV_2D, _DEPTHWISE, _FC, _TRANSPOSE_CONV = 3, 4, 9, 67
_AVG, _MAX, _L2 = 1, 17, 12
_SOFTMAX, _LOG_SOFTMAX, _L2_NORM, _LRN, _BATCH_MATMUL = 25, 50, 11, 13, 126


def options(op: TflOp) -> Table:
    if op.options is None:
        raise Unsupported("the operator has no builtin options")
    return op.options


def _padding(code: int) -> int:
    if code not in (0, 1):
        raise Unsupported(f"padding {code} is neither SAME (0) nor VALID (1)")
    return code + 1


def float_weights(g: Graph, ti: int) -> int:
    """Weights for a float op: float32 as is, float16 constants CAST, quantized ones dequantized (in the graph)."""
    t = g.tensor(ti)
    if t.type == TT.FLOAT32:
        return g.input(ti)
    float16 = t.type == TT.FLOAT16 and t.data is not None
    if float16 or (t.type in (TT.INT8, TT.UINT8) and t.quantized):
        # float16: a view of the file, CAST to float32 by the graph (folded once at preparation)
        w = g.input(ti)
        out = g.temp(w, typ=T.TENSOR_FLOAT32)
        g.op(Op.CAST if float16 else Op.DEQUANTIZE, [w], [out])
        return out
    raise Unsupported(f"weights {t.label()} of type {t.type_name} with a float input")


def _bias(g: Graph, op: TflOp, k: int, x: int, w: int, n_out: int) -> int:
    """The bias operand: the file's, re-declared with NNAPI's scale, or zeros when omitted."""
    xt = g.type_of(x)
    if not xt.is_quantized:
        if g.has_input(op, k):
            return float_weights(g, op.inputs[k])
        if not n_out:
            raise Unsupported("no bias and an unknown number of output channels")
        return g.const(np.zeros(n_out, np.float32), xt)
    wop = g.model.operands[w]
    per_channel = wop.type is T.TENSOR_QUANT8_SYMM_PER_CHANNEL
    scale = 0.0 if per_channel else float(np.float32(g.model.operands[x].scale) * np.float32(wop.scale))
    if g.has_input(op, k):
        bt = g.tensor(op.inputs[k])
        if bt.type != TT.INT32 or bt.data is None:
            raise Unsupported(f"bias {bt.label()} must be a constant int32 tensor, got {bt.type_name}")
        return g.const(bt.data, T.TENSOR_INT32, scale, name=bt.name)
    if not n_out:
        raise Unsupported("no bias and an unknown number of output channels")
    return g.const(np.zeros(n_out, np.int32), T.TENSOR_INT32, scale)


def _weighted(g: Graph, op: TflOp, x_k: int, w_k: int) -> tuple[int, int]:
    """(input, weights) operands; hybrid ops get their weights dequantized."""
    x = g.input(op.inputs[x_k])
    xt = g.type_of(x)
    if xt in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        return x, float_weights(g, op.inputs[w_k])
    if xt not in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        raise Unsupported(f"input of type {xt.name} (NNAPI convolutions take float or 8-bit quantized inputs)")
    return x, g.input(op.inputs[w_k])


def _dims(g: Graph, operand: int) -> tuple[int, ...]:
    return g.model.operands[operand].dimensions


@mapper(_CONV_2D)
def _conv(g: Graph, op: TflOp) -> None:
    o = options(op)
    pad, sw, sh, act = _padding(o.num(0, "i8")), o.num(1), o.num(2), o.num(3, "i8")
    dw, dh = o.num(4, "i32", 1), o.num(5, "i32", 1)
    x, w = _weighted(g, op, 0, 1)
    wd, xd = _dims(g, w), _dims(g, x)
    if len(wd) != 4:
        raise Unsupported(f"filter of rank {len(wd)}; expected 4 [out, h, w, in]")
    b = _bias(g, op, 2, x, w, wd[0])
    fuse, y = g.fused(act, op.outputs[0])
    in_c = xd[3] if len(xd) == 4 else 0
    if in_c and wd[3] and in_c != wd[3]:
        if dw != 1 or dh != 1:
            raise Unsupported("grouped convolution with dilation (NNAPI's GROUPED_CONV_2D has no dilation)")
        if in_c % wd[3]:
            raise Unsupported(f"input channels {in_c} are not a multiple of the filter's {wd[3]}")
        ins = [x, w, b, g.i32(pad), g.i32(sw), g.i32(sh), g.i32(in_c // wd[3]), fuse, g.flag(False)]
        g.op(Op.GROUPED_CONV_2D, ins, [y])
        return
    ins = [x, w, b, g.i32(pad), g.i32(sw), g.i32(sh), fuse]
    if dw != 1 or dh != 1:
        ins += [g.flag(False), g.i32(dw), g.i32(dh)]
    g.op(Op.CONV_2D, ins, [y])


@mapper(_DEPTHWISE)
def _depthwise(g: Graph, op: TflOp) -> None:
    o = options(op)
    pad, sw, sh, mult, act = _padding(o.num(0, "i8")), o.num(1), o.num(2), o.num(3), o.num(4, "i8")
    dw, dh = o.num(5, "i32", 1), o.num(6, "i32", 1)
    x, w = _weighted(g, op, 0, 1)
    wd, xd = _dims(g, w), _dims(g, x)
    if len(wd) != 4 or wd[0] != 1:
        raise Unsupported(f"depthwise filter of shape {list(wd)}; expected [1, h, w, out]")
    in_c = xd[3] if len(xd) == 4 else 0
    if in_c and wd[3]:
        mult = wd[3] // in_c  # the filter decides; some converters leave the option at 0
    if mult < 1:
        raise Unsupported(f"depth multiplier {mult}")
    b = _bias(g, op, 2, x, w, wd[3])
    fuse, y = g.fused(act, op.outputs[0])
    ins = [x, w, b, g.i32(pad), g.i32(sw), g.i32(sh), g.i32(mult), fuse]
    if dw != 1 or dh != 1:
        ins += [g.flag(False), g.i32(dw), g.i32(dh)]
    g.op(Op.DEPTHWISE_CONV_2D, ins, [y])


@mapper(_TRANSPOSE_CONV)
def _transpose_conv(g: Graph, op: TflOp) -> None:
    o = options(op)
    pad, sw, sh, act = _padding(o.num(0, "i8")), o.num(1), o.num(2), o.num(3, "i8")
    shape = g.const_ints(op, 0, "output_shape")
    x, w = _weighted(g, op, 2, 1)
    wd = _dims(g, w)
    b = _bias(g, op, 3, x, w, wd[0] if wd else 0)
    fuse, y = g.fused(act, op.outputs[0])
    ins = [x, w, b, g.ints(shape), g.i32(pad), g.i32(sw), g.i32(sh), fuse, g.flag(False)]
    g.op(Op.TRANSPOSE_CONV_2D, ins, [y])


@mapper(_FC)
def _fully_connected(g: Graph, op: TflOp) -> None:
    o = options(op)
    act, fmt, keep = o.num(0, "i8"), o.num(1, "i8"), o.flag(2)
    if fmt != 0:
        raise Unsupported(f"weights format {fmt} (only DEFAULT is expressible)")
    wt = g.tensor(op.inputs[1])
    x = g.input(op.inputs[0])
    per_channel = g.type_of(x).is_quantized and wt.per_channel
    if per_channel:
        # NNAPI's FULLY_CONNECTED takes per-tensor weights only; a 1x1 CONV_2D over [rows, 1, 1, k]
        # with the weights as its [units, 1, 1, k] filter takes per-channel ones.
        if wt.data is None or len(wt.shape) != 2 or wt.type != TT.INT8:
            raise Unsupported(f"per-channel weights {wt.label()} must be a constant int8 matrix")
        w = g.per_channel_const(wt, (wt.shape[0], 1, 1, wt.shape[1]))
    else:
        x, w = _weighted(g, op, 0, 1)
    if g.type_of(x).is_quantized and g.type_of(w) is not g.type_of(x) and not per_channel:
        raise Unsupported(f"weights of type {g.type_of(w).name} with a {g.type_of(x).name} input")
    wd, xd = _dims(g, w), _dims(g, x)
    if len(wd) not in (2, 4):
        raise Unsupported(f"weights of rank {len(wd)}; expected 2 [units, input size]")
    n_out, k = wd[0], wd[-1]
    b = _bias(g, op, 2, x, w, n_out)
    out_t = g.tensor(op.outputs[0])
    reshaped = (keep and len(xd) > 2) or per_channel
    if not reshaped:
        fuse, y = g.fused(act, op.outputs[0])
        g.op(Op.FULLY_CONNECTED, [x, w, b, fuse], [y])
        return
    fuse, y = g.fused(act, op.outputs[0])
    target = [d if d > 0 else -1 for d in g.dims(out_t)] if keep else [-1, n_out]
    if target.count(-1) > 1:
        raise Unsupported(f"output {target} has more than one unknown dimension")
    if per_channel:
        rows = g.temp(x, dims=[0, 1, 1, k])
        g.op(Op.RESHAPE, [x, g.ints([-1, 1, 1, k])], [rows])
        flat = g.temp(y, dims=[0, 1, 1, n_out])
        g.op(Op.CONV_2D, [rows, w, b, g.i32(2), g.i32(1), g.i32(1), fuse], [flat])
    else:
        flat = g.temp(y, dims=[0, n_out])
        g.op(Op.FULLY_CONNECTED, [x, w, b, fuse], [flat])
    g.op(Op.RESHAPE, [flat, g.ints(target)], [y])


@mapper(_AVG, _MAX, _L2)
def _pool(g: Graph, op: TflOp) -> None:
    o = options(op)
    pad, sw, sh, fw, fh, act = _padding(o.num(0, "i8")), o.num(1), o.num(2), o.num(3), o.num(4), o.num(5, "i8")
    x = g.input(op.inputs[0])
    fuse, y = g.fused(act, op.outputs[0])
    kind = {_AVG: Op.AVERAGE_POOL_2D, _MAX: Op.MAX_POOL_2D, _L2: Op.L2_POOL_2D}[op.code]
    g.op(kind, [x, g.i32(pad), g.i32(sw), g.i32(sh), g.i32(fw), g.i32(fh), fuse], [y])


@mapper(_SOFTMAX, _LOG_SOFTMAX)
def _softmax(g: Graph, op: TflOp) -> None:
    x = g.input(op.inputs[0])
    if op.code == _SOFTMAX:
        beta = options(op).real(0) if op.options is not None else 1.0
        g.op(Op.SOFTMAX, [x, g.f32(beta)], [g.out(op.outputs[0])])
        return
    if g.type_of(x) is not T.TENSOR_FLOAT32:
        raise Unsupported("LOG_SOFTMAX on a quantized input (NNAPI's LOG_SOFTMAX is float only)")
    g.op(Op.LOG_SOFTMAX, [x, g.f32(1.0), g.i32(-1)], [g.out(op.outputs[0])])


@mapper(_L2_NORM)
def _l2_norm(g: Graph, op: TflOp) -> None:
    act = op.options.num(0, "i8") if op.options is not None else 0
    x = g.input(op.inputs[0])
    y = g.after_activation(act, op.outputs[0])
    g.op(Op.L2_NORMALIZATION, [x], [y])


@mapper(_LRN)
def _lrn(g: Graph, op: TflOp) -> None:
    o = options(op)
    x = g.input(op.inputs[0])
    ins = [x, g.i32(o.num(0)), g.f32(o.real(1)), g.f32(o.real(2)), g.f32(o.real(3))]
    g.op(Op.LOCAL_RESPONSE_NORMALIZATION, ins, [g.out(op.outputs[0])])


@mapper(_BATCH_MATMUL)
def _batch_matmul(g: Graph, op: TflOp) -> None:
    o = op.options
    adj_x, adj_y = (o.flag(0), o.flag(1)) if o is not None else (False, False)
    a = g.input(op.inputs[0])
    b_const = g.const_value(op.inputs[1])
    if b_const is not None and b_const.ndim == 2 and _dims(g, a) and len(_dims(g, a)) != 2 and not adj_x:
        _matmul_by_constant(g, op, a, b_const.T if not adj_y else b_const)
        return
    b = g.input(op.inputs[1])
    if g.type_of(a) is not g.type_of(b):
        raise Unsupported("hybrid BATCH_MATMUL (inputs of different types)")
    g.op(Op.BATCH_MATMUL, [a, b, g.flag(adj_x), g.flag(adj_y)], [g.out(op.outputs[0])])


def _matmul_by_constant(g: Graph, op: TflOp, a: int, w: np.ndarray) -> None:
    """``a @ b`` for a constant 2-D ``b`` broadcast over ``a``'s leading dimensions (NNAPI's
    BATCH_MATMUL needs equal ranks): a 1x1 CONV_2D with filter ``b^T`` works on any rank-4 ``a``
    without knowing its other dimensions; rank 3 goes through EXPAND_DIMS and SQUEEZE."""
    rank = len(_dims(g, a))
    if g.type_of(a) is not T.TENSOR_FLOAT32 or rank not in (3, 4):
        raise Unsupported(f"BATCH_MATMUL of a rank-{rank} {g.type_of(a).name} input by a constant matrix")
    n_out, k = w.shape
    filt = g.const(np.ascontiguousarray(w, np.float32).reshape(n_out, 1, 1, k), T.TENSOR_FLOAT32)
    bias = g.const(np.zeros(n_out, np.float32), T.TENSOR_FLOAT32)
    y = g.out(op.outputs[0])
    x, out = a, y
    if rank == 3:
        d = _dims(g, a)
        x = g.temp(a, dims=[d[0], 1, d[1], d[2]])
        g.op(Op.EXPAND_DIMS, [a, g.i32(1)], [x])
        yd = _dims(g, y)
        out = g.temp(y, dims=[yd[0], 1, yd[1], yd[2]] if len(yd) == 3 else [0, 1, 0, n_out])
    g.op(Op.CONV_2D, [x, filt, bias, g.i32(2), g.i32(1), g.i32(1), g.i32(0)], [out])
    if rank == 3:
        g.op(Op.SQUEEZE, [out, g.ints([1])], [y])
