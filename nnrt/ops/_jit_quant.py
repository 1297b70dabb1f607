"""Compiled 8-bit kernels (numba, through ``nnrt.ops._jit``) for the quantized CONV_2D,
DEPTHWISE_CONV_2D and FULLY_CONNECTED with constant filters: one core (``_conv_q_into``; a fully
connected layer is a 1x1 convolution of its rows), one pass, no temporaries.

Why: a small int8 streaming model (a keyword spotter of ~50 ops on [1, K, 1, 64] tensors)
spends 10-30 us per quantized op in numpy calls (cast, centre, pad, product, scale, round,
clip, cast) whatever the op's size; one compiled loop does the same arithmetic in 1-2 us, of
which ~0.6 us is numba's call (so the core takes four arguments).

Exactness: the numpy kernels (``conv``, ``dense``) stay the reference, and these cores are bit
for bit theirs: the products of zero-point-centred integers are summed exactly (int64 here,
exact float32/float64 there), the int32 bias added, the sum turned into float64 and multiplied
by the same float64 scale, then requantized with the same float64 operations as
``_common.from_real`` (divide by the output scale, add copysign(0.5), truncate, add the zero
point, clip to the fused activation's range). Padding reads the input's zero point (a real 0),
so padded taps are skipped.

The choice is made once at preparation (``conv_runner`` / ``fc_runner``): quantized 8-bit
types, constant filter and bias, constant scalar parameters and NHWC layout; anything else (or
``compiled()`` returning None: numba absent or ``NNRT_JIT=0``) keeps the numpy kernel, which is
also what runs for a shape the compiled path does not take (an empty batch, NCHW). The run's
geometry is worked out (and validated) by the numpy kernel's own code once per input shape.
Inputs reach the cores as C-contiguous writeable uint8 bytes (copied if not), each core has one
compiled variant shared by the step kernels and the program runner, and preparation calls each
core once on a few zero bytes (``_warm_bytes``), so numba compiles (or loads its cache) at
preparation, even with calibration off, and never in the middle of a stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.model import Operand
from nnrt.ops import _common
from nnrt.ops._jit import Arg, CoreCall, compiled, set_core_call
from nnrt.ops._registry import Kernel, KernelResult, OpCall

__all__ = [
    "OP_CONV", "OP_COPY", "OP_COPY_CONST", "OP_DEQUANTIZE", "OP_GATHER", "OP_LOOKUP", "OP_QUANTIZE", "PROGRAM_WIDTH",
    "conv_runner", "dequantize_runner", "fc_runner", "program_runner", "quantize_runner", "set_lookup_call",
    "table_lookups",
]

#: CONV_2D runs (and FULLY_CONNECTED) of up to this many multiply-adds take the compiled core;
#: larger ones the numpy kernel, whose float GEMM (BLAS) outruns the core's loops: int8 3x3
#: 16->16 on [1,40,40,16] (3.7 M) 860 us compiled against 290 us, 1x1 64->64 on [1,1,8,64]
#: (33 k) 4 us against 30 us. Depthwise runs always take the core (99 against 294 us on
#: [1,40,40,32] 3x3, where numpy has no GEMM to use).
CONV_MAX_MACS = 1 << 17

_UNPLANNED = object()

#: The core's int64 parameter vector: the run's integers (geometry, quantization, the input's
#: and the filter's dimensions), then the int32 bias of each output channel (one array: a numba
#: call pays ~0.1-0.2 us per argument).
_G_SH, _G_SW, _G_DH, _G_DW, _G_TOP, _G_LEFT, _G_OH, _G_OW, _G_ZIN, _G_ZOUT, _G_QMIN, _G_QMAX, _G_DEPTHWISE = range(13)
_G_SIGNED, _G_N, _G_H, _G_W, _G_CIN, _G_KH, _G_KW, _G_COUT, _G_KPAD = range(13, 22)
_G_BIAS = 22
#: A convolution's filter rows (KH x KW x Cin) and each pixel's centred window are padded with
#: zeros to a multiple of this: the dot products then have no scalar remainder loop (LLVM
#: vectorizes by 8 int32 lanes x 4), which on 30-60 channels took as long as the vector part.
_K_BLOCK = 32

# One compiled variant per core (cold start, issue 14): every core takes and writes 8-bit data as
# C-contiguous uint8 views (an int8 value is its byte; a ``signed`` flag says how to read it) and
# writes a given output, so the step kernels and the program runner call the same machine code.
# Compiling a second variant (int8 and uint8, an N-d and a 1-D array, a core that allocates and
# one that writes) cost 0.2-1 s of CPU each on a cold numba cache.


def _conv_q_into(x: Any, w: Any, geo: Any, scales: Any, out: Any) -> None:
    """CONV_2D of NHWC 8-bit ``x`` (uint8 bytes; int8 values when ``geo[_G_SIGNED]``) with the
    centred int16 filter ``w`` [Cout, KH x KW x Cin padded to ``_K_BLOCK``]; when ``geo[_G_DEPTHWISE]``, DEPTHWISE_CONV_2D
    with ``w`` [KH, KW, Cout] (Cout = Cin x multiplier). ``scales`` holds each output channel's
    real scale, then the output's scale. Writes the bytes ``out`` [N, OH, OW, Cout] (of the
    output's type). Every array is flat and read from its start, the dimensions are in ``geo``:
    a program passes views of its arena and constants, no reshape (a reshaped view cost
    0.13 us per call, more than a small convolution's arithmetic). Sums are int32 (the caller
    checks they fit). A convolution gathers each output pixel's window, centred, in the filter's
    order (0 outside the input and in the padding), then takes one dot product per output
    channel (contiguous: it vectorizes; one loop per output channel, not one per tap and input
    channel); a depthwise one runs along the channels, tap by tap. An int8 byte ``b`` is the
    value ``(b ^ 0x80) - 128``."""
    n, h, wd, cin = geo[_G_N], geo[_G_H], geo[_G_W], geo[_G_CIN]
    kh, kw, cout, kpad = geo[_G_KH], geo[_G_KW], geo[_G_COUT], geo[_G_KPAD]
    depthwise = geo[_G_DEPTHWISE] != 0
    mult = cout // cin
    sh, sw, dh, dw, top, left = geo[_G_SH], geo[_G_SW], geo[_G_DH], geo[_G_DW], geo[_G_TOP], geo[_G_LEFT]
    oh, ow, zin, zout, qmin, qmax = geo[_G_OH], geo[_G_OW], geo[_G_ZIN], geo[_G_ZOUT], geo[_G_QMIN], geo[_G_QMAX]
    flip = np.uint8(0x80 if geo[_G_SIGNED] else 0)
    if geo[_G_SIGNED]:
        zin += 128
    out_scale = scales[cout]
    # from_real's clip to [qmin, qmax] after adding the zero point, as bounds before truncating
    # (integer bounds: truncating then clipping is clipping then truncating)
    lo, hi = float(qmin - zout), float(qmax - zout)
    acc = np.empty(cout, np.int32)
    xc = np.zeros(cout if depthwise else kpad, np.int16)
    # Offsets and inner loop counters unsigned: a signed index may be negative for numba, whose
    # wraparound check on each element stops LLVM from vectorizing (``_jit_float``).
    u = np.uint64
    ucin, ucout, ukpad = u(cin), u(cout), u(kpad)
    at = u(0)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                if not depthwise:
                    for ky in range(kh):
                        iy = oy * sh - top + ky * dh
                        for kx in range(kw):
                            ix = ox * sw - left + kx * dw
                            at_k = u((ky * kw + kx) * cin)
                            if iy < 0 or iy >= h or ix < 0 or ix >= wd:
                                for ci in range(ucin):
                                    xc[at_k + ci] = 0
                                continue
                            src = u(((b * h + iy) * wd + ix) * cin)
                            for ci in range(ucin):
                                xc[at_k + ci] = np.int32(x[src + ci] ^ flip) - zin
                    for co in range(ucout):
                        row = co * ukpad
                        s = np.int32(0)
                        for k in range(ukpad):
                            s = np.int32(s + np.int32(xc[k]) * np.int32(w[row + k]))
                        acc[co] = s
                else:
                    acc[:] = 0
                    for ky in range(kh):
                        iy = oy * sh - top + ky * dh
                        if iy < 0 or iy >= h:
                            continue
                        for kx in range(kw):
                            ix = ox * sw - left + kx * dw
                            if ix < 0 or ix >= wd:
                                continue
                            src = u(((b * h + iy) * wd + ix) * cin)
                            tap = u((ky * kw + kx) * cout)
                            if mult == 1:
                                for c in range(ucout):
                                    acc[c] += np.int32(np.int32(x[src + c] ^ flip) - zin) * np.int32(w[tap + c])
                                continue
                            for c in range(cout):
                                xc[c] = np.int32(x[src + u(c // mult)] ^ flip) - zin
                            for c in range(ucout):
                                acc[c] += np.int32(xc[c]) * np.int32(w[tap + c])
                # from_real: real value, divided by the output scale, rounded half away from zero
                for c in range(ucout):
                    q = float(acc[c] + geo[u(_G_BIAS) + c]) * scales[c] / out_scale
                    q = q + 0.5 if q >= 0.0 else q - 0.5
                    out[at + c] = (int(min(max(q, lo), hi)) + zout) & 0xFF
                at += ucout


def _bytes(x: np.ndarray) -> np.ndarray:
    """The bytes of an 8-bit array as the cores take them: flat, C-contiguous uint8 (a view when
    ``x`` is C-contiguous and writeable; a copy else: a read-only view would be another variant)."""
    if not (x.flags.c_contiguous and x.flags.writeable):
        x = np.array(x, order="C")
    return x.reshape(-1).view(np.uint8)


def _warm_bytes(n: int = 1) -> np.ndarray:
    """``n`` zero bytes: preparation calls each core once on them, so numba compiles (or loads
    from its cache) there, never during an execution."""
    return np.zeros(n, np.uint8)


def _quantize_q(src: Any, scale: Any, params: Any, dst: Any) -> None:
    """QUANTIZE of float32 ``src`` (flat) with the float32 ``scale`` into the bytes ``dst`` (flat);
    ``params`` = zero point, saturation range, and what numpy's cast makes of NaN. As
    ``from_real(to_real(x))``: float32 division, round half away, zero point, clip."""
    zp, lo, hi, nan = params[0], params[1], params[2], params[3]
    for i in range(src.size):
        q = src[i] / scale
        if q != q:
            dst[i] = nan & 0xFF
            continue
        q = min(max(q + math.copysign(0.5, q), -1e9), 1e9)  # float32 and float64 sums truncate alike below 2**22
        dst[i] = min(max(math.trunc(q) + zp, lo), hi) & 0xFF


def _dequantize_q(src: Any, signed: Any, zero: Any, scale: Any, dst: Any) -> None:
    """DEQUANTIZE of the 8-bit bytes ``src`` (int8 values when ``signed``) into float32 ``dst``
    (both flat): ``(float32(x) - zero) * scale`` in float32."""
    flip = np.uint8(0x80 if signed else 0)
    shift = np.float32(128.0 if signed else 0.0)
    for i in range(src.size):
        dst[i] = (np.float32(src[i] ^ flip) - shift - zero) * scale


def _lookup_q(table: Any, a: Any, b: Any, pairs: Any, dst: Any) -> None:
    """``table`` (bytes) at the bytes ``a`` (or, with ``pairs``, at ``a``'s byte x 256 + ``b``'s)
    into the bytes ``dst``, all flat: ``_common.lookup_unary`` / ``lookup_binary``."""
    if pairs:
        for i in range(a.size):
            dst[i] = table[(np.int64(a[i]) << 8) | np.int64(b[i])]
    else:
        for i in range(a.size):
            dst[i] = table[a[i]]


def table_lookups(src: Operand, dst: Operand) -> tuple[Callable[[np.ndarray, np.ndarray], np.ndarray],
                                                   Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]]:
    """The 8-bit table lookups (``_common.quant8_table``) a quantized elementwise kernel with
    input ``src`` and output ``dst`` runs: compiled ones (one pass, no index temporaries) when
    compiled kernels are in use, else ``_common.lookup_unary`` and ``lookup_binary`` (numpy),
    which also take the operands the compiled pass does not (broadcast or strided ones)."""
    unary, binary = _common.lookup_unary, _common.lookup_binary
    core = compiled(_lookup_q)
    if core is None:
        return unary, binary
    if src.type.dtype not in (np.int8, np.uint8) or dst.type.dtype not in (np.int8, np.uint8):
        return unary, binary
    x = _warm_bytes()
    core(_warm_bytes(1 << 16), x, x, True, x)

    def lookup_unary(table: np.ndarray, x: np.ndarray) -> np.ndarray:
        if not x.flags.c_contiguous:
            return unary(table, x)
        out = np.empty(x.shape, table.dtype)
        src = _bytes(x)
        core(_bytes(table), src, src, False, out.reshape(-1).view(np.uint8))
        return out

    def lookup_binary(table: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.shape != b.shape or not (a.flags.c_contiguous and b.flags.c_contiguous):
            return binary(table, a, b)
        out = np.empty(a.shape, table.dtype)
        core(_bytes(table), _bytes(a), _bytes(b), True, out.reshape(-1).view(np.uint8))
        return out

    return lookup_unary, lookup_binary


def set_lookup_call(kernel: Kernel, table: np.ndarray, binary: bool = False) -> None:
    """Declare (``set_core_call``) that ``kernel`` returns ``table`` at its input's bytes (or, with
    ``binary``, at its two same-shaped inputs' byte pairs), as ``table_lookups``' compiled pass does."""
    core = compiled(_lookup_q)
    if core is None:
        return

    def planner(args: tuple[Any, ...]) -> CoreCall | None:
        a, b = args[0], args[1] if binary else args[0]
        if a.shape != b.shape:
            return None
        return CoreCall(core, (table, Arg(0, a.shape), Arg(1 if binary else 0, b.shape), binary))

    set_core_call(kernel, planner)


def quantize_runner(call: OpCall, qrange: tuple[int, int]) -> Kernel | None:
    """The compiled QUANTIZE of a float32 input to an 8-bit type, or None (numpy kernel)."""
    core = compiled(_quantize_q)
    out = call.outputs[0]
    if core is None or call.inputs[0].type.dtype != np.float32 or out.type.dtype not in (np.int8, np.uint8):
        return None
    with np.errstate(invalid="ignore"):
        nan = int(np.array([np.nan], np.float32).astype(out.type.dtype)[0])
    scale, dtype = np.float32(out.scale), out.type.dtype
    params = np.array([out.zero_point, *qrange, nan], np.int64)
    core(np.zeros(1, np.float32), scale, params, _warm_bytes())

    def run(x: np.ndarray) -> np.ndarray:
        result = np.empty(x.shape, dtype)
        core(np.ascontiguousarray(x).reshape(-1), scale, params, result.reshape(-1).view(np.uint8))
        return result

    set_core_call(run, lambda args: CoreCall(core, (Arg(0, args[0].shape), scale, params)))
    return run


def dequantize_runner(call: OpCall) -> Kernel | None:
    """The compiled DEQUANTIZE of a per-tensor 8-bit input to float32, or None (numpy kernel)."""
    core = compiled(_dequantize_q)
    src = call.inputs[0]
    if core is None or call.outputs[0].type.dtype != np.float32 or src.type.dtype not in (np.int8, np.uint8) \
            or src.channel_quant is not None:
        return None
    zero, scale, signed = np.float32(src.zero_point), np.float32(src.scale), src.type.dtype == np.int8
    core(_warm_bytes(), signed, zero, scale, np.zeros(1, np.float32))

    def run(x: np.ndarray) -> np.ndarray:
        result = np.empty(x.shape, np.float32)
        core(_bytes(x), signed, zero, scale, result.reshape(-1))
        return result

    set_core_call(run, lambda args: CoreCall(core, (Arg(0, args[0].shape), signed, zero, scale)))
    return run


class _Prepared:
    """One operation's compiled run: the core and its constants (centred filter [KH, KW, Cout,
    Cin] or, depthwise, [KH, KW, Cout]; bias, output quantization and the filter's dimensions in
    the parameter vector; scales) besides the input and the geometry."""

    __slots__ = ("core", "depthwise", "macs", "params", "scales", "w")

    def __init__(self, core: Callable[..., None], call: OpCall, w: np.ndarray, bias: np.ndarray,
                 scales: np.ndarray, qrange: tuple[int, int], depthwise: bool, kernel: tuple[int, int]) -> None:
        self.core = core
        self.w = np.ascontiguousarray(w, dtype=np.int16).reshape(-1)  # (the core's arrays are flat)
        self.depthwise = depthwise
        #: Multiply-adds per output pixel (``_prepared`` leaves the padding out).
        self.macs = self.w.size
        out = call.outputs[0]
        kh, kw, cout = (w.shape[0], w.shape[1], w.shape[2]) if depthwise else (*kernel, w.shape[0])
        per_channel = np.broadcast_to(np.asarray(scales, np.float64), bias.shape)
        self.scales = np.concatenate([per_channel, [float(out.scale)]])
        self.params = np.concatenate([
            [1, 1, 1, 1, 0, 0, 1, 1, call.inputs[0].zero_point, out.zero_point, *qrange, depthwise,
             call.inputs[0].type.dtype == np.int8, 1, 1, 1, 1, kh, kw, cout, 0 if depthwise else w.shape[1]],
            bias.astype(np.int64),
        ]).astype(np.int64)

    def geo(self, sh: int, sw: int, dh: int, dw: int, top: int, left: int, oh: int, ow: int,
            shape: tuple[int, ...]) -> np.ndarray:
        """The parameter vector of a run with this geometry on an input of ``shape`` [N, H, W, Cin]."""
        geo = self.params.copy()
        geo[: _G_OW + 1] = (sh, sw, dh, dw, top, left, oh, ow)
        geo[_G_N:_G_CIN + 1] = shape
        return geo


def _core() -> Callable[..., None] | None:
    """The compiled ``_conv_q_into``, or None when compiled kernels are not in use."""
    return compiled(_conv_q_into)


def _conv_q(core: Callable[..., None], x: np.ndarray, w: np.ndarray, geo: np.ndarray, scales: np.ndarray,
            shape: tuple[int, ...]) -> np.ndarray:
    """The compiled ``_conv_q_into`` of ``x`` into a fresh array of ``shape`` (its [N, OH, OW, Cout]
    elements) and ``x``'s dtype."""
    out = np.empty(shape, x.dtype)
    core(_bytes(x), w, geo, scales, out.reshape(-1).view(np.uint8))
    return out


