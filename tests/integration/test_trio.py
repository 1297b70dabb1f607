"""The public coroutines on trio (issue 15, item 9): preparation, ``execute`` inline and on the
worker, queueing for a compute unit, expiry in the queue at the deadline, cancellation, fenced
executions (eager and as tasks, a fence that never signals), and bursts (at once and in
worker batches).
Each test is one ``trio.run``; nothing is left running after it (trio would complain)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
import trio

import nnrt
from nnrt import ErrorStatus, Priority, SyncFence, zoo
from tests.helpers import ones
from tests.integration.test_scheduler import Gate


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return trio.run(fn)


def test_prepare_and_execute_inline_and_on_the_worker() -> None:
    async def main() -> None:
        device = nnrt.CpuDevice(compute_units=1)
        light = await device.prepare_model(zoo.one_add())
        assert (await light.execute([ones(1, 4), ones(1, 4)])).outputs[0].tolist() == [[2, 2, 2, 2]]
        heavy = await device.prepare_model(zoo.add_chain(3))
        for step in heavy.plan.steps:
            step.cost_ns = 1e9  # every step on the worker thread
        heavy.plan.set_inline_limit(device.inline_limit_ns)
        results: list[Any] = []

        async def one() -> None:
            results.append((await heavy.execute([ones(1, 16)])).outputs[0])

        async with trio.open_nursery() as nursery:  # three at once on one unit: two queue
            for _ in range(3):
                nursery.start_soon(one)
        expected = heavy.execute_sync([ones(1, 16)]).outputs[0]
        assert len(results) == 3 and all(np.array_equal(r, expected) for r in results)
        stats = device.statistics().get("default", Priority.MEDIUM)
        assert stats.completed == 5 and device.scheduler.idle()
        device.close()

    run(main)


def test_a_queued_execution_expires_at_its_deadline_and_cancellation_frees_the_unit() -> None:
    async def main() -> None:
        device = nnrt.CpuDevice(compute_units=1, inline_limit_ns=0)
        prepared = await device.prepare_model(zoo.one_add())
        gate = Gate.on_step(prepared, 0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(prepared.execute, [ones(1, 4), ones(1, 4)])  # holds the unit
            await trio.to_thread.run_sync(gate.entered.wait, 10)
            with pytest.raises(nnrt.MissedDeadlineError) as info:  # waits for the unit: the timer fails it
                await prepared.execute([ones(1, 4), ones(1, 4)], deadline=nnrt.deadline_after(0.05))
            assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
            with trio.move_on_after(0.02):  # cancelled while queued: it leaves the queue
                await prepared.execute([ones(1, 4), ones(1, 4)])
            gate.release.set()
        assert device.scheduler.idle() and device.statistics().queued == 0
        device.close()

    run(main)


@pytest.mark.parametrize("inline_limit_ns", [1e9, 0.0], ids=["eager", "task"])
def test_fenced_executions(inline_limit_ns: float) -> None:
    async def main() -> None:
        device = nnrt.CpuDevice(inline_limit_ns=inline_limit_ns)
        prepared = await device.prepare_model(zoo.one_add())
        x = ones(1, 4)
        a, b = np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32)
        frame = SyncFence()
        f1, _ = await prepared.execute_fenced([x, x], [a], wait_for=[frame])
        f2, cb = await prepared.execute_fenced([a, x], [b], wait_for=[f1], measure_timing=True)
        frame.signal()
        await f2
        assert b.tolist() == [[3, 3, 3, 3]] and cb.get_execution_info().status is ErrorStatus.NONE
        never, _ = await prepared.execute_fenced([x, x], wait_for=[SyncFence()], deadline=nnrt.deadline_after(0.03))
        with pytest.raises(nnrt.MissedDeadlineError):
            await never.wait(5.0)
        device.close()

    run(main)


@pytest.mark.parametrize("inline_limit_ns", [1e9, 0.0], ids=["at-once", "worker-batches"])
def test_bursts(inline_limit_ns: float) -> None:
    """A burst on trio: requests run at once (cheap plan, idle device) or through the server
    task in worker batches, results in order; closing fails what is left with DEAD_OBJECT."""

    async def main() -> None:
        device = nnrt.CpuDevice(inline_limit_ns=inline_limit_ns)
        prepared = await device.prepare_model(zoo.one_add())
        data = np.zeros((17, 4), np.float32)
        data[:8] = np.arange(8, dtype=np.float32)[:, None]
        data[16] = 1.0
        async with prepared.burst() as burst:
            slot = burst.register_memory(nnrt.Memory(data))
            one = burst.location(slot, 16 * 16, 16, (1, 4))
            xs = [burst.location(slot, 16 * k, 16, (1, 4)) for k in range(8)]
            ys = [burst.location(slot, 16 * (8 + k), 16, (1, 4)) for k in range(8)]
            futures = [await burst.submit([xs[k], one], [ys[k]]) for k in range(8)]
            results = [await fut for fut in futures]
            assert [r.outputs[0][0, 0] for r in results] == [k + 1.0 for k in range(8)]
            plain = await burst.execute([ones(1, 4), ones(1, 4)])
            assert plain.outputs[0].tolist() == [[2, 2, 2, 2]]
            stats = burst.statistics()
            assert stats.completed == stats.submitted == 9 and stats.failed == 0
            if inline_limit_ns == 0.0:
                assert stats.worker_batches >= 1
        with pytest.raises(nnrt.DeadObjectError):
            await burst.execute([ones(1, 4), ones(1, 4)])
        assert device.scheduler.idle()
        device.close()

    run(main)


def test_closing_a_burst_while_the_worker_runs_a_batch() -> None:
    """Cancellation on trio: the request in progress finishes (its output whole) and is
    answered, the others fail with DEAD_OBJECT, and no job is left on the device."""

    async def main() -> None:
        device = nnrt.CpuDevice(compute_units=1, inline_limit_ns=0)
        prepared = await device.prepare_model(zoo.one_add())
        gate = Gate.on_step(prepared, 0)
        burst = await prepared.burst().configure()
        futures = [await burst.submit([ones(1, 4), ones(1, 4)]) for _ in range(3)]
        await trio.to_thread.run_sync(gate.entered.wait, 10)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(burst.close)
            await trio.sleep(0.01)
            gate.release.set()
        assert futures[0].result().outputs[0].tolist() == [[2, 2, 2, 2]]
        for fut in futures[1:]:
            with pytest.raises(nnrt.DeadObjectError):
                fut.result()
        assert device.scheduler.idle() and device.statistics().running == 0
        device.close()

    run(main)
