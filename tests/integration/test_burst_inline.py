"""Bursts on the inline path: requests naming locations that run at once (no packet, no task
switch) when nothing is queued and the device may run the plan now. Same results and failure
rules as ``execute``, the scheduler's rules (a busy device queues them, in order), deadlines on
a virtual clock, the lane cache following slot changes, closing and cancelling, no leaks.
Every test runs on asyncio and uvloop (``tests/conftest.py``) and on trio (``on_trio_too``)."""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Model, Priority, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import gather, on_trio_too, ones, start
from tests.integration.test_scheduler import Gate, settle

#: Numbers each run of a test that must not share an app with another run.
_RUNS = itertools.count()


def two_adds() -> Model:
    """a = x + y (output 0), b = a + y (output 1): two steps, two [1, 4] outputs."""
    m = Model()
    x, y = m.add_operand(T.TENSOR_FLOAT32, [1, 4]), m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    a, b = m.add_operand(T.TENSOR_FLOAT32, [1, 4]), m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    m.add_operation(Op.ADD, [x, y, act], [a])
    m.add_operation(Op.ADD, [a, y, act], [b])
    m.identify_inputs_and_outputs([x, y], [a, b])
    m.finish()
    return m


class Regions:
    """One float32 pool: two [1, 4] inputs, then ``outputs`` [1, 4] outputs filled with -1."""

    def __init__(self, burst: nnrt.Burst, outputs: int = 1) -> None:
        self.data = np.full(4 * (2 + outputs), -1.0, np.float32)
        self.data[:8] = np.arange(8)
        self.slot = burst.register_memory(nnrt.Memory(self.data))
        locs = [burst.location(self.slot, 16 * k, 16, (1, 4)) for k in range(2 + outputs)]
        self.inputs, self.outputs = locs[:2], locs[2:]

    def out(self, j: int = 0) -> list[float]:
        return [float(v) for v in self.data[8 + 4 * j : 12 + 4 * j]]


@pytest.fixture
async def vdevice() -> AsyncIterator[nnrt.CpuDevice]:
    dev = nnrt.CpuDevice(clock=nnrt.VirtualClock(1000.0), compute_units=1)
    yield dev
    dev.close()


async def test_requests_run_at_once_with_the_results_of_execute(device: nnrt.CpuDevice) -> None:
    app = f"at-once-{next(_RUNS)}"  # the device is shared by every loop's run of the test
    prepared = await device.prepare_model(zoo.one_add(), app=app)
    async with prepared.burst() as burst:
        r = Regions(burst)
        expected = (await prepared.execute([r.data[:4].reshape(1, 4), r.data[4:8].reshape(1, 4)])).outputs[0]
        fut = await burst.submit(r.inputs, r.outputs)
        assert fut.done()  # ran before submit returned
        result = fut.result()
        assert r.out() == expected.reshape(-1).tolist() == [4, 6, 8, 10]
        assert np.shares_memory(result.outputs[0], r.data) and result.output_shapes == (nnrt.OutputShape((1, 4), True),)
        r.data[:4] = 100  # pools are read per request
        assert (await burst.execute(r.inputs, r.outputs)).outputs[0].tolist() == [[104, 105, 106, 107]]
        timed = await burst.execute(r.inputs, r.outputs, measure_timing=True)
        assert timed.timing.available and timed.timing.time_on_device_ns <= timed.timing.time_in_driver_ns  # type: ignore[operator]
        stats = burst.statistics()
        assert (stats.inline, stats.submitted, stats.completed, stats.eager) == (3, 3, 3, 0)
        assert burst._server.served == 0  # the server task never ran one
    assert device.statistics().get(app, Priority.MEDIUM).completed == 4  # counted as fast-path runs


async def test_a_busy_device_queues_them_in_order_under_the_scheduler(vdevice: nnrt.CpuDevice) -> None:
    busy = await vdevice.prepare_model(zoo.add_chain(3))
    for step in busy.plan.steps:  # heavy: it runs on the worker thread, holding the unit
        step.cost_ns = 1e9
    busy.plan.set_inline_limit(vdevice.inline_limit_ns)
    gate = Gate.on_step(busy, 0)
    prepared = await vdevice.prepare_model(zoo.one_add())
    async with prepared.burst() as burst:
        data = np.zeros((12, 4), np.float32)
        data[:6, 0] = np.arange(6)
        slot = burst.register_memory(nnrt.Memory(data))
        loc = [burst.location(slot, 16 * k, 16, (1, 4)) for k in range(12)]
        blocker = start(busy.execute([ones(1, 16)]))
        await gate.wait_entered()
        order: list[int] = []
        futures = []
        for k in range(5):
            fut = await burst.submit([loc[k], loc[0]], [loc[6 + k]])
            fut.add_done_callback(functools.partial(lambda k, _f: order.append(k), k))
            futures.append(fut)
        await settle()
        assert not any(f.done() for f in futures)  # they wait for the unit like any execution
        assert burst.statistics().inline == 0
        gate.release.set()
        await blocker
        results = await gather(*futures)
        assert order == [0, 1, 2, 3, 4]
        assert [res.outputs[0][0, 0] for res in results] == [0, 1, 2, 3, 4]
        fut = await burst.submit([loc[5], loc[0]], [loc[11]])  # the device is idle again
        assert fut.done() and fut.result().outputs[0][0, 0] == 5
        assert burst.statistics().inline == 1


