"""Sliced plans on the CPU device (``nnrt.devices._cpu``, ``Plan.set_inline_limit``): with nothing
else admitted, a plan without control flow runs on the event loop thread instead of paying two
thread hand-offs, one loop slice at a time; the loop serves its other tasks and timers between
slices, and the QoS rules hold there (preemption, prompt expiry of queued work, cancellation).
With other work admitted, a step longer than a slice, or a LOW execution bound for niced
threads, it runs on a worker as before. Virtual clock; costs are set by hand."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio.lowlevel
import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Priority, zoo
from nnrt._aio import in_trio
from nnrt.execution import SLICE
from nnrt.execution._cost import ESTABLISHED
from tests.helpers import Started, gather, on_trio_too, ones, start, unknown_shape_add
from tests.integration.test_scheduler import Gate

US = 1e3


@pytest.fixture
def vdevice() -> Iterator[nnrt.CpuDevice]:
    dev = nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=1)  # the default inline limit
    yield dev
    dev.close()


def costing(prepared: nnrt.PreparedModel, *costs_us: float) -> None:
    """Give the plan's steps these costs (µs) and settle where they run, as calibration does."""
    assert len(costs_us) == len(prepared.plan.steps)
    for step, cost in zip(prepared.plan.steps, costs_us):
        step.cost_ns = cost * US
    prepared.plan.set_inline_limit(nnrt.CpuDevice().inline_limit_ns)


class Trace:
    """Records, per kernel call: the step, whether it ran on the loop thread, and how often a
    ticker task had run by then (it runs whenever the loop serves its other tasks)."""

    def __init__(self, prepared: nnrt.PreparedModel, name: str = "", before: dict[int, Callable[[], object]] | None = None):
        self.loop_thread = threading.get_ident()
        self.ticks = 0
        self.calls: list[tuple[str, int, bool, int]] = []
        self.add(prepared, name, before)

    def add(self, prepared: nnrt.PreparedModel, name: str, before: dict[int, Callable[[], object]] | None = None) -> None:
        """Record ``prepared``'s kernel calls too, as ``name``."""
        for k, step in enumerate(prepared.plan.steps):
            fn = step.fn
            assert fn is not None
            hook = (before or {}).get(k)

            def traced(*args: object, _k: int = k, _fn: Any = fn, _hook: Any = hook) -> object:
                self.calls.append((name, _k, threading.get_ident() == self.loop_thread, self.ticks))
                if _hook is not None:
                    _hook()
                return _fn(*args)

            step.fn = traced

    async def tick(self, until: Started) -> None:
        while not until.done():
            self.ticks += 1
            await anyio.lowlevel.checkpoint()

    def on_loop(self) -> list[bool]:
        return [on for _, _, on, _ in self.calls]

    def tick_seen(self) -> list[int]:
        return [t for _, _, _, t in self.calls]


async def run_with_ticker(trace: Trace, coro: Any) -> Any:
    task = start(coro)
    await trace.tick(task)
    return await task


async def test_alone_a_sliced_plan_runs_on_the_loop_thread_and_lets_it_serve_others(vdevice: nnrt.CpuDevice) -> None:
    prepared = await vdevice.prepare_model(zoo.add_chain(5))
    costing(prepared, 400, 400, 400, 400, 400)  # segments: [0, 1], [2, 3], [4]
    trace = Trace(prepared)
    result = await run_with_ticker(trace, prepared.execute([ones(1, 16)]))
    assert trace.on_loop() == [True] * 5  # no thread hand-off at all
    t = trace.tick_seen()
    assert t[0] == t[1] <= t[2] == t[3] <= t[4]  # other tasks ran between segments only
    if not in_trio():  # (trio may run a task twice before another: one checkpoint is no turn)
        assert t[1] < t[2] < t[4]  # and at every boundary
    assert vdevice.scheduler.policy.statistics().get("default", Priority.MEDIUM).completed == 1  # admitted
    assert vdevice.scheduler.idle()
    assert result.outputs[0].tolist() == prepared.execute_sync([ones(1, 16)]).outputs[0].tolist()


