"""Compiled plan segments (``nnrt/execution/_compiled_plan.py``) against the step plan, bit for bit.

Each model is prepared twice on one device: with compiled segments and with ``NNRT_PLAN_JIT=0``
(the step plan, its steps the compiled 8-bit kernels), and both must give identical outputs:
the vendored microWakeWord models over a stream with the state carried, every quantized CTS
case whose operation a program runs (with segments of one step allowed, so that single-operation
cases are programs too), and small models built here for the data movements (concatenation
with a constant, a strided slice that becomes a gather, a transpose, a reshape shared by two
outputs), float inputs, strided and read-only inputs. Then what is not lowered: a dynamic
shape, compiled kernels switched off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.conformance import load_spec
from nnrt.conformance._cts import build_model, case_inputs
from nnrt.errors import GeneralFailureError
from nnrt.execution import PreparedModel, _compiled_plan
from nnrt.ops import _jit
from tests.unit.test_jit_quant import QUANT_CASES

pytest.importorskip("numba")

MODELS = ["microwakeword_hey_jarvis", "microwakeword_hey_mycroft", "microwakeword_okay_nabu"]


def _segments(p: PreparedModel) -> int:
    return sum(s.label.startswith("compiled:") for s in p.plan.steps)


@pytest.fixture
def both(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> Callable[[Model], tuple[PreparedModel, PreparedModel]]:
    """Prepare a model with compiled segments and without (``NNRT_PLAN_JIT=0``)."""

    def prepare(m: Model) -> tuple[PreparedModel, PreparedModel]:
        _jit.reset_for_tests()
        monkeypatch.delenv("NNRT_JIT", raising=False)
        monkeypatch.delenv("NNRT_PLAN_JIT", raising=False)
        fast = device.prepare_model_sync(m)
        monkeypatch.setenv("NNRT_PLAN_JIT", "0")
        slow = device.prepare_model_sync(m)
        monkeypatch.delenv("NNRT_PLAN_JIT")
        return fast, slow

    return prepare


def _same(fast: PreparedModel, slow: PreparedModel, inputs: list[Any]) -> list[np.ndarray]:
    a, b = fast.execute_sync(inputs).outputs, slow.execute_sync(inputs).outputs
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)
    return a


@pytest.mark.parametrize("name", MODELS)
def test_streaming_models_run_as_one_step_bit_identical(both: Any, name: str) -> None:
    """The whole plan is one compiled step; 30 steps with the state carried give the step plan's bits."""
    from nnrt.bench._inputs import input_specs, make_inputs, open_model, with_initial_state
    from nnrt.importers import state_variables

    model = open_model(f"tests/data/models/{name}.tflite").model
    fast, slow = both(model)
    assert len(fast.plan.steps) == 1 and _segments(fast) == 1, [s.label for s in fast.plan.steps]
    assert len(slow.plan.steps) == len(model.operations) and _segments(slow) == 0
    specs = input_specs(model)
    inputs = with_initial_state(model, make_inputs(specs, seed=0))
    state = state_variables(model)
    rng = np.random.default_rng(0)
    for step in range(30):
        out = _same(fast, slow, inputs)
        inputs = make_inputs(specs, seed=step + 1)
        for var in state:  # the state carried, and now and then a random one (saturating values)
            inputs[var.input] = out[var.output] if step % 5 else rng.integers(-128, 128, out[var.output].shape,
                                                                                dtype=np.int64).astype(out[var.output].dtype)
        assert not any(np.shares_memory(x, y) for k, x in enumerate(out) for y in out[k + 1:])