def _prepared(call: OpCall, w: np.ndarray, bias: np.ndarray, scales: np.ndarray | float, qrange: tuple[int, int],
              depthwise: bool) -> _Prepared | None:
    """The core and its constants (the filter re-laid for it), or None: compiled kernels not in
    use, or sums that int32 would not hold exactly (taps x input channels above 33025). The
    filter is int16 (centred 8-bit values fit), and so is the centred input in the cores: half
    the bytes of int32 and multiply-adds of int16 pairs, 20-25% less time on 30-60 channels."""
    core = _core()
    if core is None or w.shape[1] * w.shape[2] * (1 if depthwise else w.shape[3]) * 255 * 255 >= 1 << 31:
        return None
    if w.size and (w.min() < -(1 << 15) or w.max() >= 1 << 15):  # (8-bit values minus a zero point always fit)
        return None
    # [KH, KW, Cout] (from depthwise's [1, KH, KW, Cout]) or [Cout, KH x KW x Cin + padding]
    if depthwise:
        relaid, cin, cout = w[0], w.shape[3], w.shape[3]
    else:
        k = w[0].size
        relaid, cin, cout = np.pad(w.reshape(w.shape[0], k), ((0, 0), (0, -k % _K_BLOCK))), w.shape[3], w.shape[0]
    prep = _Prepared(core, call, relaid, bias, np.asarray(scales, np.float64), qrange, depthwise, (w.shape[1], w.shape[2]))
    prep.macs = w.size
    core(_warm_bytes(cin), prep.w, prep.geo(1, 1, 1, 1, 0, 0, 1, 1, (1, 1, 1, cin)), prep.scales, _warm_bytes(cout))
    return prep


