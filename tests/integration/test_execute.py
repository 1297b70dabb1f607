"""``await prepared.execute`` and ``execute_sync``: results, buffers, shapes, errors, deadlines,
timing, concurrency, the worker-thread path and cancellation."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from structlog.testing import capture_logs

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt._log import reload_vlog
from tests.helpers import on_trio_too, ones, unknown_shape_add


class TickingClock:
    """A virtual clock that moves one second every time it is read."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        self.t += 1.0
        return self.t


async def test_execute_and_execute_sync_agree(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    x, y = np.arange(4, dtype=np.float32).reshape(1, 4), ones(1, 4)
    r1 = await prepared.execute([x, y])
    r2 = prepared.execute_sync([x, y])
    assert r1.outputs[0].tolist() == r2.outputs[0].tolist() == [[1, 2, 3, 4]]
    assert r1.output_shapes == (nnrt.OutputShape((1, 4), True),)
    assert r1.timing == nnrt.TIMING_UNAVAILABLE


async def test_outputs_written_in_place(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    out = np.zeros((1, 4), np.float32)
    result = await prepared.execute([ones(1, 4), ones(1, 4)], outputs=[out])
    assert result.outputs[0] is out
    assert out.tolist() == [[2, 2, 2, 2]]


async def test_unknown_output_shape_comes_from_the_run(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(unknown_shape_add())
    result = await prepared.execute([ones(3, 2), ones(3, 2)])
    assert result.output_shapes[0].dimensions == (3, 2)


async def test_insufficient_output_buffer_reports_shapes(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(unknown_shape_add())
    small = np.zeros((2, 2), np.float32)
    with pytest.raises(nnrt.OutputInsufficientSizeError) as info:
        await prepared.execute([ones(3, 2), ones(3, 2)], outputs=[small])
    assert info.value.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert info.value.output_shapes == (nnrt.OutputShape((3, 2), False),)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ([ones(1, 4)], "the model has 2 inputs, the request gives 1"),
        ([ones(1, 4), ones(1, 4), ones(1, 4)], "gives 3"),
        ([ones(1, 4), np.ones((1, 4), np.float64)], "input 1 .* has dtype float64"),
        ([ones(1, 4), ones(4)], "input 1 .* has rank 1"),
        ([ones(1, 4), ones(1, 5)], r"input 1 .* has shape \[1, 5\]"),
        ([ones(1, 4), "text"], "input 1"),
    ],
)
async def test_bad_requests(inputs: list[object], match: str, device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    with pytest.raises(nnrt.InvalidArgumentError, match=match):
        await prepared.execute(inputs)
    with pytest.raises(nnrt.InvalidArgumentError, match=match):
        prepared.execute_sync(inputs)


@pytest.mark.parametrize(
    ("outputs", "match"),
    [
        ([], "the model has 1 outputs"),
        ([np.zeros((1, 4), np.int32)], "output 0 .* has dtype int32"),
        ([np.zeros((1, 3), np.float32)], "too small"),
        ([np.zeros((1, 8), np.float32)[:, ::2]], "C-contiguous"),
    ],
)
async def test_bad_output_buffers(outputs: list[np.ndarray], match: str, device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    with pytest.raises(nnrt.InvalidArgumentError, match=match):
        await prepared.execute([ones(1, 4), ones(1, 4)], outputs=outputs)


async def test_python_lists_are_accepted_as_inputs(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    result = await prepared.execute([[[1, 2, 3, 4]], ones(1, 4)])
    assert result.outputs[0].tolist() == [[2, 3, 4, 5]]


async def test_deadline_already_passed_is_persistent() -> None:
    clock = nnrt.VirtualClock(10.0)
    dev = nnrt.CpuDevice(clock=clock)
    prepared = await dev.prepare_model(zoo.one_add())
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await prepared.execute([ones(1, 4), ones(1, 4)], deadline=10.0)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    with pytest.raises(nnrt.MissedDeadlineError):
        prepared.execute_sync([ones(1, 4), ones(1, 4)], deadline=5.0)
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await dev.prepare_model(zoo.one_add(), deadline=9.0)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    result = await prepared.execute([ones(1, 4), ones(1, 4)], deadline=nnrt.deadline_after(1.0, clock))
    assert result.outputs[0].tolist() == [[2, 2, 2, 2]]
    dev.close()


@pytest.mark.parametrize("inline", [True, False])
async def test_deadline_passing_mid_run_is_transient(inline: bool) -> None:
    dev = nnrt.CpuDevice(clock=TickingClock(), inline_limit_ns=1e12 if inline else 0)
    prepared = await dev.prepare_model(zoo.add_chain(20))
    with pytest.raises(nnrt.MissedDeadlineError, match="deadline passed before operation") as info:
        await prepared.execute([ones(1, 16)], deadline=dev.clock.now() + 5)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    dev.close()


@pytest.mark.parametrize("inline", [True, False])
async def test_timing(inline: bool) -> None:
    dev = nnrt.CpuDevice(inline_limit_ns=1e12 if inline else 0)
    prepared = await dev.prepare_model(zoo.add_chain(5))
    result = await prepared.execute([ones(1, 16)], measure_timing=True)
    t = result.timing
    assert t.time_on_device_ns is not None and t.time_in_driver_ns is not None
    assert 0 < t.time_on_device_ns <= t.time_in_driver_ns
    assert prepared.execute_sync([ones(1, 16)], measure_timing=True).timing.available
    dev.close()


async def test_many_concurrent_executions(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.add_chain(10))
    xs = [np.full((1, 16), k, np.float32) for k in range(200)]
    results = await asyncio.gather(*(prepared.execute([x]) for x in xs))
    base = prepared.execute_sync([np.zeros((1, 16), np.float32)]).outputs[0]
    for k, r in enumerate(results):
        np.testing.assert_allclose(r.outputs[0], base + k, rtol=1e-6)


async def test_heavy_plans_run_on_the_worker_thread() -> None:
    dev = nnrt.CpuDevice(inline_limit_ns=0)
    prepared = await dev.prepare_model(zoo.add_chain(3))
    seen: list[str] = []
    step = prepared.plan.steps[0]
    fn = step.fn
    assert fn is not None

    def spy(*args: object) -> np.ndarray:
        seen.append(threading.current_thread().name)
        return fn(*args)  # type: ignore[return-value]

    step.fn = spy
    await prepared.execute([ones(1, 16)])
    assert seen and seen[0].startswith(dev.name)
    dev.close()


async def test_cancelling_an_offloaded_execution_stops_it_at_a_checkpoint() -> None:
    dev = nnrt.CpuDevice(inline_limit_ns=0)
    prepared = await dev.prepare_model(zoo.add_chain(50))
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []
    first = prepared.plan.steps[0]
    fn = first.fn
    assert fn is not None

    def blocking(*args: object) -> np.ndarray:
        calls.append(1)
        started.set()
        release.wait(5)
        return fn(*args)  # type: ignore[return-value]

    first.fn = blocking
    task = asyncio.create_task(prepared.execute([ones(1, 16)]))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    task.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    first.fn = fn
    result = await prepared.execute([ones(1, 16)])  # the device is still usable
    assert result.outputs[0].shape == (1, 16)
    assert len(calls) == 1
    dev.close()


async def test_kernel_crash_is_general_failure(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())

    def broken(*args: object) -> np.ndarray:
        raise ValueError("boom")

    prepared.plan.steps[0].fn = broken
    with pytest.raises(nnrt.GeneralFailureError, match=r"operation 0 \(ADD\) failed: ValueError: boom") as info:
        await prepared.execute([ones(1, 4), ones(1, 4)])
    assert info.value.status is ErrorStatus.GENERAL_FAILURE


def test_loop_timeout_rules() -> None:
    from nnrt.execution import resolve_loop_timeout

    assert resolve_loop_timeout(None) == 2.0
    assert resolve_loop_timeout(100.0) == 15.0
    assert resolve_loop_timeout(0.001) == 0.001
    with pytest.raises(nnrt.InvalidArgumentError):
        resolve_loop_timeout(-1.0)


def test_intermediates_are_freed_after_their_last_reader(device: nnrt.CpuDevice) -> None:
    prepared = device.prepare_model_sync(zoo.add_chain(4))
    frees = [step.free for step in prepared.plan.steps]
    # Each step frees the previous step's output (its last reader); the last output is kept.
    outs = [step.out for step in prepared.plan.steps]
    assert frees[0] == ()
    assert [f for f in frees[1:]] == [(o,) for o in outs[:-1]]


async def test_vlog_execution_emits_one_summary_event(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    reload_vlog("execution")
    try:
        with capture_logs() as logs:
            await prepared.execute([ones(1, 4), ones(1, 4)])
    finally:
        reload_vlog("")
    events = [e for e in logs if e["event"] == "execution.completed"]
    assert len(events) == 1 and events[0]["app"] == "default"
    with capture_logs() as quiet:
        await prepared.execute([ones(1, 4), ones(1, 4)])
    assert quiet == []


# (the two skipped use asyncio's own gather and task cancellation; test_trio.py covers both on trio)
on_trio_too(globals(), skip={"test_many_concurrent_executions",
                             "test_cancelling_an_offloaded_execution_stops_it_at_a_checkpoint"})
