"""The float LSTM kernels (``nnrt/ops/lstm.py``) against a per-gate float64 formula.

The kernel concatenates the gates' weights, runs the input projection of every time step as
one product before the loop and works in place; the formula here computes each gate on its
own, one time step at a time, as NNAPI states it. Covered: one time step, one batch row, one
unit, time-major and batch-major, CIFG, peepholes, projection with and without bias, cell and
projection clipping, layer normalization, every activation, NaN and infinity, a bidirectional
op with an auxiliary input, and weights given at execution (the cell made per execution)
against constant ones (the cell made at preparation): identical outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op

F = T.TENSOR_FLOAT32


@dataclass
class Lstm:
    """One direction's parameters, NNAPI's per-gate layout (gate order i, f, c, o)."""

    w: list[np.ndarray | None]
    r: list[np.ndarray | None]
    b: list[np.ndarray | None]
    peep: list[np.ndarray | None] = field(default_factory=lambda: [None] * 3)  # i, f, o
    proj_w: np.ndarray | None = None
    proj_b: np.ndarray | None = None
    ln: list[np.ndarray | None] = field(default_factory=lambda: [None] * 4)

    def inputs(self) -> list[np.ndarray | None]:
        """Inputs 1-17 of the sequence ops, in NNAPI's order."""
        return [*self.w, *self.r, *self.peep, *self.b, self.proj_w, self.proj_b]