def conv_runner(call: OpCall, depthwise: bool, w: np.ndarray, bias: np.ndarray, scales: np.ndarray,
                qrange: tuple[int, int], geometry: Callable[[tuple[Any, ...]], Any], fallback: Kernel) -> Kernel | None:
    """The compiled run of a quantized CONV_2D / DEPTHWISE_CONV_2D whose filter, bias and scalar
    parameters are constants, or None (numpy kernel) when compiled kernels are not in use.

    ``w`` is the zero-point-centred filter ([Cout, KH, KW, Cin], or [1, KH, KW, Cout] for depthwise),
    ``scales`` each output channel's real scale (input scale x filter scale), ``qrange`` the output's
    saturation range with the fused activation. ``geometry(args)`` is the numpy kernel's own
    decoding and validation of one run (a ``Geometry``, raising INVALID_ARGUMENT for a bad run):
    it runs once per input shape. NCHW runs and empty outputs go to ``fallback``.
    """
    prep = _prepared(call, w, bias, scales, qrange, depthwise)
    if prep is None:
        return None
    memo: dict[tuple[int, ...], Any] = {}

    def plan(args: tuple[Any, ...]) -> tuple[np.ndarray, tuple[int, ...]] | None:
        """The run's parameter vector and output shape, or None (the numpy kernel)."""
        x = args[0]
        g = geometry(args)
        hit = None
        macs = x.shape[0] * g.out_h * g.out_w * prep.macs
        if not g.nchw and x.shape[0] and g.out_h and g.out_w and (depthwise or macs <= CONV_MAX_MACS):
            geo = prep.geo(g.stride_h, g.stride_w, g.dil_h, g.dil_w, g.top, g.left, g.out_h, g.out_w, x.shape)
            hit = geo, (x.shape[0], g.out_h, g.out_w, int(geo[_G_COUT]))
        if len(memo) < 16:
            memo[x.shape] = hit
        return hit

    core, wc, scales_ = prep.core, prep.w, prep.scales

    def run(x: np.ndarray, *rest: Any) -> KernelResult:
        hit = memo.get(x.shape, _UNPLANNED)
        if hit is _UNPLANNED:
            hit = plan((x, *rest))
        if hit is None:
            return fallback(x, *rest)
        return _conv_q(core, x, wc, hit[0], scales_, hit[1])

    def core_call(args: tuple[Any, ...]) -> CoreCall | None:
        hit = plan(args)
        return None if hit is None else CoreCall(core, (Arg(0, args[0].shape), wc, hit[0], scales_))

    set_core_call(run, core_call)
    return run


