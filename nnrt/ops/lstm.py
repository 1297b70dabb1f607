"""Float LSTM cells: LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM.

One ``_Cell`` holds a direction's float32 parameters (float16 models compute in float32) and
runs it over a time-major sequence. Its gates' weights are concatenated and transposed once
(made at preparation when they are constants, as in every imported model): the input
projection of all time steps is one GEMM before the loop, each step one ``h @ recurrent`` for
all gates, then the gate functions and the state update in place in per-call buffers. On
ddddocr's bidirectional LSTM (32 steps, 512 units) a step is memory-bound on the 4 MB of
recurrent weights (about 140 us): one direction takes 6.2 ms against 7.3 ms for per-gate
products and fresh temporaries and 5.5 ms in ONNX Runtime (``benchmarks/lstm.py``; 16 steps of
batch 8 and 128 units: 0.43 against 0.63 and 0.24 ms). A numba loop for the gates measured no
faster (its ``exp`` is scalar: 6.5 against 6.0 ms at 512 units, 14 against 15 us for one step
of 128 units), so numpy's kernel is the only one; its products are the backend's
(``_gemm.product``: MKL's or numpy's).

The variants NNAPI allows are all optional inputs: CIFG (no input gate weights: the input gate
is ``1 - forget``), peepholes (``cell_to_*``), projection (with optional bias), layer
normalization (per-gate weights; the gate's pre-activation is normalized to zero mean and unit
variance, scaled, then biased), cell and projection clipping (0 = off), and auxiliary inputs
(bidirectional only; without auxiliary weights the auxiliary input feeds the backward cell:
"parallel linking"). Omitted optional inputs arrive as None or as empty tensors. The integer
LSTMs (QUANTIZED_16BIT_LSTM, QUANTIZED_LSTM) live in ``lstm_quant.py``, imported at the bottom.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnrt.ops._common import optional_tensor
from nnrt.ops._gemm import flush_subnormals, matmul, matmul_into, product
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops._relay import relaid
from nnrt.ops.recurrent import bidirectional_outputs, check_merge_outputs, expect_float_signature
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_LN_EPSILON = np.float32(1e-8)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` in place, in those float32 operations.

    Negated by a product: numpy 2.4's in-place ``np.negative`` reads a view with a 16-byte
    stride (one unit's column of the gates) as if it were contiguous.
    """
    np.multiply(x, np.float32(-1), out=x)
    np.exp(x, out=x)
    np.add(x, np.float32(1), out=x)
    np.reciprocal(x, out=x)
    return x


def _activation(call: OpCall, code: object, i: int) -> int:
    """LSTM activations: NONE, RELU, RELU1, RELU6, TANH (4) or SIGMOID (6)."""
    if not isinstance(code, int) or code not in (0, 1, 2, 3, 4, 6):
        call.fail(f"input {i}: activation {code!r} is not NONE, RELU, RELU1, RELU6, TANH or SIGMOID")
    return code


def _apply(x: np.ndarray, code: int) -> np.ndarray:
    """Activation ``code`` applied to ``x`` in place."""
    if code == 1:
        np.maximum(x, np.float32(0), out=x)
    elif code == 2:
        np.clip(x, np.float32(-1), np.float32(1), out=x)
    elif code == 3:
        np.clip(x, np.float32(0), np.float32(6), out=x)
    elif code == 4:
        np.tanh(x, out=x)
    elif code == 6:
        _sigmoid(x)
    return x


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> None:
    """Each row of the last axis normalized to zero mean and unit variance, scaled and biased, in place."""
    mean = x.mean(axis=-1, keepdims=True)
    var = (x * x).mean(axis=-1, keepdims=True) - mean * mean
    x -= mean
    x /= np.sqrt(var + _LN_EPSILON)
    x *= weight
    x += bias


