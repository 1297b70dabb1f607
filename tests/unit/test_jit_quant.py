"""The compiled 8-bit kernels (``nnrt/ops/_jit_quant.py``) against the numpy kernels, bit for bit.

Both kernels of one model are prepared, once with compiled kernels (numba) and once with
``NNRT_JIT=0`` (numpy), and must give identical outputs: on edge shapes (one row, one column,
strides larger than the kernel, dilations, padding, batches, depth multipliers, per-tensor and
per-channel filters, extreme scales and zero points, saturation), on every quantized CTS case of
the operations they cover, and on a real int8 streaming model. The data-movement kernels that
remember their plan per shape (SLICE, STRIDED_SLICE, CONCATENATION) are covered by the CTS
cases too, and the calibration that lets such a plan run inline (its cold first run, when the
compiled kernels compile or load, is not counted) at the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.conformance import iter_specs, load_spec
from nnrt.conformance._cts import build_model, case_inputs, is_supported
from nnrt.execution import PreparedModel
from nnrt.ops import _jit, _jit_quant
from tests.unit.test_ops_conv_shapes import _in_dims, _out_size, _quant_model, _scalars, geometry

pytest.importorskip("numba")

COMPILED_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "QUANTIZE", "DEQUANTIZE", "ADD", "MUL", "LOGISTIC"}
PLANNED_OPS = {"SLICE", "STRIDED_SLICE", "CONCATENATION", "RESHAPE"}
RUNNERS = ("conv_runner.", "fc_runner.", "quantize_runner.", "dequantize_runner.")
QUANT8 = {"TENSOR_QUANT8_ASYMM", "TENSOR_QUANT8_ASYMM_SIGNED"}


def _prepare_both(device: nnrt.CpuDevice, m: Model) -> tuple[PreparedModel, PreparedModel]:
    """Prepare a model twice: with compiled kernels, and with ``NNRT_JIT=0`` (numpy)."""
    saved = os.environ.pop("NNRT_JIT", None)
    try:
        _jit.reset_for_tests()
        fast = device.prepare_model_sync(m)
        os.environ["NNRT_JIT"] = "0"
        _jit.reset_for_tests()
        slow = device.prepare_model_sync(m)
    finally:
        os.environ.pop("NNRT_JIT", None)
        if saved is not None:
            os.environ["NNRT_JIT"] = saved
        _jit.reset_for_tests()
    return fast, slow


@pytest.fixture
def both(device: nnrt.CpuDevice) -> Callable[[Model], tuple[PreparedModel, PreparedModel]]:
    return lambda m: _prepare_both(device, m)


def _compiled_steps(p: PreparedModel) -> int:
    return sum(s.fn is not None and s.fn.__qualname__.startswith(RUNNERS) for s in p.plan.steps)


def _same(fast: PreparedModel, slow: PreparedModel, inputs: list[Any]) -> None:
    a, b = fast.execute_sync(inputs).outputs, slow.execute_sync(inputs).outputs
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


@settings(max_examples=80, deadline=None)
@given(g=geometry, c=st.integers(1, 5), cout=st.integers(1, 4), depthwise=st.booleans(), mult=st.integers(1, 3),
       per_channel=st.booleans(), signed=st.booleans(), extreme=st.sampled_from(["none", "scale", "zero", "tiny"]))
def test_conv_and_depthwise_bit_identical(device: nnrt.CpuDevice, g: dict[str, Any], c: int, cout: int, depthwise: bool,
                                          mult: int, per_channel: bool, signed: bool, extreme: str) -> None:
    assume(min(_out_size(g)) > 0)
    g = {**g, "nchw": False}
    rng = np.random.default_rng(g["seed"])
    t = T.TENSOR_QUANT8_ASYMM_SIGNED if signed else T.TENSOR_QUANT8_ASYMM
    lo, hi = (-128, 127) if signed else (0, 255)
    co = c * mult if depthwise else cout
    xq = (0.1, int(rng.integers(lo, hi + 1)))
    yq = (0.05, int(rng.integers(lo, hi + 1)))
    if extreme == "scale":  # everything saturates
        yq = (1e-4, yq[1])
    elif extreme == "zero":  # zero points at the ends of the range
        xq, yq = (0.1, hi), (0.05, lo)
    elif extreme == "tiny":  # everything rounds to the zero point, halves included
        yq = (1e3, yq[1])
    wshape = (1, g["kh"], g["kw"], co) if depthwise else (cout, g["kh"], g["kw"], c)
    x = rng.integers(lo, hi + 1, (g["n"], g["h"], g["w"], c)).astype(t.dtype)
    if per_channel:
        wq = rng.integers(-127, 128, wshape).astype(np.int8)
        scales: np.ndarray | None = rng.uniform(0.002, 0.02, co)
        w_q: tuple[float, int] = (0.0, 0)
    else:
        scales, w_q = None, (0.01, int(rng.integers(lo, hi + 1)))
        wq = rng.integers(lo, hi + 1, wshape).astype(t.dtype)
    bias = rng.integers(-5000, 5000, co).astype(np.int32)
    op = Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D
    m = _quant_model(op, t, _in_dims(g, c), xq, wq, scales, w_q, bias, _scalars(g, mult if depthwise else None), yq)
    fast, slow = _prepare_both(device, m)
    assert _compiled_steps(fast) == 1 and _compiled_steps(slow) == 0
    _same(fast, slow, [x])


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize(("c", "cout", "hw", "k", "stride", "dil", "pads", "depthwise"), [
    (37, 20, (7, 5), (3, 3), 2, 1, (1, 1, 1, 1), False),  # K = 333: ten blocks of 32 and a tail, taps off the input
    (60, 60, (3, 1), (1, 1), 1, 1, (0, 0, 0, 0), False),  # the streaming 1x1 layers, three pixels
    (40, 30, (11, 1), (5, 1), 3, 1, (0, 0, 0, 0), False),  # the streaming first layer on a longer input
    (33, 33, (6, 5), (3, 3), 1, 2, (2, 2, 2, 2), True),  # depthwise, dilated, padded
    (60, 60, (23, 1), (21, 1), 1, 1, (0, 0, 0, 0), True),  # the streaming depthwise layer, three pixels
])
def test_streaming_channel_counts_bit_identical(device: nnrt.CpuDevice, c: int, cout: int, hw: tuple[int, int],
                                               k: tuple[int, int], stride: int, dil: int, pads: tuple[int, ...],
                                               depthwise: bool, signed: bool) -> None:
    """The channel counts of the streaming models (30-60, and odd ones), where the core's dot
    products run over several blocks of 32 and a zero-padded tail, with taps off the input."""
    rng = np.random.default_rng(c * 100 + cout)
    t = T.TENSOR_QUANT8_ASYMM_SIGNED if signed else T.TENSOR_QUANT8_ASYMM
    lo, hi = (-128, 127) if signed else (0, 255)
    g = {"n": 1, "h": hw[0], "w": hw[1], "kh": k[0], "kw": k[1], "sh": stride, "sw": stride, "dh": dil, "dw": dil,
         "pads": pads, "nchw": False, "act": 1}
    wshape = (1, *k, cout) if depthwise else (cout, *k, c)
    wq = rng.integers(lo, hi + 1, wshape).astype(t.dtype)
    bias = rng.integers(-20000, 20000, cout).astype(np.int32)
    op = Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D
    m = _quant_model(op, t, _in_dims(g, c), (0.1, int(rng.integers(lo, hi + 1))), wq, None,
                     (0.01, int(rng.integers(lo, hi + 1))), bias, _scalars(g, cout // c if depthwise else None),
                     (0.5, int(rng.integers(lo, hi + 1))))
    fast, slow = _prepare_both(device, m)
    assert _compiled_steps(fast) == 1 and _compiled_steps(slow) == 0
    for _ in range(3):
        _same(fast, slow, [rng.integers(lo, hi + 1, (1, *hw, c)).astype(t.dtype)])


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 4), k=st.integers(1, 70), units=st.integers(1, 9), act=st.integers(0, 3),
       signed=st.booleans(), seed=st.integers(0, 2**16))
def test_fully_connected_bit_identical(device: nnrt.CpuDevice, rows: int, k: int, units: int, act: int, signed: bool,
                                       seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = T.TENSOR_QUANT8_ASYMM_SIGNED if signed else T.TENSOR_QUANT8_ASYMM
    lo, hi = (-128, 127) if signed else (0, 255)
    m = Model()
    x = m.add_operand(t, [rows, k], 0.5, int(rng.integers(lo, hi + 1)))
    w = m.add_operand(t, [units, k], 0.25, int(rng.integers(lo, hi + 1)))
    m.set_operand_value(w, rng.integers(lo, hi + 1, (units, k)).astype(t.dtype))
    b = m.add_operand(T.TENSOR_INT32, [units], 0.125, 0)
    m.set_operand_value(b, rng.integers(-3000, 3000, units).astype(np.int32))
    a = m.add_operand(T.INT32)
    m.set_operand_value(a, act)
    y = m.add_operand(t, [rows, units], float(rng.uniform(0.5, 40.0)), int(rng.integers(lo, hi + 1)))
    m.add_operation(Op.FULLY_CONNECTED, [x, w, b, a], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    fast, slow = _prepare_both(device, m)
    assert _compiled_steps(fast) == 1 and _compiled_steps(slow) == 0
    _same(fast, slow, [rng.integers(lo, hi + 1, (rows, k)).astype(t.dtype)])


def _one_op(op: Op, src: tuple[T, float, int], dst: tuple[T, float, int], shape: list[int]) -> Model:
    m = Model()
    x = m.add_operand(src[0], shape, src[1], src[2])
    y = m.add_operand(dst[0], shape, dst[1], dst[2])
    m.add_operation(op, [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("scale", [1e-6, 0.00390625, 0.1, 3.0, 1e6])
def test_quantize_and_dequantize_bit_identical(device: nnrt.CpuDevice, signed: bool, scale: float) -> None:
    """Halves (round half away from zero), -0.0, saturation, infinities and NaN, odd shapes."""
    t = T.TENSOR_QUANT8_ASYMM_SIGNED if signed else T.TENSOR_QUANT8_ASYMM
    zp = -128 if signed else 0
    rng = np.random.default_rng(int(scale * 1000) + signed)
    special = np.array([0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e30, -1e30, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([special * np.float32(scale), rng.standard_normal(243).astype(np.float32) * np.float32(scale * 200)])
    x = x.reshape(2, 8, 1, 16)
    fast, slow = _prepare_both(device, _one_op(Op.QUANTIZE, (T.TENSOR_FLOAT32, 0.0, 0), (t, scale, zp), list(x.shape)))
    assert _compiled_steps(fast) == 1 and _compiled_steps(slow) == 0
    _same(fast, slow, [x])
    _same(fast, slow, [np.asfortranarray(x)])  # not C-contiguous
    q = rng.integers(-128 if signed else 0, 128 if signed else 256, (3, 5)).astype(t.dtype)
    fast, slow = _prepare_both(device, _one_op(Op.DEQUANTIZE, (t, scale, zp + 7), (T.TENSOR_FLOAT32, 0.0, 0), [3, 5]))
    assert _compiled_steps(fast) == 1 and _compiled_steps(slow) == 0
    _same(fast, slow, [q])


@settings(max_examples=30, deadline=None)
@given(op=st.sampled_from([Op.ADD, Op.SUB, Op.MUL]), shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
       broadcast=st.booleans(), act=st.integers(0, 3), signed=st.booleans(), seed=st.integers(0, 2**16))
def test_quantized_elementwise_lookups_bit_identical(device: nnrt.CpuDevice, op: Op, shape: list[int], broadcast: bool,
                                                     act: int, signed: bool, seed: int) -> None:
    """ADD/SUB/MUL (8-bit table lookups, compiled when shapes match) and LOGISTIC."""
    rng = np.random.default_rng(seed)
    t = T.TENSOR_QUANT8_ASYMM_SIGNED if signed else T.TENSOR_QUANT8_ASYMM
    lo, hi = (-128, 127) if signed else (0, 255)
    other = [1] * (len(shape) - 1) + shape[-1:] if broadcast else shape
    m = Model()
    a = m.add_operand(t, shape, 0.05, int(rng.integers(lo, hi + 1)))
    b = m.add_operand(t, other, 0.1, int(rng.integers(lo, hi + 1)))
    c = m.add_operand(T.INT32)
    m.set_operand_value(c, act)
    y = m.add_operand(t, shape, 0.2, int(rng.integers(lo, hi + 1)))
    z = m.add_operand(t, shape, 1 / 256, lo)
    m.add_operation(op, [a, b, c], [y])
    m.add_operation(Op.LOGISTIC, [y], [z])
    m.identify_inputs_and_outputs([a, b], [y, z])
    m.finish()
    fast, slow = _prepare_both(device, m)
    _same(fast, slow, [rng.integers(lo, hi + 1, shape).astype(t.dtype), rng.integers(lo, hi + 1, other).astype(t.dtype)])


def test_compiled_lookups_in_use() -> None:
    m = _one_op(Op.LOGISTIC, (T.TENSOR_QUANT8_ASYMM, 0.1, 3), (T.TENSOR_QUANT8_ASYMM, 1 / 256, 0), [2, 3])
    unary, binary = _jit_quant.table_lookups(m.operands[0], m.operands[1])
    assert unary.__qualname__.startswith("table_lookups.") and binary.__qualname__.startswith("table_lookups.")


def test_bad_runs_are_refused_as_by_the_numpy_kernel(both: Any) -> None:
    """The compiled run validates a new input shape with the numpy kernel's own checks."""
    rng = np.random.default_rng(1)
    t = T.TENSOR_QUANT8_ASYMM
    wq = rng.integers(0, 256, (2, 3, 3, 4)).astype(np.uint8)
    m = _quant_model(Op.CONV_2D, t, [0, 0, 0, 4], (0.1, 3), wq, None, (0.01, 7), np.zeros(2, np.int32),
                     [0, 0, 0, 0, 1, 1, 0, False, 1, 1], (0.05, 9))
    fast, slow = both(m)
    assert _compiled_steps(fast) == 1
    for p in (fast, slow):
        with pytest.raises(nnrt.InvalidArgumentError, match="does not fit"):
            p.execute_sync([np.zeros((1, 2, 2, 4), np.uint8)])
        out = p.execute_sync([np.zeros((0, 5, 5, 4), np.uint8)]).outputs[0]  # empty batch: the numpy kernel
        assert out.shape == (0, 3, 3, 2)
    _same(fast, slow, [rng.integers(0, 256, (2, 7, 5, 4)).astype(np.uint8)])
    _same(fast, slow, [rng.integers(0, 256, (1, 3, 9, 4)).astype(np.uint8)])
    _same(fast, slow, [rng.integers(0, 256, (1, 3, 9, 8)).astype(np.uint8)[..., ::2]])  # not contiguous