def fc_runner(call: OpCall, w: np.ndarray, bias: np.ndarray, scale: float, qrange: tuple[int, int],
              check: Callable[[np.ndarray, np.ndarray, np.ndarray], int], fallback: Kernel) -> Kernel | None:
    """The compiled run of a quantized FULLY_CONNECTED with constant weights, bias and activation
    (the run's ``act`` argument is that constant), or None (numpy kernel) when compiled kernels
    are not in use: a 1x1 convolution of the input rows [B, 1, 1, K].

    ``w`` is the centred weights [units, K], ``scale`` the real scale of the integer sums,
    ``check(x, w, b)`` the numpy kernel's validation of one run, returning K (run once per
    input shape). Runs above ``CONV_MAX_MACS`` go to ``fallback``.
    """
    units, k = w.shape
    prep = _prepared(call, w.reshape(units, 1, 1, k), bias, scale, qrange, False)
    if prep is None:
        return None
    runs: dict[tuple[int, ...], tuple[int, int, np.ndarray]] = {}  # input shape -> rows, K, parameter vector
    core, wc, scales_, macs = prep.core, prep.w, prep.scales, prep.macs

    def plan(x: np.ndarray, w_in: np.ndarray, b_in: np.ndarray) -> tuple[int, int, np.ndarray]:
        size = check(x, w_in, b_in)
        rows = x.size // size
        hit = rows, size, prep.geo(1, 1, 1, 1, 0, 0, 1, 1, (rows, 1, 1, size))
        if len(runs) < 16:
            runs[x.shape] = hit
        return hit

    def run(x: np.ndarray, w_in: np.ndarray, b_in: np.ndarray, act: int) -> KernelResult:
        rows, _, geo = runs.get(x.shape) or plan(x, w_in, b_in)
        if rows * macs > CONV_MAX_MACS:
            return fallback(x, w_in, b_in, act)
        return _conv_q(core, x, wc, geo, scales_, (rows, units))  # (the core reads x as its rows)

    def core_call(args: tuple[Any, ...]) -> CoreCall | None:
        x = args[0]
        rows, size, geo = plan(x, args[1], args[2])
        if rows * macs > CONV_MAX_MACS:
            return None
        return CoreCall(core, (Arg(0, (rows, 1, 1, size)), wc, geo, scales_))

    set_core_call(run, core_call)
    return run


