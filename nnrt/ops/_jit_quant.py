"""Compiled 8-bit kernels (numba, through ``nnrt.ops._jit``) for the quantized CONV_2D,
DEPTHWISE_CONV_2D and FULLY_CONNECTED with constant filters: one core (``_conv_q``; a fully
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
Inputs reach the cores C-contiguous (copied if not), and preparation calls each core once on a
one-element input of the operand's rank and type (``_warm_input``), so numba compiles (or loads
its cache) at preparation, even with calibration off, and never in the middle of a stream.
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
    "OP_COPY", "OP_COPY_CONST", "OP_GATHER", "PROGRAM_WIDTH", "ProgramConstants", "conv_runner", "dequantize_runner",
    "encode_core_call", "fc_runner", "program_runner", "quantize_runner", "set_lookup_call", "table_lookups",
]

#: CONV_2D runs (and FULLY_CONNECTED) of up to this many multiply-adds take the compiled core;
#: larger ones the numpy kernel, whose float GEMM (BLAS) outruns the core's loops: int8 3x3
#: 16->16 on [1,40,40,16] (3.7 M) 860 us compiled against 290 us, 1x1 64->64 on [1,1,8,64]
#: (33 k) 4 us against 30 us. Depthwise runs always take the core (99 against 294 us on
#: [1,40,40,32] 3x3, where numpy has no GEMM to use).
CONV_MAX_MACS = 1 << 17

_UNPLANNED = object()

#: The core's int64 parameter vector: the run's integers, then the int32 bias of each output
#: channel (one array: a numba call pays ~0.1-0.2 us per argument).
_G_SH, _G_SW, _G_DH, _G_DW, _G_TOP, _G_LEFT, _G_OH, _G_OW, _G_ZIN, _G_ZOUT, _G_QMIN, _G_QMAX, _G_DEPTHWISE = range(13)
_G_BIAS = 13


def _conv_q(x: Any, w: Any, geo: Any, scales: Any) -> Any:
    """``_conv_q_into`` a fresh [N, OH, OW, Cout] array of ``x``'s dtype, returned."""
    out = np.empty((x.shape[0], geo[_G_OH], geo[_G_OW], w.shape[3]), x.dtype)
    _CORE_CONV_INTO(x, w, geo, scales, out)
    return out


