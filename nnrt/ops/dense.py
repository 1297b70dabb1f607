"""Dense (matrix-multiply) kernels: FULLY_CONNECTED and BATCH_MATMUL.

FULLY_CONNECTED: ``[input, weights [num_units, input_size], bias [num_units], activation]``
-> ``[batch, num_units]``; an input of rank > 2 is flattened to ``[batch, input_size]``.
Float32 is the hot path (MLP benchmarks): constant weights are re-laid once at preparation
as a contiguous ``weights.T`` so the kernel is one ``x @ Wt`` (the backend's product,
``_gemm``: MKL's or numpy's) followed by an in-place bias add and fused activation. Float16
computes in float32 as NNAPI does. Quantized types
accumulate exact integer products (``(x - zx) @ (W - zw).T + bias``, the int32 bias having
scale ``input_scale * weights_scale``) and requantize with ``from_real``.

BATCH_MATMUL: ``[lhs, rhs, adj_x, adj_y] -> out``, ranks 2 to 4 (equal), the two last
dimensions multiplied as matrices after optional transposition; the output takes the
batch dimensions of ``lhs`` (an ``rhs`` batch dimension may be 1 and is broadcast).
"""

from __future__ import annotations

import numpy as np

from nnrt.model import Operand
from nnrt.ops._common import ACT_NONE, apply_activation, check_activation, from_real, quant_range
from nnrt.ops._gemm import flush_subnormals, matmul, product
from nnrt.ops._jit_quant import fc_runner
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops._relay import relaid
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_FC_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_BMM_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM_SIGNED)


# -- FULLY_CONNECTED ----------------------------------------------------------------------


def _check_bias_scale(call: OpCall) -> None:
    """NNAPI: the int32 bias scale equals input_scale * weights_scale (within 1e-6 relative)."""
    x, w, b = call.inputs[0], call.inputs[1], call.inputs[2]
    product = float(np.float32(x.scale) * np.float32(w.scale))
    bias_scale = float(np.float32(b.scale))
    if abs(product - bias_scale) > 1e-6 * min(product, bias_scale):
        call.fail(
            f"input 2 ({b.label}): bias scale {b.scale} must equal input scale * weights scale = {product}"
        )


def _fc_static_checks(call: OpCall) -> tuple[int, int]:
    """Check shapes known at preparation; return (num_units, input_size), 0 where unknown."""
    x_dims, w_dims, b_dims = (call.inputs[i].dimensions for i in range(3))
    if x_dims and len(x_dims) < 2:
        call.fail(f"input 0 ({call.inputs[0].label}) has rank {len(x_dims)}; expected at least 2")
    call.expect_rank(1, 2)
    call.expect_rank(2, 1)
    num_units, input_size = (w_dims[0], w_dims[1]) if len(w_dims) == 2 else (0, 0)
    if b_dims and num_units and b_dims[0] and b_dims[0] != num_units:
        call.fail(f"input 2 (bias) has {b_dims[0]} elements; weights have {num_units} units")
    if input_size and x_dims and all(d > 0 for d in x_dims) and int(np.prod(x_dims)) % input_size:
        call.fail(f"input 0 dimensions {list(x_dims)} are not a multiple of the weights' input size {input_size}")
    return num_units, input_size


def _check_weights_bias(call: OpCall, w: np.ndarray, b: np.ndarray) -> int:
    """Check weights/bias values' shapes; return input_size."""
    if w.ndim != 2 or w.shape[0] == 0 or w.shape[1] == 0:
        call.fail(f"input 1 (weights) has shape {list(w.shape)}; expected [num_units > 0, input_size > 0]")
    if b.ndim != 1 or b.shape[0] != w.shape[0]:
        call.fail(f"input 2 (bias) has shape {list(b.shape)}; expected [{w.shape[0]}]")
    return int(w.shape[1])