@pytest.mark.parametrize(("cost_us", "per_turn"), [(300, 1), (100, 3)], ids=["0.9 ms", "0.3 ms"])
async def test_plans_within_one_slice_run_at_once_the_loop_turning_once_a_slice(
    vdevice: nnrt.CpuDevice, cost_us: float, per_turn: int
) -> None:
    """Never admitted; an execution there never suspends, so the loop turns before one that
    would make those run back to back since its last turn hold it for over a slice."""
    prepared = await vdevice.prepare_model(zoo.add_chain(3))
    costing(prepared, cost_us, cost_us, cost_us)
    admitted: list[bool] = []
    trace = Trace(prepared, before={0: lambda: admitted.append(not vdevice.scheduler.idle())})
    assert prepared.plan.idle_inline and not prepared.plan.inline
    vdevice._loop_debt_ns = 0.0  # (as a fresh device)

    async def back_to_back() -> None:
        for _ in range(3 * per_turn):
            await prepared.execute([ones(1, 16)])

    await run_with_ticker(trace, back_to_back())
    assert admitted == [False] * 3 * per_turn
    assert trace.on_loop() == [True] * 9 * per_turn
    t = trace.tick_seen()[::3]  # as each execution began
    runs = [t[k * per_turn:(k + 1) * per_turn] for k in range(3)]  # those between two turns
    assert all(len(set(run)) == 1 for run in runs)
    if not in_trio():
        assert runs[0][0] < runs[1][0] < runs[2][0]  # the loop turned between them


async def test_after_a_sliced_run_the_loop_turns_before_an_at_once_one(vdevice: nnrt.CpuDevice) -> None:
    """The last slice of a sliced run and an at-once run right after it would hold the loop
    for up to two slices without a turn: the loop turns between them."""
    sliced = await vdevice.prepare_model(zoo.add_chain(3))
    costing(sliced, 600, 600, 600)  # segments [0], [1], [2]
    at_once = await vdevice.prepare_model(zoo.add_chain(2))
    costing(at_once, 200, 200)
    trace = Trace(sliced, "sliced")
    trace.add(at_once, "at once")

    async def both() -> None:
        await sliced.execute([ones(1, 16)])
        await at_once.execute([ones(1, 16)])

    await run_with_ticker(trace, both())
    names = [(name, k) for name, k, _, _ in trace.calls]
    assert names == [("sliced", 0), ("sliced", 1), ("sliced", 2), ("at once", 0), ("at once", 1)]
    t = trace.tick_seen()
    if not in_trio():
        assert t[0] < t[1] < t[2] < t[3]  # a turn at each boundary, and before the at-once run
    assert t[3] == t[4]


async def test_a_step_longer_than_the_slice_sends_the_rest_to_a_worker(vdevice: nnrt.CpuDevice) -> None:
    prepared = await vdevice.prepare_model(zoo.add_chain(4))
    costing(prepared, 400, 2000, 400, 400)
    trace = Trace(prepared)
    await prepared.execute([ones(1, 16)])
    assert trace.on_loop() == [True, False, False, False]


async def test_with_other_work_admitted_it_runs_on_a_worker() -> None:
    device = nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=2)
    try:
        busy = await device.prepare_model(zoo.add_chain(2))
        costing(busy, 1e6, 1e6)  # on the worker, holding a unit
        gate = Gate.on_step(busy, 0)
        prepared = await device.prepare_model(zoo.add_chain(3))
        costing(prepared, 300, 300, 300)  # within one slice: at once, were the device idle
        trace = Trace(prepared)
        blocker = start(busy.execute([ones(1, 16)]))
        await gate.wait_entered()
        await prepared.execute([ones(1, 16)])  # the second unit, beside the busy one
        assert trace.on_loop() == [False, False, False]
        gate.release.set()
        await blocker
        assert device.scheduler.idle()
    finally:
        device.close()


async def test_a_higher_priority_arrival_preempts_it_at_a_slice_boundary(vdevice: nnrt.CpuDevice) -> None:
    high = await vdevice.prepare_model(zoo.one_add(), priority=Priority.HIGH, app="camera")
    arrivals: list[Started] = []
    low = await vdevice.prepare_model(zoo.add_chain(4), priority=Priority.LOW, app="camera")
    costing(low, 400, 400, 400, 400)  # segments [0, 1], [2, 3]
    # The HIGH execution is started from inside LOW's first kernel: it can run, be admitted and
    # interrupt LOW only when the loop is free, at LOW's slice boundary.
    trace = Trace(low, "low", before={0: lambda: arrivals.append(start(high.execute([ones(1, 4), ones(1, 4)])))})
    trace.add(high, "high")
    result = await low.execute([ones(1, 16)])
    await arrivals[0]
    assert [(name, k) for name, k, _, _ in trace.calls] == [("low", 0), ("low", 1), ("high", 0), ("low", 2), ("low", 3)]
    assert all(trace.on_loop())  # LOW resumed on the loop: no recomputation, no hand-off
    assert result.outputs[0].tolist() == low.execute_sync([ones(1, 16)]).outputs[0].tolist()
    assert vdevice.statistics().get("camera", Priority.LOW).preemptions == 1
    assert vdevice.scheduler.idle()


