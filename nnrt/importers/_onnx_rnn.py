"""ONNX recurrent ops → NNAPI: LSTM as UNIDIRECTIONAL_SEQUENCE_LSTM, GRU and RNN unrolled.

LSTM: each direction is one UNIDIRECTIONAL_SEQUENCE_LSTM. ONNX packs the gates of ``W``,
``R`` and ``B`` in i, o, f, c order ([dirs, 4H, ...]) and the peepholes ``P`` in i, o, f; they
are cut into NNAPI's per-gate inputs at import, the two ONNX biases summed (``W``, ``R``,
``B``, ``P`` given at run time are cut by SLICE + RESHAPE and summed by ADD in the graph). A reverse
direction runs on the input reversed in time (REVERSE) and its output is reversed back.
``Y`` stacks the directions on axis 1 (axis 2 with ``layout=1``), ``Y_h``/``Y_c`` on axis 0
(1). Only the default activations (Sigmoid, Tanh, Tanh) are accepted; ``clip`` (which ONNX
applies to gate pre-activations, NNAPI to the cell state) and ``input_forget`` are refused, as
is a ``sequence_lens`` that is not constant and equal to the sequence length.

GRU has no NNAPI counterpart and ONNX's RNN uses tanh, which NNAPI's RNN cells do not offer
(they take RELU-family fused activations), so both are unrolled over the time steps, which
must be known at import (at most ``MAX_UNROLL``): the input projections of all steps are one
FULLY_CONNECTED, each step then a few FULLY_CONNECTED / ADD / MUL / LOGISTIC / TANH ops.
Both ``linear_before_reset`` forms of GRU are expressed. RNN with Relu maps to
UNIDIRECTIONAL_SEQUENCE_RNN directly.
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._onnx import Arg, NodeCtx, Reject, Value, mapper
from nnrt.types import OperationType as Op

__all__ = ["MAX_UNROLL"]

#: Longest sequence a GRU / tanh RNN is unrolled over.
MAX_UNROLL = 1024

_F32 = np.dtype(np.float32)


def _c(arr: np.ndarray, dtype: np.dtype) -> Value:
    a = np.ascontiguousarray(arr.astype(dtype, copy=False))
    return Value(a.dtype, a.shape, const=a)


class _Param:
    """W, R, B or P ([dirs, rows, ...]): a constant is cut with numpy at import; a run-time
    tensor (a graph input or computed) by SLICE + RESHAPE in the graph."""

    def __init__(self, ctx: NodeCtx, v: Value, what: str) -> None:
        self.b = ctx.b
        self.arr = v.const.astype(np.float32, copy=False) if v.const is not None else None
        self.v = v
        if self.arr is None and (v.dtype != _F32 or v.shape is None or len(v.shape) < 2 or not v.known):
            raise Reject(f"run-time {what} must be float32 of a known shape, not {v.dtype} {v.shape}")
        assert v.shape is not None
        self.shape: tuple[int, ...] = tuple(self.arr.shape) if self.arr is not None else tuple(v.shape)

    def part(self, d: int, lo: int, hi: int) -> Value:
        """Rows ``lo:hi`` of direction ``d``."""
        if self.arr is not None:
            return _c(self.arr[d, lo:hi], _F32)
        b, rest = self.b, list(self.shape[2:])
        sl = b.op1(Op.SLICE, [self.v, b.ints([d, lo] + [0] * len(rest)), b.ints([1, hi - lo] + [-1] * len(rest))],
                   _F32, (1, hi - lo, *rest))
        return b.reshape(sl, [hi - lo, *rest])

    def sum2(self, d: int, lo: int, hi: int, offset: int) -> Value:
        """Rows ``lo:hi`` plus rows ``offset + lo:offset + hi`` of direction ``d`` (ONNX's two biases)."""
        if self.arr is not None:
            return _c(self.arr[d, lo:hi] + self.arr[d, offset + lo:offset + hi], _F32)
        return self.b.op1(Op.ADD, [self.part(d, lo, hi), self.part(d, offset + lo, offset + hi), self.b.i32(0)], _F32,
                          (hi - lo, *self.shape[2:]))


class _Rnn:
    """What the three recurrent ops share: inputs, directions, layout, initial state."""

    def __init__(self, ctx: NodeCtx, gates: int, default_acts: list[str]) -> None:
        self.ctx = ctx
        x = ctx.inp(0)
        if x.dtype != _F32:
            raise Reject(f"input of type {x.dtype} is not supported (float32 is)")
        if x.need_rank(ctx.node.op_type) != 3:
            raise Reject(f"X must be 3-D, got shape {list(x.shape or ())}")
        w, r = _Param(ctx, ctx.inp(1), "W"), _Param(ctx, ctx.inp(2), "R")
        self.hidden = ctx.i("hidden_size", r.shape[-1])
        self.w, self.r = w, r
        b = ctx.opt(3)
        zeros = np.zeros((w.shape[0], 2 * gates * self.hidden), np.float32)
        self.b = _Param(ctx, b if b is not None else _c(zeros, _F32), "B")
        p = ctx.opt(7) if ctx.node.op_type == "LSTM" else None
        self.p = _Param(ctx, p, "P") if p is not None else None
        direction = ctx.s("direction", "forward")
        dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
        if dirs is None:
            raise Reject(f"direction {direction!r} is not supported")
        self.dirs: list[bool] = dirs
        if w.shape[0] != len(self.dirs) or w.shape[1] != gates * self.hidden:
            raise Reject(f"W has shape {list(w.shape)}, expected [{len(self.dirs)}, {gates * self.hidden}, input_size]")
        self.layout = ctx.i("layout", 0)
        acts = ctx.strings("activations")
        if acts and acts != default_acts * len(self.dirs) and acts != default_acts:
            raise Reject(f"activations {acts} are not supported (only the defaults {default_acts})")
        if ctx.has("clip"):
            raise Reject("clip is not supported (ONNX clips gate inputs, NNAPI the cell state)")
        if ctx.has("activation_alpha") or ctx.has("activation_beta"):
            raise Reject("activation_alpha/beta are not supported")
        assert x.shape is not None
        self.x = x
        seq, batch = (x.shape[0], x.shape[1]) if self.layout == 0 else (x.shape[1], x.shape[0])
        self.seq, self.batch = seq, batch
        lens = ctx.const(4, "sequence_lens")
        if lens is not None and not (seq and (lens == seq).all()):
            raise Reject("sequence_lens shorter than the sequence are not supported")
        if not batch:
            raise Reject("the batch size must be known at load (input_shapes can fix it)")

    def initial(self, i: int, what: str, d: int) -> Value:
        """The initial state of direction ``d`` ([batch, H]): constant zeros when omitted."""
        v = self.ctx.opt(i)
        if v is None:
            return _c(np.zeros((self.batch, self.hidden), np.float32), _F32)
        if v.const is not None:
            c = v.const if self.layout == 0 else v.const.transpose(1, 0, 2)
            return _c(c[d], _F32)
        # A run-time state: slice direction d out of [dirs, batch, H] ([batch, dirs, H] for layout 1).
        axis = 0 if self.layout == 0 else 1
        begin, size = [0, 0, 0], [-1, -1, -1]
        begin[axis], size[axis] = d, 1
        b = self.ctx.b
        part = b.op1(Op.SLICE, [v, b.ints(begin), b.ints(size)], _F32,
                     (1, self.batch, self.hidden) if axis == 0 else (self.batch, 1, self.hidden))
        return b.reshape(part, [self.batch, self.hidden])

    def stack(self, outs: list[Value], axis: int, shape: tuple[int, ...], i: int) -> None:
        """Expand each direction's output at ``axis`` and concatenate them into node output ``i``."""
        ctx, b = self.ctx, self.ctx.b
        if i >= len(ctx.node.outputs) or not ctx.node.outputs[i]:
            return
        parts = []
        for v in outs:
            one = list(shape)
            one[axis] = 1
            expand = b.op1 if len(outs) > 1 else None
            if expand is not None:
                parts.append(expand(Op.EXPAND_DIMS, [v, b.i32(axis)], _F32, tuple(one)))
            else:
                ctx.emit(Op.EXPAND_DIMS, [v, b.i32(axis)], _F32, tuple(one), i=i)
        if parts:
            ctx.emit(Op.CONCATENATION, [*parts, b.i32(axis)], _F32, shape, i=i)

    def time_major_input(self, reverse: bool) -> Value:
        """X as [seq, batch, in], reversed in time for a reverse direction."""
        b = self.ctx.b
        x = self.x
        assert x.shape is not None
        if self.layout == 1:
            x = b.op1(Op.TRANSPOSE, [x, b.ints([1, 0, 2])], _F32, (x.shape[1], x.shape[0], x.shape[2]))
        if reverse:
            x = b.op1(Op.REVERSE, [x, b.ints([0])], _F32, x.shape)
        return x

    def finish(self, ys: list[Value], hs: list[Value], cs: list[Value] | None = None, in_step_order: bool = True) -> None:
        """Write Y, Y_h (and Y_c) from per-direction [seq, batch, H] outputs and [batch, H] states.

        ``in_step_order``: a reverse direction's ``ys`` are in the order it ran (reversed time).
        """
        b, n = self.ctx.b, len(self.dirs)
        seq_shape = (self.seq, self.batch, self.hidden)
        fixed = []
        for y, rev in zip(ys, self.dirs):
            if rev and in_step_order:
                y = b.op1(Op.REVERSE, [y, b.ints([0])], _F32, seq_shape)
            if self.layout == 1:
                y = b.op1(Op.TRANSPOSE, [y, b.ints([1, 0, 2])], _F32, (self.batch, self.seq, self.hidden))
            fixed.append(y)
        if self.layout == 0:
            self.stack(fixed, 1, (self.seq, n, self.batch, self.hidden), 0)
            self.stack(hs, 0, (n, self.batch, self.hidden), 1)
            if cs is not None:
                self.stack(cs, 0, (n, self.batch, self.hidden), 2)
        else:
            self.stack(fixed, 2, (self.batch, self.seq, n, self.hidden), 0)
            self.stack(hs, 1, (self.batch, n, self.hidden), 1)
            if cs is not None:
                self.stack(cs, 1, (self.batch, n, self.hidden), 2)


@mapper("LSTM")
def _lstm(ctx: NodeCtx) -> None:
    rnn = _Rnn(ctx, 4, ["Sigmoid", "Tanh", "Tanh"])
    if ctx.i("input_forget", 0):
        raise Reject("input_forget (coupled gates) is not supported")
    p = rnn.p
    hdim = rnn.hidden
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(rnn.dirs):
        lo = {g: k * hdim for k, g in enumerate("iofc")}
        ins: list[Arg] = [rnn.time_major_input(reverse)]
        ins += [rnn.w.part(d, lo[g], lo[g] + hdim) for g in "ifco"]
        ins += [rnn.r.part(d, lo[g], lo[g] + hdim) for g in "ifco"]
        if p is not None:
            ins += [p.part(d, 0, hdim), p.part(d, 2 * hdim, 3 * hdim), p.part(d, hdim, 2 * hdim)]
        else:
            ins += [None, None, None]
        ins += [rnn.b.sum2(d, lo[g], lo[g] + hdim, 4 * hdim) for g in "ifco"]
        ins += [None, None, rnn.initial(5, "initial_h", d), rnn.initial(6, "initial_c", d)]
        b = ctx.b
        ins += [b.i32(4), b.f32(0.0), b.f32(0.0), b.bool(True)]
        state = (rnn.batch, hdim)
        y, h, c = b.op(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins,
                       [(_F32, (rnn.seq, rnn.batch, hdim)), (_F32, state), (_F32, state)])
        ys.append(y)
        hs.append(h)
        cs.append(c)
    rnn.finish(ys, hs, cs)


def _fc(ctx: NodeCtx, x: Value, w: Value, bias: Value, rows: int) -> Value:
    b = ctx.b
    assert w.shape is not None
    return b.op1(Op.FULLY_CONNECTED, [x, w, bias, b.i32(0)], _F32, (rows, w.shape[0]))


def _unrolled(ctx: NodeCtx, rnn: _Rnn, step: str) -> None:
    """GRU or tanh RNN, unrolled over the known time steps of each direction."""
    if not rnn.seq or rnn.seq > MAX_UNROLL:
        raise Reject(f"{ctx.node.op_type} is unrolled over its time steps, which must be known and at most {MAX_UNROLL}")
    b, hdim, seq, batch = ctx.b, rnn.hidden, rnn.seq, rnn.batch
    gates = rnn.w.shape[1] // hdim
    ys, hs = [], []
    lbr = ctx.i("linear_before_reset", 0)
    zero_bias = _c(np.zeros(hdim, np.float32), _F32)
    for d, reverse in enumerate(rnn.dirs):
        gh = gates * hdim
        x = rnn.time_major_input(False)
        flat = b.reshape(x, [seq * batch, x.shape[2] if x.shape else 0])
        # All steps' input projections at once (the recurrent bias joins it unless it must stay apart).
        in_bias = rnn.b.sum2(d, 0, gh, gh) if step == "rnn" else rnn.b.part(d, 0, gh)
        xw = _fc(ctx, flat, rnn.w.part(d, 0, gh), in_bias, seq * batch)
        # The recurrent weights and biases, cut once per direction: [z, r] together, then h.
        rec = (rnn.r.part(d, 0, hdim), zero_bias) if step == "rnn" else \
            (rnn.r.part(d, 0, 2 * hdim), rnn.b.part(d, gh, gh + 2 * hdim), rnn.r.part(d, 2 * hdim, gh),
             rnn.b.part(d, gh + 2 * hdim, 2 * gh))
        h = rnn.initial(5, "initial_h", d)
        outs: list[Value | None] = [None] * seq
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            xt = b.op1(Op.SLICE, [xw, b.ints([t * batch, 0]), b.ints([batch, gates * hdim])], _F32, (batch, gates * hdim))
            if step == "rnn":
                hr = _fc(ctx, h, rec[0], rec[1], batch)
                h = b.op1(Op.TANH, [b.op1(Op.ADD, [xt, hr, b.i32(0)], _F32, (batch, hdim))], _F32, (batch, hdim))
            else:
                h = _gru_step(ctx, xt, h, rec, hdim, batch, bool(lbr))
            outs[t] = h
        seq_out = b.op1(Op.CONCATENATION, [*outs, b.i32(0)], _F32, (seq * batch, hdim)) if seq > 1 else outs[0]
        assert seq_out is not None
        ys.append(b.reshape(seq_out, [seq, batch, hdim]))
        hs.append(h)
    rnn.finish(ys, hs, in_step_order=False)


def _gru_step(ctx: NodeCtx, xt: Value, h: Value, rec: tuple[Value, ...], hdim: int, batch: int, lbr: bool) -> Value:
    """One GRU step: gates z, r, h in ONNX's order; ``xt`` holds X W^T + Wb for the three gates;
    ``rec`` is (R and Rb of gates z and r, R and Rb of gate h)."""
    b = ctx.b
    sh = (batch, hdim)
    r_zr, rb_zr, r_h, rb_h = rec

    def part(v: Value, k: int) -> Value:
        return b.op1(Op.SLICE, [v, b.ints([0, k * hdim]), b.ints([batch, hdim])], _F32, sh)

    def add(a: Value, c: Value) -> Value:
        return b.op1(Op.ADD, [a, c, b.i32(0)], _F32, sh)

    def mul(a: Value, c: Value) -> Value:
        return b.op1(Op.MUL, [a, c, b.i32(0)], _F32, sh)

    zr = _fc(ctx, h, r_zr, rb_zr, batch)
    z = b.op1(Op.LOGISTIC, [add(part(xt, 0), part(zr, 0))], _F32, sh)
    rg = b.op1(Op.LOGISTIC, [add(part(xt, 1), part(zr, 1))], _F32, sh)
    if lbr:
        hr = _fc(ctx, h, r_h, rb_h, batch)
        cand = add(part(xt, 2), mul(rg, hr))
    else:
        cand = add(part(xt, 2), _fc(ctx, mul(rg, h), r_h, rb_h, batch))
    hh = b.op1(Op.TANH, [cand], _F32, sh)
    # h' = (1 - z) * hh + z * h = hh + z * (h - hh)
    return add(hh, mul(z, b.op1(Op.SUB, [h, hh, b.i32(0)], _F32, sh)))


@mapper("GRU")
def _gru(ctx: NodeCtx) -> None:
    _unrolled(ctx, _Rnn(ctx, 3, ["Sigmoid", "Tanh"]), "gru")


@mapper("RNN")
def _rnn(ctx: NodeCtx) -> None:
    acts = ctx.strings("activations")
    if acts and set(acts) == {"Relu"}:
        _relu_rnn(ctx, _Rnn(ctx, 1, ["Relu"]))
        return
    _unrolled(ctx, _Rnn(ctx, 1, ["Tanh"]), "rnn")


def _relu_rnn(ctx: NodeCtx, rnn: _Rnn) -> None:
    b, hdim = ctx.b, rnn.hidden
    ys, hs = [], []
    for d, reverse in enumerate(rnn.dirs):
        ins: list[Arg] = [rnn.time_major_input(reverse), rnn.w.part(d, 0, hdim), rnn.r.part(d, 0, hdim),
                          rnn.b.sum2(d, 0, hdim, hdim),
                          rnn.initial(5, "initial_h", d), b.i32(1), b.i32(1)]
        y, h = b.op(Op.UNIDIRECTIONAL_SEQUENCE_RNN, ins, [(_F32, (rnn.seq, rnn.batch, hdim)), (_F32, (rnn.batch, hdim))])
        ys.append(y)
        hs.append(h)
    rnn.finish(ys, hs)