async def test_requests_never_overtake_queued_ones(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    async with prepared.burst() as burst:
        r = Regions(burst)
        order: list[str] = []
        queued = [await burst.submit([ones(1, 4), ones(1, 4)]) for _ in range(3)]  # arrays: queued
        behind = await burst.submit(r.inputs, r.outputs)
        assert not behind.done()
        for name, fut in [("a0", queued[0]), ("a1", queued[1]), ("a2", queued[2]), ("loc", behind)]:
            fut.add_done_callback(functools.partial(lambda name, _f: order.append(name), name))
        await behind
        assert order == ["a0", "a1", "a2", "loc"] and r.out() == [4, 6, 8, 10]
        assert burst.statistics().inline == 0
        assert (await burst.submit(r.inputs, r.outputs)).done()  # nothing queued: at once again


@pytest.mark.parametrize("path", ["inline", "arrays", "execute"])
async def test_deadlines_follow_the_execute_rules(vdevice: nnrt.CpuDevice, path: str) -> None:
    clock = vdevice.clock
    assert isinstance(clock, nnrt.VirtualClock)
    prepared = await vdevice.prepare_model(two_adds())
    async with prepared.burst() as burst:
        r = Regions(burst, outputs=2)
        xs = [r.data[:4].reshape(1, 4).copy(), r.data[4:8].reshape(1, 4).copy()]

        outs = [np.full(op.dimensions, -1, op.type.dtype) for op in prepared.plan.output_operands]

        async def run(deadline: float) -> object:
            if path == "inline":
                return await burst.execute(r.inputs, r.outputs, deadline=deadline)
            if path == "arrays":  # plain arrays run at once on execute's own fast path
                return await burst.execute(xs, outs, deadline=deadline)
            return await prepared.execute(xs, deadline=deadline)

        with pytest.raises(nnrt.MissedDeadlineError) as info:  # already passed
            await run(clock.now() - 1)
        assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
        steps = prepared.plan.steps
        costs = [s.cost_ns for s in steps]
        steps[0].cost_ns = 5e9  # admission: 5 s of work cannot fit in 1 s (the plan stays inline)
        with pytest.raises(nnrt.MissedDeadlineError) as info:
            await run(clock.now() + 1.0)
        assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
        for step, cost in zip(steps, costs):
            step.cost_ns = cost
        first = steps[0].fn
        assert first is not None

        def slow(*args: Any) -> Any:
            clock.advance(2.0)  # the deadline passes during step 0
            return first(*args)

        steps[0].fn = slow
        with pytest.raises(nnrt.MissedDeadlineError) as info:
            await run(clock.now() + 1.0)
        assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT and "operation 1" in str(info.value)
        assert r.out(0) == r.out(1) == [-1] * 4  # nothing written
        assert all((o == -1).all() for o in outs)
        steps[0].fn = first
        if path == "arrays":
            assert (await run(clock.now() + 1.0)).outputs[1].tolist() == [[8, 11, 14, 17]] == outs[1].tolist()
        else:
            assert (await burst.execute(r.inputs, r.outputs, deadline=clock.now() + 1.0)).outputs[1].tolist() == [[8, 11, 14, 17]]
        if path != "execute":
            stats = burst.statistics()
            assert stats.inline == stats.submitted == 4 and stats.failed == 3 and stats.eager == 0


async def test_a_failing_kernel_is_general_failure_and_no_output_is_written(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(two_adds())
    real = prepared.plan.steps[1].fn
    assert real is not None

    def broken(*args: Any) -> Any:
        raise ValueError("boom")

    async with prepared.burst() as burst:
        r = Regions(burst, outputs=2)
        prepared.plan.steps[1].fn = broken
        fut = await burst.submit(r.inputs, r.outputs)
        with pytest.raises(nnrt.GeneralFailureError, match=r"operation 1 \(ADD\) failed: ValueError: boom") as info:
            fut.result()
        assert info.value.output_shapes == ()
        assert r.out(0) == r.out(1) == [-1] * 4  # output 0 was computed, but not written
        prepared.plan.steps[1].fn = real
        result = await burst.execute(r.inputs, r.outputs)
        assert [o.tolist() for o in result.outputs] == [[[4, 6, 8, 10]], [[8, 11, 14, 17]]]
        stats = burst.statistics()
        assert (stats.inline, stats.failed, stats.completed) == (2, 1, 1)


async def test_lanes_follow_slot_changes(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    async with prepared.burst() as burst:
        r = Regions(burst)
        assert (await burst.execute(r.inputs, r.outputs)).outputs[0].tolist() == [[4, 6, 8, 10]]
        key = (*map(id, r.inputs), *map(id, r.outputs))
        assert key in burst._server.lanes
        await burst.execute([ones(1, 4), ones(1, 4)])  # transient slots come and go ...
        assert key in burst._server.lanes and len(burst._server.lanes) == 1  # ... and only their lanes with them
        burst.release_memory(r.slot)
        with pytest.raises(nnrt.InvalidArgumentError, match="slot"):
            await burst.execute(r.inputs, r.outputs)  # the cached lane went with its slot
        assert key not in burst._server.lanes
        other = np.full(12, 2.0, np.float32)
        assert burst.register_memory(nnrt.Memory(other)) == r.slot  # same slot, another pool
        result = await burst.execute(r.inputs, r.outputs)  # the same Location objects
        assert result.outputs[0].tolist() == [[4, 4, 4, 4]] and np.shares_memory(result.outputs[0], other)
        assert other[8:].tolist() == [4] * 4 and r.out() == [4, 6, 8, 10]  # the old pool was not touched


class CountingDevice(nnrt.CpuDevice):
    """A device that instruments ``run_now`` (as the simulator's real devices do)."""

    def __init__(self) -> None:
        super().__init__(compute_units=1)
        self.runs = 0

    def run_now(self, *args: Any, **kwargs: Any) -> Any:
        self.runs += 1
        return super().run_now(*args, **kwargs)


async def test_a_device_that_instruments_run_now_keeps_it() -> None:
    device = CountingDevice()
    try:
        prepared = await device.prepare_model(zoo.one_add())
        async with prepared.burst() as burst:
            assert burst._server._lean is None
            r = Regions(burst)
            fut = await burst.submit(r.inputs, r.outputs)
            assert fut.done() and r.out() == [4, 6, 8, 10]
            assert device.runs == 1 and burst.statistics().inline == 1
    finally:
        device.close()


async def test_close_after_requests_ran_at_once_leaks_nothing() -> None:
    device = nnrt.CpuDevice(compute_units=1)
    prepared = await device.prepare_model(zoo.one_add())  # (prepares on the loop's default executor)
    threads = set(threading.enumerate())
    burst = await prepared.burst().configure()
    r = Regions(burst)
    done = [await burst.submit(r.inputs, r.outputs) for _ in range(3)]
    queued = [await burst.submit([ones(1, 4), ones(1, 4)]) for _ in range(3)]
    await burst.close()
    assert all(f.result().outputs[0].tolist() == [[4, 6, 8, 10]] for f in done)  # answered before the close
    for fut in queued:
        with pytest.raises(nnrt.DeadObjectError):
            await fut
    with pytest.raises(nnrt.DeadObjectError):
        await burst.submit(r.inputs, r.outputs)
    assert set(threading.enumerate()) <= threads  # the inline path starts no thread
    device.close()


async def test_cancelling_a_streaming_owner_leaves_whole_results(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(two_adds())
    seen: list[tuple[nnrt.Burst, Regions]] = []
    ran = anyio.Event()

    async def owner() -> None:
        async with prepared.burst() as burst:
            r = Regions(burst, outputs=2)
            seen.append((burst, r))
            k = 0
            while True:
                r.data[:4] = k
                await burst.execute(r.inputs, r.outputs)
                k += 1
                ran.set()
                await anyio.lowlevel.checkpoint()

    task = start(owner())
    await ran.wait()
    await settle(5)
    task.cancel()
    with pytest.raises(anyio.get_cancelled_exc_class()):
        await task
    ((burst, r),) = seen
    assert burst.server_task is not None and burst.server_task.done()
    x, y = r.data[:4], r.data[4:8]
    np.testing.assert_array_equal(r.data[8:12], x + y)  # the last request's outputs, whole
    np.testing.assert_array_equal(r.data[12:16], x + 2 * y)
    assert burst.statistics().inline >= 1 and burst.statistics().failed == 0


on_trio_too(globals())