def _quant_cases() -> list[tuple[str, int]]:
    """(spec, case number) of every supported CTS case with an 8-bit quantized operand of the
    specs of the operations the compiled and the planned kernels cover (by spec name: many
    other specs also hold an ADD, which the CTS adds to turn a constant into an input)."""
    found = []
    names = (op.lower().replace("_2d", "2d").replace("concatenation", "concat") for op in COMPILED_OPS | PLANNED_OPS)
    prefixes = ("conv_", *names)
    for spec in iter_specs():
        if not spec.split("/")[1].startswith(prefixes):
            continue
        for k, case in enumerate(load_spec(spec)):
            types = {od["type"] for od in case["main"]["operands"]}
            if types & QUANT8 and not case["expect_failure"] and is_supported(case):
                found.append((spec, k))
    return found


QUANT_CASES = _quant_cases()


def test_cts_quantized_cases_bit_identical(both: Any) -> None:
    """Every quantized CTS case of these operations: compiled and numpy outputs identical (the
    CTS suite itself checks the compiled ones against the expected values)."""
    compiled_cases = 0
    by_spec: dict[str, list[dict[str, Any]]] = {}
    for spec, k in QUANT_CASES:
        case = by_spec.setdefault(spec, load_spec(spec))[k]
        fast, slow = both(build_model(case))
        compiled_cases += _compiled_steps(fast) > 0
        _same(fast, slow, case_inputs(case))
    assert len(QUANT_CASES) > 300 and compiled_cases > 150, (len(QUANT_CASES), compiled_cases)