# -- programs: a plan segment's cores run by one compiled loop ----------------------------------
#
# ``nnrt.execution._compiled_plan`` lowers a run of plan steps to a program: rows of int64
# (``PROGRAM_WIDTH`` wide) that ``_run_program`` executes over one fresh byte arena holding
# every value of the segment at a fixed offset, the segment's inputs first (given as one bytes
# object). Constants live in four buffers (bytes, int16, int64, float64: ``ProgramConstants``).
# The loop has one signature whatever the model, so it is compiled once per machine (cached by
# numba like the cores; in this file, so that a change of a core invalidates it too): preparing
# a new model compiles nothing. (A function generated per model and calling the cores would
# recompile them all into its own machine code: 5-7 s per model, measured.)

PROGRAM_WIDTH = 20
OP_COPY, OP_COPY_CONST, OP_GATHER, OP_CONV, OP_QUANTIZE, OP_DEQUANTIZE, OP_LOOKUP = range(7)

def _run_program(prog: Any, inputs: Any, size: Any, kb: Any, ki16: Any, ki64: Any, kf64: Any) -> Any:
    """A fresh arena of ``size`` bytes starting with ``inputs``, after running ``prog`` over it
    (see above); each row: opcode, then its operands. Each kind of row is a function of its own:
    the views a row makes then live in one straight block, where numba drops their reference
    counts (made in this loop, they cost two atomic updates each: about 1 us a program)."""
    arena = np.empty(size, np.uint8)
    for i in range(len(inputs)):
        arena[i] = inputs[i]
    for r in range(prog.shape[0]):
        op = prog[r, 0]
        if op == OP_COPY:
            _ROW_COPY(prog, r, arena, arena)
        elif op == OP_COPY_CONST:
            _ROW_COPY(prog, r, arena, kb)
        elif op == OP_GATHER:
            _ROW_GATHER(prog, r, arena, ki64)
        elif op == OP_CONV:
            _ROW_CONV(prog, r, arena, ki16, ki64, kf64)
        elif op == OP_QUANTIZE:
            _ROW_QUANTIZE(prog, r, arena, ki64, kf64)
        elif op == OP_DEQUANTIZE:
            _ROW_DEQUANTIZE(prog, r, arena, kf64)
        elif op == OP_LOOKUP:
            _ROW_LOOKUP(prog, r, arena, kb)
    return arena


