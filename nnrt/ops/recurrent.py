"""Simple recurrent cells: RNN, SVDF, UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN.

All are float32/float16 (float16 computes in float32). RNN is one step
``h = act(x W^T + h R^T + b)`` whose two outputs (state and output) are equal; the sequence
versions loop it over time (``time_major`` selects ``[time, batch, ...]`` or
``[batch, time, ...]``), the bidirectional one runs a second cell backwards in time and may
take an auxiliary input: with auxiliary weights it feeds both cells ("cross-linking"),
without them it is the backward cell's input ("parallel linking"). SVDF is the rank-``r``
singular value decomposition filter, whose state keeps the last ``memory_size`` activations
of every filter. The LSTM family lives in ``lstm.py``, imported at the bottom.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

from nnrt.ops._common import FLOAT_TYPES, apply_activation, check_activation, optional_tensor
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["bidirectional_outputs", "check_merge_outputs", "expect_float_signature", "rnn_sequence"]


def expect_float_signature(call: OpCall, scalars: dict[int, tuple[T, ...]]) -> T:
    """Input 0 is a float tensor; the ``scalars`` inputs have their types; every other present input
    and every output has input 0's type (shared with ``lstm``)."""
    t = call.expect_type(0, *FLOAT_TYPES)
    for i in range(len(call.inputs)):
        if i in scalars:
            call.expect_type(i, *scalars[i])
        elif call.has_input(i) and call.inputs[i].type is not t:
            call.fail(f"input {i} has type {call.inputs[i].type.name}; expected {t.name}")
    for j in range(len(call.outputs)):
        call.expect_output_type(j, t)
    return t


def check_merge_outputs(call: OpCall, merge: object, n_states: int) -> None:
    """A bidirectional op has 1 (merged) or 2 sequence outputs, optionally followed by ``n_states`` final states."""
    n_out = len(call.outputs)
    if n_out not in ((1, 1 + n_states) if merge else (2, 2 + n_states)):
        call.fail(f"{n_out} outputs do not match merge_outputs={bool(merge)}")


