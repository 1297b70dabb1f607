"""TFLite → NNAPI mappers for recurrent ops and sparse constants: RNN, SVDF, BIDIRECTIONAL_SEQUENCE_LSTM/RNN,
UNIDIRECTIONAL_SEQUENCE_RNN, LSTM (full kernel), UNIDIRECTIONAL_SEQUENCE_LSTM, and DENSIFY.

TFLite keeps a recurrent op's state in variable tensors it updates in place; NNAPI's ops take
the state as inputs and return the new state as outputs. The mappers read the variable
tensors through ``Graph.input`` (which makes them state inputs of the model) and hand the
op's state outputs to ``State.assign_tensor`` (state outputs of the model). They compute in
float32: constant int8/uint8 weights (hybrid ops) get a DEQUANTIZE and float16 ones a CAST
to float32, as for convolutions (LiteRT's hybrid kernels quantize the activations on the fly
instead, so the two differ by that rounding). Quantized activations are refused.

DENSIFY turns a sparse constant (TFLite ``SparsityParameters``: traversal order, block map,
per-dimension DENSE size or SPARSE_CSR segments and indices) into NNAPI's DENSIFY inputs.
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._flatbuf import Table
from nnrt.importers._tflite_graph import Graph, Unsupported, mapper
from nnrt.importers._tflite_ops_nn import float_weights
from nnrt.importers._tflite_schema import TT, TflOp
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_RNN, _SEQ_RNN, _LSTM, _SEQ_LSTM, _DENSIFY, _SVDF, _BIDI_LSTM, _BIDI_RNN = 24, 35, 16, 44, 124, 27, 52, 46
_RNN_ACTS, _LSTM_ACTS = (0, 1, 2, 3), (0, 1, 2, 3, 4, 6)


def _float_inputs(g: Graph, op: TflOp, ks: range) -> list[int]:
    """Operands for inputs ``ks``; omitted optional ones become NO_VALUE operands. Constant
    weights in int8/uint8 (hybrid ops) or float16 become float32 in the graph as for convolutions."""
    out = []
    for k in ks:
        if g.has_input(op, k):
            t = g.tensor(op.inputs[k])
            if t.type != TT.FLOAT32 and (k == 0 or t.data is None):
                raise Unsupported(f"input {k} ({t.label()}) is {t.type_name}; only float32 recurrent ops map")
            out.append(float_weights(g, op.inputs[k]))
        else:
            out.append(_omitted(g, T.TENSOR_FLOAT32))
    return out


def _state_tensor(g: Graph, op: TflOp, k: int) -> int:
    if not g.has_input(op, k) or not g.tensor(op.inputs[k]).is_variable or g.state is None:
        raise Unsupported(f"input {k} must be a variable (state) tensor in the main subgraph")
    return g.input(op.inputs[k])


def _assign(g: Graph, op: TflOp, k: int, operand: int) -> None:
    assert g.state is not None
    g.state.assign_tensor(g, g.tensor(op.inputs[k]), operand)


def _act(o: Table | None, slot: int, allowed: tuple[int, ...]) -> int:
    """The op's activation; NNAPI's RNNs take a FuseCode (0-3), its LSTMs also TANH (4) and SIGMOID (6)."""
    act = o.num(slot, "i8") if o is not None else 0
    if act not in allowed:
        raise Unsupported(f"activation {act} (NNAPI's op takes {', '.join(map(str, allowed))})")
    return act


@mapper(_RNN)
def _rnn(g: Graph, op: TflOp) -> None:
    x, w, rw, b = _float_inputs(g, op, range(4))
    h = _state_tensor(g, op, 4)
    act = _act(op.options, 0, _RNN_ACTS)
    y = g.out(op.outputs[0])
    h_out = g.temp(y)
    g.op(Op.RNN, [x, w, rw, b, h, g.i32(act)], [h_out, y])
    _assign(g, op, 4, h_out)


@mapper(_SEQ_RNN)
def _sequence_rnn(g: Graph, op: TflOp) -> None:
    x, w, rw, b = _float_inputs(g, op, range(4))
    h = _state_tensor(g, op, 4)
    o = op.options
    time_major = o.flag(0) if o is not None else False
    y = g.out(op.outputs[0])
    h_out = g.temp(h)
    g.op(Op.UNIDIRECTIONAL_SEQUENCE_RNN, [x, w, rw, b, h, g.i32(_act(o, 1, _RNN_ACTS)), g.i32(int(time_major))], [y, h_out])
    _assign(g, op, 4, h_out)


def _lstm_inputs(g: Graph, op: TflOp) -> tuple[list[int], int, int, list[int]]:
    if len(op.inputs) not in (20, 24):
        raise Unsupported(f"{len(op.inputs)} inputs; the full LSTM kernel takes 20 or 24")
    weights = _float_inputs(g, op, range(18))
    h, c = _state_tensor(g, op, 18), _state_tensor(g, op, 19)
    norms = _float_inputs(g, op, range(20, 24)) if len(op.inputs) == 24 else []
    return weights, h, c, norms


@mapper(_SEQ_LSTM)
def _sequence_lstm(g: Graph, op: TflOp) -> None:
    o = op.options
    weights, h, c, norms = _lstm_inputs(g, op)
    act = _act(o, 0, _LSTM_ACTS)
    clip, proj_clip = (o.real(1), o.real(2)) if o is not None else (0.0, 0.0)
    time_major = o.flag(3) if o is not None else False
    y = g.out(op.outputs[0])
    h_out, c_out = g.temp(h), g.temp(c)
    ins = [*weights, h, c, g.i32(act), g.f32(clip), g.f32(proj_clip), g.flag(time_major), *norms]
    g.op(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [y, h_out, c_out])
    _assign(g, op, 18, h_out)
    _assign(g, op, 19, c_out)


@mapper(_LSTM)
def _lstm(g: Graph, op: TflOp) -> None:
    o = op.options
    if o is not None and o.num(3, "i8") != 0:
        raise Unsupported("the BASIC LSTM kernel (NNAPI's QUANTIZED_16BIT_LSTM form is not mapped)")
    weights, h, c, norms = _lstm_inputs(g, op)
    clip, proj_clip = (o.real(1), o.real(2)) if o is not None else (0.0, 0.0)
    y = g.out(op.outputs[0])
    scratch = g.temp(y, dims=[0, 0])
    h_out, c_out = g.temp(h), g.temp(c)
    ins = [*weights, h, c, g.i32(_act(o, 0, _LSTM_ACTS)), g.f32(clip), g.f32(proj_clip), *norms]
    g.op(Op.LSTM, ins, [scratch, h_out, c_out, y])
    _assign(g, op, 18, h_out)
    _assign(g, op, 19, c_out)


def _index_vector(meta: Table, type_slot: int, value_slot: int, what: str) -> np.ndarray | None:
    kind, table = meta.union(type_slot, value_slot, what)
    if table is None:
        return None
    dtype = {1: "i4", 2: "u2", 3: "u1"}.get(kind)
    if dtype is None:
        raise Unsupported(f"{what} of union type {kind}")
    arr = table.array(0, dtype, what)
    return np.zeros(0, np.int32) if arr is None else arr


def _index_operand(g: Graph, arr: np.ndarray) -> int:
    """A sparse index vector as DENSIFY's TENSOR_INT32 input. uint8 / uint16 vectors stay views
    of the file (not widened at load): uint8 as TENSOR_QUANT8_ASYMM, CAST to int32; uint16 as
    its [n, 2] little-endian bytes, CAST, then low + 256 * high. Every one of these operations
    has constant inputs, so preparation folds them once."""
    if arr.dtype == np.int32 or arr.size == 0:
        return g.const(arr.astype(np.int32, copy=False), T.TENSOR_INT32)
    n = arr.size
    if arr.dtype == np.uint8:
        out = g.model.add_operand(T.TENSOR_INT32, (n,))
        g.op(Op.CAST, [g.const(arr, T.TENSOR_QUANT8_ASYMM, 1.0, 0)], [out])
        return out
    pairs = arr.astype("<u2", copy=False).view(np.uint8).reshape(n, 2)
    wide = g.model.add_operand(T.TENSOR_INT32, (n, 2))
    g.op(Op.CAST, [g.const(pairs, T.TENSOR_QUANT8_ASYMM, 1.0, 0)], [wide])
    lo, hi = g.model.add_operand(T.TENSOR_INT32, (n, 1)), g.model.add_operand(T.TENSOR_INT32, (n, 1))
    g.op(Op.SPLIT, [wide, g.i32(1), g.i32(2)], [lo, hi])
    scaled, total = g.model.add_operand(T.TENSOR_INT32, (n, 1)), g.model.add_operand(T.TENSOR_INT32, (n, 1))
    g.op(Op.MUL, [hi, g.const(np.full(1, 256, np.int32), T.TENSOR_INT32), g.i32(0)], [scaled])
    g.op(Op.ADD, [lo, scaled, g.i32(0)], [total])
    out = g.model.add_operand(T.TENSOR_INT32, (n,))
    g.op(Op.RESHAPE, [total, g.ints([n])], [out])
    return out


@mapper(_DENSIFY)
def _densify(g: Graph, op: TflOp) -> None:
    t = g.tensor(op.inputs[0])
    sp = t.sparsity
    if sp is None or t.data is None:
        raise Unsupported(f"{t.label()} is not a sparse constant")
    order_arr = sp.array(0, "i4", "traversal_order")
    block_arr = sp.array(1, "i4", "block_map")
    order = [int(v) for v in order_arr] if order_arr is not None else list(range(len(t.shape)))
    block_map = [int(v) for v in block_arr] if block_arr is not None else []
    metas = sp.tables(2, "dim_metadata")
    rank = len(t.shape)
    if len(metas) != len(order) or len(order) != rank + len(block_map) or sorted(order) != list(range(len(order))):
        raise Unsupported(f"sparsity with traversal order {order}, block map {block_map}, {len(metas)} dimensions")
    formats: list[int] = []
    dims: list[int] = []
    arrays: list[np.ndarray | None] = []
    for level, meta in enumerate(metas):
        fmt = meta.num(0, "i8")
        formats.append(fmt)
        if fmt == 0:
            dims.append(meta.num(1))
            arrays += [None, None]
            continue
        size = t.shape[order[level]] if order[level] < rank else 0
        if order[level] < rank and order[level] in block_map:
            block_level = order.index(rank + block_map.index(order[level]))
            size //= max(1, metas[block_level].num(1))
        dims.append(size)
        arrays += [_index_vector(meta, 2, 3, "array_segments"), _index_vector(meta, 4, 5, "array_indices")]
    typ, scale, zp = g.nn_type(t)
    values = g.const(t.data.reshape(-1), typ, scale, zp)
    ins = [values, g.ints(order), g.ints(block_map) if block_map else _omitted(g, T.TENSOR_INT32), g.ints(formats), g.ints(dims)]
    ins += [_index_operand(g, a) if a is not None else _omitted(g, T.TENSOR_INT32) for a in arrays]
    g.op(Op.DENSIFY, ins, [g.out(op.outputs[0])])


def _omitted(g: Graph, typ: T) -> int:
    """An omitted optional input (NO_VALUE)."""
    empty = g.model.add_operand(typ)
    g.model.set_operand_value(empty, None)
    return empty


@mapper(_SVDF)
def _svdf(g: Graph, op: TflOp) -> None:
    x, wf, wt, b = _float_inputs(g, op, range(4))
    state = _state_tensor(g, op, 4)
    o = op.options
    rank = o.num(0) if o is not None else 0
    y = g.out(op.outputs[0])
    state_out = g.temp(state)
    g.op(Op.SVDF, [x, wf, wt, b, state, g.i32(rank), g.i32(_act(o, 1, _RNN_ACTS))], [state_out, y])
    _assign(g, op, 4, state_out)


@mapper(_BIDI_LSTM)
def _bidirectional_lstm(g: Graph, op: TflOp) -> None:
    """Inputs map one to one (NNAPI's op follows TFLite's): input, forward weights 1-17,
    backward 18-34, four states 35-38, auxiliary input and weights 39-47; then NNAPI's scalars
    and 8 omitted layer-norm weights."""
    if len(op.inputs) != 48:
        raise Unsupported(f"{len(op.inputs)} inputs; expected 48")
    o = op.options
    act = _act(o, 0, _LSTM_ACTS)
    clip, proj_clip = (o.real(1), o.real(2)) if o is not None else (0.0, 0.0)
    merge, time_major = (o.flag(3), o.flag(4, True)) if o is not None else (False, True)
    ins = _float_inputs(g, op, range(35))
    states = [_state_tensor(g, op, k) for k in range(35, 39)]
    aux = _float_inputs(g, op, range(39, 48))
    scalars = [g.i32(act), g.f32(clip), g.f32(proj_clip), g.flag(merge), g.flag(time_major)]
    outs = [g.out(t) for t in op.outputs[: 1 if merge else 2]]
    new_states = [g.temp(s) for s in states]
    norms = [_omitted(g, T.TENSOR_FLOAT32) for _ in range(8)]
    g.op(Op.BIDIRECTIONAL_SEQUENCE_LSTM, [*ins, *states, *aux, *scalars, *norms], [*outs, *new_states])
    for k, new in zip(range(35, 39), new_states):
        _assign(g, op, k, new)


@mapper(_BIDI_RNN)
def _bidirectional_rnn(g: Graph, op: TflOp) -> None:
    """One to one: input, forward weights/recurrent/bias, forward state, the same backwards,
    auxiliary input and weights; then NNAPI's activation, time_major and merge_outputs."""
    if len(op.inputs) != 12:
        raise Unsupported(f"{len(op.inputs)} inputs; expected 12")
    o = op.options
    time_major, merge = (o.flag(0), o.flag(2)) if o is not None else (False, False)
    fw, bw = _float_inputs(g, op, range(4)), _float_inputs(g, op, range(5, 8))
    fw_h, bw_h = _state_tensor(g, op, 4), _state_tensor(g, op, 8)
    aux = _float_inputs(g, op, range(9, 12))
    scalars = [g.i32(_act(o, 1, _RNN_ACTS)), g.flag(time_major), g.flag(merge)]
    outs = [g.out(t) for t in op.outputs[: 1 if merge else 2]]
    new_fw, new_bw = g.temp(fw_h), g.temp(bw_h)
    g.op(Op.BIDIRECTIONAL_SEQUENCE_RNN, [*fw, fw_h, *bw, bw_h, *aux, *scalars], [*outs, new_fw, new_bw])
    _assign(g, op, 4, new_fw)
    _assign(g, op, 8, new_bw)