def _row_copy(prog: Any, r: Any, arena: Any, source: Any) -> None:
    """dst, src (in ``source``), bytes; never overlapping. A loop over two views: 30 ns a copy,
    where slice assignment (which checks for overlap) takes 100 and a loop indexing the arena
    twice 160 (not vectorized)."""
    n = prog[r, 3]
    dst, src = arena[prog[r, 1]:prog[r, 1] + n], source[prog[r, 2]:prog[r, 2] + n]
    for i in range(n):
        dst[i] = src[i]


def _row_gather(prog: Any, r: Any, arena: Any, ki64: Any) -> None:
    """dst, src, item bytes, count, index map (in ``ki64``)."""
    d, s, size, count, m = prog[r, 1], prog[r, 2], prog[r, 3], prog[r, 4], prog[r, 5]
    for i in range(count):
        at = s + ki64[m + i] * size
        for k in range(size):
            arena[d + i * size + k] = arena[at + k]


def _row_conv(prog: Any, r: Any, arena: Any, ki16: Any, ki64: Any, kf64: Any) -> None:
    """x, filter (ki16), parameter vector (ki64), scales (kf64), out: the core reads the
    dimensions from its parameter vector, so its arrays are views from those offsets on."""
    _CORE_CONV(arena[prog[r, 1]:], ki16[prog[r, 2]:], ki64[prog[r, 3]:], kf64[prog[r, 4]:], arena[prog[r, 5]:])