def _conv_q_into(x: Any, w: Any, geo: Any, scales: Any, out: Any) -> None:
    """CONV_2D of NHWC 8-bit ``x`` with the centred int32 filter ``w`` [KH, KW, Cin, Cout]; when
    ``geo[_G_DEPTHWISE]``, DEPTHWISE_CONV_2D with ``w`` [KH, KW, 1, Cout] (Cout = Cin x multiplier).
    ``scales`` holds each output channel's real scale, then the output's scale. Writes ``out``
    [N, OH, OW, Cout] (``x``'s dtype: a program passes its arena). Sums are int32 (the caller
    checks they fit); the innermost loop runs along Cout, contiguous in ``w`` and in the
    accumulator (it vectorizes)."""
    n, h, wd, cin = x.shape
    kh, kw, cout = w.shape[0], w.shape[1], w.shape[3]
    depthwise = geo[_G_DEPTHWISE] != 0
    mult = cout // cin
    sh, sw, dh, dw, top, left = geo[_G_SH], geo[_G_SW], geo[_G_DH], geo[_G_DW], geo[_G_TOP], geo[_G_LEFT]
    oh, ow, zin, zout, qmin, qmax = geo[_G_OH], geo[_G_OW], geo[_G_ZIN], geo[_G_ZOUT], geo[_G_QMIN], geo[_G_QMAX]
    out_scale = scales[cout]
    # from_real's clip to [qmin, qmax] after adding the zero point, as bounds before truncating
    # (integer bounds: truncating then clipping is clipping then truncating)
    lo, hi = float(qmin - zout), float(qmax - zout)
    bias = geo[_G_BIAS:]
    acc = np.empty(cout, np.int32)
    real = np.empty(cout, np.float64)
    xc = np.empty(cout if depthwise else cin, np.int32)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                acc[:] = 0
                for ky in range(kh):
                    iy = oy * sh - top + ky * dh
                    if iy < 0 or iy >= h:
                        continue
                    for kx in range(kw):
                        ix = ox * sw - left + kx * dw
                        if ix < 0 or ix >= wd:
                            continue
                        if depthwise and mult == 1:
                            for c in range(cout):
                                acc[c] += np.int32(np.int32(x[b, iy, ix, c]) - zin) * w[ky, kx, 0, c]
                            continue
                        if depthwise:
                            for c in range(cout):
                                xc[c] = np.int32(x[b, iy, ix, c // mult]) - zin
                            for c in range(cout):
                                acc[c] += xc[c] * w[ky, kx, 0, c]
                            continue
                        for ci in range(cin):
                            v = np.int32(np.int32(x[b, iy, ix, ci]) - zin)
                            for co in range(cout):
                                acc[co] += v * w[ky, kx, ci, co]
                # from_real: real value, divided by the output scale, rounded half away from zero
                for c in range(cout):
                    q = float(acc[c] + bias[c]) * scales[c] / out_scale
                    q = q + 0.5 if q >= 0.0 else q - 0.5
                    real[c] = min(max(q, lo), hi)
                for c in range(cout):
                    out[b, oy, ox, c] = int(real[c]) + zout


def _warm_input(dims: tuple[int, ...] | list[int], dtype: Any) -> np.ndarray:
    """A one-element input of an operand's rank and dtype: preparation calls each core once on
    it, so numba compiles (or loads from its cache) there, never during an execution."""
    return np.zeros((1,) * len(dims), dtype)


def _quantize_q(x: Any, scale: Any, params: Any, like: Any) -> Any:
    """QUANTIZE of float32 ``x`` (C-contiguous) with the float32 ``scale``; ``params`` = zero
    point, saturation range, and what numpy's cast makes of NaN; a fresh array of ``like``'s dtype.
    As ``from_real(to_real(x))``: float32 division, round half away, zero point, clip."""
    zp, lo, hi, nan = params[0], params[1], params[2], params[3]
    out = np.empty(x.shape, like.dtype)
    src, dst = x.reshape(-1), out.reshape(-1)
    for i in range(src.size):
        q = src[i] / scale
        if q != q:
            dst[i] = nan
            continue
        q = min(max(q + math.copysign(0.5, q), -1e9), 1e9)  # float32 and float64 sums truncate alike below 2**22
        dst[i] = min(max(math.trunc(q) + zp, lo), hi)
    return out


def _dequantize_q(x: Any, zero: Any, scale: Any) -> Any:
    """DEQUANTIZE of 8-bit ``x`` (C-contiguous) to float32: ``(float32(x) - zero) * scale`` in float32."""
    out = np.empty(x.shape, np.float32)
    src, dst = x.reshape(-1), out.reshape(-1)
    for i in range(src.size):
        dst[i] = (np.float32(src[i]) - zero) * scale
    return out


def _lookup_q(table: Any, a: Any, b: Any, pairs: bool) -> Any:
    """``table`` at the bytes of 8-bit ``a`` (or, with ``pairs``, at ``a``'s byte x 256 + ``b``'s,
    ``b`` of ``a``'s shape), both C-contiguous: ``_common.lookup_unary`` / ``lookup_binary``."""
    out = np.empty(a.shape, table.dtype)
    src, dst = a.reshape(-1), out.reshape(-1)
    if pairs:
        other = b.reshape(-1)
        for i in range(src.size):
            dst[i] = table[(np.int64(np.uint8(src[i])) << 8) | np.int64(np.uint8(other[i]))]
    else:
        for i in range(src.size):
            dst[i] = table[np.uint8(src[i])]
    return out


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
    if src.dimensions:
        x = _warm_input(src.dimensions, src.type.dtype)
        core(np.zeros(1 << 16, dst.type.dtype), x, x, True)

    def lookup_unary(table: np.ndarray, x: np.ndarray) -> np.ndarray:
        if not x.flags.c_contiguous:
            return unary(table, x)
        out: np.ndarray = core(table, x, x, False)
        return out

    def lookup_binary(table: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.shape != b.shape or not (a.flags.c_contiguous and b.flags.c_contiguous):
            return binary(table, a, b)
        out: np.ndarray = core(table, a, b, True)
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
    scale, like = np.float32(out.scale), np.empty(0, out.type.dtype)
    params = np.array([out.zero_point, *qrange, nan], np.int64)
    if call.inputs[0].dimensions:
        core(_warm_input(call.inputs[0].dimensions, np.float32), scale, params, like)

    def run(x: np.ndarray) -> np.ndarray:
        result: np.ndarray = core(x if x.flags.c_contiguous else np.ascontiguousarray(x), scale, params, like)
        return result

    set_core_call(run, lambda args: CoreCall(core, (Arg(0, args[0].shape), scale, params, like)))
    return run


def dequantize_runner(call: OpCall) -> Kernel | None:
    """The compiled DEQUANTIZE of a per-tensor 8-bit input to float32, or None (numpy kernel)."""
    core = compiled(_dequantize_q)
    src = call.inputs[0]
    if core is None or call.outputs[0].type.dtype != np.float32 or src.type.dtype not in (np.int8, np.uint8) \
            or src.channel_quant is not None:
        return None
    zero, scale = np.float32(src.zero_point), np.float32(src.scale)
    if src.dimensions:
        core(_warm_input(src.dimensions, src.type.dtype), zero, scale)

    def run(x: np.ndarray) -> np.ndarray:
        result: np.ndarray = core(x if x.flags.c_contiguous else np.ascontiguousarray(x), zero, scale)
        return result

    set_core_call(run, lambda args: CoreCall(core, (Arg(0, args[0].shape), zero, scale)))
    return run


class _Prepared:
    """One operation's compiled run: the core and its constants (centred filter [KH, KW, Cin or 1,
    Cout], bias and output quantization in the parameter vector, scales) besides the input and
    the geometry."""

    __slots__ = ("core", "depthwise", "params", "scales", "w")

    def __init__(self, core: Callable[..., np.ndarray], call: OpCall, w: np.ndarray, bias: np.ndarray,
                 scales: np.ndarray, qrange: tuple[int, int], depthwise: bool) -> None:
        self.core = core
        self.w = np.ascontiguousarray(w, dtype=np.int32)
        self.depthwise = depthwise
        out = call.outputs[0]
        per_channel = np.broadcast_to(np.asarray(scales, np.float64), bias.shape)
        self.scales = np.concatenate([per_channel, [float(out.scale)]])
        self.params = np.concatenate([
            [1, 1, 1, 1, 0, 0, 1, 1, call.inputs[0].zero_point, out.zero_point, *qrange, depthwise],
            bias.astype(np.int64),
        ]).astype(np.int64)

    def geo(self, sh: int, sw: int, dh: int, dw: int, top: int, left: int, oh: int, ow: int) -> np.ndarray:
        """The parameter vector of a run with this geometry."""
        geo = self.params.copy()
        geo[: _G_OW + 1] = (sh, sw, dh, dw, top, left, oh, ow)
        return geo


_CORE_CONV_INTO: Any = None


def _core() -> Callable[..., np.ndarray] | None:
    """The compiled ``_conv_q``, or None when compiled kernels are not in use."""
    global _CORE_CONV_INTO
    _CORE_CONV_INTO = compiled(_conv_q_into)  # what ``_conv_q`` calls (bound before it compiles)
    return None if _CORE_CONV_INTO is None else compiled(_conv_q)


def _prepared(call: OpCall, w: np.ndarray, bias: np.ndarray, scales: np.ndarray | float, qrange: tuple[int, int],
              depthwise: bool) -> _Prepared | None:
    """The core and its constants (the filter re-laid for it), or None: compiled kernels not in
    use, or sums that int32 would not hold exactly (taps x input channels above 33025)."""
    core = _core()
    if core is None or w.shape[1] * w.shape[2] * (1 if depthwise else w.shape[3]) * 255 * 255 >= 1 << 31:
        return None
    relaid = w.transpose(1, 2, 0, 3) if depthwise else w.transpose(1, 2, 3, 0)  # [KH, KW, Cin or 1, Cout]
    prep = _Prepared(core, call, relaid, bias, np.asarray(scales, np.float64), qrange, depthwise)
    channels = relaid.shape[3] if depthwise else relaid.shape[2]
    core(_warm_input((1, 1, 1, channels), call.inputs[0].type.dtype), prep.w, prep.geo(1, 1, 1, 1, 0, 0, 1, 1), prep.scales)
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

    def plan(args: tuple[Any, ...]) -> np.ndarray | None:
        x = args[0]
        g = geometry(args)
        hit = None
        macs = x.shape[0] * g.out_h * g.out_w * prep.w.size
        if not g.nchw and x.shape[0] and g.out_h and g.out_w and (depthwise or macs <= CONV_MAX_MACS):
            hit = prep.geo(g.stride_h, g.stride_w, g.dil_h, g.dil_w, g.top, g.left, g.out_h, g.out_w)
        if len(memo) < 16:
            memo[x.shape] = hit
        return hit

    core, wc, scales_ = prep.core, prep.w, prep.scales

    def run(x: np.ndarray, *rest: Any) -> KernelResult:
        geo = memo.get(x.shape, _UNPLANNED)
        if geo is _UNPLANNED:
            geo = plan((x, *rest))
        if geo is None:
            return fallback(x, *rest)
        return core(x if x.flags.c_contiguous else np.ascontiguousarray(x), wc, geo, scales_)

    def core_call(args: tuple[Any, ...]) -> CoreCall | None:
        geo = plan(args)
        return None if geo is None else CoreCall(core, (Arg(0, args[0].shape), wc, geo, scales_))

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
    geo = prep.geo(1, 1, 1, 1, 0, 0, 1, 1)
    sizes: dict[tuple[int, ...], int] = {}
    core, wc, scales_ = prep.core, prep.w, prep.scales

    def run(x: np.ndarray, w_in: np.ndarray, b_in: np.ndarray, act: int) -> KernelResult:
        size = sizes.get(x.shape)
        if size is None:
            size = check(x, w_in, b_in)
            if len(sizes) < 16:
                sizes[x.shape] = size
        rows = x.size // size
        if rows * wc.size > CONV_MAX_MACS:
            return fallback(x, w_in, b_in, act)
        out: np.ndarray = core(np.ascontiguousarray(x.reshape(rows, 1, 1, size)), wc, geo, scales_)
        return out.reshape(rows, units)

    def core_call(args: tuple[Any, ...]) -> CoreCall | None:
        x = args[0]
        rows = x.size // check(x, args[1], args[2])
        if rows * wc.size > CONV_MAX_MACS:
            return None
        return CoreCall(core, (Arg(0, (rows, 1, 1, x.size // rows)), wc, geo, scales_))

    set_core_call(run, core_call)
    return run


# -- programs: a plan segment's cores run by one compiled loop ----------------------------------
#
# ``nnrt.execution._compiled_plan`` lowers a run of plan steps to a program: rows of int64
# (``PROGRAM_WIDTH`` wide) that ``_run_program`` executes over one fresh byte arena holding
# every value of the segment at a fixed offset, the segment's inputs first (given as one bytes
# object). Constants live in four buffers (bytes, int32, int64, float64: ``ProgramConstants``).
# The loop has one signature whatever the model, so it is compiled once per machine (cached by
# numba like the cores; in this file, so that a change of a core invalidates it too): preparing
# a new model compiles nothing. (A function generated per model and calling the cores would
# recompile them all into its own machine code: 5-7 s per model, measured.)

PROGRAM_WIDTH = 20
OP_COPY, OP_COPY_CONST, OP_GATHER, OP_CONV, OP_QUANTIZE, OP_DEQUANTIZE, OP_LOOKUP = range(7)

def _put(arena: Any, at: Any, result: Any) -> None:
    flat = result.reshape(-1).view(np.uint8)
    arena[at:at + flat.size] = flat


def _run_program(prog: Any, inputs: Any, size: Any, kb: Any, ki32: Any, ki64: Any, kf64: Any) -> Any:
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
            _ROW_CONV(prog, r, arena, ki32, ki64, kf64)
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


def _row_conv(prog: Any, r: Any, arena: Any, ki32: Any, ki64: Any, kf64: Any) -> None:
    """signed, x, n, h, w, c, filter (ki32), kh, kw, ci, co, geo, its length, scales, their length, out."""
    p = prog[r]
    x, n, h, w, c = p[2], p[3], p[4], p[5], p[6]
    wt = ki32[p[7]:p[7] + p[8] * p[9] * p[10] * p[11]].reshape((p[8], p[9], p[10], p[11]))
    geo, scales = ki64[p[12]:p[12] + p[13]], kf64[p[14]:p[14] + p[15]]
    src = arena[x:x + n * h * w * c]
    dst = arena[p[16]:p[16] + n * geo[_G_OH] * geo[_G_OW] * p[11]]
    shape = (n, geo[_G_OH], geo[_G_OW], p[11])
    if p[1]:
        _CORE_CONV(src.view(np.int8).reshape((n, h, w, c)), wt, geo, scales, dst.view(np.int8).reshape(shape))
    else:
        _CORE_CONV(src.reshape((n, h, w, c)), wt, geo, scales, dst.reshape(shape))


def _row_quantize(prog: Any, r: Any, arena: Any, ki64: Any, kf64: Any) -> None:
    """signed out, x (float32), count, scale (kf64), params (ki64, 4), out."""
    p = prog[r]
    src = arena[p[2]:p[2] + 4 * p[3]].view(np.float32)
    scale, params = np.float32(kf64[p[4]]), ki64[p[5]:p[5] + 4]
    # into bytes whatever the output's signedness (an int8 value stored as uint8 keeps its bits):
    # one compiled variant of the core, not two
    _CORE_PUT(arena, p[6], _CORE_QUANTIZE(src, scale, params, np.empty(0, np.uint8)))


def _row_dequantize(prog: Any, r: Any, arena: Any, kf64: Any) -> None:
    """signed in, x, count, zero point (kf64), scale (kf64), out."""
    p = prog[r]
    src = arena[p[2]:p[2] + p[3]]
    zero, scale = np.float32(kf64[p[4]]), np.float32(kf64[p[5]])
    if p[1]:
        _CORE_PUT(arena, p[6], _CORE_DEQUANTIZE(src.view(np.int8), zero, scale))
    else:
        _CORE_PUT(arena, p[6], _CORE_DEQUANTIZE(src, zero, scale))


def _row_lookup(prog: Any, r: Any, arena: Any, kb: Any) -> None:
    """signed table, a, b, count, table (kb), table length, pairs, out."""
    p = prog[r]
    first, second = arena[p[2]:p[2] + p[4]], arena[p[3]:p[3] + p[4]]
    table = kb[p[5]:p[5] + p[6]]
    _CORE_PUT(arena, p[8], _CORE_LOOKUP(table, first, second, p[7] != 0))  # the table's bytes, as bytes


_CORE_CONV: Any = None
_CORE_QUANTIZE: Any = None
_CORE_DEQUANTIZE: Any = None
_CORE_LOOKUP: Any = None
_CORE_PUT: Any = None
_ROW_COPY: Any = None
_ROW_GATHER: Any = None
_ROW_CONV: Any = None
_ROW_QUANTIZE: Any = None
_ROW_DEQUANTIZE: Any = None
_ROW_LOOKUP: Any = None


def program_runner() -> Callable[..., Any] | None:
    """The compiled ``_run_program`` (its cores and rows bound), or None when compiled kernels are not in use."""
    global _CORE_CONV, _CORE_QUANTIZE, _CORE_DEQUANTIZE, _CORE_LOOKUP, _CORE_PUT
    global _ROW_COPY, _ROW_GATHER, _ROW_CONV, _ROW_QUANTIZE, _ROW_DEQUANTIZE, _ROW_LOOKUP
    cores = (_core() and compiled(_conv_q_into), compiled(_quantize_q), compiled(_dequantize_q), compiled(_lookup_q),
             compiled(_put))
    rows = (compiled(_row_copy), compiled(_row_gather), compiled(_row_conv), compiled(_row_quantize),
            compiled(_row_dequantize), compiled(_row_lookup))
    if any(c is None for c in cores + rows):
        return None
    _CORE_CONV, _CORE_QUANTIZE, _CORE_DEQUANTIZE, _CORE_LOOKUP, _CORE_PUT = cores
    _ROW_COPY, _ROW_GATHER, _ROW_CONV, _ROW_QUANTIZE, _ROW_DEQUANTIZE, _ROW_LOOKUP = rows
    return compiled(_run_program)


class ProgramConstants:
    """The constant buffers of a program: bytes, int32, int64 and float64 (each array once)."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {"uint8": [], "int32": [], "int64": [], "float64": []}
        self.sizes = dict.fromkeys(self.parts, 0)
        self._seen: dict[tuple[int, str], int] = {}
        self._alive: list[Any] = []  # what ``_seen`` keys on, kept alive so that no id is reused

    def add(self, value: Any, kind: str) -> int:
        """Offset (in items of ``kind``) of ``value``'s items converted exactly to ``kind``."""
        key = (id(value), kind)
        if key in self._seen:
            return self._seen[key]
        arr = np.ascontiguousarray(value).reshape(-1)
        if kind == "uint8":
            arr = arr.view(np.uint8)
        else:
            conv = arr.astype(kind)
            if not np.array_equal(conv, arr):
                raise ValueError(f"constant of {arr.dtype} does not convert exactly to {kind}")
            arr = conv
        at = self._seen[key] = self.sizes[kind]
        self._alive.append(value)
        self.parts[kind].append(arr)
        self.sizes[kind] += arr.size
        return at

    def buffers(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate(p) if p else np.zeros(1, k) for k, p in self.parts.items())


def encode_core_call(call: CoreCall, ins: list[tuple[int, np.dtype[Any]]], out: int,
                     consts: ProgramConstants) -> list[int] | None:
    """The program row running ``call``, its ``Arg`` inputs at the arena offsets ``ins`` (offset
    and dtype, in ``Arg`` order) and its result at offset ``out``; None when the program does not
    run this call."""
    fn, args = getattr(call.core, "py_func", None), call.args
    eight = (np.dtype(np.int8), np.dtype(np.uint8))
    shapes = [a.shape for a in args if isinstance(a, Arg)]
    if any(dt not in eight and dt != np.float32 for _, dt in ins):
        return None
    if fn is _conv_q:
        _, w, geo, scales = args
        if len(shapes[0]) != 4 or ins[0][1] not in eight:
            return None
        return [OP_CONV, _signed(ins[0][1]), ins[0][0], *shapes[0], consts.add(w, "int32"), *w.shape,
                consts.add(geo, "int64"), geo.size, consts.add(scales, "float64"), scales.size, out]
    if fn is _quantize_q:
        _, scale, params, like = args
        if like.dtype not in eight or ins[0][1] != np.float32:
            return None
        return [OP_QUANTIZE, _signed(like.dtype), ins[0][0], math.prod(shapes[0]),
                consts.add(np.array([scale], np.float64), "float64"), consts.add(params, "int64"), out]
    if fn is _dequantize_q:
        _, zero, scale = args
        if ins[0][1] not in eight:
            return None
        return [OP_DEQUANTIZE, _signed(ins[0][1]), ins[0][0], math.prod(shapes[0]),
                consts.add(np.array([zero], np.float64), "float64"), consts.add(np.array([scale], np.float64), "float64"), out]
    if fn is _lookup_q:
        table, _, _, pairs = args
        if table.dtype not in eight or any(dt not in eight for _, dt in ins):
            return None
        return [OP_LOOKUP, _signed(table.dtype), ins[0][0], ins[1][0], math.prod(shapes[0]),
                consts.add(table, "uint8"), table.size, int(pairs), out]
    return None


def _signed(dtype: Any) -> int:
    return int(np.dtype(dtype) == np.int8)
