"""The QoS scheduler wired into the device, on a virtual clock: admission, prompt expiry while
another execution runs, preemption at checkpoints with resumption (no recomputation), app
isolation, aborts at checkpoints, resource limits, statistics."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import anyio
import anyio.lowlevel
import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Priority, zoo
from nnrt._aio import to_thread
from tests.helpers import on_trio_too, ones, start


class Gate:
    """Blocks a kernel in the worker thread until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def wrap(self, fn: Callable[..., object]) -> Callable[..., object]:
        def blocked(*args: object) -> object:
            self.entered.set()
            assert self.release.wait(10)
            return fn(*args)

        return blocked

    @classmethod
    def on_step(cls, prepared: nnrt.PreparedModel, index: int) -> Gate:
        """A gate installed on step ``index`` of ``prepared``'s plan."""
        gate = cls()
        step = prepared.plan.steps[index]
        assert step.fn is not None
        step.fn = gate.wrap(step.fn)
        return gate

    async def wait_entered(self) -> None:
        assert await to_thread(self.entered.wait, 10)  # (the loop's default executor on asyncio)


async def settle(n: int = 20) -> None:
    for _ in range(n):
        await anyio.lowlevel.checkpoint()


def count_calls(prepared: nnrt.PreparedModel) -> list[int]:
    calls = [0] * len(prepared.plan.steps)
    for k, step in enumerate(prepared.plan.steps):
        fn = step.fn
        assert fn is not None

        def counted(*args: object, _k: int = k, _fn: Callable[..., object] = fn) -> object:
            calls[_k] += 1
            return _fn(*args)

        step.fn = counted
    return calls


def set_cost(prepared: nnrt.PreparedModel, seconds_per_step: float) -> None:
    for step in prepared.plan.steps:
        step.cost_ns = seconds_per_step * 1e9


@pytest.fixture
def vdevice() -> Iterator[nnrt.CpuDevice]:
    dev = nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=1, inline_limit_ns=0)
    yield dev
    dev.close()


async def test_queued_execution_expires_at_its_deadline_while_another_runs(vdevice: nnrt.CpuDevice) -> None:
    clock = vdevice.clock
    assert isinstance(clock, nnrt.VirtualClock)
    long = await vdevice.prepare_model(zoo.add_chain(5))
    short = await vdevice.prepare_model(zoo.one_add())
    gate = Gate.on_step(long, 0)
    running = start(long.execute([ones(1, 16)]))
    await gate.wait_entered()
    queued = start(short.execute([ones(1, 4), ones(1, 4)], deadline=clock.now() + 1.0))
    await settle()
    assert not queued.done()
    clock.advance(0.5)
    await settle()
    assert not queued.done()
    clock.advance(0.6)  # past the deadline: fails now, while `long` is still inside its kernel
    await settle()
    assert queued.done()
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        queued.result()
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert not running.done()
    gate.release.set()
    assert (await running).outputs[0].shape == (1, 16)
    stats = vdevice.statistics().get("default", Priority.MEDIUM)
    assert stats.expired == 1 and stats.completed == 1


async def test_high_priority_preempts_low_of_the_same_app_and_low_resumes(vdevice: nnrt.CpuDevice) -> None:
    low = await vdevice.prepare_model(zoo.add_chain(10), priority=Priority.LOW, app="camera")
    high = await vdevice.prepare_model(zoo.one_add(), priority=Priority.HIGH, app="camera")
    calls = count_calls(low)
    gate = Gate.on_step(low, 2)
    order: list[str] = []

    async def run(name: str, prepared: nnrt.PreparedModel, inputs: list[np.ndarray]) -> nnrt.ExecutionResult:
        result = await prepared.execute(inputs)
        order.append(name)
        return result

    low_task = start(run("low", low, [ones(1, 16)]))
    await gate.wait_entered()
    high_task = start(run("high", high, [ones(1, 4), ones(1, 4)]))
    await settle()
    assert not high_task.done()  # LOW holds the unit until its next checkpoint
    gate.release.set()
    low_result = await low_task
    await high_task
    assert order == ["high", "low"]
    assert calls == [1] * 10  # resumed where it stopped: nothing recomputed
    expected = low.execute_sync([ones(1, 16)]).outputs[0]
    np.testing.assert_array_equal(low_result.outputs[0], expected)
    assert vdevice.statistics().get("camera", Priority.LOW).preemptions == 1


