"""The per-call path of a small plan (issue 14, the int8 streaming step): the fast paths taken,
and everything off them unchanged.

* ``PreparedModel._validate_request`` checks a request of plain arrays of exactly the operands'
  dtypes and dimensions in one pass; any other request takes ``_check_request``, input by
  input. Counted here by a spy on ``_check_request``, and every rejected request gets the same
  error, status and message as with the one-pass check switched off.
* ``Plan.whole``: a plan of one kernel step from the plan's inputs to its outputs (a model
  compiled into one program; also a one-operation model) runs on the request's arguments,
  without the slots: counted by a template that counts its copies. Anything the loop must act
  on (a deadline passed, an interrupt, a profile, a stop mark) takes the loop, with its errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.errors import NnrtError
from nnrt.execution import PreparedModel
from nnrt.execution._interpreter import INTERRUPTED, ExecContext, run_plan
from nnrt.memory import Memory, MemoryLocation
from tests.helpers import ones

pytest.importorskip("numba")

MODELS = ["microwakeword_hey_jarvis", "microwakeword_hey_mycroft", "microwakeword_okay_nabu"]


class _CountingTemplate(list):  # type: ignore[type-arg]
    """A plan template that counts the interpreter's copies of it (its slot loop)."""

    copies = 0

    def copy(self) -> list[Any]:
        type(self).copies += 1
        return list(self)


def _count_loop(prepared: PreparedModel) -> type[_CountingTemplate]:
    class Counting(_CountingTemplate):
        copies = 0

    prepared.plan.template = Counting(prepared.plan.template)
    return Counting


def _streaming(device: nnrt.CpuDevice, name: str) -> tuple[PreparedModel, list[np.ndarray]]:
    from nnrt.bench._inputs import input_specs, make_inputs, open_model, with_initial_state

    model = open_model(f"tests/data/models/{name}.tflite").model
    return device.prepare_model_sync(model), with_initial_state(model, make_inputs(input_specs(model), seed=0))