async def test_queued_work_expires_promptly_while_it_runs(vdevice: nnrt.CpuDevice) -> None:
    """Timers are served at slice boundaries: a queued execution whose deadline passes fails
    while the long plan is still running, not after it."""
    clock = vdevice.clock
    assert isinstance(clock, nnrt.VirtualClock)
    queued = await vdevice.prepare_model(zoo.one_add(), app="other")  # (another app never preempts)
    arrivals: list[Started] = []
    seen_failed: list[bool] = []

    def arrive() -> None:
        arrivals.append(start(queued.execute([ones(1, 4), ones(1, 4)], deadline=clock.now() + 0.005)))

    long = await vdevice.prepare_model(zoo.add_chain(6))
    costing(long, 400, 400, 400, 400, 400, 400)  # segments [0, 1], [2, 3], [4, 5]
    Trace(long, before={0: arrive, 2: lambda: clock.advance(0.010), 4: lambda: seen_failed.append(arrivals[0].done())})
    await long.execute([ones(1, 16)])
    assert seen_failed == [True]
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await arrivals[0]
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert vdevice.statistics().get("other", Priority.MEDIUM).expired == 1


async def test_cancelled_at_a_slice_boundary_it_stops_and_frees_its_unit(vdevice: nnrt.CpuDevice) -> None:
    prepared = await vdevice.prepare_model(zoo.add_chain(4))
    costing(prepared, 400, 400, 400, 400)
    tasks: list[Started] = []
    trace = Trace(prepared, before={0: lambda: tasks[0].cancel()})
    tasks.append(start(prepared.execute([ones(1, 16)])))
    with pytest.raises(BaseException) as info:
        await tasks[0]
    assert not isinstance(info.value, nnrt.NnrtError)  # the cancellation itself
    assert [k for _, k, _, _ in trace.calls] == [0, 1]  # stopped at the boundary
    assert vdevice.scheduler.idle() and vdevice.statistics().running == 0
    await prepared.execute([ones(1, 16)])  # the unit is free again


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities are set on Linux only")
async def test_low_executions_bound_for_niced_threads_stay_off_the_loop() -> None:
    device = nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=1, low_priority_nice=5)
    try:
        low = await device.prepare_model(zoo.add_chain(3), priority=Priority.LOW)
        costing(low, 400, 400, 400)
        names: list[str] = []
        Trace(low, before={0: lambda: names.append(threading.current_thread().name)})
        await low.execute([ones(1, 16)])
        assert names[0].startswith(f"{device.name}-low")
    finally:
        device.close()


async def test_the_loop_slice_is_a_device_option() -> None:
    device = nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=1, loop_slice_ns=0)
    try:
        prepared = await device.prepare_model(zoo.add_chain(3))
        for step in prepared.plan.steps:
            step.cost_ns = 300 * US
        device._place(prepared.plan)
        assert not prepared.plan.sliced and not prepared.plan.idle_inline
        trace = Trace(prepared)
        await prepared.execute([ones(1, 16)])
        assert trace.on_loop() == [False, False, False]  # slices off: the worker, as before
    finally:
        device.close()
    for bad in (-1.0, float("inf"), "1", None, True):
        with pytest.raises(nnrt.InvalidArgumentError, match="loop_slice_ns"):
            nnrt.CpuDevice(loop_slice_ns=bad)  # type: ignore[arg-type]


async def test_plans_from_the_compilation_cache_get_the_device_s_slice(tmp_path: Any) -> None:
    # uncalibrated estimates, about 1 us a step: above a 1 ns limit, two steps above a 2 us slice
    device = nnrt.CpuDevice(compute_units=1, inline_limit_ns=1, loop_slice_ns=2000, calibrate=False)
    try:
        token = bytes(range(32))
        first = await device.prepare_model(zoo.add_chain(3), cache_dir=tmp_path, token=token)
        again = await device.prepare_model_from_cache(tmp_path, token)
        for prepared in (first, again):
            assert prepared.plan.sliced and [s.stop for s in prepared.plan.steps] == [0, SLICE, SLICE]
    finally:
        device.close()