def _packed(parts: Sequence[np.ndarray | None]) -> np.ndarray:
    """The present per-gate matrices ``[units, n]`` as one ``[n, gates * units]`` operand of
    ``rows @ packed`` (a fresh, aligned float32 array, subnormal values flushed to zero:
    ``_gemm.flush_subnormals``), or the vectors ``[units]`` as one ``[gates * units]``."""
    present = [p for p in parts if p is not None]
    if present[0].ndim == 1:
        return np.concatenate(present).astype(np.float32)
    return flush_subnormals(np.ascontiguousarray(np.concatenate(present).T, dtype=np.float32))


class _Cell:
    """One direction's parameters, read from the kernel's arguments and re-laid for the loop.

    ``first`` is the index of input_to_input_weights; the 17 inputs from there are the four
    input weights, four recurrent weights, three peepholes, four biases, projection weights
    and projection bias (NNAPI's order). ``ln`` and ``aux`` index the four layer-norm weights
    and the four auxiliary weights, when the operation has them.

    The gates' weights are concatenated (input gate, forget, output, cell: the sigmoid gates
    together; no input gate with CIFG) and transposed once, so a step is one product ``h @ recurrent`` for every gate and
    the input projection of all time steps is one GEMM before the loop. A cell whose
    parameters are all constants is made once, when the operation is prepared.
    """

    def __init__(self, call: OpCall, args: Sequence[object], first: int, ln: int | None, aux: int | None,
                 cached: bool = False) -> None:
        def get(i: int) -> np.ndarray | None:
            return optional_tensor(args[i]) if i < len(args) else None

        self.call = call
        self.mm = product()
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
        self.gates = 3 if self.cifg else 4
        # The output gate's sigmoid joins the input and forget gates' unless it must wait for
        # the new cell state (a peephole or layer normalization). When it joins them, their
        # weights and biases are halved (exactly: a power of two) and each sigmoid is
        # 0.5 + 0.5 * tanh(z / 2): one tanh pass over all the gates, 30-35% fewer numpy calls.
        self.late_o = self.peep[3] is not None or self.ln[1] is not None
        self.aux_cat: np.ndarray | None = None
        # A prepared cell's matrices come from (and go to) the compilation cache (``relaid``).
        self.w_cat = relaid(call, f"w_cat{first}", lambda: self._pack(self.w)) if cached else self._pack(self.w)
        self.r_cat = relaid(call, f"r_cat{first}", lambda: self._pack(self.r)) if cached else self._pack(self.r)
        gates = (self.gates, self.units)
        self.b_cat = self._pack(self.b).reshape(gates)
        self.ln_cat = _packed(_ifoc(self.ln)).reshape(gates) if self.ln[1] is not None else None
        self.proj_t = None if self.proj_w is None else np.ascontiguousarray(self.proj_w.T, dtype=np.float32)

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
            if self.aux_cat is None:  # once per cell (a prepared cell checks every execution's size)
                self.aux_cat = self._pack(self.aux_w)

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
        """Run over time-major ``x``; returns (outputs [time, batch, out], h, c, last gates
        [batch, gates * units] in the order i, f, o, c).

        The buffers are made per call (a prepared model may run in two threads at once): the
        gates' pre-activations ``z`` [batch, gates * units], the cell state and one temporary;
        every step works in them in place.
        """
        n_time, batch = x.shape[0], x.shape[1]
        if x.shape[-1] != self.input_size or h.shape != (batch, self.output_size) or c.shape != (batch, self.units):
            self.call.fail(
                f"input {list(x.shape)}, output state {list(h.shape)} and cell state {list(c.shape)} do not match "
                f"the weights ({self.units} units, input size {self.input_size}, output size {self.output_size})"
            )
        u, n = self.units, self.gates
        mm = self.mm
        pre = matmul(mm, x.reshape(n_time * batch, self.input_size), self.w_cat)
        if aux is not None and self.aux_cat is not None:
            pre += matmul(mm, aux.reshape(n_time * batch, aux.shape[-1]), self.aux_cat)
        if self.ln_cat is None:
            pre += self.b_cat.reshape(-1)
        pre = pre.reshape(n_time, batch, n * u)
        out = np.empty((n_time, batch, self.output_size), dtype=np.float32)
        z = np.zeros((batch, n * u), dtype=np.float32)
        zg = z.reshape(batch, n, u)  # gates i, f, o, c (no input gate with CIFG)
        c = np.array(c, dtype=np.float32)
        tmp = np.empty((batch, u), dtype=np.float32)
        f_gate, o_gate, g_gate = zg[:, n - 3], zg[:, n - 2], zg[:, n - 1]
        i_gate = tmp if self.cifg else zg[:, 0]
        sigmoids = zg[:, : n - 2] if self.late_o else zg[:, : n - 1]
        half = np.float32(0.5)
        for t in range(n_time - 1, -1, -1) if reverse else range(n_time):
            matmul_into(mm, h, self.r_cat, z)
            z += pre[t]
            if self.late_o:
                self._before_cell(zg, c)
                _sigmoid(sigmoids)
                _apply(g_gate, act)
            else:  # halved sigmoid gates: 0.5 + 0.5 * tanh
                if act == 4:
                    np.tanh(z, out=z)
                else:
                    np.tanh(sigmoids, out=sigmoids)
                    _apply(g_gate, act)
                sigmoids *= half
                sigmoids += half
            if self.cifg:
                np.subtract(np.float32(1), f_gate, out=tmp)
            c *= f_gate
            np.multiply(i_gate, g_gate, out=tmp)
            c += tmp
            if cell_clip > 0:
                np.clip(c, np.float32(-cell_clip), np.float32(cell_clip), out=c)
            if self.late_o:
                self._output_gate(o_gate, c, tmp)
            if act == 4:
                np.tanh(c, out=tmp)
            else:
                np.copyto(tmp, c)
                _apply(tmp, act)
            if self.proj_t is None:
                h = np.multiply(o_gate, tmp, out=out[t])
            else:
                tmp *= o_gate
                h = matmul_into(mm, tmp, self.proj_t, out[t])
                if self.proj_b is not None:
                    h += self.proj_b
                if proj_clip > 0:
                    np.clip(h, np.float32(-proj_clip), np.float32(proj_clip), out=h)
        return out, np.array(h, dtype=np.float32), c, z

    def _pack(self, parts: Sequence[np.ndarray | None]) -> np.ndarray:
        """Per-gate weights or biases as one operand in the loop's gate order; the sigmoid
        gates' halved unless the output gate comes late."""
        packed = _packed(_ifoc(parts))
        if not self.late_o:
            packed[..., : (self.gates - 1) * self.units] *= np.float32(0.5)
        return packed

    def _before_cell(self, zg: np.ndarray, c: np.ndarray) -> None:
        """Peepholes from the old cell state into the input and forget gates, then layer
        normalization of the input, forget and cell gates (each over its own units)."""
        n = self.gates
        for k, p in ((0, self.peep[0]), (n - 3, self.peep[1])):
            if p is not None:
                zg[:, k] += p * c
        if self.ln_cat is not None:
            _layer_norm(zg[:, : n - 2], self.ln_cat[: n - 2], self.b_cat[: n - 2])
            _layer_norm(zg[:, n - 1], self.ln_cat[n - 1], self.b_cat[n - 1])

    def _output_gate(self, o_gate: np.ndarray, c: np.ndarray, tmp: np.ndarray) -> None:
        """The output gate from the new cell state: peephole, layer normalization, sigmoid."""
        if self.peep[3] is not None:
            np.multiply(self.peep[3], c, out=tmp)
            o_gate += tmp
        if self.ln_cat is not None:
            n = self.gates
            _layer_norm(o_gate, self.ln_cat[n - 2], self.b_cat[n - 2])
        _sigmoid(o_gate)


