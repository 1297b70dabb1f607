"""Broadcasting binary arithmetic with a fused activation: ADD, SUB, MUL, DIV.

Signature (NNAPI): ``[a, b, activation] -> [out]``; ``a`` and ``b`` broadcast. Float32 and
float16 compute directly in their own type; TENSOR_INT32 (FL4) computes in int32 with no
activation (DIV rounds toward negative infinity); quantized types compute in real numbers
and requantize to the output's scale and zero point. The float kernels are the hottest code
in nnrt (one numpy call per operation), so they are specialised at preparation when the
activation is a constant.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnrt.ops._common import ACT_NONE, apply_activation, broadcast_shape, broadcasts, check_activation, from_real, to_real
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_UFUNCS: dict[Op, Callable[..., np.ndarray]] = {
    Op.ADD: np.add,
    Op.SUB: np.subtract,
    Op.MUL: np.multiply,
    Op.DIV: np.divide,
}
_TYPES = {
    Op.ADD: (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32),
    Op.SUB: (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32),
    Op.MUL: (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32),
    Op.DIV: (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32),
}


@kernel(Op.ADD, Op.SUB, Op.MUL, Op.DIV)
@broadcasts(0, 1)
def prepare_binary(call: OpCall) -> Kernel:
    call.expect_counts(3, 1)
    t = call.expect_type(0, *_TYPES[call.type])
    call.expect_same_type(0, 1, outputs=[0])
    call.expect_type(2, T.INT32)
    broadcast_shape(call, call.inputs[0].dimensions, call.inputs[1].dimensions)
    act = call.const(2)
    if act is not None:
        check_activation(call, act, 2)
    ufunc = _UFUNCS[call.type]
    a_op, b_op, out_op = call.inputs[0], call.inputs[1], call.outputs[0]

    if t is T.TENSOR_INT32:
        if act not in (None, ACT_NONE):
            call.fail("TENSOR_INT32 arithmetic takes no fused activation")
        int_ufunc = np.floor_divide if call.type is Op.DIV else ufunc

        def run_int(a: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
            if act != ACT_NONE:
                call.fail("TENSOR_INT32 arithmetic takes no fused activation")
            return int_ufunc(a, b).astype(np.int32, copy=False)

        return run_int

    if t.is_quantized:

        def run_quant(a: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
            real = ufunc(to_real(a, a_op, np.float64), to_real(b, b_op, np.float64))
            return from_real(real, out_op, check_activation(call, act, 2))

        return run_quant

    if act == ACT_NONE:
        # The hot path: one numpy call.
        def run_float(a: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
            return ufunc(a, b)

        return run_float

    def run_float_act(a: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
        return apply_activation(ufunc(a, b), check_activation(call, act, 2))

    return run_float_act
