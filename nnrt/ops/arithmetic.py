"""Broadcasting binary arithmetic with a fused activation: ADD, SUB, MUL, DIV.

Signature (NNAPI): ``[a, b, activation] -> [out]``; ``a`` and ``b`` broadcast. Float32 and
float16 compute directly in their own type; TENSOR_INT32 (FL4) computes in int32 with no
activation (DIV rounds toward negative infinity); quantized types compute in real numbers
and requantize to the output's scale and zero point, through a table of every pair of 8-bit
values built on first use (``quant8_table``). The float kernels are the hottest code
in nnrt (one numpy call per operation), so they are specialised at preparation when the
activation is a constant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.model import dims_product
from nnrt.ops._common import (
    ACT_NONE,
    ChannelRows,
    apply_activation,
    broadcast_shape,
    broadcasts,
    check_activation,
    from_real,
    quant8_table,
    to_real,
)
from nnrt.ops._into import Into, set_into, write
from nnrt.ops._jit_quant import table_lookups
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["binary_into"]

#: Elements from which a per-channel constant operand is applied over long rows (below, the
#: reshapes cost more than they save).
_ROWS_MIN_ELEMENTS = 4096

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


def binary_into(ufunc: Callable[..., np.ndarray], act: int, plain: Callable[..., Any]) -> Into:
    """The ``into`` (``nnrt.ops._into``) of a float kernel computing ``ufunc(a, b)`` then the
    constant activation ``act``: the same ufunc with ``out=``; ``plain`` (the kernel itself) for
    arguments it does not take (another activation, other types, a result of another shape)."""

    def into(out: np.ndarray, a: np.ndarray, b: np.ndarray, act_arg: int) -> None:
        try:
            fits = np.broadcast_shapes(a.shape, b.shape) == out.shape
        except ValueError:
            fits = False
        if not fits or act_arg != act or a.dtype != out.dtype or b.dtype != out.dtype:
            write(out, plain(a, b, act_arg), "the arithmetic result")
            return
        apply_activation(ufunc(a, b, out=out), act)

    return into


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
        tables: dict[int, np.ndarray] = {}  # by activation: built on first use, then looked up
        lookup = table_lookups(a_op, out_op)[1]

        def run_quant(a: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
            table = tables.get(act)
            if table is None:
                code = check_activation(call, act, 2)

                def formula(qa: np.ndarray, qb: np.ndarray) -> np.ndarray:
                    return from_real(ufunc(to_real(qa, a_op, np.float64), to_real(qb, b_op, np.float64)), out_op, code)

                table = tables[act] = quant8_table(formula, (a_op, b_op))
            return lookup(table, a, b)

        return run_quant

    const_k = 1 if call.const(1) is not None else 0 if call.const(0) is not None else -1
    rows = ChannelRows.of(call.const(const_k)) if t is T.TENSOR_FLOAT32 and const_k >= 0 and act is not None else None
    other = call.inputs[1 - const_k].dimensions if const_k >= 0 else ()
    if rows is not None and not (other and all(other) and dims_product(other) < _ROWS_MIN_ELEMENTS):
        # A per-channel constant (a bias, a scale): over long rows when the other operand allows.
        channel_rows, k = rows, const_k

        def run_channel(a: np.ndarray, b: np.ndarray, act_arg: int) -> np.ndarray:
            x = b if k == 0 else a
            views = channel_rows.views(x) if x.size >= _ROWS_MIN_ELEMENTS else None
            if views is None or act_arg != act:
                return apply_activation(ufunc(a, b), check_activation(call, act_arg, 2))
            xv, cv = views
            out = ufunc(cv, xv) if k == 0 else ufunc(xv, cv)
            return apply_activation(out, act).reshape(x.shape)

        return run_channel

    if act == ACT_NONE:
        # The hot path: one numpy call.
        def run_float(a: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
            return ufunc(a, b)

        set_into(run_float, binary_into(ufunc, ACT_NONE, run_float))
        return run_float

    def run_float_act(a: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
        return apply_activation(ufunc(a, b), check_activation(call, act, 2))

    if act is not None:
        set_into(run_float_act, binary_into(ufunc, act, run_float_act))
    return run_float_act