def test_quantized_cts_cases_as_programs_bit_identical(both: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every quantized CTS case of the operations programs run (CONV_2D, DEPTHWISE_CONV_2D,
    FULLY_CONNECTED, QUANTIZE, DEQUANTIZE, LOGISTIC, the data movements...), as a program of one
    step or more: outputs identical to the step plan's."""
    monkeypatch.setattr(_compiled_plan, "MIN_STEPS", 1)
    lowered = 0
    by_spec: dict[str, list[dict[str, Any]]] = {}
    for spec, k in QUANT_CASES:
        case = by_spec.setdefault(spec, load_spec(spec))[k]
        fast, slow = both(build_model(case))
        lowered += _segments(fast) > 0
        _same(fast, slow, case_inputs(case))
    assert lowered > 100, lowered


def _movements_model(signed: bool) -> Model:
    """x [1,6,1,4] -> CONCATENATION(const [1,2,1,4], x) -> STRIDED_SLICE stride 2 on axes 1 and 3
    -> TRANSPOSE -> RESHAPE, returned twice (the second a RESHAPE of the same bytes) and a
    LOGISTIC of it."""
    t = T.TENSOR_QUANT8_ASYMM_SIGNED if signed else T.TENSOR_QUANT8_ASYMM
    zp = -3 if signed else 125
    m = Model()

    def const(kind: T, value: Any, dims: list[int] | None = None) -> int:
        i = m.add_operand(kind, dims) if dims is not None else m.add_operand(kind)
        m.set_operand_value(i, value)
        return i

    x = m.add_operand(t, [1, 6, 1, 4], 0.5, zp)
    c = m.add_operand(t, [1, 2, 1, 4], 0.5, zp)
    m.set_operand_value(c, np.arange(8, dtype=t.dtype).reshape(1, 2, 1, 4))
    cat = m.add_operand(t, [1, 8, 1, 4], 0.5, zp)
    m.add_operation(Op.CONCATENATION, [c, x, const(T.INT32, 1)], [cat])
    sl = m.add_operand(t, [1, 4, 1, 2], 0.5, zp)
    m.add_operation(Op.STRIDED_SLICE, [cat, const(T.TENSOR_INT32, np.array([0, 0, 0, 1], np.int32), [4]),
                                       const(T.TENSOR_INT32, np.array([1, 8, 1, 4], np.int32), [4]),
                                       const(T.TENSOR_INT32, np.array([1, 2, 1, 2], np.int32), [4]),
                                       const(T.INT32, 0), const(T.INT32, 0), const(T.INT32, 0)], [sl])
    tr = m.add_operand(t, [2, 1, 4, 1], 0.5, zp)
    m.add_operation(Op.TRANSPOSE, [sl, const(T.TENSOR_INT32, np.array([3, 2, 1, 0], np.int32), [4])], [tr])
    flat = m.add_operand(t, [8], 0.5, zp)
    m.add_operation(Op.RESHAPE, [tr, const(T.TENSOR_INT32, np.array([8], np.int32), [1])], [flat])
    again = m.add_operand(t, [2, 4], 0.5, zp)
    m.add_operation(Op.RESHAPE, [flat, const(T.TENSOR_INT32, np.array([2, 4], np.int32), [2])], [again])
    sig = m.add_operand(t, [8], 1 / 256, -128 if signed else 0)
    m.add_operation(Op.LOGISTIC, [flat], [sig])
    m.identify_inputs_and_outputs([x], [flat, again, sig])
    m.finish()
    return m


@pytest.mark.parametrize(("signed", "gather"), [(True, False), (False, False), (True, True)])
def test_data_movements_and_shared_bytes(both: Any, monkeypatch: pytest.MonkeyPatch, signed: bool, gather: bool) -> None:
    if gather:  # the strided slice and the transpose (8 runs of one element each) as gathers
        monkeypatch.setattr(_compiled_plan, "_MAX_RUNS", 4)
    fast, slow = both(_movements_model(signed))
    assert len(fast.plan.steps) == 1 and _segments(fast) == 1
    dtype = np.int8 if signed else np.uint8
    x = np.random.default_rng(1).integers(0, 100, (1, 6, 1, 4)).astype(dtype)
    out = _same(fast, slow, [x])
    assert not np.shares_memory(out[0], out[1])  # the second output shares the first's bytes: copied
    out[0][:] = 0  # outputs are the caller's own: the next execution's share nothing with them
    again = _same(fast, slow, [x])
    assert not any(np.shares_memory(a, b) for a in out for b in again)
    assert fast._all_fresh and not slow._all_fresh  # handed out without a copy (Step.fresh)
    # a strided input and a read-only one
    wide = np.zeros((1, 6, 2, 4), dtype)
    wide[:, :, 0] = x[:, :, 0]
    _same(fast, slow, [wide[:, :, :1]])
    frozen = x.copy()
    frozen.flags.writeable = False
    _same(fast, slow, [frozen])
    # what the program cannot take (never from a validated request): refused, naming the operand
    for bad in (np.zeros(3, dtype), None, np.zeros((1, 6, 1, 4), np.int16)):
        with pytest.raises(GeneralFailureError, match="operand 0 is"):
            fast.plan.steps[0].fn(bad)


def _float_model() -> Model:
    """float32 x [1,3] -> QUANTIZE -> FULLY_CONNECTED -> DEQUANTIZE: a float input (wider than a
    byte: the inputs are placed 16-aligned) and a float output."""
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 3])
    q = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 3], 0.05, 128)
    m.add_operation(Op.QUANTIZE, [x], [q])
    w = m.add_operand(T.TENSOR_QUANT8_ASYMM, [2, 3], 0.02, 120)
    m.set_operand_value(w, np.array([[1, 50, 200], [255, 0, 128]], np.uint8))
    b = m.add_operand(T.TENSOR_INT32, [2], 0.05 * 0.02, 0)
    m.set_operand_value(b, np.array([10, -300], np.int32))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    y = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 2], 0.1, 100)
    m.add_operation(Op.FULLY_CONNECTED, [q, w, b, act], [y])
    f = m.add_operand(T.TENSOR_FLOAT32, [1, 2])
    m.add_operation(Op.DEQUANTIZE, [y], [f])
    m.identify_inputs_and_outputs([x], [f, y])
    m.finish()
    return m