async def test_other_apps_never_preempt(vdevice: nnrt.CpuDevice) -> None:
    low = await vdevice.prepare_model(zoo.add_chain(10), priority=Priority.LOW, app="assistant")
    high = await vdevice.prepare_model(zoo.one_add(), priority=Priority.HIGH, app="camera")
    gate = Gate.on_step(low, 2)
    order: list[str] = []

    async def run(name: str, coro: object) -> None:
        await coro  # type: ignore[misc]
        order.append(name)

    low_task = start(run("low", low.execute([ones(1, 16)])))
    await gate.wait_entered()
    high_task = start(run("high", high.execute([ones(1, 4), ones(1, 4)])))
    await settle()
    gate.release.set()
    await low_task
    await high_task
    assert order == ["low", "high"]
    assert vdevice.statistics().get("assistant", Priority.LOW).preemptions == 0


async def test_running_execution_aborts_at_the_next_checkpoint_after_its_deadline(vdevice: nnrt.CpuDevice) -> None:
    clock = vdevice.clock
    assert isinstance(clock, nnrt.VirtualClock)
    prepared = await vdevice.prepare_model(zoo.add_chain(10))
    calls = count_calls(prepared)
    gate = Gate.on_step(prepared, 3)
    task = start(prepared.execute([ones(1, 16)], deadline=clock.now() + 1.0))
    await gate.wait_entered()
    clock.advance(5.0)
    gate.release.set()
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await task
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert calls == [1, 1, 1, 1] + [0] * 6  # step 3 finished its kernel; the abort came before step 4


async def test_admission_uses_the_cost_model(vdevice: nnrt.CpuDevice) -> None:
    clock = vdevice.clock
    prepared = await vdevice.prepare_model(zoo.add_chain(5))
    set_cost(prepared, 1.0)  # 5 s of work per execution
    gate = Gate.on_step(prepared, 0)
    first = start(prepared.execute([ones(1, 16)], deadline=clock.now() + 6.0))
    await gate.wait_entered()
    # Fits on an idle device (5 s < 7 s) but not behind the 5 s running with an earlier
    # deadline (EDF runs that one first): TRANSIENT.
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await prepared.execute([ones(1, 16)], deadline=clock.now() + 7.0)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    # Cannot fit even on an idle device: PERSISTENT, at once.
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await prepared.execute([ones(1, 16)], deadline=clock.now() + 3.0)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    gate.release.set()
    await first
    rejected = vdevice.statistics().get("default", Priority.MEDIUM).rejected
    assert rejected[ErrorStatus.MISSED_DEADLINE_TRANSIENT] == 1 and rejected[ErrorStatus.MISSED_DEADLINE_PERSISTENT] == 1


async def test_full_queue_is_resource_exhausted() -> None:
    dev = nnrt.CpuDevice(clock=nnrt.VirtualClock(), compute_units=1, inline_limit_ns=0, max_queued_per_app=1)
    prepared = await dev.prepare_model(zoo.add_chain(3))
    gate = Gate.on_step(prepared, 0)
    first = start(prepared.execute([ones(1, 16)]))
    await gate.wait_entered()
    second = start(prepared.execute([ones(1, 16)]))
    await settle()
    with pytest.raises(nnrt.ResourceExhaustedError) as info:
        await prepared.execute([ones(1, 16)])
    assert info.value.status is ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    gate.release.set()
    await first
    await second
    dev.close()