def _row_quantize(prog: Any, r: Any, arena: Any, ki64: Any, kf64: Any) -> None:
    """signed out, x (float32), count, scale (kf64), params (ki64, 4), out."""
    p = prog[r]
    src = arena[p[2]:p[2] + 4 * p[3]].view(np.float32)
    _CORE_QUANTIZE(src, np.float32(kf64[p[4]]), ki64[p[5]:p[5] + 4], arena[p[6]:p[6] + p[3]])


def _row_dequantize(prog: Any, r: Any, arena: Any, kf64: Any) -> None:
    """signed in, x, count, zero point (kf64), scale (kf64), out."""
    p = prog[r]
    dst = arena[p[6]:p[6] + 4 * p[3]].view(np.float32)
    _CORE_DEQUANTIZE(arena[p[2]:p[2] + p[3]], p[1] != 0, np.float32(kf64[p[4]]), np.float32(kf64[p[5]]), dst)


def _row_lookup(prog: Any, r: Any, arena: Any, kb: Any) -> None:
    """signed table, a, b, count, table (kb), table length, pairs, out."""
    p = prog[r]
    first, second = arena[p[2]:p[2] + p[4]], arena[p[3]:p[3] + p[4]]
    _CORE_LOOKUP(kb[p[5]:p[5] + p[6]], first, second, p[7] != 0, arena[p[8]:p[8] + p[4]])