def _spy_checks(prepared: PreparedModel, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    checked = prepared._check_request

    def spy(*args: Any) -> Any:
        calls.append(1)
        return checked(*args)

    monkeypatch.setattr(prepared, "_check_request", spy)
    return calls


def _one_floor() -> nnrt.Model:
    """FLOOR of a float32 [1, 4] input: one step reading only the model's input."""
    m = nnrt.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    b = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    m.add_operation(Op.FLOOR, inputs=[a], outputs=[b])
    m.identify_inputs_and_outputs(inputs=[a], outputs=[b])
    m.finish()
    return m


# -- Plan.whole ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_a_model_compiled_whole_runs_on_the_arguments(device: nnrt.CpuDevice, name: str) -> None:
    """The program's inputs and outputs are in the model's order, so the plan is ``whole``: its
    executions never copy the template, and give the slot loop's bits."""
    prepared, inputs = _streaming(device, name)
    plan = prepared.plan
    assert plan.whole is plan.steps[0] and plan.steps[0].ins == plan.inputs
    counting = _count_loop(prepared)
    fast = [prepared.execute_sync(inputs).outputs for _ in range(3)]
    assert counting.copies == 0
    plan.whole = None  # the slot loop
    slow = prepared.execute_sync(inputs).outputs
    assert counting.copies == 1
    for x, y in zip(fast[-1], slow, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)
    assert not any(np.shares_memory(x, y) for x in fast[0] for y in fast[1])  # each call its own outputs
    for x, op in zip(fast[0], plan.output_operands, strict=True):  # fields of the arena: plain arrays
        assert type(x) is np.ndarray and x.dtype == op.type.dtype and x.shape == op.dimensions
        assert x.flags.writeable and x.flags.c_contiguous and x.flags.aligned


async def test_whole_plan_on_every_entry_point(device: nnrt.CpuDevice) -> None:
    """``execute``, ``execute_sync`` with a deadline to spare, one-FLOOR and one-ADD models (whose
    plans are whole too, the ADD's with its constant activation after the inputs): no template
    copy, right results."""
    prepared, inputs = _streaming(device, MODELS[0])
    counting = _count_loop(prepared)
    ref = prepared.execute_sync(inputs).outputs
    got = (await prepared.execute(inputs)).outputs
    deadline = nnrt.deadline_after(10.0)
    got2 = prepared.execute_sync(inputs, deadline=deadline).outputs
    assert counting.copies == 0
    for a, b, c in zip(ref, got, got2, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    floor = device.prepare_model_sync(_one_floor())
    assert floor.plan.whole is floor.plan.steps[0]
    counting = _count_loop(floor)
    out = (await floor.execute([np.full((1, 4), 2.5, np.float32)])).outputs
    assert counting.copies == 0
    np.testing.assert_array_equal(out[0], np.full((1, 4), 2, np.float32))
    add = device.prepare_model_sync(zoo.one_add())  # its step reads a constant after the inputs
    assert add.plan.whole is add.plan.steps[0] and add.plan.whole_tail == [0]
    counting = _count_loop(add)
    np.testing.assert_array_equal((await add.execute([ones(1, 4), ones(1, 4)])).outputs[0], np.full((1, 4), 2, np.float32))
    assert counting.copies == 0
    m = nnrt.Model()  # ADD(a, a): an input read twice is not a whole plan's
    a = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    c = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    m.add_operation(Op.ADD, inputs=[a, a, act], outputs=[c])
    m.identify_inputs_and_outputs(inputs=[a], outputs=[c])
    m.finish()
    twice = device.prepare_model_sync(m)
    assert twice.plan.whole is None
    np.testing.assert_array_equal(twice.execute_sync([ones(1, 4)]).outputs[0], np.full((1, 4), 2, np.float32))


def test_whole_plan_takes_the_loop_when_it_must(device: nnrt.CpuDevice) -> None:
    """A passed deadline, an interrupt and a profile go through the slot loop: its errors, its
    yields, its per-step times."""
    clock = nnrt.VirtualClock(10.0)
    dev = nnrt.CpuDevice(clock=clock)
    try:
        floor = dev.prepare_model_sync(_one_floor())
        plan = floor.plan
        counting = _count_loop(floor)
        args = [ones(1, 4)]
        gen = run_plan(plan, args, ExecContext(clock, deadline=clock.now()))
        with pytest.raises(nnrt.MissedDeadlineError, match="deadline passed before operation 0") as info:
            next(gen)
        assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT and counting.copies == 1
        ctx = ExecContext(clock)
        ctx.interrupt = True
        gen = run_plan(plan, args, ctx)
        assert next(gen) == INTERRUPTED and counting.copies == 2
        ctx.interrupt = False
        with pytest.raises(StopIteration) as stop:
            next(gen)
        np.testing.assert_array_equal(stop.value.value[0], ones(1, 4))
        profile: dict[int, int] = {}
        gen = run_plan(plan, args, ExecContext(clock, profile=profile))
        with pytest.raises(StopIteration):
            next(gen)
        assert counting.copies == 3 and list(profile) == [id(plan.steps[0])]
    finally:
        dev.close()


def test_whole_plan_keeps_the_late_and_failure_checks(device: nnrt.CpuDevice) -> None:
    """On the whole path, a step that ends after the deadline is MISSED_DEADLINE_TRANSIENT and a
    kernel's own exception GENERAL_FAILURE naming the operation, as on the loop."""
    clock = nnrt.VirtualClock(10.0)
    dev = nnrt.CpuDevice(clock=clock)
    try:
        floor = dev.prepare_model_sync(_one_floor())
        step = floor.plan.steps[0]
        fn = step.fn
        assert fn is not None
        counting = _count_loop(floor)

        def late(*args: Any) -> Any:
            clock.advance(0.02)
            return fn(*args)

        step.fn = late
        with pytest.raises(nnrt.MissedDeadlineError, match="during operation 0") as info:
            floor.execute_sync([ones(1, 4)], deadline=clock.now() + 0.01)
        assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT

        def broken(*args: Any) -> Any:
            raise ValueError("boom")

        step.fn = broken
        with pytest.raises(nnrt.GeneralFailureError, match=r"operation 0 \(FLOOR\) failed: ValueError: boom"):
            floor.execute_sync([ones(1, 4)])
        assert counting.copies == 0
    finally:
        dev.close()


# -- request validation -----------------------------------------------------------------------------


def test_plain_requests_take_the_one_pass_check(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lists and tuples of plain arrays, with or without output buffers: no input-by-input check."""
    prepared, inputs = _streaming(device, MODELS[0])
    calls = _spy_checks(prepared, monkeypatch)
    prepared.execute_sync(inputs)
    prepared.execute_sync(tuple(inputs))
    outs = [np.empty(op.dimensions, op.type.dtype) for op in prepared.plan.output_operands]
    result = prepared.execute_sync(inputs, outs)
    assert calls == [] and all(a is b for a, b in zip(result.outputs, outs))
    args, bufs = prepared._validate_request(inputs, None)
    assert args == inputs and args is not inputs and bufs is None


def _requests(prepared: PreparedModel, inputs: list[np.ndarray]) -> list[tuple[str, Any, Any, bool]]:
    """Requests off the common path, or on it but odd: (what, inputs, outputs, whether the inputs
    go to ``_check_request``). Output buffers of a request whose inputs pass the one-pass check
    are checked by the same ``_validate_outputs`` either way."""
    first = inputs[0]
    pool = Memory.from_array(np.ascontiguousarray(first).copy())
    outs_ok = [np.empty(op.dimensions, op.type.dtype) for op in prepared.plan.output_operands]
    return [
        ("too few inputs", inputs[:-1], None, True),
        ("too many inputs", [*inputs, first], None, True),
        ("an array for the list", first, None, True),
        ("wrong dtype", [first.astype(np.float32), *inputs[1:]], None, True),
        ("wrong shape", [first.reshape(first.shape[::-1]), *inputs[1:]], None, True),
        ("wrong rank", [first.reshape(-1), *inputs[1:]], None, True),
        ("omitted required input", [None, *inputs[1:]], None, True),
        ("a nested list, converted", [first.tolist(), *inputs[1:]], None, True),
        ("floats for int8", [first.astype(np.float64).tolist(), *inputs[1:]], None, True),
        ("values out of range", [(first.astype(np.int64) + 1000).tolist(), *inputs[1:]], None, True),
        ("not an array", [object(), *inputs[1:]], None, True),
        ("a subclass", [first.view(np.ma.MaskedArray), *inputs[1:]], None, True),
        ("a memory location", [MemoryLocation(pool, 0, first.nbytes), *inputs[1:]], None, True),
        ("an output location", inputs, [MemoryLocation(pool, 0, outs_ok[0].nbytes), *outs_ok[1:]], True),
        ("a strided view", [np.repeat(first, 2, axis=-1)[..., ::2], *inputs[1:]], None, False),
        ("too few outputs", inputs, outs_ok[:-1], False),
        ("output of the wrong dtype", inputs, [outs_ok[0].astype(np.float32), *outs_ok[1:]], False),
        ("read-only output", inputs, [np.broadcast_to(outs_ok[0], outs_ok[0].shape), *outs_ok[1:]], False),
        ("output too small", inputs, [outs_ok[0], np.empty(1, outs_ok[1].dtype), *outs_ok[2:]], False),
        ("not an output array", inputs, [[0], *outs_ok[1:]], False),
    ]


def _outcome(prepared: PreparedModel, inputs: Any, outputs: Any) -> tuple[Any, ...]:
    try:
        result = prepared.execute_sync(inputs, outputs)
    except NnrtError as err:
        return type(err), err.status, str(err)
    return ("ok", [o.tobytes() for o in result.outputs])


def test_other_requests_get_the_same_outcome_as_before(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request the one-pass check does not take goes input by input, and every request
    ends as it did with the one-pass check off: the same error class, status and message (naming
    the input or output), or the same outputs."""
    prepared, inputs = _streaming(device, MODELS[0])
    exact = prepared._exact_inputs
    assert exact is not None
    calls = _spy_checks(prepared, monkeypatch)
    failures = 0
    for what, ins, outs, by_input in _requests(prepared, inputs):
        before = len(calls)
        fast = _outcome(prepared, ins, outs)
        assert len(calls) == before + by_input, what
        prepared._exact_inputs = None
        slow = _outcome(prepared, ins, outs)
        prepared._exact_inputs = exact
        assert fast == slow, what
        failures += fast[0] != "ok"
        if what in ("wrong dtype", "wrong shape", "wrong rank", "omitted required input", "not an array"):
            assert "input 0" in fast[2], (what, fast)
        if what.startswith("output") or what == "read-only output":
            assert "output" in fast[2], (what, fast)
    assert failures >= 14


def test_models_with_scalars_or_unknown_dimensions_check_input_by_input(
    device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An input of unknown dimensions or a scalar input: no one-pass check; requests as before."""
    from tests.helpers import unknown_shape_add

    prepared = device.prepare_model_sync(unknown_shape_add())
    assert prepared._exact_inputs is None
    calls = _spy_checks(prepared, monkeypatch)
    out = prepared.execute_sync([ones(3, 2), ones(3, 2)]).outputs[0]
    assert calls == [1] and out.shape == (3, 2)


async def test_a_burst_runs_a_whole_plan_on_the_arguments(device: nnrt.CpuDevice) -> None:
    """The burst's lean runner (``run_kernels``, requests in registered pools) takes the whole
    path too: no template copy, the same outputs as ``execute``; a passed deadline is refused."""
    prepared, inputs = _streaming(device, MODELS[0])
    assert prepared.plan.whole is not None
    ref = (await prepared.execute(inputs)).outputs
    model = prepared.model
    specs = [(model.operands[i].dimensions, model.operands[i].type.dtype) for i in (*model.input_indexes,
                                                                                   *model.output_indexes)]
    sizes = [int(np.prod(d)) * np.dtype(t).itemsize for d, t in specs]
    offsets = np.cumsum([0, *sizes[:-1]])
    data = np.zeros(sum(sizes), np.uint8)
    for x, o, n in zip(inputs, offsets, sizes, strict=False):
        data[o:o + n] = np.ascontiguousarray(x).view(np.uint8).reshape(-1)
    async with prepared.burst() as burst:
        slot = burst.register_memory(Memory(data))
        locs = [burst.location(slot, int(o), n, d) for o, n, (d, _) in zip(offsets, sizes, specs, strict=True)]
        ins, outs = locs[:len(inputs)], locs[len(inputs):]
        counting = _count_loop(prepared)
        got = (await burst.execute(ins, outs)).outputs
        assert counting.copies == 0 and burst.statistics().inline == 1
        for a, b in zip(ref, got, strict=True):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(NnrtError) as err:
            await burst.execute(ins, outs, deadline=nnrt.deadline_after(-1.0))
        assert err.value.status in (ErrorStatus.MISSED_DEADLINE_PERSISTENT, ErrorStatus.MISSED_DEADLINE_TRANSIENT)
