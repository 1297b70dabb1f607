"""ONNX convolution, pooling, dense and normalisation ops → NNAPI.

Conv (2-D, and 1-D as 2-D with H = 1): group 1 → CONV_2D, group = C_in with one input
channel per group → DEPTHWISE_CONV_2D, other groups → GROUPED_CONV_2D (or, when dilated,
which GROUPED_CONV_2D cannot express, one CONV_2D per group between SPLIT and CONCATENATION).
Weights are re-laid at import: OIHW → OHWI, depthwise → [1, H, W, M]. A missing bias becomes
zeros. ``auto_pad`` SAME_UPPER/SAME_LOWER/VALID become explicit pads (SAME needs the spatial
size known at load). 2-D convs and pools read and write NHWC (``_onnx_layout``).
ConvTranspose → TRANSPOSE_CONV_2D (weights IOHW → OHWI),
groups by SPLIT / CONCATENATION, ``output_padding`` taken off the end pads; dilations refused.
Weights that arrive at run time (graph inputs or computed; NNAPI does not need them constant)
are re-laid by a TRANSPOSE in the graph instead, the bias used as it is (grouped+dilated Conv
refuses them; no BatchNormalization folding then).

BatchNormalization directly after a Conv whose output nothing else reads is folded into the
Conv's weights and bias; a Relu (or Clip 0..6 / -1..1) right after is fused as the
activation. A BatchNormalization on its own becomes MUL + ADD by per-channel constants.

Pools (2-D): MaxPool / AveragePool with explicit pads; ``ceil_mode`` by extra end padding
(exact: NNAPI ignores padding in max and excludes it from averages, and ONNX drops a last
window that would start in the padding); ``count_include_pad`` by an explicit PAD first.
GlobalAveragePool / GlobalMaxPool → MEAN / REDUCE_MAX over the spatial axes.

Gemm / MatMul with a constant 2-D B → FULLY_CONNECTED (B re-laid to [N, K], alpha and
beta folded, C as bias when it is a row vector, else an ADD), reshaped back to the input's
leading dims; with a non-constant B → BATCH_MATMUL (equal ranks and batch dims, as NNAPI
requires), or FULLY_CONNECTED by B^T (TRANSPOSE) / B as [1, K] (RESHAPE) when B is 2-D / 1-D
under an A of another rank.
(InstanceNormalization, LRN and LpNormalization live in ``_onnx_norm``.)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from nnrt.importers._onnx import Arg, NodeCtx, Reject, Value, mapper, to_nhwc
from nnrt.importers._onnx_elem import bshape
from nnrt.importers._onnx_proto import Node
from nnrt.importers._onnx_shape import reshape_to
from nnrt.types import OperationType as Op

__all__ = ["BiasFn", "WeightFn", "channel_const", "conv_operands", "emit_conv", "fully_connected"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def _cv(arr: np.ndarray) -> Value:
    arr = np.ascontiguousarray(arr)
    return Value(arr.dtype, arr.shape, const=arr)


def _spatial(ctx: NodeCtx, x: Value, kernel: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(strides, dilations, pads [t, l, b, r]) with auto_pad resolved; kernel is [kH, kW]."""
    strides = ctx.ints("strides") or [1, 1]
    dil = ctx.ints("dilations") or [1, 1]
    pads = ctx.ints("pads") or [0, 0, 0, 0]
    auto = ctx.s("auto_pad", "NOTSET")
    if len(strides) != 2 or len(dil) != 2 or len(pads) != 4:
        raise Reject("only 2-D strides, dilations and pads are supported")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        assert x.shape is not None
        pads = [0, 0, 0, 0]
        for k in range(2):
            size = x.shape[2 + k]
            if not size:
                raise Reject(f"auto_pad {auto} needs the input's spatial size known (input_shapes can fix it)")
            total = max((-(-size // strides[k]) - 1) * strides[k] + (kernel[k] - 1) * dil[k] + 1 - size, 0)
            small, big = total // 2, total - total // 2
            pads[k], pads[k + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    elif auto != "NOTSET":
        raise Reject(f"auto_pad {auto!r} is not supported")
    if any(p < 0 for p in pads):
        raise Reject("negative pads are not supported")
    return strides, dil, pads


def _out_size(size: int, k: int, s: int, d: int, p0: int, p1: int, ceil: bool = False) -> int:
    if not size:
        return 0
    span = size + p0 + p1 - ((k - 1) * d + 1)
    if ceil:
        out = -(-span // s) + 1
        if (out - 1) * s >= size + p0:
            out -= 1
        return out
    return span // s + 1


def _consumer(ctx: NodeCtx, name: str, *op_types: str) -> Node | None:
    """The one node reading ``name``, if it is of one of ``op_types`` (and ``name`` is not a graph output)."""
    users = ctx.b.consumers.get(name, [])
    if len(users) == 1 and users[0].op_type in op_types and name not in ctx.b.graph_outputs:
        return users[0]
    return None


def _fold_bn(ctx: NodeCtx, bn: Node, w: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    params = [ctx.b.lookup(n) if n else None for n in bn.inputs[1:5]]
    if len(params) != 4 or any(p is None or p.const is None for p in params):
        return None
    gamma, beta, mean, var = (p.const.astype(np.float32, copy=False) for p in params if p is not None and p.const is not None)
    eps = float(bn.attrs["epsilon"].f) if "epsilon" in bn.attrs else 1e-5
    if len(bn.outputs) > 1 and any(bn.outputs[1:]):
        return None
    scale = gamma / np.sqrt(var + np.float32(eps))
    w2 = (w.astype(np.float32, copy=False) * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype, copy=False)
    b2 = ((bias.astype(np.float32, copy=False) - mean) * scale + beta).astype(bias.dtype, copy=False)
    return w2, b2


def _activation(ctx: NodeCtx, name: str) -> tuple[int, Node | None]:
    """A Relu / Clip(0,6) / Clip(-1,1) reading ``name`` alone, fused as NNAPI's activation code."""
    nxt = _consumer(ctx, name, "Relu", "Clip")
    if nxt is None:
        return 0, None
    if nxt.op_type == "Relu":
        return 1, nxt
    bounds = []
    for n in nxt.inputs[1:3]:
        v = ctx.b.lookup(n) if n else None
        if v is None or v.const is None:
            return 0, None
        bounds.append(float(v.const.reshape(-1)[0]))
    if ctx.opset < 11 or len(bounds) != 2:
        return 0, None
    code = {(0.0, 6.0): 3, (-1.0, 1.0): 2}.get((bounds[0], bounds[1]), 0)
    return code, nxt if code else None


def _conv_fusions(ctx: NodeCtx, w: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, str]:
    """Fold a following Add of a per-channel constant (a bias exported as a node of its own, as
    Paddle does after ConvTranspose) and a BatchNormalization, and fuse a following activation;
    ``w`` has the output channels first. Returns the weights, bias, activation code and the
    final output name."""
    name = ctx.out()
    add = _bias_add(ctx, name, bias)
    if add is not None:
        bias, node = add
        ctx.b.absorbed.add(id(node))
        name = node.outputs[0]
    bn = _consumer(ctx, name, "BatchNormalization")
    if bn is not None:
        folded = _fold_bn(ctx, bn, w, bias)
        if folded is not None:
            w, bias = folded
            ctx.b.absorbed.add(id(bn))
            name = bn.outputs[0]
    act, nxt = _activation(ctx, name)
    if nxt is not None:
        ctx.b.absorbed.add(id(nxt))
        name = nxt.outputs[0]
    return w, bias, act, name


def _bias_add(ctx: NodeCtx, name: str, bias: np.ndarray) -> tuple[np.ndarray, Node] | None:
    """``bias`` plus the constant of the Add reading ``name`` alone, when that constant is one
    value or one per channel ([C, 1, 1] or [1, C, 1, 1]) of the bias's type; with the Add."""
    add = _consumer(ctx, name, "Add")
    if add is None or len(add.inputs) != 2 or add.inputs.count(name) != 1:
        return None
    v = ctx.b.lookup(add.inputs[1] if add.inputs[0] == name else add.inputs[0])
    c = None if v is None else v.const
    n = bias.shape[0]
    if c is None or c.dtype != bias.dtype or not ((c.size == 1 and c.ndim <= 4) or c.shape in ((n, 1, 1), (1, n, 1, 1))):
        return None
    return bias + c.reshape(-1), add


def _conv_input(ctx: NodeCtx, quantized: bool) -> tuple[Value, int]:
    """The convolution's input (NHWC-capable for 2-D, NCHW for 1-D) and its rank."""
    x = ctx.raw(0)  # 2-D convolutions read it NHWC (emit_conv); a 1-D one reads it NCHW
    r = x.need_rank(ctx.node.op_type)
    if r != 4:
        x = ctx.inp(0)
    if (x.dtype not in _FLOATS or x.quant is not None) and not quantized:
        raise Reject(f"input of type {x.dtype} is not supported")
    return x, r


def _widen_1d(ctx: NodeCtx, x: Value) -> Value:
    """A 1-D conv's [N, C, L] input as [N, C, 1, L], its attributes widened to match."""
    assert x.shape is not None
    for name, fill in (("strides", 1), ("dilations", 1), ("kernel_shape", 1)):
        if ctx.has(name):
            ctx.node.attrs[name].ints = [fill, *(ctx.ints(name) or [])]
    if ctx.has("pads"):
        p = ctx.ints("pads") or [0, 0]
        ctx.node.attrs["pads"].ints = [0, p[0], 0, p[1]]
    return ctx.b.op1(Op.EXPAND_DIMS, [x, ctx.b.i32(2)], x.dtype, (x.shape[0], x.shape[1], 1, x.shape[2]), x.quant)


def conv_operands(ctx: NodeCtx, w_index: int, quantized: bool = False) -> tuple[Value, np.ndarray, bool]:
    """The input as 4-D NCHW (a 1-D conv's [N, C, L] reshaped to [N, C, 1, L], its attributes
    widened to match), the 4-D OIHW weights, and whether the conv was 1-D."""
    x, r = _conv_input(ctx, quantized)
    w = ctx.const(w_index, "weights")
    assert w is not None and x.shape is not None
    if r not in (3, 4) or w.ndim != r:
        raise Reject(f"only 1-D and 2-D convolutions are supported (input rank {r}, weights rank {w.ndim})")
    if r == 4:
        return x, w, False
    return _widen_1d(ctx, x), w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]), True


def _run_time_weights(ctx: NodeCtx, dtype: np.dtype, rank: int) -> Value:
    """Input 1, a weight tensor computed or fed at run time: its shape must be known."""
    w = ctx.inp(1)
    if w.dtype != dtype:
        raise Reject(f"weights of type {w.dtype} differ from the input's {dtype}")
    if w.shape is None or len(w.shape) != rank or not w.known:
        raise Reject(f"run-time weights (input 1) need a known shape of rank {rank}, not {w.shape}")
    return w


def _run_time_bias(ctx: NodeCtx, dtype: np.dtype, channels: int) -> Value:
    """Input 2 as it is (constant or not), or a zero bias when absent."""
    b = ctx.opt(2)
    if b is None:
        return _cv(np.zeros(channels, dtype))
    if b.dtype != dtype or b.shape is None or tuple(b.shape) not in ((channels,), (0,)):
        raise Reject(f"bias (input 2) must be [{channels}] of {dtype}, not {b.shape} of {b.dtype}")
    return b


#: Makes the filter operand from re-laid weights: (array, its output-channel dim, group slice).
WeightFn = Callable[[np.ndarray, int, slice], Value]
#: Makes the bias operand for a slice of the output channels.
BiasFn = Callable[[slice], Value]


def emit_conv(ctx: NodeCtx, x: Value, w: np.ndarray | Value, weight: WeightFn, bias: BiasFn, *, act: int = 0,
              was_1d: bool = False, out_name: str = "", out_type: tuple[np.dtype, tuple[float, int] | None] | None = None,
              ) -> None:
    """Emit the NNAPI convolution for OIHW ``w`` on NCHW ``x`` (group form chosen by the shapes).

    A constant ``w`` is re-laid here and handed to ``weight``; a run-time one (a Value) is
    re-laid by a TRANSPOSE in the graph (``weight`` is then not called)."""
    assert x.shape is not None and w.shape is not None
    dtype, quant = out_type if out_type is not None else (x.dtype, None)
    group = ctx.i("group", 1)
    nhwc = not was_1d  # a 1-D conv's [N, C, 1, L] view stays NCHW (NNAPI's flag) between its reshapes
    xp = ctx.b.nhwc(x) if nhwc else ctx.b.logical(x)
    m, cg, kh, kw = w.shape
    c = x.shape[1]

    def filt(perm: tuple[int, int, int, int], dim: int, sl: slice) -> Value:
        if isinstance(w, np.ndarray):
            return weight(w[sl].transpose(perm), dim, sl)
        if sl != every:
            raise Reject("a dilated grouped convolution with run-time weights is not supported")
        if perm == (0, 2, 3, 1):
            return ctx.b.nhwc(w)  # OIHW -> OHWI, shared with any other reader of the weights
        assert w.shape is not None
        return ctx.b.op1(Op.TRANSPOSE, [w, ctx.b.ints(perm)], w.dtype, tuple(w.shape[p] for p in perm))

    if c and c != cg * group:
        raise Reject(f"input has {c} channels; weights expect {cg} x {group} groups")
    strides, dil, pads = _spatial(ctx, x, [kh, kw])
    t, left, b_, r_ = pads
    shape = (x.shape[0], m, _out_size(x.shape[2], kh, strides[0], dil[0], t, b_),
             _out_size(x.shape[3], kw, strides[1], dil[1], left, r_))
    geo = [ctx.b.i32(v) for v in (left, r_, t, b_, strides[1], strides[0])]
    layout = ctx.b.bool(not nhwc)
    dilation = [layout, ctx.b.i32(dil[1]), ctx.b.i32(dil[0])]
    every = slice(0, m)
    if not isinstance(w, np.ndarray) and group > 1 and cg != 1 and dil != [1, 1]:
        raise Reject("a dilated grouped convolution with run-time weights is not supported")

    def emit(op: Op, ins: list[Arg], out_shape: tuple[int, ...]) -> Value:
        if nhwc:
            return ctx.b.op_nhwc(op, ins, dtype, out_shape, quant)
        return ctx.b.op1(op, ins, dtype, out_shape, quant)

    ins: list[Arg]
    if group == 1:
        ins = [xp, filt((0, 2, 3, 1), 0, every), bias(every), *geo, ctx.b.i32(act), *dilation]
        y = emit(Op.CONV_2D, ins, shape)
    elif cg == 1 and m % group == 0:
        ins = [xp, filt((1, 2, 3, 0), 3, every), bias(every), *geo, ctx.b.i32(m // group),
               ctx.b.i32(act), *dilation]
        y = emit(Op.DEPTHWISE_CONV_2D, ins, shape)
    elif dil == [1, 1]:
        ins = [xp, filt((0, 2, 3, 1), 0, every), bias(every), *geo, ctx.b.i32(group), ctx.b.i32(act),
               layout]
        y = emit(Op.GROUPED_CONV_2D, ins, shape)
    else:  # GROUPED_CONV_2D has no dilation: one CONV_2D per group
        part_shape = (x.shape[0], cg, x.shape[2], x.shape[3])
        parts = ctx.b.op(Op.SPLIT, [xp, ctx.b.i32(3 if nhwc else 1), ctx.b.i32(group)],
                         [(x.dtype, to_nhwc(part_shape) if nhwc else part_shape, x.quant)] * group)
        mg = m // group
        outs = []
        for g, part in enumerate(parts):
            sl = slice(g * mg, (g + 1) * mg)
            ins = [part, filt((0, 2, 3, 1), 0, sl), bias(sl), *geo, ctx.b.i32(act), *dilation]
            outs.append(emit(Op.CONV_2D, ins, (shape[0], mg, shape[2], shape[3])))
        y = emit(Op.CONCATENATION, [*outs, ctx.b.i32(3 if nhwc else 1)], shape)
    out_shape = shape if not was_1d else (shape[0], shape[1], shape[3])
    if was_1d:
        y = ctx.b.op1(Op.SQUEEZE, [y, ctx.b.ints([2])], dtype, out_shape, quant)
    out_name = out_name or ctx.out()
    ctx.b.values[out_name] = y
    if out_name == ctx.out():
        ctx.set(0, y)
    else:
        ctx.set(0, Value(dtype, out_shape, missing=True))  # never read: its only reader was fused


@mapper("Conv")
def _conv(ctx: NodeCtx) -> None:
    wv = ctx.opt(1)
    if wv is not None and wv.const is None:
        _conv_run_time(ctx)
        return
    x, w, was_1d = conv_operands(ctx, 1)
    bias_c = ctx.const(2, "bias")
    bias = bias_c.astype(x.dtype, copy=False) if bias_c is not None else np.zeros(w.shape[0], x.dtype)
    w, bias, act, out_name = _conv_fusions(ctx, w.astype(x.dtype, copy=False), bias)
    folded_bias = bias
    whole = w.size

    def weight(arr: np.ndarray, _dim: int, _sl: slice) -> Value:  # re-laid over the file's bytes when it may
        return _cv(ctx.b.relaid(ctx.node.inputs[1], arr) if arr.size == whole else arr)

    emit_conv(ctx, x, w, weight, lambda sl: _cv(folded_bias[sl]), act=act, was_1d=was_1d, out_name=out_name)


def _conv_run_time(ctx: NodeCtx) -> None:
    """Conv whose weights arrive at run time: re-laid by a TRANSPOSE in the graph, bias as it is."""
    x, r = _conv_input(ctx, False)
    if r not in (3, 4):
        raise Reject(f"only 1-D and 2-D convolutions are supported (input rank {r})")
    w = _run_time_weights(ctx, x.dtype, r)
    assert w.shape is not None
    bias = _run_time_bias(ctx, x.dtype, w.shape[0])
    if r == 3:
        x = _widen_1d(ctx, x)
        w = ctx.b.reshape(w, [w.shape[0], w.shape[1], 1, w.shape[2]])
    act, nxt = _activation(ctx, ctx.out())
    out_name = ctx.out()
    if nxt is not None:
        ctx.b.absorbed.add(id(nxt))
        out_name = nxt.outputs[0]
    emit_conv(ctx, x, w, lambda _arr, _dim, _sl: w, lambda _sl: bias, act=act, was_1d=r == 3, out_name=out_name)


@mapper("ConvTranspose")
def _conv_transpose(ctx: NodeCtx) -> None:
    x = ctx.raw(0)  # read NHWC (``ctx.inp`` would add a TRANSPOSE to NCHW that nothing reads)
    if x.need_rank("ConvTranspose") != 4:
        raise Reject("only 2-D ConvTranspose is supported")
    wv = ctx.inp(1)
    run_time = wv.const is None
    w_run = _run_time_weights(ctx, x.dtype, 4) if run_time else wv
    group = ctx.i("group", 1)
    assert w_run.shape is not None and x.shape is not None
    _cin_g, mg, kh, kw = w_run.shape  # [C_in, M/group, kH, kW]
    if (ctx.ints("dilations") or [1, 1]) != [1, 1]:
        raise Reject("dilated ConvTranspose is not supported (TRANSPOSE_CONV_2D has no dilation)")
    if ctx.has("output_shape"):
        raise Reject("the output_shape attribute is not supported (give pads)")
    m = mg * group
    strides = ctx.ints("strides") or [1, 1]
    pads = ctx.ints("pads") or [0, 0, 0, 0]
    outpad = ctx.ints("output_padding") or [0, 0]
    auto = ctx.s("auto_pad", "NOTSET")
    if auto != "NOTSET":
        if auto == "VALID":
            pads = [0, 0, 0, 0]
        else:
            total = [(kh - strides[0]), (kw - strides[1])]
            if min(total) < 0:
                raise Reject(f"auto_pad {auto} with stride > kernel is not supported")
            lo = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
            pads = [lo[0], lo[1], total[0] - lo[0], total[1] - lo[1]]
    t, left, b_, r_ = pads[0], pads[1], pads[2] - outpad[0], pads[3] - outpad[1]
    if min(t, left, b_, r_) < 0:
        raise Reject("output_padding larger than the end pads is not supported")
    h, wd = x.shape[2], x.shape[3]
    shape = (x.shape[0], m, (h - 1) * strides[0] + kh - t - b_ if h else 0,
             (wd - 1) * strides[1] + kw - left - r_ if wd else 0)
    geo = [ctx.b.i32(v) for v in (left, r_, t, b_, strides[1], strides[0])]
    xp = ctx.b.nhwc(x)
    cg = _cin_g // group
    act, out_name = 0, ctx.out()
    ws: list[Value]
    bs: list[Value]
    if run_time:  # [C_in, M/g, kH, kW] -> [M/g, kH, kW, C_in] by a TRANSPOSE, cut per group by SPLIT
        wt = ctx.b.op1(Op.TRANSPOSE, [w_run, ctx.b.ints([1, 2, 3, 0])], x.dtype, (mg, kh, kw, _cin_g))
        bv = _run_time_bias(ctx, x.dtype, m)
        ws, bs = [wt], [bv]
        if group > 1:
            ws = ctx.b.op(Op.SPLIT, [wt, ctx.b.i32(3), ctx.b.i32(group)], [(x.dtype, (mg, kh, kw, cg))] * group)
            bs = ctx.b.op(Op.SPLIT, [bv, ctx.b.i32(0), ctx.b.i32(group)], [(x.dtype, (mg,))] * group)
    else:
        w = ctx.const(1, "weights")
        assert w is not None
        w = w.astype(x.dtype, copy=False)
        bias_c = ctx.const(2, "bias")
        bias = bias_c.astype(x.dtype, copy=False) if bias_c is not None else np.zeros(m, x.dtype)
        if group == 1 and x.dtype == np.float32:  # a bias Add, BatchNormalization, activation after it
            wo, bias, act, out_name = _conv_fusions(ctx, w.transpose(1, 0, 2, 3), bias)
            w = wo.transpose(1, 0, 2, 3)
        ws = [_cv(w[g * cg:(g + 1) * cg].transpose(1, 2, 3, 0)) for g in range(group)]  # [M/g, kH, kW, C_in/g]
        bs = [_cv(bias[g * mg:(g + 1) * mg]) for g in range(group)]
    part_shape = (x.shape[0], x.shape[1] // group if x.shape[1] else 0, h, wd)
    xs = [xp] if group == 1 else ctx.b.op(Op.SPLIT, [xp, ctx.b.i32(3), ctx.b.i32(group)],
                                          [(x.dtype, to_nhwc(part_shape))] * group)
    outs = []
    for g, part in enumerate(xs):
        ins: list[Arg] = [part, ws[g], bs[g], *geo, ctx.b.i32(act), ctx.b.bool(False)]
        outs.append(ctx.b.op_nhwc(Op.TRANSPOSE_CONV_2D, ins, x.dtype, shape if group == 1 else
                                  (shape[0], mg, shape[2], shape[3]), name=out_name if group == 1 else ""))
    if out_name != ctx.out():  # nodes folded in: the last one's output is the convolution's
        ctx.b.values[out_name] = outs[0]
        ctx.set(0, Value(x.dtype, shape, missing=True))  # never read: its only reader was fused
        return
    ctx.set(0, outs[0] if group == 1 else
            ctx.b.op_nhwc(Op.CONCATENATION, [*outs, ctx.b.i32(3)], x.dtype, shape, name=ctx.out()))


def channel_const(arr: np.ndarray, rank: int, dtype: np.dtype) -> Value:
    return _cv(arr.astype(dtype, copy=False).reshape((-1,) + (1,) * (rank - 2)))


@mapper("BatchNormalization")
def _batchnorm(ctx: NodeCtx) -> None:
    x = ctx.raw(0)
    if x.rank != 4:
        x = ctx.inp(0)
    if x.dtype not in _FLOATS:
        raise Reject(f"input of type {x.dtype} is not supported")
    if ctx.i("training_mode", 0) or len([o for o in ctx.node.outputs if o]) > 1:
        raise Reject("training mode (running statistics outputs) is not supported")
    consts = [ctx.const(i, n) for i, n in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var"))]
    gamma, beta, mean, var = (c.astype(np.float32, copy=False) for c in consts if c is not None)
    scale = gamma / np.sqrt(var + np.float32(ctx.f("epsilon", 1e-5)))
    shift = beta - mean * scale
    r = x.need_rank("BatchNormalization")
    if r < 2:
        raise Reject("needs an input of rank >= 2")
    assert x.shape is not None
    if r == 4:  # NHWC: the per-channel constants broadcast along the last axis
        xp = ctx.b.nhwc(ctx.raw(0))
        y = ctx.b.op_nhwc(Op.MUL, [xp, _cv(scale.astype(x.dtype)), ctx.b.i32(0)], x.dtype, x.shape)
        ctx.set(0, ctx.b.op_nhwc(Op.ADD, [y, _cv(shift.astype(x.dtype)), ctx.b.i32(0)], x.dtype, x.shape, name=ctx.out()))
        return
    y = ctx.b.op1(Op.MUL, [x, channel_const(scale, r, x.dtype), ctx.b.i32(0)], x.dtype, x.shape)
    ctx.emit(Op.ADD, [y, channel_const(shift, r, x.dtype), ctx.b.i32(0)], x.dtype, x.shape)


@mapper("MaxPool", "AveragePool")
def _pool(ctx: NodeCtx) -> None:
    x = ctx.raw(0)  # read NHWC
    if x.need_rank(ctx.node.op_type) != 4:
        raise Reject("only 2-D pooling is supported")
    if len([o for o in ctx.node.outputs if o]) > 1:
        raise Reject("the Indices output is not supported")
    if x.dtype not in _FLOATS and x.quant is None:
        raise Reject(f"input of type {x.dtype} is not supported")
    kernel = ctx.ints("kernel_shape") or []
    if len(kernel) != 2:
        raise Reject("kernel_shape must have 2 values")
    strides, dil, pads = _spatial(ctx, x, kernel)
    if dil != [1, 1]:
        raise Reject("dilated pooling is not supported")
    assert x.shape is not None
    ceil = bool(ctx.i("ceil_mode", 0))
    avg = ctx.node.op_type == "AveragePool"
    oh = _out_size(x.shape[2], kernel[0], strides[0], 1, pads[0], pads[2], ceil)
    ow = _out_size(x.shape[3], kernel[1], strides[1], 1, pads[1], pads[3], ceil)
    if avg and ctx.i("count_include_pad", 0) and any(pads):
        table = np.asarray([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], dtype=np.int32)  # NHWC
        padded = (x.shape[0], x.shape[1], x.shape[2] + pads[0] + pads[2] if x.shape[2] else 0,
                  x.shape[3] + pads[1] + pads[3] if x.shape[3] else 0)
        x = ctx.b.op_nhwc(Op.PAD, [ctx.b.nhwc(x), _cv(table)], x.dtype, padded, x.quant)
        pads = [0, 0, 0, 0]
    assert x.shape is not None
    if ceil:
        if not (x.shape[2] and x.shape[3]):
            raise Reject("ceil_mode needs the input's spatial size known (input_shapes can fix it)")
        # The windows ceil mode adds hang over the end: pad there (ignored by MAX, excluded from AVERAGE).
        pads[2] += max((oh - 1) * strides[0] + kernel[0] - (x.shape[2] + pads[0] + pads[2]), 0)
        pads[3] += max((ow - 1) * strides[1] + kernel[1] - (x.shape[3] + pads[1] + pads[3]), 0)
    op = Op.AVERAGE_POOL_2D if avg else Op.MAX_POOL_2D
    geo = [ctx.b.i32(v) for v in (pads[1], pads[3], pads[0], pads[2], strides[1], strides[0], kernel[1], kernel[0])]
    ctx.set(0, ctx.b.op_nhwc(op, [ctx.b.nhwc(x), *geo, ctx.b.i32(0), ctx.b.bool(False)], x.dtype,
                             (x.shape[0], x.shape[1], oh, ow), x.quant, ctx.out()))


@mapper("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: NodeCtx) -> None:
    x = ctx.raw(0)
    r = x.need_rank(ctx.node.op_type)
    if r != 4:
        x = ctx.inp(0)
    if r < 3 or x.dtype not in _FLOATS:
        raise Reject("needs a float input of rank >= 3")
    assert x.shape is not None
    axes = list(range(2, r))
    shape = x.shape[:2] + (1,) * (r - 2)
    if r == 4:  # over H and W of the NHWC tensor
        xp = ctx.b.nhwc(ctx.raw(0))
        if ctx.node.op_type == "GlobalAveragePool":
            y = ctx.b.op_nhwc(Op.MEAN, [xp, ctx.b.ints([1, 2]), ctx.b.i32(1)], x.dtype, shape, name=ctx.out())
        else:
            y = ctx.b.op_nhwc(Op.REDUCE_MAX, [xp, ctx.b.ints([1, 2]), ctx.b.bool(True)], x.dtype, shape, name=ctx.out())
        ctx.set(0, y)
        return
    if ctx.node.op_type == "GlobalAveragePool":
        ctx.emit(Op.MEAN, [x, ctx.b.ints(axes), ctx.b.i32(1)], x.dtype, shape)
    else:
        ctx.emit(Op.REDUCE_MAX, [x, ctx.b.ints(axes), ctx.b.bool(True)], x.dtype, shape)


def fully_connected(ctx: NodeCtx, a: Value, w_nk: np.ndarray | Value, bias: np.ndarray | Value,
                    out_shape: tuple[int, ...], final: bool = True,
                    out_type: tuple[np.dtype, tuple[float, int] | None] | None = None) -> Value:
    """FULLY_CONNECTED of ``a`` (rank >= 2, last dim K) by [N, K] weights, reshaped to ``out_shape``.

    Float weights and bias may be given as arrays; quantized ones as Values carrying their types.
    """
    assert a.shape is not None
    w = w_nk if isinstance(w_nk, Value) else _cv(w_nk.astype(a.dtype, copy=False))
    bv = bias if isinstance(bias, Value) else _cv(bias.astype(a.dtype, copy=False))
    dtype, quant = out_type if out_type is not None else (a.dtype, None)
    rows = math.prod(a.shape[:-1]) if all(a.shape[:-1]) else 0
    assert w.shape is not None
    ins: list[Arg] = [a, w, bv, ctx.b.i32(0)]
    two_d = (rows, w.shape[0])
    if out_shape == two_d:
        return ctx.emit(Op.FULLY_CONNECTED, ins, dtype, two_d, quant) if final else \
            ctx.b.op1(Op.FULLY_CONNECTED, ins, dtype, two_d, quant)
    y = ctx.b.op1(Op.FULLY_CONNECTED, ins, dtype, two_d, quant)
    return reshape_to(ctx, y, list(out_shape), out=0 if final else None)


@mapper("MatMul")
def _matmul(ctx: NodeCtx) -> None:
    a, b = ctx.inp(0), ctx.inp(1)
    if a.dtype not in _FLOATS or b.dtype != a.dtype:
        raise Reject(f"inputs of type {a.dtype} x {b.dtype} are not supported")
    ra, rb = a.need_rank("MatMul"), b.need_rank("MatMul")
    assert a.shape is not None and b.shape is not None
    if b.const is not None and rb == 2 and ra >= 1:
        if ra == 1:
            a = reshape_to(ctx, a, [1, a.shape[0]], out=None)
            out_shape: tuple[int, ...] = (b.shape[1],)
        else:
            assert a.shape is not None
            out_shape = (*a.shape[:-1], b.shape[1])
        fully_connected(ctx, a, ctx.b.relaid(ctx.node.inputs[1], b.const.T), np.zeros(b.shape[1], a.dtype), out_shape)
        return
    assert a.shape is not None
    if (rb == 1 and ra >= 2) or (rb == 2 and ra != 2):
        # A run-time B [K] or [K, N] under an A of another rank: FULLY_CONNECTED by B as [1, K]
        # (RESHAPE) or B^T (TRANSPOSE) in the graph; BATCH_MATMUL would need equal ranks.
        if not b.known:
            raise Reject(f"a run-time B of rank {rb} under an A of rank {ra} needs B's shape known")
        k = b.shape[0]
        n = b.shape[1] if rb == 2 else 1
        w = ctx.b.reshape(b, [1, k]) if rb == 1 else \
            ctx.b.op1(Op.TRANSPOSE, [b, ctx.b.ints([1, 0])], b.dtype, (n, k))
        out_shape = (*a.shape[:-1], n) if rb == 2 else tuple(a.shape[:-1])
        a2 = reshape_to(ctx, a, [1, a.shape[0]], out=None) if ra == 1 else a
        fully_connected(ctx, a2, w, np.zeros(n, a.dtype), out_shape)
        return
    if ra < 2 or rb < 2 or ra > 4 or rb > 4:
        raise Reject(f"ranks {ra} x {rb} with a non-constant B are not supported (BATCH_MATMUL takes 2-4)")
    if ra != rb or any(x != y and x and y for x, y in zip(a.shape[:-2], b.shape[:-2])):
        raise Reject(f"batch dims {list(a.shape[:-2])} x {list(b.shape[:-2])} differ (BATCH_MATMUL does not broadcast)")
    shape = (*tuple(max(x, y) for x, y in zip(a.shape[:-2], b.shape[:-2])), a.shape[-2], b.shape[-1])
    ctx.emit(Op.BATCH_MATMUL, [a, b, ctx.b.bool(False), ctx.b.bool(False)], a.dtype, shape)


@mapper("Gemm")
def _gemm(ctx: NodeCtx) -> None:
    a, b = ctx.inp(0), ctx.inp(1)
    c = ctx.opt(2)
    if a.dtype not in _FLOATS:
        raise Reject(f"input of type {a.dtype} is not supported")
    if a.need_rank("Gemm") != 2 or b.need_rank("Gemm") != 2:
        raise Reject("A and B must be 2-D")
    alpha, beta = ctx.f("alpha", 1.0), ctx.f("beta", 1.0)
    trans_a, trans_b = ctx.i("transA", 0), ctx.i("transB", 0)
    assert a.shape is not None and b.shape is not None
    if trans_a:
        a = ctx.b.op1(Op.TRANSPOSE, [a, ctx.b.ints([1, 0])], a.dtype, (a.shape[1], a.shape[0]))
    assert a.shape is not None
    n = b.shape[0] if trans_b else b.shape[1]
    shape = (a.shape[0], n)
    bias = np.zeros(n, np.float32)
    add_c = None
    if c is not None:
        if c.const is not None and c.const.size in (1, n) and (c.const.ndim < 2 or c.const.shape[0] == 1):
            bias = np.broadcast_to(c.const.astype(np.float32, copy=False).reshape(-1), (n,)) * np.float32(beta)
        else:
            add_c = c
    if b.const is not None:
        w = (b.const if trans_b else b.const.T).astype(np.float32, copy=False)
        if alpha != 1.0:
            w = w * np.float32(alpha)
        w = ctx.b.relaid(ctx.node.inputs[1], w)
        y = fully_connected(ctx, a, w, bias, shape, final=add_c is None)
    else:
        y = ctx.b.op1(Op.BATCH_MATMUL, [a, b, ctx.b.bool(False), ctx.b.bool(bool(trans_b))], a.dtype, shape)
        if alpha != 1.0:
            y = ctx.b.op1(Op.MUL, [y, _cv(np.asarray([alpha], a.dtype)), ctx.b.i32(0)], a.dtype, shape)
        if add_c is None and c is not None:
            add_c = _cv(bias.astype(a.dtype, copy=False))
            beta = 1.0
        if add_c is None:
            ctx.set(0, y)
            return
    if add_c is not None:
        if beta != 1.0:
            add_c = ctx.b.op1(Op.MUL, [add_c, _cv(np.asarray([beta], a.dtype)), ctx.b.i32(0)], a.dtype, add_c.shape)
        ctx.emit(Op.ADD, [y, add_c, ctx.b.i32(0)], a.dtype, bshape(shape, add_c.shape))
