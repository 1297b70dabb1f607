"""Float LSTM cells: LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM.

One ``_Cell`` holds a direction's float32 parameters (float16 models compute in float32) and
runs it over a time-major sequence. The variants NNAPI allows are all optional inputs:
CIFG (no input gate weights: the input gate is ``1 - forget``), peepholes (``cell_to_*``),
projection (with optional bias), layer normalization (per-gate weights; the gate's
pre-activation is normalized to zero mean and unit variance, scaled, then biased), cell and
projection clipping (0 = off), and auxiliary inputs (bidirectional only; without auxiliary
weights the auxiliary input feeds the backward cell: "parallel linking"). Omitted optional
inputs arrive as None or as empty tensors. The integer LSTMs (QUANTIZED_16BIT_LSTM,
QUANTIZED_LSTM) live in ``lstm_quant.py``, imported at the bottom.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnrt.ops._common import optional_tensor
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.recurrent import bidirectional_outputs, check_merge_outputs, expect_float_signature
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_LN_EPSILON = np.float32(1e-8)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))  # type: ignore[no-any-return]


def _activation(call: OpCall, code: object, i: int) -> int:
    """LSTM activations: NONE, RELU, RELU1, RELU6, TANH (4) or SIGMOID (6)."""
    if not isinstance(code, int) or code not in (0, 1, 2, 3, 4, 6):
        call.fail(f"input {i}: activation {code!r} is not NONE, RELU, RELU1, RELU6, TANH or SIGMOID")
    return code


def _apply(x: np.ndarray, code: int) -> np.ndarray:
    y: np.ndarray
    if code == 0:
        y = x
    elif code == 1:
        y = np.maximum(x, np.float32(0))
    elif code == 2:
        y = np.clip(x, np.float32(-1), np.float32(1))
    elif code == 3:
        y = np.clip(x, np.float32(0), np.float32(6))
    elif code == 4:
        y = np.tanh(x)
    else:
        y = _sigmoid(x)
    return y


def _layer_norm(x: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = (x * x).mean(axis=-1, keepdims=True) - mean * mean
    return (x - mean) / np.sqrt(var + _LN_EPSILON)  # type: ignore[no-any-return]


class _Cell:
    """One direction's parameters, read from the kernel's arguments.

    ``first`` is the index of input_to_input_weights; the 17 inputs from there are the four
    input weights, four recurrent weights, three peepholes, four biases, projection weights
    and projection bias (NNAPI's order). ``ln`` and ``aux`` index the four layer-norm weights
    and the four auxiliary weights, when the operation has them.
    """

    def __init__(self, call: OpCall, args: Sequence[object], first: int, ln: int | None, aux: int | None) -> None:
        def get(i: int) -> np.ndarray | None:
            return optional_tensor(args[i]) if i < len(args) else None

        self.call = call
        self.w = [get(first + k) for k in range(4)]
        self.r = [get(first + 4 + k) for k in range(4)]
        p_i, p_f, p_o = (get(first + 8 + k) for k in range(3))
        self.peep = [p_i, p_f, None, p_o]
        self.b = [get(first + 11 + k) for k in range(4)]
        self.proj_w, self.proj_b = get(first + 15), get(first + 16)
        self.ln = [get(ln + k) for k in range(4)] if ln is not None else [None] * 4
        self.aux_w = [get(aux + k) for k in range(4)] if aux is not None else [None] * 4
        self.cifg = self.w[0] is None
        self._validate(first)

    def _validate(self, first: int) -> None:
        fail = self.call.fail
        for k in (1, 2, 3):
            if self.w[k] is None or self.r[k] is None or self.b[k] is None:
                fail(f"the forget, cell and output gate weights and biases (from input {first}) are required")
        w_f, r_f = self.w[1], self.r[1]
        assert w_f is not None and r_f is not None
        if w_f.ndim != 2 or r_f.ndim != 2:
            fail("LSTM weights must be matrices")
        self.units, self.input_size = w_f.shape
        self.output_size = r_f.shape[1]
        if (self.r[0] is None) != self.cifg or (self.b[0] is None) != self.cifg:
            fail("CIFG: input-gate weights, recurrent weights and bias must be all present or all omitted")
        has_peep = self.peep[1] is not None
        if (self.peep[3] is not None) != has_peep or (self.peep[0] is not None and (self.cifg or not has_peep)):
            fail("peephole weights must be all present (cell_to_input only without CIFG) or all omitted")
        if (self.ln[1] is not None) != (self.ln[3] is not None) or (self.ln[2] is not None) != (self.ln[1] is not None):
            fail("layer normalization weights must be all present or all omitted")
        if self.ln[1] is not None and (self.ln[0] is None) != self.cifg:
            fail("the input-gate layer normalization weights go with the input gate")
        if self.proj_b is not None and self.proj_w is None:
            fail("a projection bias needs projection weights")
        u, n_in, n_out = self.units, self.input_size, self.output_size
        shapes: list[tuple[np.ndarray | None, tuple[int, ...]]] = []
        shapes += [(w, (u, n_in)) for w in self.w]
        shapes += [(r, (u, n_out)) for r in self.r]
        shapes += [(v, (u,)) for v in (*self.peep, *self.b, *self.ln)]
        if self.proj_w is not None:
            shapes += [(self.proj_w, (n_out, u)), (self.proj_b, (n_out,))]
        elif n_out != u:
            fail(f"without projection the output size ({n_out}) must equal the number of units ({u})")
        for arr, want in shapes:
            if arr is not None and arr.shape != want:
                fail(f"an LSTM weight has shape {list(arr.shape)}; expected {list(want)}")

    def check_aux(self, aux_size: int) -> None:
        present = [a is not None for a in self.aux_w]
        if any(present):
            if present[1:] != [True] * 3 or present[0] == self.cifg:
                self.call.fail("auxiliary weights must be present for every gate the cell has")
            for a in self.aux_w:
                if a is not None and a.shape != (self.units, aux_size):
                    self.call.fail(f"an auxiliary weight has shape {list(a.shape)}")

    def run(
        self,
        x: np.ndarray,
        h: np.ndarray,
        c: np.ndarray,
        act: int,
        cell_clip: float,
        proj_clip: float,
        aux: np.ndarray | None = None,
        reverse: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Run over time-major ``x``; returns (outputs [time, batch, out], h, c, last gates)."""
        if x.shape[-1] != self.input_size or h.shape != (x.shape[1], self.output_size) or c.shape != (x.shape[1], self.units):
            self.call.fail(
                f"input {list(x.shape)}, output state {list(h.shape)} and cell state {list(c.shape)} do not match "
                f"the weights ({self.units} units, input size {self.input_size}, output size {self.output_size})"
            )
        use_ln = self.ln[1] is not None
        gates = [k for k in range(4) if not (k == 0 and self.cifg)]
        pre: dict[int, np.ndarray] = {}
        for k in gates:
            w = self.w[k]
            assert w is not None
            z = x @ w.T
            aw = self.aux_w[k]
            if aux is not None and aw is not None:
                z += aux @ aw.T
            if not use_ln:
                z += self.b[k]
            pre[k] = z
        out = np.empty((x.shape[0], x.shape[1], self.output_size), dtype=np.float32)
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        last = np.zeros((x.shape[1], self.units * len(gates)), dtype=np.float32)

        def gate(k: int, t: int, cell: np.ndarray | None) -> np.ndarray:
            r = self.r[k]
            assert r is not None
            z: np.ndarray = pre[k][t] + h @ r.T
            p = self.peep[k]
            if p is not None and cell is not None:
                z = z + p * cell
            if use_ln:
                z = _layer_norm(z) * self.ln[k] + self.b[k]
            return z

        for t in steps:
            f = _sigmoid(gate(1, t, c))
            i = 1.0 - f if self.cifg else _sigmoid(gate(0, t, c))
            g = _apply(gate(2, t, None), act)
            c = f * c + i * g
            if cell_clip > 0:
                c = np.clip(c, -cell_clip, cell_clip)
            o = _sigmoid(gate(3, t, c))
            h = o * _apply(c, act)
            if self.proj_w is not None:
                h = h @ self.proj_w.T
                if self.proj_b is not None:
                    h = h + self.proj_b
                if proj_clip > 0:
                    h = np.clip(h, -proj_clip, proj_clip)
            h = h.astype(np.float32, copy=False)
            c = c.astype(np.float32, copy=False)
            out[t] = h
            last = np.concatenate([v for k, v in ((0, i), (1, f), (2, g), (3, o)) if k in gates], axis=1)
        return out, h, c, last


def _state(call: OpCall, x: object, i: int) -> np.ndarray:
    v = optional_tensor(x)
    if v is None or v.ndim != 2:
        call.fail(f"input {i} (a state) is required and must have rank 2")
    return v


def _clips(call: OpCall, cell_clip: object, proj_clip: object, i: int) -> tuple[float, float]:
    if not isinstance(cell_clip, (int, float)) or not isinstance(proj_clip, (int, float)) or cell_clip < 0 or proj_clip < 0:
        call.fail(f"inputs {i} and {i + 1} (cell and projection clip) must be non-negative numbers")
    return float(cell_clip), float(proj_clip)


# -- LSTM ---------------------------------------------------------------------------------


@kernel(Op.LSTM)
def prepare_lstm(call: OpCall) -> Kernel:
    call.expect_counts((23, 27), 4)
    t = expect_float_signature(call, {20: (T.INT32,), 21: (T.FLOAT32, T.FLOAT16), 22: (T.FLOAT32, T.FLOAT16)})
    call.expect_rank(0, 2)
    if call.const(20) is not None:
        _activation(call, call.const(20), 20)
    dtype = t.dtype
    ln = 23 if len(call.inputs) == 27 else None

    def run(*args: object) -> tuple[np.ndarray, ...]:
        x = optional_tensor(args[0])
        if x is None or x.ndim != 2:
            call.fail("input 0 must be [batch, input_size]")
        cell = _Cell(call, args, 1, ln, None)
        h, c = _state(call, args[18], 18), _state(call, args[19], 19)
        act = _activation(call, args[20], 20)
        cell_clip, proj_clip = _clips(call, args[21], args[22], 21)
        out, h, c, scratch = cell.run(x[None], h, c, act, cell_clip, proj_clip)
        return scratch.astype(dtype), h.astype(dtype), c.astype(dtype), out[0].astype(dtype)

    return run


@kernel(Op.UNIDIRECTIONAL_SEQUENCE_LSTM)
def prepare_unidirectional_lstm(call: OpCall) -> Kernel:
    call.expect_counts((24, 28), (1, 3))
    scalars = {20: (T.INT32,), 21: (T.FLOAT32, T.FLOAT16), 22: (T.FLOAT32, T.FLOAT16), 23: (T.BOOL,)}
    t = expect_float_signature(call, scalars)
    call.expect_rank(0, 3)
    if call.const(20) is not None:
        _activation(call, call.const(20), 20)
    dtype = t.dtype
    ln = 24 if len(call.inputs) == 28 else None
    n_out = len(call.outputs)

    def run(*args: object) -> np.ndarray | tuple[np.ndarray, ...]:
        x = optional_tensor(args[0])
        if x is None or x.ndim != 3:
            call.fail("input 0 must have rank 3")
        cell = _Cell(call, args, 1, ln, None)
        h, c = _state(call, args[18], 18), _state(call, args[19], 19)
        act = _activation(call, args[20], 20)
        cell_clip, proj_clip = _clips(call, args[21], args[22], 21)
        time_major = bool(args[23])
        xt = x if time_major else x.transpose(1, 0, 2)
        out, h, c, _ = cell.run(xt, h, c, act, cell_clip, proj_clip)
        y = np.ascontiguousarray(out if time_major else out.transpose(1, 0, 2), dtype=dtype)
        return (y, h.astype(dtype), c.astype(dtype)) if n_out == 3 else y

    return run


@kernel(Op.BIDIRECTIONAL_SEQUENCE_LSTM)
def prepare_bidirectional_lstm(call: OpCall) -> Kernel:
    call.expect_counts(61, (1, 2, 5, 6))
    scalars = {48: (T.INT32,), 49: (T.FLOAT32, T.FLOAT16), 50: (T.FLOAT32, T.FLOAT16), 51: (T.BOOL,), 52: (T.BOOL,)}
    t = expect_float_signature(call, scalars)
    call.expect_rank(0, 3)
    if call.const(48) is not None:
        _activation(call, call.const(48), 48)
    if call.const(51) is not None:
        check_merge_outputs(call, call.const(51), 4)
    n_out = len(call.outputs)
    dtype = t.dtype

    def run(*args: object) -> np.ndarray | tuple[np.ndarray, ...]:
        x = optional_tensor(args[0])
        if x is None or x.ndim != 3:
            call.fail("input 0 must have rank 3")
        fw = _Cell(call, args, 1, 53, 40)
        bw = _Cell(call, args, 18, 57, 44)
        fw_h, fw_c = _state(call, args[35], 35), _state(call, args[36], 36)
        bw_h, bw_c = _state(call, args[37], 37), _state(call, args[38], 38)
        aux = optional_tensor(args[39])
        act = _activation(call, args[48], 48)
        cell_clip, proj_clip = _clips(call, args[49], args[50], 49)
        merge, time_major = bool(args[51]), bool(args[52])
        check_merge_outputs(call, merge, 4)
        xt = x if time_major else x.transpose(1, 0, 2)
        auxt = None if aux is None else (aux if time_major else aux.transpose(1, 0, 2))
        has_aux_w = fw.aux_w[1] is not None or bw.aux_w[1] is not None
        if has_aux_w and auxt is None:
            call.fail("auxiliary weights need an auxiliary input (input 39)")
        if auxt is not None and (auxt.ndim != 3 or auxt.shape[:2] != xt.shape[:2]):
            call.fail("input 39 (auxiliary input) must have the input's time and batch sizes")
        bw_x = xt
        if auxt is not None and not has_aux_w:
            bw_x, auxt = auxt, None  # parallel linking
        if auxt is not None:
            fw.check_aux(auxt.shape[2])
            bw.check_aux(auxt.shape[2])
        fw_out, fw_h, fw_c, _ = fw.run(xt, fw_h, fw_c, act, cell_clip, proj_clip, aux=auxt)
        bw_out, bw_h, bw_c, _ = bw.run(bw_x, bw_h, bw_c, act, cell_clip, proj_clip, aux=auxt, reverse=True)
        return bidirectional_outputs(fw_out, bw_out, [fw_h, fw_c, bw_h, bw_c], merge, time_major, n_out, dtype)

    return run
from nnrt.ops import lstm_quant as _lstm_quant  # noqa: E402,F401
