"""Type-conversion kernels: QUANTIZE, DEQUANTIZE and CAST.

QUANTIZE maps float32/float16 to an 8-bit asymmetric type (``round(x / scale) + zero_point``,
half away from zero, saturated). DEQUANTIZE maps any 8-bit quantized type, per-channel
included, to float32/float16 (``(q - zero_point) * scale``). CAST converts *stored values*,
not real values: quantization parameters are ignored (a QUANT8_ASYMM 5 casts to 5.0), float
to integer truncates toward zero, and results saturate to the target's range. CAST converts
between float32, float16, int32 and QUANT8_ASYMM; other tensor types may only be cast to
themselves (identity). Input and output shapes must agree.
"""

from __future__ import annotations

import numpy as np

from nnrt.ops._common import ACT_NONE, from_real, quant_range, to_real
from nnrt.ops._jit_quant import dequantize_runner, quantize_runner
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_QUANT8_ASYMM = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_DEQUANT_INPUTS = (
    T.TENSOR_QUANT8_ASYMM,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
    T.TENSOR_QUANT8_SYMM,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
)
#: Types CAST converts between (in any direction).
_CAST_CONVERTIBLE = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
#: Further types CAST accepts only as an identity (same input and output type).
_CAST_IDENTITY_ONLY = (
    T.TENSOR_BOOL8,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
    T.TENSOR_QUANT8_SYMM,
    T.TENSOR_QUANT16_ASYMM,
    T.TENSOR_QUANT16_SYMM,
)

#: Saturation ranges of CAST's integer targets.
_INT_LIMITS = {T.TENSOR_INT32: (-(2.0**31), 2.0**31 - 1), T.TENSOR_QUANT8_ASYMM: (0.0, 255.0)}


def _check_same_shape(call: OpCall) -> None:
    """Input 0 and output 0 have the same shape wherever both are known (0 = unknown)."""
    a, b = call.inputs[0].dimensions, call.outputs[0].dimensions
    if not a or not b:
        return
    if len(a) != len(b) or any(da and db and da != db for da, db in zip(a, b, strict=True)):
        call.fail(f"output 0 dimensions {list(b)} do not match input 0 dimensions {list(a)}")


@kernel(Op.QUANTIZE)
def prepare_quantize(call: OpCall) -> Kernel:
    call.expect_counts(1, 1)
    call.expect_type(0, *_FLOATS)
    call.expect_output_type(0, *_QUANT8_ASYMM)
    _check_same_shape(call)
    in_op, out_op = call.inputs[0], call.outputs[0]

    def run(x: np.ndarray) -> np.ndarray:
        return from_real(to_real(x, in_op), out_op)

    fast = quantize_runner(call, quant_range(ACT_NONE, out_op.scale, out_op.zero_point, out_op.type))
    return run if fast is None else fast


@kernel(Op.DEQUANTIZE)
def prepare_dequantize(call: OpCall) -> Kernel:
    call.expect_counts(1, 1)
    call.expect_type(0, *_DEQUANT_INPUTS)
    call.expect_output_type(0, *_FLOATS)
    _check_same_shape(call)
    in_op, out_op = call.inputs[0], call.outputs[0]
    out_dtype = out_op.type.dtype

    def run(x: np.ndarray) -> np.ndarray:
        return to_real(x, in_op).astype(out_dtype, copy=False)

    fast = dequantize_runner(call)
    return run if fast is None else fast


@kernel(Op.CAST)
def prepare_cast(call: OpCall) -> Kernel:
    call.expect_counts(1, 1)
    t = call.expect_type(0, *_CAST_CONVERTIBLE, *_CAST_IDENTITY_ONLY)
    if t in _CAST_CONVERTIBLE:
        out_t = call.expect_output_type(0, *_CAST_CONVERTIBLE)
    else:
        out_t = call.expect_output_type(0, t)
    _check_same_shape(call)
    out_dtype = out_t.dtype

    if out_t is t:

        def run_identity(x: np.ndarray) -> np.ndarray:
            return x.copy()

        return run_identity

    if out_t in _FLOATS:

        def run_to_float(x: np.ndarray) -> np.ndarray:
            return x.astype(out_dtype)

        return run_to_float

    lo, hi = _INT_LIMITS[out_t]

    def run_to_int(x: np.ndarray) -> np.ndarray:
        wide = x.astype(np.float64)
        if t in _FLOATS:
            wide = np.nan_to_num(np.trunc(wide), nan=0.0)
        return np.clip(wide, lo, hi).astype(out_dtype)

    return run_to_int