async def test_a_dynamic_plan_runs_on_the_loop_for_shapes_measured_cheap(vdevice: nnrt.CpuDevice) -> None:
    """The decision per shape class, from its measured cost: until measured, or measured above
    a slice, the worker; measured within one, at once on the loop thread when idle."""
    prepared = await vdevice.prepare_model(unknown_shape_add())
    plan = prepared.plan
    small, big = [ones(2, 2), ones(2, 2)], [ones(600, 2), ones(600, 2)]
    trace = Trace(prepared)
    await prepared.execute(small)  # not measured enough yet: the worker
    assert trace.on_loop() == [False]
    for _ in range(ESTABLISHED):
        plan.cost_for(small).observe(50 * US)
        plan.cost_for(big).observe(5000 * US)
    await prepared.execute(small)
    await prepared.execute(big)
    assert trace.on_loop() == [False, True, False]
    assert vdevice.scheduler.idle()


async def test_an_if_plan_runs_on_the_loop_once_measured_cheap_a_while_plan_never(vdevice: nnrt.CpuDevice) -> None:
    """Calibration cannot cost control flow: an IF plan runs on the loop at once when its
    measured compute time fits a slice; a WHILE plan (unbounded) stays on the worker."""
    from nnrt.conformance._cts import build_model, load_spec

    branching = await vdevice.prepare_model(build_model(load_spec("V1_3/if_simple")[0]))
    looping = await vdevice.prepare_model(build_model(load_spec("V1_3/while_fib")[0]))
    assert not branching.plan.has_loop and looping.plan.has_loop
    ran_on: list[bool] = []
    for prepared in (branching, looping):
        for step in prepared.plan.steps:
            for sub in step.branches:  # (the top-level step is the IF or WHILE: trace its branches)
                for inner in sub.steps:
                    fn = inner.fn
                    assert fn is not None

                    def traced(*args: object, _fn: Any = fn) -> object:
                        ran_on.append(threading.current_thread() is threading.main_thread())
                        return _fn(*args)

                    inner.fn = traced
    cond = np.ones(1, np.bool_)
    x = np.ones((3, 4), np.float32)
    await branching.execute([cond, x])  # not measured yet: the worker
    for _ in range(ESTABLISHED):
        branching.plan.cost.observe(2000 * US, 50 * US)  # 50 us of work, hand-offs aside
        looping.plan.cost.observe(2000 * US, 50 * US)
    await branching.execute([cond, x])
    assert ran_on == [False, True]
    ran_on.clear()
    await looping.execute([np.full(1, 3, np.int32)])  # (fib's one input: the count)
    assert ran_on and not any(ran_on)


async def _reference(device: nnrt.CpuDevice, n: int, value: float) -> np.ndarray:
    """``zoo.add_chain(n)`` of a [1, 16] input of ``value``, by a plan left as prepared."""
    ref = await device.prepare_model(zoo.add_chain(n))
    out: np.ndarray = ref.execute_sync([np.full((1, 16), value, np.float32)]).outputs[0]
    return out


async def test_a_kernel_failing_on_the_loop_thread_fails_it_and_frees_the_unit(vdevice: nnrt.CpuDevice) -> None:
    prepared = await vdevice.prepare_model(zoo.add_chain(5))
    costing(prepared, 400, 400, 400, 400, 400)  # segments [0, 1], [2, 3], [4]
    failed: list[bool] = []

    def fail_once() -> None:
        if not failed:
            failed.append(True)
            raise ValueError("a kernel's own failure")

    trace = Trace(prepared, before={2: fail_once})
    with pytest.raises(nnrt.GeneralFailureError, match=r"operation 2 \(ADD\).*a kernel's own failure"):
        await run_with_ticker(trace, prepared.execute([ones(1, 16)]))
    assert trace.on_loop() == [True] * 3
    assert vdevice.scheduler.idle() and vdevice.statistics().running == 0
    again = await prepared.execute([ones(1, 16)])
    assert again.outputs[0].tolist() == (await _reference(vdevice, 5, 1)).tolist()


