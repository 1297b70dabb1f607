"""Helpers every kernel family shares: type groups, quantized values and requantization, fused
activations, axes, integer parameters, broadcasting, padding, layouts and fixed-point integer
arithmetic. One helper per concern; kernels do not re-implement them.

Quantized kernels in nnrt compute in real numbers: ``to_real`` dequantizes (per-channel
aware), the kernel computes in float32/float64, and ``from_real`` requantizes with NNAPI's
rounding (half away from zero) and saturation. The CTS allows an error of 1 on quantized
outputs, which this scheme meets for every reference case; kernels that need the exact
integer pipeline (the quantized LSTM cells) build it from the fixed-point helpers at the end.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nnrt.errors import ResourceExhaustedError
from nnrt.model import Operand
from nnrt.ops._registry import Kernel, OpCall
from nnrt.types import ErrorStatus, OperandType

__all__ = [
    "activation_bounds",
    "ACT_NONE",
    "ACT_RELU",
    "ACT_RELU1",
    "ACT_RELU6",
    "FLOAT_TYPES",
    "QUANT8_TYPES",
    "apply_activation",
    "broadcast_shape",
    "broadcasts",
    "centred_filter",
    "check_activation",
    "ChannelRows",
    "check_padding_scheme",
    "check_result_size",
    "from_nchw",
    "float_scalar_type",
    "from_real",
    "implicit_padding",
    "multiply_by_quantized_multiplier",
    "int_param",
    "normalize_axis",
    "optional_tensor",
    "lookup_binary",
    "lookup_unary",
    "output_values",
    "quant_range",
    "quant8_table",
    "quantize_multiplier",
    "requantize",
    "round_half_away",
    "rounding_divide_by_pot",
    "same_quant",
    "saturate",
    "saturating_doubling_high_mul",
    "to_nchw",
    "to_real",
    "wrap16",
]

T = OperandType
FLOAT_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
QUANT8_TYPES = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)

ACT_NONE, ACT_RELU, ACT_RELU1, ACT_RELU6 = 0, 1, 2, 3
_ACT_BOUNDS: dict[int, tuple[float, float]] = {
    ACT_NONE: (-np.inf, np.inf),
    ACT_RELU: (0.0, np.inf),
    ACT_RELU1: (-1.0, 1.0),
    ACT_RELU6: (0.0, 6.0),
}
_F32 = np.dtype(np.float32)
#: ``activation_bounds``' answers: the clamp bounds as float32 scalars, (1, 0) for none.
_ACT_BOUNDS_F32: dict[int, tuple[np.float32, np.float32]] = {
    act: (np.float32(lo), np.float32(hi)) if act != ACT_NONE else (np.float32(1), np.float32(0))
    for act, (lo, hi) in _ACT_BOUNDS.items()
}

PADDING_SAME, PADDING_VALID = 1, 2

_INT_RANGES = {
    T.TENSOR_QUANT8_ASYMM: (0, 255),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    T.TENSOR_QUANT8_SYMM: (-127, 127),
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: (-127, 127),
    T.TENSOR_QUANT16_SYMM: (-32768, 32767),
    T.TENSOR_QUANT16_ASYMM: (0, 65535),
    T.TENSOR_INT32: (-(2**31), 2**31 - 1),
}


def float_scalar_type(t: OperandType) -> OperandType:
    """The float scalar type of parameters that go with tensor type ``t``: FLOAT16 for TENSOR_FLOAT16, else FLOAT32."""
    return T.FLOAT16 if t is T.TENSOR_FLOAT16 else T.FLOAT32


# -- fused activations --------------------------------------------------------------------


def check_activation(call: OpCall, act: object, i: int) -> int:
    """Validate a fused-activation code (input ``i``)."""
    if not isinstance(act, int) or act not in _ACT_BOUNDS:
        call.fail(f"input {i}: fused activation {act!r} is not NONE(0), RELU(1), RELU1(2) or RELU6(3)")
    return act


def apply_activation(x: np.ndarray, act: int) -> np.ndarray:
    """Apply a fused activation to a float array, in place (``x`` must be the kernel's own)."""
    if act == ACT_NONE:
        return x
    lo, hi = _ACT_BOUNDS[act]
    if hi == np.inf:  # (a float32 scalar made per call costs 0.8 us: the table's for float32)
        out: np.ndarray = np.maximum(x, _ACT_BOUNDS_F32[act][0] if x.dtype == _F32 else x.dtype.type(lo), out=x)
        return out
    clipped: np.ndarray = np.clip(x, lo, hi, out=x)
    return clipped


def activation_bounds(act: int) -> tuple[np.float32, np.float32]:
    """A fused activation's float32 clamp bounds for a compiled kernel; (1, 0) for none (lo > hi).
    From a table: making two numpy scalars cost about 1 us, a small layer's loop 2-5 us."""
    return _ACT_BOUNDS_F32[act]


@functools.lru_cache(maxsize=4096)
def quant_range(act: int, scale: float, zero_point: int, type_: OperandType) -> tuple[int, int]:
    """The saturating integer range of a quantized output with a fused activation (remembered:
    every requantization asks, and numpy scalar arithmetic makes it cost ~3 us)."""
    qmin, qmax = _INT_RANGES[type_]
    lo, hi = _ACT_BOUNDS[act]
    if lo != -np.inf:
        qmin = max(qmin, zero_point + int(round_half_away(np.float64(lo / scale))))
    if hi != np.inf:
        qmax = min(qmax, zero_point + int(round_half_away(np.float64(hi / scale))))
    return qmin, qmax


# -- quantized values ---------------------------------------------------------------------


def round_half_away(x: np.ndarray | np.floating) -> np.ndarray:
    """Round half away from zero, as NNAPI's reference kernels (``std::round``) do."""
    out: np.ndarray = np.trunc(x + np.copysign(0.5, x))
    return out


def to_real(x: np.ndarray, operand: Operand, dtype: type[np.floating] = np.float32) -> np.ndarray:
    """Real values of a tensor: dequantized if quantized, widened if float16."""
    t = operand.type
    if t is T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        cq = operand.channel_quant
        assert cq is not None
        shape = [1] * x.ndim
        shape[cq.channel_dim] = -1
        return x.astype(dtype) * np.asarray(cq.scales, dtype=dtype).reshape(shape)
    if t.is_quantized:
        real: np.ndarray = (x.astype(dtype) - dtype(operand.zero_point)) * dtype(operand.scale)
        return real
    if x.dtype == dtype:
        return x
    return x.astype(dtype)


def from_real(real: np.ndarray, operand: Operand, act: int = ACT_NONE, *, owned: bool = False) -> np.ndarray:
    """Values of ``operand``'s type from real values, with a fused activation applied.

    ``real`` may be modified in place. With ``owned`` (a float array the caller made and will
    not read again) quantizing works in it: no temporaries beyond one, which matters on large
    tensors (each fresh temporary of a few hundred KiB costs its page faults).
    """
    t = operand.type
    if t.is_quantized:
        lo, hi = quant_range(act, operand.scale, operand.zero_point, t)
        if owned and real.dtype.kind == "f" and real.flags.writeable:
            q = np.divide(real, real.dtype.type(operand.scale), out=real)
            np.add(q, np.copysign(real.dtype.type(0.5), q), out=q)
            np.trunc(q, out=q)
            if operand.zero_point:
                q += operand.zero_point
            np.clip(q, lo, hi, out=q)
            quantized: np.ndarray = q.astype(t.dtype)
            return quantized
        scale = np.float64(operand.scale) if real.dtype == np.float64 else np.float32(operand.scale)
        q = round_half_away(real / scale)
        q += operand.zero_point
        result: np.ndarray = np.clip(q, lo, hi).astype(t.dtype)
        return result
    if t is T.TENSOR_INT32:
        return real.astype(np.int32)
    out = real.astype(t.dtype, copy=False)
    if out is real and act != ACT_NONE and not out.flags.writeable:
        out = out.copy()
    return apply_activation(out, act)


def same_quant(src: Operand, dst: Operand) -> bool:
    """True when ``dst`` holds ``src``'s stored values unchanged: not quantized, or equal scale and zero point."""
    return not src.type.is_quantized or (src.scale == dst.scale and src.zero_point == dst.zero_point)


def requantize(x: np.ndarray, src: Operand, dst: Operand) -> np.ndarray:
    """A fresh C-ordered array of ``dst``'s dtype holding ``x`` (values of ``src``), requantized if needed."""
    if not same_quant(src, dst):
        return from_real(to_real(x, src, np.float64), dst)
    return x.astype(dst.type.dtype, order="C")


def output_values(x: np.ndarray, src: Operand, dst: Operand) -> np.ndarray:
    """``x`` as ``dst``'s values; ``x`` itself (not a copy) when no requantization is needed.

    For kernels whose next numpy call makes a fresh array anyway (concatenate, pad, tile...).
    """
    if not same_quant(src, dst):
        return from_real(to_real(x, src, np.float64), dst)
    return x


def optional_tensor(x: object, dtype: type[np.generic] = np.float32) -> np.ndarray | None:
    """An optional tensor argument as ``dtype``; None when omitted (None or an empty array)."""
    return np.asarray(x, dtype=dtype) if isinstance(x, np.ndarray) and x.size else None


# -- per-channel constants ------------------------------------------------------------------


class ChannelRows:
    """A constant per-channel vector (shape [..., C] with every other dimension 1) applied along
    the last axis of contiguous tensors: ``views(x)`` gives ``x`` as rows of k*C values and the
    vector tiled k times. Broadcasting a C-vector makes numpy's inner loop C long, 2-4x slower
    per element than rows of a thousand values; the tiled vectors are cached per k."""

    __slots__ = ("_tiled", "c", "ndim")

    def __init__(self, vector: np.ndarray) -> None:
        self.c = vector.shape[-1] if vector.ndim else 0
        self.ndim = vector.ndim
        flat = np.ascontiguousarray(vector).reshape(-1)
        self._tiled: dict[int, np.ndarray] = {1: flat}

    @staticmethod
    def of(value: object) -> ChannelRows | None:
        """For a constant that is a per-channel vector of more than one element; else None."""
        if not isinstance(value, np.ndarray) or value.ndim == 0 or value.size < 2 or value.size != value.shape[-1]:
            return None
        return ChannelRows(value)

    def views(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(rows of ``x``, tiled vector) when ``x`` is contiguous with C channels last, else None."""
        c = self.c
        if x.ndim < self.ndim or not x.ndim or x.shape[-1] != c or not x.flags.c_contiguous:
            return None
        n = x.size // c
        k = next(k for k in (64, 32, 16, 8, 4, 2, 1) if (n % k == 0 and k * c <= 4096) or k == 1)
        tiled = self._tiled.get(k)
        if tiled is None:
            tiled = self._tiled[k] = np.tile(self._tiled[1], k)
        return x.reshape(-1, k * c), tiled


# -- 8-bit lookup tables ---------------------------------------------------------------------
# An elementwise function of one or two 8-bit quantized tensors has at most 256 or 65536
# distinct results: computing them all once (with the kernel's own real-number formula, so the
# results are bit for bit the formula's) turns every later run into one table lookup, about
# 4x (two inputs) to 10x (one input) fewer passes than dequantize, compute, requantize.


def quant8_table(fn: Callable[..., np.ndarray], ins: Sequence[Operand]) -> np.ndarray:
    """``fn`` of every combination of 8-bit values of the operands ``ins`` (one or two), as a
    flat table indexed by the values' bytes (``lookup_unary`` / ``lookup_binary``)."""
    values = [np.arange(256, dtype=np.uint8).view(op.type.dtype) for op in ins]
    if len(values) == 2:
        table: np.ndarray = fn(values[0][:, None], values[1][None, :]).reshape(-1)
        return table
    single: np.ndarray = fn(values[0])
    return single


def lookup_unary(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``table`` (from ``quant8_table``) at the 8-bit values of ``x``."""
    out: np.ndarray = np.take(table, x.view(np.uint8))
    return out


def lookup_binary(table: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``table`` (from ``quant8_table``) at the pairs of 8-bit values of ``a`` and ``b`` (broadcast)."""
    idx = a.view(np.uint8).astype(np.uint16)
    idx <<= 8
    idx = np.bitwise_or(idx, b.view(np.uint8), out=idx if idx.shape == np.broadcast_shapes(a.shape, b.shape) else None)
    out: np.ndarray = np.take(table, idx)
    return out


# -- broadcasting -------------------------------------------------------------------------


def broadcast_shape(call: OpCall, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """NNAPI broadcasting (numpy's rule, aligned at the trailing dimension); 0 = unknown."""
    out: list[int] = []
    for k in range(1, max(len(a), len(b)) + 1):
        da = a[-k] if k <= len(a) else 1
        db = b[-k] if k <= len(b) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        elif da == 0 or db == 0:
            out.append(max(da, db))
        else:
            call.fail(f"dimensions {list(a)} and {list(b)} cannot be broadcast (axis -{k}: {da} vs {db})")
    return tuple(reversed(out))


def broadcasts(*inputs: int) -> Callable[[Callable[[OpCall], Kernel]], Callable[[OpCall], Kernel]]:
    """Decorate a prepare function whose kernel broadcasts ``inputs`` with numpy's rule: when
    their dimensions are not all known at preparation (known ones were checked there by
    ``broadcast_shape``, and requests must match them), the kernel first checks the shapes it
    is given, so that incompatible ones are INVALID_ARGUMENT naming the operation rather than a
    numpy ValueError inside the kernel (GENERAL_FAILURE). Static models keep the bare kernel."""

    def decorate(prepare: Callable[[OpCall], Kernel]) -> Callable[[OpCall], Kernel]:
        def prepare_checked(call: OpCall) -> Kernel:
            run = prepare(call)
            if all(call.inputs[i].fully_specified for i in inputs):
                return run

            seen: set[tuple[tuple[int, ...], ...]] = set()  # shapes checked already (a few per model)

            def checked(*args: Any) -> Any:
                shapes = tuple(np.shape(args[i]) for i in inputs)
                if shapes not in seen:  # ``np.broadcast_shapes`` costs 4-5 us, a set lookup 0.1
                    try:
                        np.broadcast_shapes(*shapes)
                    except ValueError:
                        call.fail(f"inputs {', '.join(map(str, inputs))} have shapes {[list(x) for x in shapes]}, "
                                  "which do not broadcast")
                    if len(seen) < 16:
                        seen.add(shapes)
                return run(*args)

            return checked

        prepare_checked.__name__ = prepare.__name__
        prepare_checked.__doc__ = prepare.__doc__
        return prepare_checked

    return decorate


# -- axes ---------------------------------------------------------------------------------


def normalize_axis(call: OpCall, axis: object, rank: int | None, i: int) -> int:
    """An axis argument (input ``i``) in [-rank, rank) as a non-negative index.

    Fails when it is not an integer or is out of range; with ``rank`` None (unknown) only
    the type is checked and the axis is returned as given.
    """
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        call.fail(f"input {i}: axis {axis!r} is not an integer")
    a = int(axis)
    if rank is None:
        return a
    if not -rank <= a < rank:
        call.fail(f"input {i}: axis {a} is out of range for rank {rank}")
    return a % rank


# -- integer parameters -------------------------------------------------------------------


def int_param(call: OpCall, args: Sequence[object], i: int, what: str, minimum: int | None = None) -> int:
    """Kernel argument ``args[i]`` (input ``i``, described as ``what``), checked to be an int >= ``minimum``."""
    value = args[i]
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
        call.fail(f"input {i} ({what}) must be an integer{'' if minimum is None else f' >= {minimum}'}, got {value!r}")
    return value


# -- padding and layouts ------------------------------------------------------------------


def check_padding_scheme(call: OpCall, scheme: object, i: int) -> int:
    """An implicit padding scheme (input ``i``): SAME (1) or VALID (2)."""
    if scheme not in (PADDING_SAME, PADDING_VALID):
        call.fail(f"input {i}: padding scheme {scheme!r} is not SAME(1) or VALID(2)")
    return int(scheme)


def implicit_padding(scheme: int, in_size: int, stride: int, filter_size: int, dilation: int = 1) -> tuple[int, int]:
    """(before, after) padding for NNAPI's implicit schemes SAME (1) and VALID (2)."""
    if scheme != PADDING_SAME:
        return 0, 0
    effective = (filter_size - 1) * dilation + 1
    out_size = (in_size + stride - 1) // stride
    total = max((out_size - 1) * stride + effective - in_size, 0)
    return total // 2, total - total // 2


def to_nchw(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 3, 1, 2)


def from_nchw(x: np.ndarray) -> np.ndarray:
    """NCHW view of an array as NHWC (the layout nnrt's 2-D kernels compute in)."""
    return x.transpose(0, 2, 3, 1)


# -- fixed-point integers (gemmlowp / TFLite semantics) ------------------------------------
# Raw int16/int32 values are held in int64 arrays; these reproduce C++'s wrap-around, saturation
# and rounding. Used by the exact integer LSTMs (``lstm_quant``, ``qlstm``).

_I64 = np.int64


def quantize_multiplier(real: float) -> tuple[int, int]:
    """A real multiplier as (Q31 multiplier, left shift), like TFLite's QuantizeMultiplier."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = math.floor(abs(q) * (1 << 31) + 0.5) * (1 if q >= 0 else -1)
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def wrap16(x: np.ndarray) -> np.ndarray:
    """C++'s wrap-around of an int16 cast."""
    return ((x + 32768) & 0xFFFF) - 32768


def _wrap32(x: np.ndarray) -> np.ndarray:
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def saturate(x: np.ndarray, bits: int) -> np.ndarray:
    """Saturate to the signed ``bits``-bit range."""
    out: np.ndarray = np.clip(x, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return out


def rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT (round half away from zero) on int64 arrays."""
    if exponent == 0:
        return x
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def saturating_doubling_high_mul(a: np.ndarray, b: np.ndarray | int, bits: int) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul for int16 (bits=16) or int32 (bits=32) raw values."""
    a = np.asarray(a, dtype=_I64)
    b_arr = np.asarray(b, dtype=_I64)
    lo = -(1 << (bits - 1))
    ab = a * b_arr
    half = 1 << (bits - 2)
    q = ab + np.where(ab >= 0, half, 1 - half)
    res = np.where(q >= 0, q >> (bits - 1), -((-q) >> (bits - 1)))  # C++ division truncates
    return np.where((a == lo) & (b_arr == lo), (1 << (bits - 1)) - 1, res)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier on int32 values (held as int64)."""
    left, right = max(shift, 0), max(-shift, 0)
    shifted = _wrap32(np.asarray(x, dtype=_I64) << left)
    return rounding_divide_by_pot(saturating_doubling_high_mul(shifted, multiplier, 32), right)


#: The largest result a kernel may allocate: NNAPI's limit on one operand (what ``add_operand``
#: checks for sizes known when the model is built).
MAX_RESULT_BYTES = 2**31 - 1


def check_result_size(call: OpCall, shape: Sequence[int], dtype: np.dtype[Any] | type[Any]) -> None:
    """RESOURCE_EXHAUSTED_PERSISTENT, before allocating, when a result whose shape is known only
    at run time (FILL, TILE, PAD, RESIZE) exceeds ``MAX_RESULT_BYTES``."""
    nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
    if nbytes > MAX_RESULT_BYTES:
        raise ResourceExhaustedError(
            f"{call.label}: a result of shape {list(shape)} needs {nbytes} bytes, more than the "
            f"{MAX_RESULT_BYTES} bytes one operand may hold",
            status=ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
        )


def centred_filter(call: OpCall, w: np.ndarray, channel_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A quantized filter's zero-point-centred integer values (float64) and the real scale of
    each output channel's sums of products with centred inputs: input scale x filter scale."""
    f = call.inputs[1]
    cq = f.channel_quant
    in_scale = np.float64(call.inputs[0].scale)
    if f.type is OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL and cq is not None:
        return w.astype(np.float64), np.asarray(cq.scales, dtype=np.float64) * in_scale
    return w.astype(np.float64) - f.zero_point, np.full(w.shape[channel_dim], np.float64(f.scale) * in_scale)
