"""Recurrent and lookup kernels through the public API: RNN against its numpy formula, an LSTM
step with omitted (CIFG) inputs, lookups, seeded RANDOM_MULTINOMIAL, FarmHash and the
fixed-point gate functions, and bad signatures rejected with INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.ops.lookup import fingerprint64
from nnrt.ops.lstm_quant import fixed_logistic, fixed_tanh
from tests.helpers import rejected

Spec = tuple[T, Sequence[int]] | tuple[T, Sequence[int], object]


def build(op: Op, inputs: Sequence[Spec], outputs: Sequence[tuple[T, Sequence[int]]],
          quant: dict[int, tuple[float, int]] | None = None) -> tuple[Model, int]:
    """A one-operation model; a third item in an input spec makes it a constant. Returns the
    model and the number of model inputs."""
    m = Model()
    quant = quant or {}
    ins, model_inputs = [], []
    for k, spec in enumerate(inputs):
        i = m.add_operand(spec[0], list(spec[1]), *quant.get(k, (0.0, 0)))
        if len(spec) == 3:
            m.set_operand_value(i, spec[2])
        else:
            model_inputs.append(i)
        ins.append(i)
    outs = [m.add_operand(t, list(d), *quant.get(100 + j, (0.0, 0))) for j, (t, d) in enumerate(outputs)]
    m.add_operation(op, ins, outs)
    m.identify_inputs_and_outputs(model_inputs, outs)
    m.finish()
    return m, len(model_inputs)


F = T.TENSOR_FLOAT32


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 5), st.sampled_from([0, 1, 3]), st.integers(0, 2**31))
def test_rnn_matches_formula(batch: int, n_in: int, units: int, act: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=(batch, n_in)).astype(np.float32), rng.normal(size=(units, n_in)).astype(np.float32)
    r, b = rng.normal(size=(units, units)).astype(np.float32), rng.normal(size=units).astype(np.float32)
    h = rng.normal(size=(batch, units)).astype(np.float32)
    m, _ = build(Op.RNN, [(F, x.shape), (F, w.shape), (F, r.shape), (F, b.shape), (F, h.shape), (T.INT32, [], act)],
                 [(F, (batch, units)), (F, (batch, units))])
    state, out = nnrt.CpuDevice().prepare_model_sync(m).execute_sync([x, w, r, b, h]).outputs
    want = x @ w.T + h @ r.T + b
    want = {0: want, 1: np.maximum(want, 0), 3: np.clip(want, 0, 6)}[act]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(state, out)


def test_lstm_cifg_step_with_omitted_inputs(device: nnrt.CpuDevice) -> None:
    batch, n_in, units = 1, 2, 3
    rng = np.random.default_rng(0)
    specs: list[Spec] = [(F, (batch, n_in))]
    specs += [(F, (units, n_in))] * 4 + [(F, (units, units))] * 4 + [(F, (units,))] * 3 + [(F, (units,))] * 4
    specs += [(F, (units, units)), (F, (units,)), (F, (batch, units)), (F, (batch, units))]
    specs += [(T.INT32, [], 4), (T.FLOAT32, [], 0.0), (T.FLOAT32, [], 0.0)]
    m, n = build(Op.LSTM, specs, [(F, (batch, units * 3)), (F, (batch, units)), (F, (batch, units)), (F, (batch, units))])
    values: list[np.ndarray | None] = [rng.normal(size=s[1]).astype(np.float32) for s in specs[:n]]
    for omitted in (1, 5, 9, 10, 11, 12, 16, 17):  # CIFG, no peephole, no projection
        values[omitted] = None
    x, wf, wc, wo, rf, rc, ro = (values[i] for i in (0, 2, 3, 4, 6, 7, 8))
    bf, bc, bo, h, c = (values[i] for i in (13, 14, 15, 18, 19))
    scratch, h_out, c_out, out = device.prepare_model_sync(m).execute_sync(values).outputs

    def sig(v: np.ndarray) -> np.ndarray:
        out: np.ndarray = 1 / (1 + np.exp(-v))
        return out

    f = sig(x @ wf.T + h @ rf.T + bf)  # type: ignore[union-attr]
    g = np.tanh(x @ wc.T + h @ rc.T + bc)  # type: ignore[union-attr]
    c_want = f * c + (1 - f) * g
    h_want = sig(x @ wo.T + h @ ro.T + bo) * np.tanh(c_want)  # type: ignore[union-attr]
    np.testing.assert_allclose(c_out, c_want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, h_want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(h_out, out)
    assert scratch.shape == (batch, units * 3)


def test_embedding_and_hashtable_lookup(device: nnrt.CpuDevice) -> None:
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    m, _ = build(Op.EMBEDDING_LOOKUP, [(T.TENSOR_INT32, [2]), (F, [3, 4])], [(F, [2, 4])])
    out = device.prepare_model_sync(m).execute_sync([np.array([2, 0], np.int32), table]).outputs[0]
    np.testing.assert_array_equal(out, table[[2, 0]])
    with pytest.raises(nnrt.InvalidArgumentError, match="out of range"):
        device.prepare_model_sync(m).execute_sync([np.array([3, 0], np.int32), table])

    m, _ = build(Op.HASHTABLE_LOOKUP, [(T.TENSOR_INT32, [3]), (T.TENSOR_INT32, [3]), (F, [3, 4])],
                 [(F, [3, 4]), (T.TENSOR_QUANT8_ASYMM, [3])], {101: (1.0, 0)})
    keys = np.array([-5, 7, 9], np.int32)
    out, hits = device.prepare_model_sync(m).execute_sync([np.array([9, 8, -5], np.int32), keys, table]).outputs
    np.testing.assert_array_equal(hits, [1, 0, 1])
    np.testing.assert_array_equal(out, [table[2], np.zeros(4), table[0]])


def test_random_multinomial_is_seeded(device: nnrt.CpuDevice) -> None:
    logits = np.log(np.array([[0.7, 0.2, 0.1]], np.float32))
    m, _ = build(Op.RANDOM_MULTINOMIAL, [(F, [1, 3]), (T.INT32, [], 4000), (T.TENSOR_INT32, [2])],
                 [(T.TENSOR_INT32, [1, 4000])])
    prepared = device.prepare_model_sync(m)
    a = prepared.execute_sync([logits, np.array([1, 2], np.int32)]).outputs[0]
    b = prepared.execute_sync([logits, np.array([1, 2], np.int32)]).outputs[0]
    c = prepared.execute_sync([logits, np.array([1, 3], np.int32)]).outputs[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_allclose(np.bincount(a[0], minlength=3) / 4000, [0.7, 0.2, 0.1], atol=0.03)


def test_fingerprint64_known_values() -> None:
    assert fingerprint64(b"") == 0x9AE16A3B2F90404F  # farmhashna's k2 for the empty string
    long = bytes(range(200))
    assert fingerprint64(long) != fingerprint64(long[:-1] + b"\x00")


def test_fixed_point_gates_track_floats() -> None:
    raw = np.arange(-32768, 32768, 37, dtype=np.int64)
    real = raw / 4096.0  # 3 integer bits
    assert np.abs(fixed_logistic(raw, 3) / 32768 - 1 / (1 + np.exp(-real))).max() < 5e-4
    assert np.abs(fixed_tanh(raw, 3) / 32768 - np.tanh(real)).max() < 5e-4


def test_bad_signatures(device: nnrt.CpuDevice) -> None:
    rnn_5 = [(F, [1, 2]), (F, [3, 2]), (F, [3, 3]), (F, [3]), (F, [1, 3])]
    rejected(device, lambda: build(Op.RNN, rnn_5, [(F, [1, 3]), (F, [1, 3])])[0], "takes 6 inputs")
    rejected(device, lambda: build(Op.EMBEDDING_LOOKUP, [(F, [2]), (F, [3, 4])], [(F, [2, 4])])[0], "TENSOR_INT32")
    m, _ = build(Op.LSH_PROJECTION, [(F, [4, 2]), (T.TENSOR_INT32, [3, 2]), (F, [3]), (T.INT32, [], 7)],
                 [(T.TENSOR_INT32, [4])])
    rejected(device, m, "LSH projection type")
    m, _ = build(Op.SVDF, [(F, [2, 3]), (F, [4, 3]), (F, [4, 10]), (F, [4]), (F, [2, 40]), (T.INT32, [], 3),
                           (T.INT32, [], 0)], [(F, [2, 40]), (F, [2, 4])])
    rejected(device, m, "rank 3 must be positive and divide")
    q8: Spec = (T.TENSOR_QUANT8_ASYMM, [1, 2])
    specs: list[Spec] = [q8]
    specs += [(T.TENSOR_QUANT8_ASYMM, [4, 2])] * 4 + [(T.TENSOR_QUANT8_ASYMM, [4, 4])] * 4
    specs += [(T.TENSOR_INT32, [4])] * 4
    specs += [(T.TENSOR_QUANT16_SYMM, [1, 4]), (T.TENSOR_QUANT8_ASYMM, [1, 4])]
    quant = {0: (0.5, 128), **{k: (0.01, 100) for k in range(1, 9)}, **{k: (0.01 / 128, 0) for k in range(9, 13)},
             13: (1 / 2048, 0), 14: (1 / 128, 128), 100: (1 / 2048, 0), 101: (1 / 128, 128)}
    m, _ = build(Op.QUANTIZED_16BIT_LSTM, specs, [(T.TENSOR_QUANT16_SYMM, [1, 4]), (T.TENSOR_QUANT8_ASYMM, [1, 4])], quant)
    rejected(device, m, "scale 1/128 and zero point 128")