def make(rng: np.random.Generator, n_in: int, units: int, n_out: int | None = None, *, cifg: bool = False,
         peephole: bool = False, proj_bias: bool = False, layer_norm: bool = False) -> Lstm:
    def m(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    gates = range(1, 4) if cifg else range(4)
    out = units if n_out is None else n_out
    p = Lstm([m(units, n_in) if k in gates else None for k in range(4)],
             [m(units, out) if k in gates else None for k in range(4)],
             [m(units) if k in gates else None for k in range(4)])
    if peephole:
        p.peep = [None if cifg else m(units), m(units), m(units)]
    if n_out is not None:
        p.proj_w = m(out, units)
        p.proj_b = m(out) if proj_bias else None
    if layer_norm:
        p.ln = [m(units) if k in gates else None for k in range(4)]
    return p


def reference(p: Lstm, x: np.ndarray, h: np.ndarray, c: np.ndarray, act: int, cell_clip: float = 0.0,
              proj_clip: float = 0.0, reverse: bool = False, aux: np.ndarray | None = None,
              aux_w: list[np.ndarray | None] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time-major ``x``: (outputs, h, c) in float64, one gate at a time."""
    f64 = np.float64

    def sig(v: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            out: np.ndarray = 1 / (1 + np.exp(-v))
        return out

    def activation(v: np.ndarray) -> np.ndarray:
        return {0: lambda: v, 1: lambda: np.maximum(v, 0), 2: lambda: np.clip(v, -1, 1), 3: lambda: np.clip(v, 0, 6),
                4: lambda: np.tanh(v), 6: lambda: sig(v)}[act]()

    def gate(k: int, xt: np.ndarray, at: np.ndarray | None, h: np.ndarray, cell: np.ndarray | None) -> np.ndarray:
        w, r = p.w[k], p.r[k]
        assert w is not None and r is not None
        z = xt @ w.T.astype(f64) + h @ r.T.astype(f64)
        if at is not None and aux_w is not None and aux_w[k] is not None:
            z = z + at @ aux_w[k].T.astype(f64)  # type: ignore[union-attr]
        pk = {0: p.peep[0], 1: p.peep[1], 3: p.peep[2]}.get(k)
        if pk is not None and cell is not None:
            z = z + pk * cell
        lnk = p.ln[k]
        if lnk is not None:
            mean = z.mean(axis=-1, keepdims=True)
            var = (z * z).mean(axis=-1, keepdims=True) - mean * mean
            z = (z - mean) / np.sqrt(var + 1e-8) * lnk
        return z + p.b[k]  # type: ignore[operator]

    h, c = h.astype(f64), c.astype(f64)
    outs = np.zeros((x.shape[0], x.shape[1], h.shape[1]))
    for t in range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0]):
        xt, at = x[t].astype(f64), None if aux is None else aux[t].astype(f64)
        f = sig(gate(1, xt, at, h, c))
        i = 1 - f if p.w[0] is None else sig(gate(0, xt, at, h, c))
        c = f * c + i * activation(gate(2, xt, at, h, None))
        if cell_clip > 0:
            c = np.clip(c, -cell_clip, cell_clip)
        h = sig(gate(3, xt, at, h, c)) * activation(c)
        if p.proj_w is not None:
            h = h @ p.proj_w.T.astype(f64) + (0 if p.proj_b is None else p.proj_b)
            if proj_clip > 0:
                h = np.clip(h, -proj_clip, proj_clip)
        outs[t] = h
    return outs, h, c


def _operand(m: Model, value: np.ndarray | None, const: bool, model_inputs: list[int],
             feeds: list[np.ndarray]) -> int:
    """An input operand: omitted (None), a constant or a model input fed ``value``."""
    if value is None:
        i = m.add_operand(F, [0])
        m.set_operand_value(i, None)
        return i
    i = m.add_operand(F, list(value.shape))
    if const:
        m.set_operand_value(i, value)
    else:
        model_inputs.append(i)
        feeds.append(value)
    return i


def _scalar(m: Model, t: T, value: object) -> int:
    i = m.add_operand(t, [])
    m.set_operand_value(i, value)
    return i


def run_unidirectional(p: Lstm, x: np.ndarray, h: np.ndarray, c: np.ndarray, act: int, *, time_major: bool = True,
                       cell_clip: float = 0.0, proj_clip: float = 0.0, const: bool = True) -> list[np.ndarray]:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM (three outputs) run on the CPU device."""
    m = Model()
    model_inputs: list[int] = []
    feeds: list[np.ndarray] = []
    ins = [_operand(m, x, False, model_inputs, feeds)]
    ins += [_operand(m, v, const, model_inputs, feeds) for v in p.inputs()]
    ins += [_operand(m, h, False, model_inputs, feeds), _operand(m, c, False, model_inputs, feeds)]
    ins += [_scalar(m, T.INT32, act), _scalar(m, T.FLOAT32, cell_clip), _scalar(m, T.FLOAT32, proj_clip),
            _scalar(m, T.BOOL, time_major)]
    if any(v is not None for v in p.ln):
        ins += [_operand(m, v, const, model_inputs, feeds) for v in p.ln]
    n_time, batch = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
    y_shape = [n_time, batch, h.shape[1]] if time_major else [batch, n_time, h.shape[1]]
    outs = [m.add_operand(F, y_shape), m.add_operand(F, list(h.shape)), m.add_operand(F, list(c.shape))]
    m.add_operation(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, outs)
    m.identify_inputs_and_outputs(model_inputs, outs)
    m.finish()
    return list(nnrt.CpuDevice().prepare_model_sync(m).execute_sync(feeds).outputs)


def check(got: list[np.ndarray], want: tuple[np.ndarray, ...], time_major: bool = True, tol: float = 2e-5) -> None:
    y, h, c = want
    if not time_major:
        y = y.transpose(1, 0, 2)
    for g, w in zip(got, (y, h, c)):
        assert g.dtype == np.float32 and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


VARIANTS = {
    "plain": {},
    "cifg": {"cifg": True},
    "peephole": {"peephole": True},
    "cifg-peephole": {"cifg": True, "peephole": True},
    "projection": {"n_out": 3},
    "projection-bias": {"n_out": 3, "proj_bias": True},
    "layer-norm": {"layer_norm": True},
    "layer-norm-cifg-peephole-projection": {"layer_norm": True, "cifg": True, "peephole": True, "n_out": 2,
                                            "proj_bias": True},
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("n_time", "batch", "n_in", "units"), [(1, 1, 3, 4), (5, 2, 3, 4), (4, 3, 2, 1), (3, 1, 1, 5)])
def test_variants_match_the_formula(variant: str, n_time: int, batch: int, n_in: int, units: int) -> None:
    rng = np.random.default_rng(n_time * 100 + batch * 10 + units)
    kw = dict(VARIANTS[variant])
    n_out = int(kw.pop("n_out", units))  # type: ignore[call-overload]
    p = make(rng, n_in, units, n_out if n_out != units else None, **kw)  # type: ignore[arg-type]
    x = rng.standard_normal((n_time, batch, n_in)).astype(np.float32)
    h = rng.standard_normal((batch, n_out)).astype(np.float32)
    c = rng.standard_normal((batch, units)).astype(np.float32)
    check(run_unidirectional(p, x, h, c, 4), reference(p, x, h, c, 4))


@pytest.mark.parametrize("act", [0, 1, 2, 3, 4, 6])
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("peephole", [True, False])  # sigmoids as 1 / (1 + exp(-z)) or 0.5 + 0.5 tanh(z / 2)
def test_activations_clips_and_layouts(act: int, time_major: bool, peephole: bool) -> None:
    rng = np.random.default_rng(act)
    p = make(rng, 3, 4, 2, peephole=peephole, proj_bias=True)
    x = (rng.standard_normal((6, 2, 3)) * 3).astype(np.float32)
    h, c = (rng.standard_normal((2, 2)) * 2).astype(np.float32), (rng.standard_normal((2, 4)) * 2).astype(np.float32)
    want = reference(p, x, h, c, act, cell_clip=0.7, proj_clip=0.4)
    xs = x if time_major else np.ascontiguousarray(x.transpose(1, 0, 2))
    got = run_unidirectional(p, xs, h, c, act, time_major=time_major, cell_clip=0.7, proj_clip=0.4)
    check(got, want, time_major)
    assert np.abs(got[2]).max() <= np.float32(0.7) and np.abs(got[0]).max() <= np.float32(0.4)


@pytest.mark.parametrize("variant", ["plain", "layer-norm-cifg-peephole-projection"])
def test_weights_given_at_execution_match_constant_ones(variant: str) -> None:
    rng = np.random.default_rng(7)
    kw = dict(VARIANTS[variant])
    n_out = kw.pop("n_out", None)
    p = make(rng, 3, 4, n_out, **kw)  # type: ignore[arg-type]
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    h = rng.standard_normal((2, 4 if n_out is None else n_out)).astype(np.float32)  # type: ignore[operator]
    c = rng.standard_normal((2, 4)).astype(np.float32)
    fixed, per_run = run_unidirectional(p, x, h, c, 4), run_unidirectional(p, x, h, c, 4, const=False)
    for a, b in zip(fixed, per_run):
        np.testing.assert_array_equal(a, b)
    check(per_run, reference(p, x, h, c, 4))


def test_nan_and_infinity_propagate() -> None:
    rng = np.random.default_rng(11)
    p = make(rng, 3, 4, peephole=True)
    x = rng.standard_normal((4, 3, 3)).astype(np.float32)
    x[1, 0, 2] = np.nan  # batch row 0 turns NaN from step 1 on
    x[2, 1, :] = np.inf  # row 1: +inf pre-activations of both signs give NaN or saturate
    h, c = np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32)
    got = run_unidirectional(p, x, h, c, 4)
    with np.errstate(all="ignore"):
        check(got, reference(p, x, h, c, 4))
    assert np.isnan(got[0][1:, 0]).all() and not np.isnan(got[0][0]).any()
    assert np.isfinite(got[0][:, 2]).all()  # the untouched row stays finite


def _bidirectional_model(fw: Lstm, bw: Lstm, x: np.ndarray, aux: np.ndarray | None,
                         aux_w: tuple[list[np.ndarray | None], ...], const: bool) -> tuple[Model, list[np.ndarray]]:
    """BIDIRECTIONAL_SEQUENCE_LSTM, time-major, separate outputs and final states; its feeds."""
    m = Model()
    model_inputs: list[int] = []
    feeds: list[np.ndarray] = []
    batch, units = x.shape[1], fw.b[1].shape[0]  # type: ignore[union-attr]
    zero = np.zeros((batch, units), np.float32)
    ins = [_operand(m, x, False, model_inputs, feeds)]
    ins += [_operand(m, v, const, model_inputs, feeds) for v in (*fw.inputs(), *bw.inputs())]
    ins += [_operand(m, zero, False, model_inputs, feeds) for _ in range(4)]
    ins += [_operand(m, aux, False, model_inputs, feeds)]
    ins += [_operand(m, v, const, model_inputs, feeds) for v in (*aux_w[0], *aux_w[1])]
    ins += [_scalar(m, T.INT32, 4), _scalar(m, T.FLOAT32, 0.0), _scalar(m, T.FLOAT32, 0.0),
            _scalar(m, T.BOOL, False), _scalar(m, T.BOOL, True)]
    ins += [_operand(m, None, const, model_inputs, feeds) for _ in range(8)]
    seq = [x.shape[0], batch, units]
    outs = [m.add_operand(F, seq), m.add_operand(F, seq)] + [m.add_operand(F, [batch, units]) for _ in range(4)]
    m.add_operation(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, outs)
    m.identify_inputs_and_outputs(model_inputs, outs)
    m.finish()
    return m, feeds


@pytest.mark.parametrize("const", [True, False], ids=["constant-weights", "run-time-weights"])
def test_bidirectional_with_auxiliary_input(const: bool) -> None:
    rng = np.random.default_rng(5)
    fw, bw = make(rng, 3, 4), make(rng, 3, 4, cifg=True)
    aux_w = ([(rng.standard_normal((4, 2)) * 0.5).astype(np.float32) for _ in range(4)],
             [None] + [(rng.standard_normal((4, 2)) * 0.5).astype(np.float32) for _ in range(3)])
    x, aux = rng.standard_normal((5, 2, 3)).astype(np.float32), rng.standard_normal((5, 2, 2)).astype(np.float32)
    model, feeds = _bidirectional_model(fw, bw, x, aux, aux_w, const)
    got = nnrt.CpuDevice().prepare_model_sync(model).execute_sync(feeds).outputs
    zero = np.zeros((2, 4), np.float32)
    fy, fh, fc = reference(fw, x, zero, zero, 4, aux=aux, aux_w=aux_w[0])
    by, bh, bc = reference(bw, x, zero, zero, 4, reverse=True, aux=aux, aux_w=aux_w[1])
    for g, w in zip(got, (fy, by, fh, fc, bh, bc)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_bad_constant_weights_fail_at_preparation() -> None:
    rng = np.random.default_rng(2)
    p = make(rng, 3, 4)
    p.r[2] = p.r[2][:, :3]  # type: ignore[index]
    x, h, c = np.zeros((2, 1, 3), np.float32), np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32)
    with pytest.raises(nnrt.InvalidArgumentError, match=r"shape \[4, 3\]; expected \[4, 4\]") as info:
        run_unidirectional(p, x, h, c, 4)
    assert info.value.status is nnrt.ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(nnrt.NnrtError, match=r"shape \[4, 3\]; expected \[4, 4\]"):  # the same check per execution
        run_unidirectional(p, x, h, c, 4, const=False)


def test_prepared_matrices_come_from_the_compilation_cache() -> None:
    # Both directions' packed input and recurrent matrices are recorded by a first preparation
    # and taken back (read-only, as the data cache maps them) by the next: the same outputs.
    from nnrt.ops._relay import RelayStore, relay_store

    rng = np.random.default_rng(8)
    fw, bw = make(rng, 3, 4), make(rng, 3, 4, cifg=True)
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    model, feeds = _bidirectional_model(fw, bw, x, None, ([None] * 4, [None] * 4), True)
    first = RelayStore()
    with relay_store(first):
        want = nnrt.CpuDevice().prepare_model_sync(model).execute_sync(feeds).outputs
    assert sorted(k for _, k in first.computed) == ["r_cat1", "r_cat18", "w_cat1", "w_cat18"]
    loaded = {k: v.copy() for k, v in first.computed.items()}
    for v in loaded.values():
        v.flags.writeable = False
    again = RelayStore(loaded)
    with relay_store(again):
        got = nnrt.CpuDevice().prepare_model_sync(model).execute_sync(feeds).outputs
    assert again.reused == 4 and not again.computed
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