_CORE_CONV: Any = None
_CORE_QUANTIZE: Any = None
_CORE_DEQUANTIZE: Any = None
_CORE_LOOKUP: Any = None
_ROW_COPY: Any = None
_ROW_GATHER: Any = None
_ROW_CONV: Any = None
_ROW_QUANTIZE: Any = None
_ROW_DEQUANTIZE: Any = None
_ROW_LOOKUP: Any = None


def program_runner() -> Callable[..., Any] | None:
    """The compiled ``_run_program`` (its cores and rows bound), or None when compiled kernels are not in use."""
    global _CORE_CONV, _CORE_QUANTIZE, _CORE_DEQUANTIZE, _CORE_LOOKUP
    global _ROW_COPY, _ROW_GATHER, _ROW_CONV, _ROW_QUANTIZE, _ROW_DEQUANTIZE, _ROW_LOOKUP
    cores = (compiled(_conv_q_into), compiled(_quantize_q), compiled(_dequantize_q), compiled(_lookup_q))
    rows = (compiled(_row_copy), compiled(_row_gather), compiled(_row_conv), compiled(_row_quantize),
            compiled(_row_dequantize), compiled(_row_lookup))
    if any(c is None for c in cores + rows):
        return None
    _CORE_CONV, _CORE_QUANTIZE, _CORE_DEQUANTIZE, _CORE_LOOKUP = cores
    _ROW_COPY, _ROW_GATHER, _ROW_CONV, _ROW_QUANTIZE, _ROW_DEQUANTIZE, _ROW_LOOKUP = rows
    return compiled(_run_program)
