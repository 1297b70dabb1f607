"""The one execution path: every entry point (``execute``, ``execute_sync``, a burst's requests,
fenced executions) keeps the same promises. Nothing succeeds after its deadline, even when the
last step runs across it (issue 15, item 3), and ``execute_sync`` from a thread goes through
the device's scheduler when the prepared model's event loop runs elsewhere."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt.sched import Job
from tests.helpers import on_trio_too, ones, unknown_shape_add


def _slow_last_step(prepared: nnrt.PreparedModel, clock: nnrt.VirtualClock, seconds: float) -> None:
    """Make the plan's last kernel take ``seconds`` of virtual time (it moves the clock)."""
    step = prepared.plan.steps[-1]
    fn = step.fn
    assert fn is not None

    def slow(*args: Any) -> Any:
        clock.advance(seconds)
        return fn(*args)

    step.fn = slow


async def _late_execute(prepared: nnrt.PreparedModel, deadline: float) -> Any:
    return await prepared.execute([ones(1, 4), ones(1, 4)], deadline=deadline)


async def _late_sync(prepared: nnrt.PreparedModel, deadline: float) -> Any:
    return prepared.execute_sync([ones(1, 4), ones(1, 4)], deadline=deadline)


async def _late_burst(prepared: nnrt.PreparedModel, deadline: float) -> Any:
    async with prepared.burst() as burst:
        return await burst.execute([ones(1, 4), ones(1, 4)], deadline=deadline)


async def _late_fenced(prepared: nnrt.PreparedModel, deadline: float) -> Any:
    fence, _ = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], deadline=deadline)
    return await fence


@pytest.mark.parametrize("inline", [True, False])
@pytest.mark.parametrize("entry", [_late_execute, _late_sync, _late_burst, _late_fenced])
async def test_no_path_succeeds_after_its_deadline(entry: Callable[..., Any], inline: bool) -> None:
    """The one step starts before the deadline and ends 10 ms after it: MISSED_DEADLINE_TRANSIENT
    on every path, inline on the loop or on the worker (before the end-of-run check, the fast
    path and ``execute_sync`` returned success)."""
    clock = nnrt.VirtualClock(100.0)
    device = nnrt.CpuDevice(clock=clock, inline_limit_ns=1e12 if inline else 0)
    prepared = await device.prepare_model(zoo.one_add())
    _slow_last_step(prepared, clock, 0.015)
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await entry(prepared, clock.now() + 0.005)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    # The same request with room to spare succeeds on the same path.
    await entry(prepared, clock.now() + 0.030)
    device.close()


@pytest.fixture
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in another thread (an app whose executions run there)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def test_execute_sync_goes_through_the_scheduler_of_a_running_loop(loop_thread: asyncio.AbstractEventLoop) -> None:
    """From a thread without a loop, ``execute_sync`` runs on the prepared model's loop, under
    its device's scheduler: with a HIGH execution of the app holding the only unit for 10 s,
    a 1 s deadline is refused at admission (TRANSIENT: work ahead). Outside the scheduler it
    would have run at once and succeeded."""
    device = nnrt.CpuDevice(compute_units=1)

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop_thread).result(timeout=30)

    prepared = on_loop(device.prepare_model(zoo.one_add()))
    blocker = Job("default", nnrt.Priority.HIGH, cost=10.0)

    async def hold() -> None:
        device.scheduler.admit(blocker, type("Ctx", (), {"interrupt": False})())
        await device.scheduler.wait_turn(blocker)

    on_loop(hold())
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        prepared.execute_sync([ones(1, 4), ones(1, 4)], deadline=nnrt.deadline_after(1.0))
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert "not admitted" in str(info.value)

    async def release() -> None:
        device.scheduler.finish(blocker)

    on_loop(release())
    result = prepared.execute_sync([ones(1, 4), ones(1, 4)], deadline=nnrt.deadline_after(1.0))
    assert result.outputs[0].tolist() == [[2, 2, 2, 2]]
    device.close()


def test_execute_sync_without_a_running_loop_runs_here() -> None:
    """No loop running: the execution runs on the calling thread, outside the scheduler (the
    idle-device admission test still applies), and is counted as completed."""
    device = nnrt.CpuDevice()
    prepared = device.prepare_model_sync(zoo.one_add())
    assert prepared.execute_sync([ones(1, 4), ones(1, 4)]).outputs[0].tolist() == [[2, 2, 2, 2]]
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        prepared.execute_sync([ones(1, 4), ones(1, 4)], deadline=nnrt.deadline_after(1e-9))
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert sum(c.completed for c in device.statistics().classes) == 1
    device.close()


async def test_a_model_with_unknown_dimensions_runs_on_the_worker_and_learns_per_shape() -> None:
    """Item 2: a plan whose inputs have unknown dimensions is not estimated at 1 us and run on
    the event loop thread whatever the input size: it runs on the device's worker (so it can
    be preempted and never stalls the loop), and its cost is learned per shape class."""
    device = nnrt.CpuDevice()
    prepared = await device.prepare_model(unknown_shape_add())
    step = prepared.plan.steps[0]
    fn = step.fn
    assert fn is not None
    threads: list[int] = []

    def spy(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return fn(*args)

    step.fn = spy
    big = np.ones((4096, 2), np.float32)
    result = await prepared.execute([big, big])
    assert result.outputs[0].shape == (4096, 2)
    assert threads and threads[0] != threading.get_ident()
    assert prepared.plan.cost_for([big, big]).observations == 1
    assert prepared.plan.cost_for([big[:1], big[:1]]).observations == 0
    device.close()


on_trio_too(globals())