def _ifoc(gates: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
    """NNAPI's gate order (input, forget, cell, output) as the loop's (input, forget, output, cell)."""
    return [gates[0], gates[1], gates[3], gates[2]]

def _state(call: OpCall, x: object, i: int) -> np.ndarray:
    v = optional_tensor(x)
    if v is None or v.ndim != 2:
        call.fail(f"input {i} (a state) is required and must have rank 2")
    return v


def _clips(call: OpCall, cell_clip: object, proj_clip: object, i: int) -> tuple[float, float]:
    if not isinstance(cell_clip, (int, float)) or not isinstance(proj_clip, (int, float)) or cell_clip < 0 or proj_clip < 0:
        call.fail(f"inputs {i} and {i + 1} (cell and projection clip) must be non-negative numbers")
    return float(cell_clip), float(proj_clip)


def _prepared_cell(call: OpCall, first: int, ln: int | None, aux: int | None) -> _Cell | None:
    """The cell made once, at preparation, when every parameter it reads is a constant or
    omitted (as in imported models); None when one arrives at execution."""
    params = [*range(first, first + 17), *(range(ln, ln + 4) if ln is not None else ()),
              *(range(aux, aux + 4) if aux is not None else ())]
    if any(call.has_input(i) and call.const(i) is None for i in params):
        return None
    args = [call.const(i) if call.has_input(i) else None for i in range(len(call.inputs))]
    return _Cell(call, args, first, ln, aux, cached=True)


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
    fixed = _prepared_cell(call, 1, ln, None)

    def run(*args: object) -> tuple[np.ndarray, ...]:
        x = optional_tensor(args[0])
        if x is None or x.ndim != 2:
            call.fail("input 0 must be [batch, input_size]")
        cell = fixed or _Cell(call, args, 1, ln, None)
        h, c = _state(call, args[18], 18), _state(call, args[19], 19)
        act = _activation(call, args[20], 20)
        cell_clip, proj_clip = _clips(call, args[21], args[22], 21)
        out, h, c, gates = cell.run(x[None], h, c, act, cell_clip, proj_clip)
        scratch = gates.reshape(len(h), cell.gates, -1)[:, [0, 2, 1] if cell.cifg else [0, 1, 3, 2]]  # i, f, c, o
        return (scratch.reshape(len(h), -1).astype(dtype), h.astype(dtype, copy=False), c.astype(dtype, copy=False),
                out[0].astype(dtype))

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
    fixed = _prepared_cell(call, 1, ln, None)

    def run(*args: object) -> np.ndarray | tuple[np.ndarray, ...]:
        x = optional_tensor(args[0])
        if x is None or x.ndim != 3:
            call.fail("input 0 must have rank 3")
        cell = fixed or _Cell(call, args, 1, ln, None)
        h, c = _state(call, args[18], 18), _state(call, args[19], 19)
        act = _activation(call, args[20], 20)
        cell_clip, proj_clip = _clips(call, args[21], args[22], 21)
        time_major = bool(args[23])
        xt = x if time_major else x.transpose(1, 0, 2)
        out, h, c, _ = cell.run(xt, h, c, act, cell_clip, proj_clip)
        y = np.ascontiguousarray(out if time_major else out.transpose(1, 0, 2), dtype=dtype)
        return (y, h.astype(dtype, copy=False), c.astype(dtype, copy=False)) if n_out == 3 else y

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
    fixed = _prepared_cell(call, 1, 53, 40), _prepared_cell(call, 18, 57, 44)

    def run(*args: object) -> np.ndarray | tuple[np.ndarray, ...]:
        x = optional_tensor(args[0])
        if x is None or x.ndim != 3:
            call.fail("input 0 must have rank 3")
        fw = fixed[0] or _Cell(call, args, 1, 53, 40)
        bw = fixed[1] or _Cell(call, args, 18, 57, 44)
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