def bidirectional_outputs(
    fw_out: np.ndarray,
    bw_out: np.ndarray,
    states: list[np.ndarray],
    merge: bool,
    time_major: bool,
    n_out: int,
    dtype: DTypeLike,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """A bidirectional op's results from time-major sequences: merged or separate outputs in the op's
    layout, then the final ``states`` when the op has more than two outputs."""
    outs = [np.concatenate([fw_out, bw_out], axis=2)] if merge else [fw_out, bw_out]
    if not time_major:
        outs = [o.transpose(1, 0, 2) for o in outs]
    if n_out > 2:
        outs += states
    result = tuple(np.ascontiguousarray(o, dtype=dtype) for o in outs)
    return result[0] if len(result) == 1 else result


def _need(call: OpCall, x: object, i: int, ndim: int) -> np.ndarray:
    """Required float tensor input ``i`` of rank ``ndim``, as float32."""
    if not isinstance(x, np.ndarray) or x.size == 0:
        call.fail(f"input {i} is required")
    if x.ndim != ndim:
        call.fail(f"input {i} must have rank {ndim}, has shape {list(x.shape)}")
    return np.asarray(x, dtype=np.float32)


# -- RNN ----------------------------------------------------------------------------------


def rnn_sequence(
    x: np.ndarray,
    cell: list[np.ndarray],
    act: int,
    reverse: bool = False,
    aux: np.ndarray | None = None,
    aux_w: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run an RNN cell (weights, recurrent weights, bias, state) over time-major ``x`` ([time, batch,
    input]); returns (outputs, final state)."""
    w, r, b, h = cell
    xw = x @ w.T + b  # all time steps at once
    if aux is not None and aux_w is not None:
        xw += aux @ aux_w.T
    out = np.empty((x.shape[0], x.shape[1], w.shape[0]), dtype=np.float32)
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for t in steps:
        h = apply_activation(xw[t] + h @ r.T, act)
        out[t] = h
    return out, h


def _check_rnn_shapes(call: OpCall, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray) -> None:
    units = w.shape[0]
    if w.shape[1] != x.shape[-1] or r.shape != (units, units) or b.shape != (units,) or h.shape[-1] != units:
        call.fail(
            f"inconsistent shapes: input {list(x.shape)}, weights {list(w.shape)}, recurrent weights "
            f"{list(r.shape)}, bias {list(b.shape)}, hidden state {list(h.shape)}"
        )


@kernel(Op.RNN)
def prepare_rnn(call: OpCall) -> Kernel:
    call.expect_counts(6, 2)
    expect_float_signature(call, {5: (T.INT32,)})
    for i, rank in ((0, 2), (1, 2), (2, 2), (3, 1), (4, 2)):
        call.expect_rank(i, rank)
    if call.const(5) is not None:
        check_activation(call, call.const(5), 5)
    dtype = call.outputs[0].type.dtype

    def run(*args: object) -> tuple[np.ndarray, np.ndarray]:
        x, w, r, b, h = (_need(call, args[i], i, n) for i, n in ((0, 2), (1, 2), (2, 2), (3, 1), (4, 2)))
        act = check_activation(call, args[5], 5)
        _check_rnn_shapes(call, x, w, r, b, h)
        if h.shape[0] != x.shape[0]:
            call.fail("input 4 (hidden state) must have the input's batch size")
        out, _ = rnn_sequence(x[None], [w, r, b, h], act)
        y = out[0].astype(dtype)
        return y, y.copy()

    return run


@kernel(Op.UNIDIRECTIONAL_SEQUENCE_RNN)
def prepare_unidirectional_rnn(call: OpCall) -> Kernel:
    call.expect_counts(7, (1, 2))
    expect_float_signature(call, {5: (T.INT32,), 6: (T.INT32,)})
    for i, rank in ((0, 3), (1, 2), (2, 2), (3, 1), (4, 2)):
        call.expect_rank(i, rank)
    if call.const(5) is not None:
        check_activation(call, call.const(5), 5)
    dtype = call.outputs[0].type.dtype
    with_state = len(call.outputs) == 2

    def run(*args: object) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        x, w, r, b, h = (_need(call, args[i], i, n) for i, n in ((0, 3), (1, 2), (2, 2), (3, 1), (4, 2)))
        act = check_activation(call, args[5], 5)
        time_major = bool(args[6])
        _check_rnn_shapes(call, x, w, r, b, h)
        xt = x if time_major else x.transpose(1, 0, 2)
        if h.shape[0] != xt.shape[1]:
            call.fail("input 4 (hidden state) must have the input's batch size")
        out, h_last = rnn_sequence(xt, [w, r, b, h], act)
        y = (out if time_major else out.transpose(1, 0, 2)).astype(dtype)
        return (y, h_last.astype(dtype)) if with_state else y

    return run


@kernel(Op.BIDIRECTIONAL_SEQUENCE_RNN)
def prepare_bidirectional_rnn(call: OpCall) -> Kernel:
    call.expect_counts(15, (1, 2, 3, 4))
    expect_float_signature(call, {12: (T.INT32,), 13: (T.BOOL,), 14: (T.BOOL,)})
    for i, rank in ((0, 3), (1, 2), (2, 2), (3, 1), (4, 2), (5, 2), (6, 2), (7, 1), (8, 2)):
        call.expect_rank(i, rank)
    if call.const(12) is not None:
        check_activation(call, call.const(12), 12)
    if call.const(14) is not None:
        check_merge_outputs(call, call.const(14), 2)
    n_out = len(call.outputs)
    dtype = call.outputs[0].type.dtype

    def run(*args: object) -> np.ndarray | tuple[np.ndarray, ...]:
        x = _need(call, args[0], 0, 3)
        fw = [_need(call, args[i], i, n) for i, n in ((1, 2), (2, 2), (3, 1), (4, 2))]
        bw = [_need(call, args[i], i, n) for i, n in ((5, 2), (6, 2), (7, 1), (8, 2))]
        aux, fw_aux_w, bw_aux_w = (optional_tensor(args[i]) for i in (9, 10, 11))
        act = check_activation(call, args[12], 12)
        time_major, merge = bool(args[13]), bool(args[14])
        check_merge_outputs(call, merge, 2)
        if (fw_aux_w is None) != (bw_aux_w is None) or (aux is None and fw_aux_w is not None):
            call.fail("auxiliary weights need an auxiliary input, and come as a pair")
        xt = x if time_major else x.transpose(1, 0, 2)
        auxt = None if aux is None else (aux if time_major else aux.transpose(1, 0, 2))
        if auxt is not None and auxt.shape[:2] != xt.shape[:2]:
            call.fail("input 9 (auxiliary input) must have the input's time and batch sizes")
        bw_x = xt
        if auxt is not None and fw_aux_w is None:
            bw_x = auxt  # parallel linking: the auxiliary input is the backward cell's input
            auxt = None
        _check_rnn_shapes(call, xt, *fw)
        _check_rnn_shapes(call, bw_x, *bw)
        if fw[3].shape[0] != xt.shape[1] or bw[3].shape[0] != xt.shape[1]:
            call.fail("hidden states must have the input's batch size")
        for aw, cell in ((fw_aux_w, fw), (bw_aux_w, bw)):
            if aw is not None and auxt is not None and aw.shape != (cell[0].shape[0], auxt.shape[2]):
                call.fail(f"auxiliary weights have shape {list(aw.shape)}")
        fw_out, fw_h = rnn_sequence(xt, fw, act, aux=auxt, aux_w=fw_aux_w)
        bw_out, bw_h = rnn_sequence(bw_x, bw, act, reverse=True, aux=auxt, aux_w=bw_aux_w)
        return bidirectional_outputs(fw_out, bw_out, [fw_h, bw_h], merge, time_major, n_out, dtype)

    return run


# -- SVDF ---------------------------------------------------------------------------------


@kernel(Op.SVDF)
def prepare_svdf(call: OpCall) -> Kernel:
    call.expect_counts(7, 2)
    expect_float_signature(call, {5: (T.INT32,), 6: (T.INT32,)})
    for i, rank in ((0, 2), (1, 2), (2, 2), (3, 1), (4, 2)):
        call.expect_rank(i, rank)
    if call.const(6) is not None:
        check_activation(call, call.const(6), 6)
    rank_ = call.const(5)
    filters = call.inputs[1].dimensions[0] if call.inputs[1].dimensions else 0
    if rank_ is not None and (rank_ <= 0 or (filters and filters % rank_)):
        call.fail(f"input 5: rank {rank_} must be positive and divide the {filters} filters")
    dtype = call.outputs[0].type.dtype

    def run(*args: object) -> tuple[np.ndarray, np.ndarray]:
        x, wf, wt = (_need(call, args[i], i, 2) for i in (0, 1, 2))
        bias = optional_tensor(args[3])
        state = _need(call, args[4], 4, 2)
        rank, act = args[5], check_activation(call, args[6], 6)
        if not isinstance(rank, int):
            call.fail("input 5 (rank) must be an INT32 scalar")
        batch, filters, memory = x.shape[0], wf.shape[0], wt.shape[1]
        if rank <= 0 or filters % rank:
            call.fail(f"input 5: rank {rank} must be positive and divide the {filters} filters")
        units = filters // rank
        if (
            wf.shape[1] != x.shape[1]
            or wt.shape[0] != filters
            or state.shape != (batch, filters * memory)
            or (bias is not None and bias.shape != (units,))
        ):
            call.fail("inconsistent shapes of input, weights, bias and state")
        s = state.reshape(batch, filters, memory).copy()
        s[:, :, -1] = x @ wf.T  # the newest activation of every filter
        scratch = np.einsum("bfm,fm->bf", s, wt)
        out = scratch.reshape(batch, units, rank).sum(axis=2)
        if bias is not None:
            out += bias
        out = apply_activation(out, act)
        s[:, :, :-1] = s[:, :, 1:].copy()  # shift the memory left, freeing the newest slot
        s[:, :, -1] = 0.0
        return s.reshape(batch, filters * memory).astype(dtype), out.astype(dtype)

    return run


from nnrt.ops import lstm as _lstm  # noqa: E402,F401
