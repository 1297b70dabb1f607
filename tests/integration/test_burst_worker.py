"""Bursts of a plan too heavy for the event loop: the server runs the queued requests as a
batch on the device's worker under one scheduler job. Results in order and equal to execute,
per-request failures, preemption between two requests by a higher priority, deadlines that
pass while a request waits in its batch, closing while the worker runs (outputs whole, no
task, thread or job left behind). Every test runs on asyncio, uvloop and trio."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Priority, zoo
from nnrt._aio import Future
from tests.helpers import gather, on_trio_too, ones, start, wait_all
from tests.integration.test_scheduler import Gate, settle


@pytest.fixture
def heavy() -> Iterator[nnrt.CpuDevice]:
    """A device on a virtual clock that runs every plan on its worker thread."""
    dev = nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=1, inline_limit_ns=0)
    yield dev
    dev.close()


class Ring:
    """One float32 pool of ``n`` [1, 4] inputs (row k holds k) and ``n`` outputs, and a [1, 4]
    region of ones; request k computes row k + 1."""

    def __init__(self, burst: nnrt.Burst, n: int) -> None:
        self.data = np.full((2 * n + 1, 4), -1.0, np.float32)
        self.data[:n] = np.arange(n, dtype=np.float32)[:, None]
        self.data[2 * n] = 1.0
        slot = burst.register_memory(nnrt.Memory(self.data))
        self.x = [burst.location(slot, 16 * k, 16, (1, 4)) for k in range(n)]
        self.y = [burst.location(slot, 16 * (n + k), 16, (1, 4)) for k in range(n)]
        self.one = burst.location(slot, 16 * 2 * n, 16, (1, 4))
        self.n = n

    async def submit(self, burst: nnrt.Burst, k: int, **kwargs: Any) -> Future[nnrt.ExecutionResult]:
        return await burst.submit([self.x[k], self.one], [self.y[k]], **kwargs)

    def out(self, k: int) -> list[float]:
        return [float(v) for v in self.data[self.n + k]]


async def test_queued_requests_run_in_worker_batches_in_order(heavy: nnrt.CpuDevice) -> None:
    prepared = await heavy.prepare_model(zoo.one_add(), app="stream")
    assert not prepared.plan.inline
    async with prepared.burst(max_in_flight=8) as burst:
        ring = Ring(burst, 20)
        order: list[int] = []
        futures = []
        for k in range(20):
            fut = await ring.submit(burst, k)
            fut.add_done_callback(lambda _f, k=k: order.append(k))  # type: ignore[misc]
            futures.append(fut)
        results = await gather(*futures)
        assert order == list(range(20))
        assert [r.outputs[0].tolist() for r in results] == [[[k + 1.0] * 4] for k in range(20)]
        assert all(np.shares_memory(r.outputs[0], ring.data) for r in results)
        assert [ring.out(k) for k in range(20)] == [[k + 1.0] * 4 for k in range(20)]
        stats = burst.statistics()
        assert stats.completed == 20 and stats.inline == 0 and 1 <= stats.worker_batches < 20  # several per batch
        timed = await (await ring.submit(burst, 0, measure_timing=True))
        assert timed.timing.available
    assert heavy.statistics().get("stream", Priority.MEDIUM).completed == 21  # requests, not batches
    assert heavy.scheduler.idle()


async def test_a_failing_request_fails_alone(heavy: nnrt.CpuDevice) -> None:
    prepared = await heavy.prepare_model(zoo.one_add())
    step = prepared.plan.steps[0]
    real = step.fn
    assert real is not None

    def picky(*args: Any) -> Any:
        if args[0][0, 0] == 1.0:
            raise ValueError("no ones")
        return real(*args)

    step.fn = picky
    async with prepared.burst() as burst:
        ring = Ring(burst, 3)
        futures = [await ring.submit(burst, k) for k in range(3)]
        await wait_all(futures)
        with pytest.raises(nnrt.GeneralFailureError, match="no ones"):
            futures[1].result()
        assert futures[0].result().outputs[0][0, 0] == 1 and futures[2].result().outputs[0][0, 0] == 3
        assert ring.out(1) == [-1.0] * 4  # nothing written for the failed one
        assert burst.statistics().failed == 1


async def test_a_higher_priority_takes_the_unit_between_two_requests(heavy: nnrt.CpuDevice) -> None:
    low = await heavy.prepare_model(zoo.one_add(), priority=Priority.LOW, app="cam")
    high = await heavy.prepare_model(zoo.one_add(), priority=Priority.HIGH, app="cam")
    gate = Gate.on_step(low, 0)
    order: list[str] = []
    async with low.burst() as burst:
        ring = Ring(burst, 3)
        futures = []
        for k in range(3):
            fut = await ring.submit(burst, k)
            fut.add_done_callback(lambda _f, k=k: order.append(f"burst{k}"))  # type: ignore[misc]
            futures.append(fut)
        await gate.wait_entered()  # request 0 is inside its kernel, on the worker
        urgent = start(high.execute([ones(1, 4), ones(1, 4)]))
        urgent.add_done_callback(lambda _t: order.append("high"))
        await settle()
        assert not urgent.done()  # the burst holds the unit until its request ends
        gate.release.set()
        await gather(urgent, *futures)
        assert order == ["burst0", "high", "burst1", "burst2"]
        assert [ring.out(k) for k in range(3)] == [[k + 1.0] * 4 for k in range(3)]
        assert burst.statistics().worker_batches == 2  # the rest came back and ran in a second batch
    assert heavy.scheduler.idle()


async def test_deadlines_in_a_batch(heavy: nnrt.CpuDevice) -> None:
    clock = heavy.clock
    assert isinstance(clock, nnrt.VirtualClock)
    prepared = await heavy.prepare_model(zoo.one_add())
    gate = Gate.on_step(prepared, 0)
    async with prepared.burst() as burst:
        ring = Ring(burst, 5)
        first = await ring.submit(burst, 0)
        passed = await ring.submit(burst, 1, deadline=clock.now() - 1.0)
        expires = await ring.submit(burst, 2, deadline=clock.now() + 1.0)
        fine = await ring.submit(burst, 3, deadline=clock.now() + 10.0)
        await gate.wait_entered()  # one batch of all four; request 0 is inside its kernel
        later = await ring.submit(burst, 4, deadline=clock.now() + 1.0)  # the next batch
        clock.advance(2.0)  # requests 2 and 4 reach their deadlines while they wait
        gate.release.set()
        await wait_all([first, passed, expires, fine, later])
        statuses = []
        for fut in (passed, expires, later):
            with pytest.raises(nnrt.MissedDeadlineError) as info:
                fut.result()
            statuses.append(info.value.status)
        assert statuses == [
            ErrorStatus.MISSED_DEADLINE_PERSISTENT,  # passed when it was submitted
            ErrorStatus.MISSED_DEADLINE_TRANSIENT,  # passed in its batch, as a job expires in the queue
            ErrorStatus.MISSED_DEADLINE_PERSISTENT,  # passed before its batch started, as in execute
        ]
        assert first.result().outputs[0][0, 0] == 1 and fine.result().outputs[0][0, 0] == 4
        assert ring.out(1) == ring.out(2) == ring.out(4) == [-1.0] * 4
        assert burst.statistics().worker_batches == 1  # request 4 was refused before reaching the worker


async def test_closing_while_the_worker_runs_a_batch(heavy: nnrt.CpuDevice) -> None:
    prepared = await heavy.prepare_model(zoo.one_add())
    await prepared.execute([ones(1, 4), ones(1, 4)])  # the worker thread exists from here on
    threads = set(threading.enumerate())
    gate = Gate.on_step(prepared, 0)
    burst = await prepared.burst().configure()
    ring = Ring(burst, 4)
    futures = [await ring.submit(burst, k) for k in range(4)]
    await gate.wait_entered()
    closing = start(burst.close())
    await settle()
    assert not closing.done()  # it waits for the request in progress
    gate.release.set()
    await closing
    assert futures[0].result().outputs[0].tolist() == [[1.0] * 4]  # in progress: it finished, and was answered
    for fut in futures[1:]:
        with pytest.raises(nnrt.DeadObjectError):
            fut.result()
    assert ring.out(0) == [1.0] * 4  # the request in progress finished: its output is whole
    assert ring.out(1) == ring.out(2) == ring.out(3) == [-1.0] * 4  # the others never started
    assert heavy.scheduler.idle() and heavy.statistics().running == 0
    assert burst.server_task is not None and burst.server_task.done()
    assert set(threading.enumerate()) <= threads


async def test_a_refused_batch_fails_each_of_its_requests() -> None:
    device = nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=1, inline_limit_ns=0, max_queued_per_app=1)
    try:
        prepared = await device.prepare_model(zoo.one_add(), app="full")
        other = await device.prepare_model(zoo.one_add(), app="full")
        gate = Gate.on_step(other, 0)
        running = start(other.execute([ones(1, 4), ones(1, 4)]))
        await gate.wait_entered()
        waiting = start(other.execute([ones(1, 4), ones(1, 4)]))  # the app's one queued job
        await settle()
        async with prepared.burst() as burst:
            ring = Ring(burst, 2)
            futures = [await ring.submit(burst, k) for k in range(2)]
            await wait_all(futures)
            for fut in futures:
                with pytest.raises(nnrt.NnrtError) as info:
                    fut.result()
                assert info.value.status is ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
            gate.release.set()
            await gather(running, waiting)
            assert (await (await ring.submit(burst, 1))).outputs[0][0, 0] == 2  # room again
        assert device.scheduler.idle()
    finally:
        device.close()


async def test_batch_results_arrive_as_each_request_ends_and_none_succeeds_late(heavy: nnrt.CpuDevice) -> None:
    """Issue 15, item 4: in one worker batch, request 0's result is delivered while request 1
    still runs (it used to wait for the whole batch), and request 1, whose deadline passes
    during its kernel, fails MISSED_DEADLINE_TRANSIENT (it used to succeed late)."""
    clock = heavy.clock
    assert isinstance(clock, nnrt.VirtualClock)
    prepared = await heavy.prepare_model(zoo.one_add())
    step = prepared.plan.steps[0]
    fn = step.fn
    assert fn is not None
    gate = Gate()
    calls: list[int] = []

    def second_blocks(*args: Any) -> Any:
        calls.append(1)
        return gate.wrap(fn)(*args) if len(calls) == 2 else fn(*args)

    step.fn = second_blocks
    async with prepared.burst() as burst:
        ring = Ring(burst, 3)
        first = await ring.submit(burst, 0)
        late = await ring.submit(burst, 1, deadline=clock.now() + 1.0)
        fine = await ring.submit(burst, 2, deadline=clock.now() + 10.0)
        await gate.wait_entered()  # request 1 is inside its kernel
        await settle()
        assert first.done() and first.result().outputs[0][0, 0] == 1
        assert not late.done()
        clock.advance(2.0)  # its deadline passes during the kernel
        gate.release.set()
        await wait_all([late, fine])
        with pytest.raises(nnrt.MissedDeadlineError) as info:
            late.result()
        assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
        assert fine.result().outputs[0][0, 0] == 3
        assert burst.statistics().worker_batches == 1


on_trio_too(globals())