def test_float_inputs_and_outputs(both: Any) -> None:
    fast, slow = both(_float_model())
    assert _segments(fast) == 1
    rng = np.random.default_rng(2)
    for _ in range(20):
        _same(fast, slow, [(rng.standard_normal((1, 3)) * 8).astype(np.float32)])
    _same(fast, slow, [np.array([[np.nan, np.inf, -np.inf]], np.float32)])


def test_profile_reports_the_segment_as_one_step(both: Any) -> None:
    """The interpreter's per-step timer sees one step, named for its operations; ``nnrt bench
    --profile`` counts it under its own type."""
    from nnrt.execution._interpreter import ExecContext, run_plan

    fast, _ = both(_float_model())
    (step,) = fast.plan.steps
    assert step.label.startswith("compiled: operations 0-2 (3 ops: ") and "FULLY_CONNECTED x1" in step.label
    ctx = ExecContext(profile={})
    with pytest.raises(StopIteration) as done:
        next(run_plan(fast.plan, [np.ones((1, 3), np.float32)], ctx))
    assert list(ctx.profile or {}) == [id(step)] and len(done.value.value) == 2
    from nnrt.bench import profile_plan

    prof = profile_plan(fast.plan, [np.ones((1, 3), np.float32)], runs=2, warmup=1)
    assert [t.op_type for t in prof.op_types] == [_compiled_plan.SEGMENT_TYPE]


def test_not_lowered_dynamic_shapes_and_switched_off(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, [0, 4], 0.5, 3)
    y = m.add_operand(T.TENSOR_QUANT8_ASYMM, [0, 4], 1 / 256, 0)
    z = m.add_operand(T.TENSOR_QUANT8_ASYMM, [0, 4], 1 / 256, 0)
    m.add_operation(Op.LOGISTIC, [x], [y])
    m.add_operation(Op.LOGISTIC, [y], [z])
    m.identify_inputs_and_outputs([x], [z])
    m.finish()
    assert _segments(device.prepare_model_sync(m)) == 0  # unknown dimensions: the step plan
    monkeypatch.setenv("NNRT_JIT", "0")
    _jit.reset_for_tests()
    try:
        assert not _compiled_plan.enabled()
        assert _segments(device.prepare_model_sync(_float_model())) == 0
    finally:
        monkeypatch.delenv("NNRT_JIT")
        _jit.reset_for_tests()
    monkeypatch.setenv("NNRT_PLAN_JIT", "off")
    assert not _compiled_plan.enabled()
