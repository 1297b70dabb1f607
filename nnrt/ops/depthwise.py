"""DEPTHWISE_CONV_2D: its kernel, filter and bias re-laying (split from ``conv``, which holds
the signature, type and geometry helpers the 2-D convolutions share and imports this module at
its bottom so the kernel registers with the family).

Float32 runs the compiled loop ``compiled_depthwise`` picks once at preparation when numba is
available (``nnrt.ops._jit``), else one padded, phase-split copy and one einsum per phase
(``_conv_core.depthwise_sums``), or one contraction for a handful of outputs
(``depthwise_direct``). Quantized filters with constant parameters run the compiled 8-bit core
(``_jit_quant``) through ``conv.compiled_or``; otherwise the real-number path requantizes.

A float32 NHWC layer takes a HARD_SWISH epilogue (``nnrt.ops._epilogue``, folded by
``nnrt.execution._fuse_epilogue``): the compiled loops apply a plain one to each finished output
row while it is in cache; affines around it, and the numpy paths, run the successor's own kernel
on the result (``Epilogue.after``). Bit for bit the two steps either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.ops._common import apply_activation, centred_filter, from_nchw, to_nchw
from nnrt.ops._conv_core import Geometry, TiledTaps, compiled_depthwise, depthwise_direct, depthwise_sums, exact_in_float32
from nnrt.ops._epilogue import HARD_SWISH, Epilogue, accept_epilogue
from nnrt.ops._gemm import flush_subnormals
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.conv import (
    ConvTypes,
    check_const_params,
    check_conv_types,
    compiled_or,
    conv_signature,
    empty_output,
    finish_output,
    real_bias,
    real_filter,
    run_geometry,
)
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []


# -- DEPTHWISE_CONV_2D ----------------------------------------------------------------------


@kernel(Op.DEPTHWISE_CONV_2D)
def prepare_depthwise_conv2d(call: OpCall) -> Kernel:
    sig = conv_signature(call, 3, extra=True, layout_required=False, dilation=True)
    types = check_conv_types(call, 3)
    check_const_params(call, sig)
    fd = call.inputs[1].dimensions
    if fd and fd[0] != 1:
        call.fail(f"filter dimension 0 must be 1, got {fd[0]} (filter dimensions {list(fd)})")
    nchw_const = call.const(sig.layout) if sig.layout is not None else False
    mult_const = call.const(sig.extra) if sig.extra is not None else None
    idims = call.inputs[0].dimensions
    if fd and idims and nchw_const is not None and mult_const is not None:
        cin = idims[1] if nchw_const else idims[3]
        if fd[3] and cin and fd[3] != cin * mult_const:
            call.fail(f"filter has {fd[3]} channels; input channels {cin} x depth multiplier {mult_const} expected")

    in_op = call.inputs[0]
    zero = float(in_op.zero_point) if types.quantized else 0.0
    const_w, const_b = call.const(1), call.const(2)
    filt0 = _depthwise_filter(call, types, const_w) if const_w is not None else None
    bias0 = _depthwise_bias(call, types, const_b) if const_b is not None else None
    stride_w = call.const(sig.stride)
    jit = compiled_depthwise(stride_w, fd[3] if fd else None, fd[2] if fd else None) if types.input is T.TENSOR_FLOAT32 else None

    seen: dict[tuple[Any, ...], Geometry] = {}

    def checked(args: tuple[Any, ...]) -> Geometry:
        """The run's geometry, validated; remembered per shapes and parameters (a few kinds per
        layer), as decoding it costs about as much as a small layer's loop."""
        try:
            key = (args[0].shape, args[1].shape, args[2].shape, *args[3:])
            hit = seen.get(key)
        except (AttributeError, TypeError):  # not arrays, or an unhashable parameter: decode it
            key, hit = None, None
        if hit is not None:
            return hit
        g, cin = run_geometry(call, sig, args)
        w, b = args[1], args[2]
        if w.shape[0] != 1 or w.shape[3] != cin * g.extra or b.shape != (w.shape[3],):
            call.fail(
                f"filter {list(w.shape)} / bias {list(b.shape)} do not match {cin} input channels "
                f"x depth multiplier {g.extra}"
            )
        if key is not None and len(seen) < 8:
            seen[key] = g
        return g

    #: With constant filter and bias: per input shape, parameters and epilogue, the compiled
    #: loop's run on an NHWC input of depth multiplier 1 (a few per layer).
    runs: dict[tuple[Any, ...], Callable[[np.ndarray], np.ndarray]] = {}

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, *params: Any, epilogue: Epilogue | None = None
            ) -> np.ndarray:
        in_loop = epilogue is not None and jit is not None and epilogue.plain_hard_swish
        try:
            fast = runs.get((x.shape, w.shape, b.shape, *params, in_loop)) if runs else None
        except (AttributeError, TypeError):  # not arrays, or an unhashable parameter
            fast = None
        res = fast(x) if fast is not None else _run(x, w, b, params, in_loop)
        return res if epilogue is None or in_loop else epilogue.after(np.ascontiguousarray(res))

    def _run(x: np.ndarray, w: np.ndarray, b: np.ndarray, params: tuple[Any, ...], hswish: bool) -> np.ndarray:
        g = checked((x, w, b, *params))
        cout = w.shape[3]
        n, kh, kw = x.shape[0], w.shape[1], w.shape[2]
        if n == 0 or g.out_h == 0 or g.out_w == 0:
            return empty_output(call, n, cout, g)
        taps, dtype, scales = filt0 if filt0 is not None else _depthwise_filter(call, types, w)
        bias = bias0 if bias0 is not None else _depthwise_bias(call, types, b)
        xin = from_nchw(x) if g.nchw else x
        if g.extra > 1:
            xin = np.repeat(xin, g.extra, axis=3)
        oh, ow = g.out_h, g.out_w
        if jit is not None:
            made = jit(xin.shape, taps, bias, kw, g, hswish)
            if filt0 is not None and bias0 is not None and not g.nchw and g.extra == 1 and len(runs) < 8:
                runs[(x.shape, w.shape, b.shape, *params, hswish)] = made
            res = made(xin)
            return np.ascontiguousarray(to_nchw(res)) if g.nchw else res
        if n * oh * ow <= _DIRECT_MAX_OUTPUTS:
            xc = xin.astype(dtype)
            if zero:
                xc -= dtype(zero)
            sums = depthwise_direct(xc, taps.taps.reshape(kh, kw, cout), g).reshape(n, oh, ow * cout)
        else:
            sums = depthwise_sums(xin, taps, kh, kw, g, dtype, zero)
        if types.input is T.TENSOR_FLOAT32:
            out = np.add(sums, bias.tiled(ow)[0], out=sums)
            res = apply_activation(out, g.act).reshape(n, oh, ow, cout)
            return np.ascontiguousarray(to_nchw(res)) if g.nchw else res
        real = np.add(sums, bias.tiled(ow)[0], dtype=np.float64 if types.quantized else np.float32)
        if scales is not None:
            real *= scales.tiled(ow)[0]
        return finish_output(call, real.reshape(n, oh, ow, cout), g)

    kern = compiled_or(call, sig, types, True, checked, run)
    if kern is run and types.input is T.TENSOR_FLOAT32 and nchw_const is False:
        accept_epilogue(run, frozenset({HARD_SWISH}))  # in the compiled loop: ``_jit_float``
    return kern