def _check_input(call: OpCall, x: np.ndarray, input_size: int) -> None:
    if x.ndim < 2:
        call.fail(f"input 0 has rank {x.ndim}; expected at least 2")
    if x.size % input_size:
        call.fail(f"input 0 shape {list(x.shape)} is not a multiple of the weights' input size {input_size}")


def _fc_runtime_checks(call: OpCall, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> int:
    input_size = _check_weights_bias(call, w, b)
    _check_input(call, x, input_size)
    return input_size


@kernel(Op.FULLY_CONNECTED)
def prepare_fully_connected(call: OpCall) -> Kernel:
    call.expect_counts(4, 1)
    t = call.expect_type(0, *_FC_TYPES)
    call.expect_type(1, t)
    call.expect_type(2, T.TENSOR_INT32 if t.is_quantized else t)
    call.expect_type(3, T.INT32)
    call.expect_output_type(0, t)
    _fc_static_checks(call)
    if t.is_quantized:
        _check_bias_scale(call)
    act = call.const(3)
    if act is not None:
        check_activation(call, act, 3)
    if t is T.TENSOR_FLOAT32:
        return _fc_float32(call, act)
    if t is T.TENSOR_FLOAT16:
        return _fc_float16(call)
    return _fc_quant(call)


def _fc_float32(call: OpCall, const_act: int | None) -> Kernel:
    w_const, b_const = call.const(1), call.const(2)
    mm = product()
    if w_const is not None and b_const is not None:
        input_size = _check_weights_bias(call, w_const, b_const)
        # from the compilation cache when there; subnormal weights flushed (``_gemm.flush_subnormals``)
        wt = relaid(call, "wt", lambda: flush_subnormals(np.ascontiguousarray(w_const.T)))
        bias = np.array(b_const, dtype=np.float32)

        if const_act == ACT_NONE:

            def run_const_noact(x: np.ndarray, w: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
                if x.ndim < 2 or x.size % input_size:
                    _check_input(call, x, input_size)
                out = matmul(mm, x.reshape(-1, input_size), wt)
                out += bias
                return out

            return run_const_noact

        def run_const(x: np.ndarray, w: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
            if x.ndim < 2 or x.size % input_size:
                _check_input(call, x, input_size)
            out = matmul(mm, x.reshape(-1, input_size), wt)
            out += bias
            return apply_activation(out, act if act == const_act else check_activation(call, act, 3))

        return run_const

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
        input_size = _fc_runtime_checks(call, x, w, b)
        out = matmul(mm, x.reshape(-1, input_size), w.T)
        out += b
        return apply_activation(out, check_activation(call, act, 3))

    return run


def _fc_float16(call: OpCall) -> Kernel:
    out_dtype = call.outputs[0].type.dtype
    w_const = call.const(1)
    wt_const = np.ascontiguousarray(w_const.astype(np.float32).T) if w_const is not None else None

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
        input_size = _fc_runtime_checks(call, x, w, b)
        wt = wt_const if wt_const is not None else w.astype(np.float32).T
        out = x.reshape(-1, input_size).astype(np.float32) @ wt
        out += b.astype(np.float32)
        return apply_activation(out, check_activation(call, act, 3)).astype(out_dtype)

    return run


def _centered_t(w: np.ndarray, op: Operand) -> np.ndarray:
    """``(w - zero_point).T`` as contiguous float64 (exact for 8-bit values)."""
    return np.ascontiguousarray((w.astype(np.float64) - op.zero_point).T)


def _fc_quant(call: OpCall) -> Kernel:
    x_op, w_op, out_op = call.inputs[0], call.inputs[1], call.outputs[0]
    product_scale = float(np.float32(x_op.scale) * np.float32(w_op.scale))
    w_const = call.const(1)
    wt_const = _centered_t(w_const, w_op) if w_const is not None else None

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
        input_size = _fc_runtime_checks(call, x, w, b)
        wt = wt_const if wt_const is not None else _centered_t(w, w_op)
        acc = (x.reshape(-1, input_size).astype(np.float64) - x_op.zero_point) @ wt
        acc += b.astype(np.float64)
        acc *= product_scale
        return from_real(acc, out_op, check_activation(call, act, 3))

    act = call.const(3)
    b_const = call.const(2)
    if wt_const is None or b_const is None or act is None:
        return run
    _check_weights_bias(call, w_const, b_const)
    qrange = quant_range(act, out_op.scale, out_op.zero_point, out_op.type)
    fast = fc_runner(call, wt_const.T, b_const, product_scale, qrange, lambda x, w, b: _fc_runtime_checks(call, x, w, b), run)
    return run if fast is None else fast


# -- BATCH_MATMUL -------------------------------------------------------------------------


def _bmm_check_shapes(call: OpCall, a: tuple[int, ...], b: tuple[int, ...], adj_x: bool, adj_y: bool) -> None:
    """NNAPI's shape rules (0 = unknown dimension, skipped)."""
    if len(a) != len(b):
        call.fail(f"input ranks differ: {len(a)} and {len(b)}")
    if not 2 <= len(a) <= 4:
        call.fail(f"input rank {len(a)} is not between 2 and 4")
    inner_a = a[-2] if adj_x else a[-1]
    inner_b = b[-1] if adj_y else b[-2]
    if inner_a and inner_b and inner_a != inner_b:
        call.fail(f"shapes {list(a)} (adj_x={adj_x}) and {list(b)} (adj_y={adj_y}) cannot be multiplied")
    for k, (da, db) in enumerate(zip(a[:-2], b[:-2], strict=True)):
        if da and db and db != 1 and da != db:
            call.fail(f"batch dimension {k} differs: {da} (input 0) and {db} (input 1)")


@kernel(Op.BATCH_MATMUL)
def prepare_batch_matmul(call: OpCall) -> Kernel:
    call.expect_counts(4, 1)
    t = call.expect_type(0, *_BMM_TYPES)
    call.expect_type(1, t)
    call.expect_type(2, T.BOOL)
    call.expect_type(3, T.BOOL)
    call.expect_output_type(0, t)
    a_op, b_op, out_op = call.inputs[0], call.inputs[1], call.outputs[0]
    adj_x, adj_y = call.const(2), call.const(3)
    if a_op.dimensions and b_op.dimensions and adj_x is not None and adj_y is not None:
        _bmm_check_shapes(call, a_op.dimensions, b_op.dimensions, bool(adj_x), bool(adj_y))
    out_dtype = out_op.type.dtype
    product_scale = float(np.float32(a_op.scale) * np.float32(b_op.scale))
    mm = product()

    def run(a: np.ndarray, b: np.ndarray, adj_x: bool, adj_y: bool) -> np.ndarray:
        _bmm_check_shapes(call, a.shape, b.shape, bool(adj_x), bool(adj_y))
        if adj_x:
            a = np.swapaxes(a, -1, -2)
        if adj_y:
            b = np.swapaxes(b, -1, -2)
        out: np.ndarray
        if t is T.TENSOR_FLOAT32:
            out = matmul(mm, a, b)  # the backend's for rank 2, else numpy's
        elif t is T.TENSOR_FLOAT16:
            out = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(out_dtype)
        elif t is T.TENSOR_INT32:
            out = np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(out_dtype)
        else:
            out = from_real(_bmm_quant_acc(a, b, a_op, b_op) * product_scale, out_op)
        return out

    return run


def _bmm_quant_acc(a: np.ndarray, b: np.ndarray, a_op: Operand, b_op: Operand) -> np.ndarray:
    """Exact integer products of zero-point-centred 8-bit values (as float64)."""
    return np.matmul(a.astype(np.float64) - a_op.zero_point, b.astype(np.float64) - b_op.zero_point)  # type: ignore[no-any-return]