async def test_cancelling_a_queued_execution_frees_its_place(vdevice: nnrt.CpuDevice) -> None:
    prepared = await vdevice.prepare_model(zoo.add_chain(3))
    gate = Gate.on_step(prepared, 0)
    first = start(prepared.execute([ones(1, 16)]))
    await gate.wait_entered()
    queued = start(prepared.execute([ones(1, 16)]))
    await settle()
    queued.cancel()
    with pytest.raises(anyio.get_cancelled_exc_class()):
        await queued
    gate.release.set()
    await first
    stats = vdevice.statistics()
    assert stats.queued == 0 and stats.running == 0
    assert stats.get("default", Priority.MEDIUM).cancelled == 1


async def test_fast_path_counts_in_statistics() -> None:
    device = nnrt.CpuDevice()
    prepared = await device.prepare_model(zoo.one_add(), app="stats-app", priority=Priority.HIGH)
    for _ in range(3):
        await prepared.execute([ones(1, 4), ones(1, 4)])
    assert device.statistics().get("stats-app", Priority.HIGH).completed == 3
    device.close()


async def test_memory_budget_and_app_limits() -> None:
    import gc

    from nnrt.devices._budget import model_footprint

    size = model_footprint(zoo.mlp())
    dev = nnrt.CpuDevice(memory_budget=3 * size, app_memory_limit=2 * size)
    # Larger than the whole device: can never fit.
    with pytest.raises(nnrt.ResourceExhaustedError) as info:
        await dev.prepare_model(zoo.mobilenet_block())
    assert info.value.status is ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
    a1 = await dev.prepare_model(zoo.mlp(), app="a")
    a2 = dev.prepare_model_sync(zoo.mlp(), app="a")
    # App "a" is at its limit: a third model must wait for one to be released.
    with pytest.raises(nnrt.ResourceExhaustedError) as info:
        await dev.prepare_model(zoo.mlp(), app="a")
    assert info.value.status is ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    # Another app has its own limit, but the device budget is shared.
    b1 = await dev.prepare_model(zoo.mlp(), app="b")
    with pytest.raises(nnrt.ResourceExhaustedError) as info:
        await dev.prepare_model(zoo.mlp(), app="b")
    assert info.value.status is ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    assert dev.memory.in_use() == 3 * size
    del a1, a2, b1
    gc.collect()
    assert dev.memory.in_use() == 0
    await dev.prepare_model(zoo.mlp(), app="a")
    dev.close()


@pytest.mark.parametrize("inline_limit_ns", [0.0, 1e9], ids=["scheduler", "fast-path"])
async def test_admission_recovers_from_an_inflated_estimate(inline_limit_ns: float) -> None:
    """Refused executions are never measured: without decay, one inflated estimate would refuse
    every later request forever (lock-in). Refusals decay it until a probe is admitted, whose
    measurement replaces the stale history. The service times learned are measured for real
    (hand-offs to the worker included), so the deadline leaves them room: a 50 ms deadline
    against a 500 ms history (a 5 ms one failed when a loaded machine's hand-off took ms)."""
    clock = nnrt.VirtualClock(1000.0)
    dev = nnrt.CpuDevice(clock=clock, compute_units=1, inline_limit_ns=inline_limit_ns)
    prepared = await dev.prepare_model(zoo.one_add())
    plan = prepared.plan
    for _ in range(20):
        plan.observe(500e6)  # a bad history: 500 ms per execution
    outcomes = []
    for _ in range(60):
        try:
            await prepared.execute([ones(1, 4), ones(1, 4)], deadline=clock.now() + 0.050)  # 50 ms
        except nnrt.MissedDeadlineError as err:
            assert err.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
            outcomes.append("refused")
        else:
            outcomes.append("ok")
    first_ok = outcomes.index("ok")
    assert 5 <= first_ok <= 30  # refused while the estimate says 500 ms, then probed
    assert outcomes[first_ok:] == ["ok"] * (60 - first_ok)  # the probe's measurement sticks
    assert plan.admission_cost_ns < 50e6
    dev.close()


on_trio_too(globals())