#: Depthwise outputs (batch x rows x columns) up to which one contraction beats the tap loop.
_DIRECT_MAX_OUTPUTS = 32


def _depthwise_filter(
    call: OpCall, types: ConvTypes, w: np.ndarray
) -> tuple[TiledTaps, type[np.floating], TiledTaps | None]:
    """A depthwise filter [1, KH, KW, C] as tiled taps, the dtype the taps are summed in and,
    for quantized filters, the real scale of each channel's integer sums (else None)."""
    if not types.quantized:  # (subnormal taps flushed: every product with one takes a microcode assist)
        return TiledTaps(flush_subnormals(real_filter(w, call, types)[0])), np.float32, None
    centred, scales = centred_filter(call, w, 3)
    dtype: type[np.floating] = np.float32 if exact_in_float32(w.shape[1] * w.shape[2]) else np.float64
    return TiledTaps(centred[0].astype(dtype)), dtype, TiledTaps(scales[None, :])


def _depthwise_bias(call: OpCall, types: ConvTypes, b: np.ndarray) -> TiledTaps:
    """The bias as a tiled row: real values (float), or the int32 values themselves (quantized:
    they share the integer sums' scale)."""
    if types.quantized:
        return TiledTaps(b.astype(np.float64)[None, :])
    return TiledTaps(flush_subnormals(real_bias(b, call, types))[None, :])
