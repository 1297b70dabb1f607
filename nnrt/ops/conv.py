"""2-D convolutions: CONV_2D, DEPTHWISE_CONV_2D and GROUPED_CONV_2D (the DEPTHWISE_CONV_2D kernel
lives in ``depthwise``, GROUPED_CONV_2D in ``conv_grouped`` and TRANSPOSE_CONV_2D in
``conv_transpose``, all imported at the bottom of this module; the signature, type and geometry
helpers all four share live here).

All three share NNAPI's signature shape: ``[input, filter, bias, padding..., stride_w, stride_h,
(depth multiplier | groups), activation, (layout), (dilation_w, dilation_h)]`` where padding is
either one implicit scheme (SAME/VALID) or four explicit values (left, right, top, bottom). The
kernels compute in NHWC (NCHW inputs are viewed as NHWC; outputs are transposed back unless the
formulation yields NCHW directly) and in real numbers: float32 for float32/float16/relaxed
models, float64 for quantized ones (inputs dequantized with ``to_real``, per-channel filters
included; the int32 bias is scaled by ``input_scale * filter_scale[c]``), requantized by
``from_real``.

Speed: constant filters (and biases) are re-laid once at preparation. CONV_2D is one matrix
product: 1x1 convolutions multiply the input directly, others gather the filter taps first (as
channel-major planes when the input has few channels, as im2col rows otherwise) plus a row of
ones so the product adds the bias. DEPTHWISE_CONV_2D views NHWC rows as flat ``[W*C]`` vectors
and accumulates one tiled weight row per tap (clipped at the borders, so no padded copy), a
block of output rows at a time so the accumulator stays in cache, fused activation included.
With numba (``nnrt.ops._jit``), float32 DEPTHWISE_CONV_2D runs a compiled loop of
``_jit_float`` instead, chosen and compiled once at preparation (``compiled_depthwise``), a
float32 1x1 CONV_2D adds its bias and fused activation in one compiled pass per block of
pixels (``_jit_pointwise.pointwise_blocks``), and a float32 KxK
CONV_2D builds its im2col rows with a compiled loop in blocks that stay in L2, one BLAS product
per block (``_jit_conv.Im2colConv``: 1.2-2.5x faster on the real models' shapes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from nnrt.errors import NnrtError
from nnrt.model import Operand
from nnrt.ops._common import (
    activation_bounds,
    apply_activation,
    centred_filter,
    check_activation,
    check_padding_scheme,
    check_result_size,
    from_nchw,
    from_real,
    implicit_padding,
    int_param,
    quant_range,
    to_nchw,
    to_real,
)
from nnrt.ops._conv_core import (
    Geometry,
    im2col,
    live_taps,
    padded,
)
from nnrt.ops._conv_line import line_conv
from nnrt.ops._epilogue import Epilogue, accept_epilogue
from nnrt.ops._gemm import Product, flush_subnormals, product
from nnrt.ops._jit import compiled
from nnrt.ops._jit_conv import (
    IM2COL_ROWS_F32,
    PLANES_ROWS_F32,
    Im2colConv,
    im2col_rows_f32,
    planes_rows_f32,
    winograd,
)
from nnrt.ops._jit_float import BIAS_ACT_F32, bias_act_f32
from nnrt.ops._jit_pointwise import pointwise_blocks
from nnrt.ops._jit_quant import conv_runner
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops._relay import relaid
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = [
    "ConvSignature",
    "ConvTypes",
    "Geometry",
    "check_const_params",
    "check_conv_types",
    "conv_matrix",
    "conv_nhwc",
    "conv_signature",
    "empty_output",
    "finish_output",
    "geometry",
    "input_nhwc",
    "pointwise_parts",
    "real_bias",
    "real_filter",
    "run_geometry",
]

#: Input channels up to which CONV_2D gathers taps as per-channel planes rather than im2col rows
#: (one copy per tap: for few taps only; a 1x256 filter over a signal takes im2col's one copy).
_PLANES_MAX_CHANNELS = 4
_PLANES_MAX_TAPS = 25


# -- signatures -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConvSignature:
    """Where each scalar parameter of a conv-like operation sits in its input list."""

    explicit: bool
    pad: int  # the scheme (implicit) or the first of left, right, top, bottom (explicit)
    stride: int  # stride_w; stride_h follows
    extra: int | None  # depth multiplier / number of groups
    act: int
    layout: int | None
    dilation: int | None  # dilation_w; dilation_h follows


def conv_signature(call: OpCall, first: int, extra: bool, layout_required: bool, dilation: bool) -> ConvSignature:
    """Decode and type-check the padding/stride/... parameters that start at input ``first``.

    The implicit form has ``first + 4 (+1 with extra)`` required inputs, the explicit form
    three more; the optional layout bool and the two dilation factors follow. As in NNAPI,
    the explicit form is chosen when the input right after the implicit form's required ones
    is an INT32 rather than the layout BOOL.
    """
    n = len(call.inputs)
    k = 1 if extra else 0
    implicit_base = first + 4 + k
    explicit_base = implicit_base + 3
    counts: set[int] = set()
    for b in (implicit_base, explicit_base):
        counts |= {b + 1} if layout_required else {b, b + 1}
        if dilation:
            counts.add(b + 3)
    call.expect_counts(counts, 1)
    is_implicit = n == implicit_base or (n > implicit_base and call.inputs[implicit_base].type is T.BOOL)
    base = implicit_base if is_implicit else explicit_base
    if n not in (base, base + 1, base + 3):
        call.fail(f"input {implicit_base} is {call.inputs[implicit_base].type.name}: {n} inputs do not form a signature")
    npad = 1 if is_implicit else 4
    for i in range(first, base):
        call.expect_type(i, T.INT32)
    if n > base:
        call.expect_type(base, T.BOOL)
    if n > base + 1:
        call.expect_type(base + 1, T.INT32)
        call.expect_type(base + 2, T.INT32)
    stride = first + npad
    return ConvSignature(
        explicit=not is_implicit,
        pad=first,
        stride=stride,
        extra=stride + 2 if extra else None,
        act=stride + 2 + k,
        layout=base if n > base else None,
        dilation=base + 1 if n > base + 1 else None,
    )


def geometry(
    call: OpCall, sig: ConvSignature, args: tuple[Any, ...], in_h: int, in_w: int, k_h: int, k_w: int
) -> Geometry:
    """Decode one run's scalar parameters (``args`` = the kernel's arguments) and validate them."""
    sw = int_param(call, args, sig.stride, "stride_w", 1)
    sh = int_param(call, args, sig.stride + 1, "stride_h", 1)
    dw = dh = 1
    if sig.dilation is not None and args[sig.dilation] is not None:
        dw = int_param(call, args, sig.dilation, "dilation_w", 1)
        dh = int_param(call, args, sig.dilation + 1, "dilation_h", 1)
    if sig.explicit:
        left = int_param(call, args, sig.pad, "padding_left", 0)
        right = int_param(call, args, sig.pad + 1, "padding_right", 0)
        top = int_param(call, args, sig.pad + 2, "padding_top", 0)
        bottom = int_param(call, args, sig.pad + 3, "padding_bottom", 0)
    else:
        scheme = check_padding_scheme(call, args[sig.pad], sig.pad)
        left, right = implicit_padding(scheme, in_w, sw, k_w, dw)
        top, bottom = implicit_padding(scheme, in_h, sh, k_h, dh)
    eff_h, eff_w = (k_h - 1) * dh + 1, (k_w - 1) * dw + 1
    out_h = (in_h + top + bottom - eff_h) // sh + 1
    out_w = (in_w + left + right - eff_w) // sw + 1
    if (out_h <= 0 or out_w <= 0) and in_h > 0 and in_w > 0:
        call.fail(f"the {k_h}x{k_w} filter (dilation {dh}x{dw}) does not fit the padded {in_h}x{in_w} input")
    extra = 1
    if sig.extra is not None:
        extra = int_param(call, args, sig.extra, "depth multiplier" if call.type is Op.DEPTHWISE_CONV_2D else "groups", 1)
    layout = args[sig.layout] if sig.layout is not None else False
    return Geometry(
        top, bottom, left, right, sh, sw, dh, dw, max(out_h, 0), max(out_w, 0),
        bool(layout), check_activation(call, args[sig.act], sig.act), extra,
    )  # fmt: skip


def check_const_params(call: OpCall, sig: ConvSignature) -> None:
    """Validate the constant scalar parameters at preparation (the rest is checked per run)."""
    last = len(call.inputs)
    for i in range(sig.pad, last):
        v = call.const(i)
        if v is None:
            continue
        if i == sig.layout:
            continue
        if i == sig.act:
            check_activation(call, v, i)
        elif i == sig.pad and not sig.explicit:
            check_padding_scheme(call, v, i)
        else:
            minimum = 0 if sig.explicit and sig.pad <= i < sig.pad + 4 else 1
            if v < minimum:
                call.fail(f"input {i} must be >= {minimum}, got {v}")


# -- operand types --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConvTypes:
    """The operand types of a conv-like call, decided at preparation."""

    input: T
    quantized: bool
    real: type[np.floating]  # dtype the kernel computes in


def check_conv_types(call: OpCall, filter_channel_dim: int) -> ConvTypes:
    """NNAPI's type rules for input 0 (input), 1 (filter), 2 (bias) and the output.

    Float types need filter, bias and output of the input's type. Quantized inputs take a
    filter of the same type or TENSOR_QUANT8_SYMM_PER_CHANNEL (quantized along
    ``filter_channel_dim``), an int32 bias and an output of the input's type.
    """
    t = call.expect_type(0, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
    call.expect_output_type(0, t)
    quantized = t.is_quantized
    if quantized:
        ft = call.expect_type(1, t, T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
        call.expect_type(2, T.TENSOR_INT32)
        if ft is T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            cq = call.inputs[1].channel_quant
            if cq is None or cq.channel_dim != filter_channel_dim:
                call.fail(f"input 1: per-channel filter must be quantized along dimension {filter_channel_dim}")
    else:
        call.expect_type(1, t)
        call.expect_type(2, t)
    call.expect_rank(0, 4)
    call.expect_rank(1, 4)
    call.expect_rank(2, 1)
    fd, bd = call.inputs[1].dimensions, call.inputs[2].dimensions
    if fd and bd and fd[filter_channel_dim] and bd[0] and fd[filter_channel_dim] != bd[0]:
        call.fail(f"bias has {bd[0]} elements, the filter has {fd[filter_channel_dim]} output channels")
    return ConvTypes(t, quantized, np.float64 if quantized else np.float32)


def real_filter(x: np.ndarray, call: OpCall, types: ConvTypes) -> np.ndarray:
    return to_real(x, call.inputs[1], types.real)


def real_bias(b: np.ndarray, call: OpCall, types: ConvTypes) -> np.ndarray:
    """The bias in real numbers: an int32 bias has scale input_scale * filter_scale[c]."""
    if not types.quantized:
        return to_real(b, call.inputs[2], types.real)
    f = call.inputs[1]
    cq = f.channel_quant
    scales = np.asarray(cq.scales, dtype=np.float64) if f.type is T.TENSOR_QUANT8_SYMM_PER_CHANNEL and cq else f.scale
    return b.astype(np.float64) * (np.float64(call.inputs[0].scale) * scales)


def check_shape(call: OpCall, name: str, arr: np.ndarray, rank: int) -> None:
    if arr.ndim != rank:
        call.fail(f"{name} has rank {arr.ndim}; expected {rank}")


def input_nhwc(call: OpCall, x: np.ndarray, g: Geometry, types: ConvTypes) -> np.ndarray:
    """The input as real NHWC values (a view when possible)."""
    r = to_real(x, call.inputs[0], types.real)
    return from_nchw(r) if g.nchw else r


def finish_output(call: OpCall, out: np.ndarray, g: Geometry, in_layout: bool = False) -> np.ndarray:
    """Real result (owned by the kernel) -> output operand values in its layout.

    ``out`` is NHWC, or already in the operation's layout when ``in_layout`` is set.
    """
    op: Operand = call.outputs[0]
    if op.type is T.TENSOR_FLOAT32:
        res = apply_activation(out.astype(np.float32, copy=False), g.act)
    else:
        res = from_real(out, op, g.act, owned=True)
    return np.ascontiguousarray(to_nchw(res)) if g.nchw and not in_layout else res


def empty_output(call: OpCall, n: int, c: int, g: Geometry) -> np.ndarray:
    shape = (n, c, g.out_h, g.out_w) if g.nchw else (n, g.out_h, g.out_w, c)
    return np.zeros(shape, dtype=call.outputs[0].type.dtype)


# -- the compute cores ----------------------------------------------------------------------


def conv_nhwc(
    x: np.ndarray, waug: np.ndarray, k_h: int, k_w: int, g: Geometry, nchw_out: bool = False,
    bias_act: Callable[[np.ndarray, np.ndarray], None] | None = None, mm: Product | None = None,
) -> tuple[np.ndarray, bool]:
    """Convolution plus bias of real NHWC ``x`` (may be a view of NCHW data).

    ``waug`` is [k_h*k_w*Cin + 1, Cout]: the filter taps in (kh, kw, c) order, then the bias row
    (the gathered taps get a row of ones, so the matrix product adds the bias). Returns a
    fresh, writable result and whether it is NCHW: [N, Cout, out_h, out_w] when ``nchw_out``
    asks for it and the formulation gives it for free, else [N, out_h, out_w, Cout].
    ``bias_act(out, bias_row)``, for a 1x1 filter without ``nchw_out``, adds the bias to the
    [P, Cout] product in place instead (the caller's compiled pass that also applies the fused
    activation); ``mm``, with it, makes the float32 product of a 1x1 filter (``_gemm.product``).
    """
    n, h, w, c = x.shape
    oh, ow, sh, sw = g.out_h, g.out_w, g.stride_h, g.stride_w
    cout = waug.shape[1]
    p = n * oh * ow
    k = k_h * k_w * c
    if nchw_out and k_h == 1 and k_w == 1 and sh == sw == 1 and (oh, ow) == (h, w) and g.top == g.left == 0:
        # NCHW pointwise: out[n] = W^T @ x[n] as [Cin, H*W] planes, no transposes.
        res: np.ndarray = np.matmul(waug[:k].T, x.transpose(0, 3, 1, 2).reshape(n, c, h * w))
        res += waug[k][:, None]
        return res.reshape(n, cout, oh, ow), True
    if k_h == 1 and k_w == 1:
        xp = padded(x, g, 1, 1)
        src = xp[:, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw]
        if bias_act is not None and mm is not None:
            out: np.ndarray = np.empty((p, cout), dtype=np.float32)
            mm(src.reshape(p, c), waug[:k], out)
        else:
            out = np.matmul(src.reshape(p, c), waug[:k])
        if bias_act is not None:
            bias_act(out, waug[k])
        else:
            _add_row(out, waug[k])
        return out.reshape(n, oh, ow, cout), False
    if c <= _PLANES_MAX_CHANNELS and k_h * k_w <= _PLANES_MAX_TAPS:
        # Channel-major padded copy, then one [C, N, OH, OW] block per tap; BLAS multiplies
        # the [K+1, P] planes through a transposed view.
        rows_h = [slice(i * g.dil_h, i * g.dil_h + (oh - 1) * sh + 1, sh) for i in range(k_h)]
        cols_w = [slice(j * g.dil_w, j * g.dil_w + (ow - 1) * sw + 1, sw) for j in range(k_w)]
        xc = _padded_cnhw(x, g, k_h, k_w)
        planes = np.empty((k + 1, n, oh, ow), dtype=x.dtype)
        for i, rs in enumerate(rows_h):
            for j, cs in enumerate(cols_w):
                t = (i * k_w + j) * c
                planes[t : t + c] = xc[:, :, rs, cs]
        planes[k] = 1
        if nchw_out and n == 1:
            out = np.matmul(waug.T, planes.reshape(k + 1, p))
            return out.reshape(1, cout, oh, ow), True
        out = np.matmul(planes.reshape(k + 1, p).T, waug)
    else:
        # im2col in one copy from a strided window view, a column of ones for the bias row.
        out = np.matmul(im2col(padded(x, g, k_h, k_w), g, k_h, k_w, ones=True), waug)
    return out.reshape(n, oh, ow, cout), False


def _add_row(out: np.ndarray, row: np.ndarray) -> None:
    """``out += row`` for a C-contiguous [P, C] ``out``, over rows of up to 16 * C elements
    (a short broadcast row makes numpy's inner loop short: about 1.5x slower)."""
    p, c = out.shape
    r = next(r for r in (16, 8, 4, 2, 1) if p % r == 0) if out.size >= 1 << 14 else 1
    flat = out.reshape(p // r, r * c)
    flat += np.tile(row, r) if r > 1 else row


def _padded_cnhw(x: np.ndarray, g: Geometry, k_h: int, k_w: int) -> np.ndarray:
    """``x`` (NHWC) as a zero-padded channel-major [C, N, H', W'] copy covering every tap."""
    n, h, w, c = x.shape
    need_h = max((g.out_h - 1) * g.stride_h + (k_h - 1) * g.dil_h + 1, g.top + h)
    need_w = max((g.out_w - 1) * g.stride_w + (k_w - 1) * g.dil_w + 1, g.left + w)
    xc = np.zeros((c, n, need_h, need_w), dtype=x.dtype)
    xc[:, :, g.top : g.top + h, g.left : g.left + w] = x.transpose(3, 0, 1, 2)
    return xc


# -- CONV_2D --------------------------------------------------------------------------------


def conv_matrix(w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Filter [Cout, KH, KW, Cin] and bias [Cout] -> [KH*KW*Cin + 1, Cout] (bias last), contiguous,
    float32 subnormals flushed to zero (``_gemm.flush_subnormals``: BLAS is 10-20x slower on them)."""
    cout = w.shape[0]
    out = np.empty((w[0].size + 1, cout), dtype=w.dtype)
    out[:-1] = w.reshape(cout, -1).T
    out[-1] = bias
    return flush_subnormals(out)


@kernel(Op.CONV_2D)
def prepare_conv2d(call: OpCall) -> Kernel:
    sig = conv_signature(call, 3, extra=False, layout_required=False, dilation=True)
    types = check_conv_types(call, 0)
    check_const_params(call, sig)
    nchw_const = call.const(sig.layout) if sig.layout is not None else False
    fd, idims = call.inputs[1].dimensions, call.inputs[0].dimensions
    if fd and idims and nchw_const is not None:
        cin = idims[1] if nchw_const else idims[3]
        if fd[3] and cin and fd[3] != cin:
            call.fail(f"filter has {fd[3]} input channels, the input has {cin}")

    const_w, const_b = call.const(1), call.const(2)
    mat0 = None
    if const_w is not None and const_b is not None:
        mat0 = _conv_matrices(call, types, const_w, const_b, cached=True)
    zero = call.inputs[0].zero_point if types.quantized else 0
    fused = compiled(bias_act_f32, BIAS_ACT_F32) if call.outputs[0].type is T.TENSOR_FLOAT32 else None
    im2col_fn = compiled(im2col_rows_f32, IM2COL_ROWS_F32) if fused is not None and fd[1:3] != (1, 1) else None
    planes_fn = compiled(planes_rows_f32, PLANES_ROWS_F32) if im2col_fn is not None else None
    mm = product() if fused is not None else None  # MKL's or numpy's (``_gemm``), with the compiled paths
    blocked = Im2colConv(im2col_fn, fused, planes_fn, mm) if fused is not None and im2col_fn is not None else None

    def checked(args: tuple[Any, ...]) -> Geometry:
        return _checked_geometry(call, sig, args)

    shape0, g0 = static_geometry(call, checked)
    # Constant float filter and geometry: drop the filter rows and columns that only ever read
    # padding (a 3x3 filter over a one-row input is a 1x3 one), exactly; Winograd where it pays.
    live = live_taps(g0, shape0, const_w.shape) if mat0 is not None and mat0[1] is None and g0 and shape0 else None
    w_live = const_w[:, live[0] : live[1], live[2] : live[3]] if live is not None else const_w
    trimmed = None
    if live is not None and g0 is not None:
        g_live = replace(g0, top=g0.top - live[0] * g0.dil_h, left=g0.left - live[2] * g0.dil_w)
        m_live = conv_matrix(real_filter(w_live, call, types), real_bias(const_b, call, types))
        trimmed = (m_live, w_live.shape[1], w_live.shape[2], g_live)
    wino = winograd(w_live, const_b, trimmed[3] if trimmed else g0, fused) if mat0 is not None else None
    pointwise = plain_pointwise(mat0[0], const_w, g0, shape0) if fused is not None and mat0 is not None else None
    line = line_conv(const_w, const_b, g0, shape0, mm) if mat0 is not None and mat0[1] is None else None  # (_conv_line)

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, *params: Any, epilogue: Epilogue | None = None
            ) -> np.ndarray:
        if pointwise is not None and fused is not None and mm is not None and x.shape == shape0 and x.flags.c_contiguous:
            return pointwise_blocks(x, *pointwise, fused, mm, epilogue)
        if line is not None and x.shape == shape0:  # NCHW over one row: a 1-D convolution
            return line(x)
        g = g0 if x.shape == shape0 and g0 is not None else checked((x, w, b, *params))
        if x.shape[0] == 0 or g.out_h == 0 or g.out_w == 0:
            return empty_output(call, x.shape[0], w.shape[0], g)
        wmat, scales = mat0 if mat0 is not None else _conv_matrices(call, types, w, b, cached=False)
        kh, kw = w.shape[1], w.shape[2]
        if scales is None:
            xin = input_nhwc(call, x, g, types)
            if trimmed is not None and g is g0:
                wmat, kh, kw, g = trimmed
            if fused is not None and not g.nchw and kh == kw == 1:  # bias + activation in one pass
                lo, hi, then = *activation_bounds(g.act), epilogue
                return conv_nhwc(xin, wmat, 1, 1, g, bias_act=lambda o, row: fused(o, row, lo, hi) if then is None
                                 else then.with_bias(o, row, lo, hi, 0, fused), mm=mm)[0]
            if wino is not None and x.shape == shape0 and wino.takes(xin):  # Winograd F(2x2, 3x3) (_jit_conv)
                res = wino(xin, g, *activation_bounds(g.act), epilogue)
                return np.ascontiguousarray(to_nchw(res)) if g.nchw else res
            if blocked is not None and kh * kw > 1:  # compiled im2col in blocks (_jit_conv)
                res = blocked(xin, wmat, kh, kw, g, *activation_bounds(g.act), epilogue)
                return np.ascontiguousarray(to_nchw(res)) if g.nchw else res
            out, in_layout = conv_nhwc(xin, wmat, kh, kw, g, g.nchw)
            res = finish_output(call, out, g, in_layout)
            return res if epilogue is None else epilogue.after(np.ascontiguousarray(res))
        xc = (from_nchw(x) if g.nchw else x).astype(wmat.dtype)
        if zero:
            xc -= wmat.dtype.type(zero)
        sums = conv_nhwc(xc, wmat, kh, kw, g)[0]
        return finish_output(call, np.multiply(sums, scales, dtype=np.float64), g)

    kern = compiled_or(call, sig, types, False, checked, run)
    if kern is run and call.outputs[0].type is T.TENSOR_FLOAT32 and nchw_const is False:
        accept_epilogue(run)  # NHWC float32: its rows are the output pixels (``_epilogue``)
    return kern


def _checked_geometry(call: OpCall, sig: ConvSignature, args: tuple[Any, ...]) -> Geometry:
    """A CONV_2D run's geometry, its filter and bias checked against the input's channels."""
    g, cin = run_geometry(call, sig, args)
    w, b = args[1], args[2]
    if w.shape[3] != cin or b.shape != (w.shape[0],):
        call.fail(f"filter {list(w.shape)} / bias {list(b.shape)} do not match {cin} input channels")
    return g


def pointwise_parts(call: OpCall) -> tuple[np.ndarray, np.ndarray, np.float32, np.float32] | None:
    """For a float32 CONV_2D whose every run ``prepare_conv2d`` makes one product plus the bias
    pass (``plain_pointwise``: constant 1x1 filter and bias, known input shape, no stride or
    padding, NHWC): its weights [Cin, Cout], bias and activation bounds; else None. For a plan
    fusion that takes the product over itself (``execution._fuse_pool``)."""
    if call.type is not Op.CONV_2D or call.outputs[0].type is not T.TENSOR_FLOAT32:
        return None
    if call.inputs[0].type is not T.TENSOR_FLOAT32:
        return None
    try:
        sig = conv_signature(call, 3, extra=False, layout_required=False, dilation=True)
        types = check_conv_types(call, 0)
    except NnrtError:
        return None
    w, b = call.const(1), call.const(2)
    if w is None or b is None or w.ndim != 4:
        return None
    shape, g = static_geometry(call, lambda args: _checked_geometry(call, sig, args))
    wmat = conv_matrix(real_filter(w, call, types), real_bias(b, call, types))
    return plain_pointwise(wmat, w, g, shape)


def plain_pointwise(wmat: np.ndarray, w: np.ndarray, g: Geometry | None, shape: tuple[int, ...] | None
                    ) -> tuple[np.ndarray, np.ndarray, np.float32, np.float32] | None:
    """For a constant 1x1 float32 CONV_2D over NHWC without stride or padding: its weights,
    bias and activation bounds, so that a run is one product and the compiled bias pass, with
    no geometry or layout work (a squeeze-excitation 1x1 on one pixel: 5.0 -> 2.4 us)."""
    if g is None or shape is None or w.shape[1:3] != (1, 1) or g.nchw:
        return None
    if (g.stride_h, g.stride_w, g.top, g.left, g.out_h, g.out_w) != (1, 1, 0, 0, shape[1], shape[2]):
        return None
    k = w.shape[3]
    return wmat[:k], wmat[k], *activation_bounds(g.act)


def static_geometry(call: OpCall, checked: Callable[[tuple[Any, ...]], Geometry]
                    ) -> tuple[tuple[int, ...] | None, Geometry | None]:
    """The input shape and geometry of every run, decided at preparation when the input's shape
    and every other input (filter, bias, scalar parameters) are known; else (None, None), as
    when they do not fit (the run reports it). A run whose input has that shape skips decoding
    and validating its parameters again: 5-6 us of a 9 us pointwise CONV_2D on a 1x1 input."""
    dims = call.inputs[0].dimensions
    consts = [call.const(i) for i in range(1, len(call.inputs))]
    if not dims or 0 in dims or any(v is None for v in consts):
        return None, None
    try:
        return tuple(dims), checked((np.broadcast_to(np.float32(0), dims), *consts))
    except NnrtError:
        return None, None


def compiled_or(call: OpCall, sig: ConvSignature, types: ConvTypes, depthwise: bool,
                 checked: Any, run: Kernel) -> Kernel:
    """The compiled twin of a quantized conv's ``run`` (``_jit_quant``) when filter, bias and
    every scalar parameter are constants; else ``run``."""
    w, b = call.const(1), call.const(2)
    if not types.quantized or w is None or b is None or w.size == 0:
        return run
    if any(call.const(i) is None for i in range(sig.pad, len(call.inputs))):
        return run
    centred, scales = centred_filter(call, w, 3 if depthwise else 0)
    out = call.outputs[0]
    qrange = quant_range(call.const(sig.act), out.scale, out.zero_point, out.type)
    fast = conv_runner(call, depthwise, centred, b, scales, qrange, checked, run)
    return run if fast is None else fast


def _conv_matrices(
    call: OpCall, types: ConvTypes, w: np.ndarray, b: np.ndarray, cached: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """The GEMM matrix of a CONV_2D filter and bias (``conv_matrix``) and, for quantized
    filters, the real scale of each output channel (else None).

    A quantized filter keeps its zero-point-centred integers and the bias its int32 values,
    so the product of centred integer inputs sums exactly (float32 when every sum stays below
    2**24, else float64); one multiplication by the scales gives real values."""
    scales = None
    if not types.quantized:

        def make() -> np.ndarray:
            return conv_matrix(real_filter(w, call, types), real_bias(b, call, types))

    else:
        centred, scales = centred_filter(call, w, 0)
        bound = w[0].size * 255 * 255 + int(np.abs(b.astype(np.int64)).max(initial=0))
        dtype = np.float32 if bound < 1 << 24 else np.float64

        def make() -> np.ndarray:
            return conv_matrix(centred.astype(dtype), b.astype(dtype))

    key = "wmat_int" if types.quantized else "wmat"
    return (relaid(call, key, make) if cached else make()), scales


def run_geometry(call: OpCall, sig: ConvSignature, args: tuple[Any, ...]) -> tuple[Geometry, int]:
    """One run's geometry and input channel count, from the kernel's arguments (input, filter, bias, ...)."""
    x, w = args[0], args[1]
    check_shape(call, "input", x, 4)
    check_shape(call, "filter", w, 4)
    nchw = sig.layout is not None and bool(args[sig.layout])
    in_h, in_w = (x.shape[2], x.shape[3]) if nchw else (x.shape[1], x.shape[2])
    g = geometry(call, sig, args, in_h, in_w, w.shape[1], w.shape[2])
    cout = w.shape[3] if call.type is Op.DEPTHWISE_CONV_2D else w.shape[0]
    check_result_size(call, (x.shape[0], g.out_h, g.out_w, cout), call.outputs[0].type.dtype)  # padding: any size
    return g, x.shape[1] if g.nchw else x.shape[3]


# -- the other convolutions register their kernels ------------------------------------------------


from nnrt.ops import conv_grouped as _conv_grouped  # noqa: E402, F401
from nnrt.ops import conv_transpose as _conv_transpose  # noqa: E402, F401
from nnrt.ops import depthwise as _depthwise  # noqa: E402, F401