async def test_its_own_deadline_passing_mid_run_stops_it_at_the_next_operation(vdevice: nnrt.CpuDevice) -> None:
    clock = vdevice.clock
    assert isinstance(clock, nnrt.VirtualClock)
    prepared = await vdevice.prepare_model(zoo.add_chain(6))
    costing(prepared, 400, 400, 400, 400, 400, 400)
    trace = Trace(prepared, before={1: lambda: clock.advance(0.050)})
    with pytest.raises(nnrt.MissedDeadlineError, match=r"before operation 2") as info:
        await prepared.execute([ones(1, 16)], deadline=clock.now() + 0.010)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert [k for _, k, _, _ in trace.calls] == [0, 1] and all(trace.on_loop())
    assert vdevice.scheduler.idle() and vdevice.statistics().running == 0


async def test_execute_sync_on_the_loop_thread_while_a_sliced_run_is_suspended(vdevice: nnrt.CpuDevice) -> None:
    """Between two slices another task runs the same model with ``execute_sync`` (on the loop's
    own thread: outside the scheduler, no deadlock on the unit the sliced run holds) and then
    with ``execute`` (queued behind it): all three get their own inputs' results."""
    prepared = await vdevice.prepare_model(zoo.add_chain(6))
    costing(prepared, 400, 400, 400, 400, 400, 400)
    got: list[np.ndarray] = []

    async def meanwhile() -> None:
        got.append(prepared.execute_sync([np.full((1, 16), 10, np.float32)]).outputs[0])
        got.append((await prepared.execute([np.full((1, 16), 20, np.float32)])).outputs[0])

    others: list[Started] = []
    trace = Trace(prepared, before={0: lambda: others.append(start(meanwhile())) if not others else None})
    first = await prepared.execute([ones(1, 16)])
    await others[0]
    assert [k for _, k, _, _ in trace.calls] == [0, 1, *range(6), 2, 3, 4, 5, *range(6)]  # sync ran at the boundary
    for out, value in zip([first.outputs[0], *got], (1, 10, 20)):
        assert out.tolist() == (await _reference(vdevice, 6, value)).tolist()
    assert vdevice.scheduler.idle()


async def test_two_devices_slice_plans_on_one_loop() -> None:
    devices = [nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=1) for _ in range(2)]
    try:
        plans = [await d.prepare_model(zoo.add_chain(6)) for d in devices]
        traces = []
        for p in plans:
            costing(p, 400, 400, 400, 400, 400, 400)
            traces.append(Trace(p))
        results = await gather(*(p.execute([np.full((1, 16), i, np.float32)]) for i, p in enumerate(plans) for _ in range(2)))
        for k, r in enumerate(results):
            assert r.outputs[0].tolist() == (await _reference(devices[0], 6, k // 2)).tolist()
        assert all(all(t.on_loop()) for t in traces)
        assert all(d.scheduler.idle() and d.statistics().running == 0 for d in devices)
    finally:
        for d in devices:
            d.close()


async def test_cancelled_while_an_at_once_run_waits_for_its_loop_turn(vdevice: nnrt.CpuDevice) -> None:
    prepared = await vdevice.prepare_model(zoo.add_chain(3))
    costing(prepared, 300, 300, 300)
    assert prepared.plan.idle_inline
    vdevice._loop_debt_ns = 0.95e6  # the loop turns before this one runs
    trace = Trace(prepared)
    task = start(prepared.execute([ones(1, 16)]))
    await anyio.lowlevel.checkpoint()
    task.cancel()
    with pytest.raises(BaseException) as info:
        await task
    assert not isinstance(info.value, nnrt.NnrtError) and not trace.calls
    assert vdevice.scheduler.idle() and vdevice.statistics().running == 0
    assert (await prepared.execute([ones(1, 16)])).outputs[0].tolist() == (await _reference(vdevice, 3, 1)).tolist()


# On trio one checkpoint does not promise every other task a turn (a batch runs in either order),
# so an arrival may be admitted at a later boundary than these tests arrange for.
on_trio_too(globals(), skip={"test_queued_work_expires_promptly_while_it_runs",
                             "test_a_higher_priority_arrival_preempts_it_at_a_slice_boundary",
                             "test_execute_sync_on_the_loop_thread_while_a_sliced_run_is_suspended"})