def test_streaming_model_bit_identical_over_a_stream(both: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vendored microWakeWord model: 20 steps with the state carried, both paths (the step
    kernels: compiled segments, ``nnrt.execution._compiled_plan``, are tested on their own)."""
    from nnrt.bench._inputs import input_specs, make_inputs, open_model, with_initial_state
    from nnrt.importers import state_variables

    monkeypatch.setenv("NNRT_PLAN_JIT", "0")
    model = open_model("tests/data/models/microwakeword_okay_nabu.tflite").model
    fast, slow = both(model)
    assert _compiled_steps(fast) == 17  # 6 CONV_2D, 8 DEPTHWISE_CONV_2D, FULLY_CONNECTED, DEQUANTIZE, QUANTIZE
    specs = input_specs(model)
    inputs = with_initial_state(model, make_inputs(specs, seed=0))
    state = state_variables(model)
    for step in range(20):
        a, b = fast.execute_sync(inputs).outputs, slow.execute_sync(inputs).outputs
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
        inputs = make_inputs(specs, seed=step + 1)
        for var in state:
            inputs[var.input] = a[var.output]


def test_numpy_path_when_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNRT_JIT", "0")
    _jit.reset_for_tests()
    try:
        assert _jit_quant._core() is None
    finally:
        monkeypatch.delenv("NNRT_JIT")
        _jit.reset_for_tests()


def test_sliced_plans_are_remembered_per_shape_and_still_checked(device: nnrt.CpuDevice) -> None:
    """SLICE with constant parameters: a new input shape is validated again, results are fresh arrays."""
    m = Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, [0, 0], 0.5, 3)
    begin, size = m.add_operand(T.TENSOR_INT32, [2]), m.add_operand(T.TENSOR_INT32, [2])
    m.set_operand_value(begin, np.array([0, 1], np.int32))
    m.set_operand_value(size, np.array([2, 2], np.int32))
    y = m.add_operand(T.TENSOR_QUANT8_ASYMM, [0, 0], 0.5, 3)
    m.add_operation(Op.SLICE, [x, begin, size], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    p = device.prepare_model_sync(m)
    a = np.arange(12, dtype=np.uint8).reshape(3, 4)
    for _ in range(2):
        out = p.execute_sync([a]).outputs[0]
        np.testing.assert_array_equal(out, a[0:2, 1:3])
        assert not np.shares_memory(out, a)
        with pytest.raises(nnrt.InvalidArgumentError, match="do not fit"):
            p.execute_sync([np.zeros((1, 4), np.uint8)])


def test_calibration_does_not_count_the_cold_run(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cheap plan whose first run is slow (a compiled kernel compiling) is still measured on
    several warm runs, and its cost is theirs: it runs inline."""
    import time

    from nnrt.devices import _cpu_prepare as _cpu

    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [4])
    y = m.add_operand(T.TENSOR_FLOAT32, [4])
    m.add_operation(Op.RELU, [x], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    runs = []
    real = _cpu._calibrate

    def slow_first(plan: Any) -> None:
        step = plan.steps[0]
        fn = step.fn

        def wrapped(*args: Any) -> Any:
            runs.append(1)
            if len(runs) == 1:
                time.sleep(0.005)  # more than the 2 ms calibration budget
            return fn(*args)

        step.fn = wrapped
        real(plan)
        step.fn = fn

    monkeypatch.setattr(_cpu, "_calibrate", slow_first)
    p = device.prepare_model_sync(m)
    assert len(runs) == 6
    assert p.plan.cost_ns < 1_000_000 and p.plan.inline


def test_large_conv_and_fc_runs_take_the_numpy_kernel(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above CONV_MAX_MACS a CONV_2D or FULLY_CONNECTED run goes to the numpy kernel (BLAS is
    faster there); a DEPTHWISE_CONV_2D run stays compiled."""
    real_core = _jit_quant._core()
    calls: list[int] = []

    def counting() -> Any:
        def core(*args: Any) -> Any:
            calls.append(1)
            return real_core(*args)  # type: ignore[misc]

        return core

    monkeypatch.setattr(_jit_quant, "_core", counting)
    monkeypatch.setattr(_jit_quant, "CONV_MAX_MACS", 1000)
    rng = np.random.default_rng(3)
    t = T.TENSOR_QUANT8_ASYMM_SIGNED
    for op, wshape, mult in ((Op.CONV_2D, (4, 3, 3, 8), None), (Op.DEPTHWISE_CONV_2D, (1, 3, 3, 8), 1)):
        wq = rng.integers(-128, 128, wshape).astype(np.int8)
        m = _quant_model(op, t, [1, 0, 0, 8], (0.1, -3), wq, None, (0.01, 5), np.arange(wshape[-1] if mult else 4,
                         dtype=np.int32), [0, 0, 0, 0, 1, 1, *([mult] if mult else []), 0, False, 1, 1], (0.05, 9))
        fast, slow = _prepare_both(device, m)
        for hw, compiled_run in ((3, True), (12, op is Op.DEPTHWISE_CONV_2D)):  # 1 and 100 output pixels
            calls.clear()
            _same(fast, slow, [rng.integers(-128, 128, (1, hw, hw, 8)).astype(np.int8)])
            assert bool(calls) is compiled_run, (op, hw)
    m = Model()
    x = m.add_operand(t, [0, 50], 0.5, 1)
    w = m.add_operand(t, [10, 50], 0.25, -2)
    m.set_operand_value(w, rng.integers(-128, 128, (10, 50)).astype(np.int8))
    b = m.add_operand(T.TENSOR_INT32, [10], 0.125, 0)
    m.set_operand_value(b, np.arange(10, dtype=np.int32))
    a = m.add_operand(T.INT32)
    m.set_operand_value(a, 0)
    y = m.add_operand(t, [0, 10], 3.0, 4)
    m.add_operation(Op.FULLY_CONNECTED, [x, w, b, a], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    fast, slow = _prepare_both(device, m)
    for rows, compiled_run in ((2, True), (3, False)):  # 1000 and 1500 MACs
        calls.clear()
        _same(fast, slow, [rng.integers(-128, 128, (rows, 50)).astype(np.int8)])
        assert bool(calls) is compiled_run, rows


def test_cores_compile_at_preparation_once_for_every_type() -> None:
    """Even with calibration off, preparing a model compiles (or loads) the cores it uses, and
    each core has one compiled variant, shared by int8 and uint8 operands of any rank, by the
    step kernels and by the program runner (cold start: each variant is 0.2-1 s of compilation)."""
    from nnrt.ops._jit import compiled

    device = nnrt.CpuDevice(calibrate=False)
    try:
        rng = np.random.default_rng(4)
        for qtype in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
            m = Model()
            x = m.add_operand(T.TENSOR_FLOAT32, [2, 1, 3, 2, 1])  # a rank no other test uses
            q = m.add_operand(qtype, [2, 1, 3, 2, 1], 0.5, 3)
            y = m.add_operand(T.TENSOR_FLOAT32, [2, 1, 3, 2, 1])
            m.add_operation(Op.QUANTIZE, [x], [q])
            m.add_operation(Op.DEQUANTIZE, [q], [y])
            m.identify_inputs_and_outputs([x], [y])
            m.finish()
            prepared = device.prepare_model_sync(m)
            data = rng.uniform(-3, 3, (2, 1, 3, 2, 1)).astype(np.float32)
            (got,) = prepared.execute_sync([data]).outputs
            lo = -128 if qtype == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
            want = (np.clip(np.round(data / 0.5) + 3, lo, lo + 255) - 3) * 0.5  # no .5 ties: data is random
            np.testing.assert_array_equal(got, want.astype(np.float32))
        for core in (_jit_quant._quantize_q, _jit_quant._dequantize_q):
            dispatcher = compiled(core)
            assert dispatcher is not None
            assert len(dispatcher.signatures) == 1, dispatcher.signatures  # type: ignore[attr-defined]
        for qtype, zero in ((T.TENSOR_QUANT8_ASYMM, 3), (T.TENSOR_QUANT8_ASYMM_SIGNED, -3)):
            wq = rng.integers(-127, 128, (3, 2, 2, 5)).astype(np.int8)
            conv = _quant_model(Op.CONV_2D, qtype, [1, 4, 4, 5], (0.1, zero), wq, rng.uniform(0.01, 0.02, 3),
                                (0.0, 0), np.zeros(3, np.int32), [0, 0, 0, 0, 1, 1, 0, False, 1, 1], (0.05, 9))
            device.prepare_model_sync(conv)
        core = compiled(_jit_quant._conv_q_into)
        assert core is not None
        assert [str(sig[0]) for sig in core.signatures] == ["array(uint8, 1d, C)"]  # type: ignore[attr-defined]
    finally:
        device.close()
