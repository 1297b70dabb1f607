"""``execute_fenced``: validation at the call, waiting for fences without running, failure
propagation, deadlines counted from the fences, timing info, chaining and cancellation."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, SyncFence, zoo
from tests.helpers import on_trio_too, ones


@pytest.fixture(scope="module", params=["eager", "task"])
def device(request: pytest.FixtureRequest) -> Iterator[nnrt.CpuDevice]:
    """Cheap plans run eagerly on the loop; with no inline budget they run as worker-thread tasks."""
    dev = nnrt.CpuDevice(inline_limit_ns=1e6 if request.param == "eager" else 0)
    yield dev
    dev.close()


async def spin(n: int = 5) -> None:
    for _ in range(n):
        await anyio.lowlevel.checkpoint()


def spy_on_first_step(prepared: nnrt.PreparedModel) -> list[int]:
    calls: list[int] = []
    step = prepared.plan.steps[0]
    fn = step.fn
    assert fn is not None

    def spy(*args: object) -> object:
        calls.append(1)
        return fn(*args)

    step.fn = spy
    return calls


async def test_fenced_execution_signals_with_outputs(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)])
    await fence
    assert fence.status is ErrorStatus.NONE
    assert callback.result.outputs[0].tolist() == [[2, 2, 2, 2]]
    info = callback.get_execution_info()
    assert info.status is ErrorStatus.NONE
    assert not info.timing_launched.available and not info.timing_fenced.available
    await spin()
    assert not prepared._tasks  # the task is released once done


async def test_timing_info_when_measured(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    gate = SyncFence()
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[gate], measure_timing=True)
    with pytest.raises(nnrt.GeneralFailureError, match="not signaled yet"):
        callback.get_execution_info()
    await spin()
    gate.signal()
    await fence
    info = callback.get_execution_info()
    launched, fenced = info.timing_launched, info.timing_fenced
    assert launched.time_in_driver_ns is not None and fenced.time_in_driver_ns is not None
    assert fenced.time_in_driver_ns <= launched.time_in_driver_ns
    assert launched.time_on_device_ns is not None and launched.time_on_device_ns <= launched.time_in_driver_ns


async def test_waits_for_every_fence_before_running(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    calls = spy_on_first_step(prepared)
    a, b = SyncFence(), SyncFence()
    fence, _ = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[a, b])
    await spin()
    a.signal()
    await spin()
    assert not calls and not fence.done()
    b.signal()
    await fence
    assert calls == [1]


async def test_fence_signaled_from_another_thread(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    gate = SyncFence()
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[gate])
    threading.Timer(0.01, gate.signal).start()
    assert await fence.wait(5.0)
    assert callback.result.outputs[0][0, 0] == 2


async def test_failing_wait_for_fence_fails_without_running(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    calls = spy_on_first_step(prepared)
    gate = SyncFence()
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[gate])
    await spin()
    gate.signal_error(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "upstream late")
    with pytest.raises(nnrt.GeneralFailureError, match="wait-for fence failed"):
        await fence
    assert fence.status is ErrorStatus.GENERAL_FAILURE
    assert callback.get_execution_info().status is ErrorStatus.GENERAL_FAILURE
    assert not calls


async def test_validation_is_synchronous(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    with pytest.raises(nnrt.InvalidArgumentError, match="already in error"):
        await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[SyncFence.failed(ErrorStatus.GENERAL_FAILURE)])
    with pytest.raises(nnrt.InvalidArgumentError, match="not a SyncFence"):
        await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[object()])  # type: ignore[list-item]
    with pytest.raises(nnrt.InvalidArgumentError, match="2 inputs"):
        await prepared.execute_fenced([ones(1, 4)])
    with pytest.raises(nnrt.InvalidArgumentError, match="timeout_after_fence"):
        await prepared.execute_fenced([ones(1, 4), ones(1, 4)], timeout_after_fence=-1.0)
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await prepared.execute_fenced([ones(1, 4), ones(1, 4)], deadline=nnrt.deadline_after(-1.0, device.clock))
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT


async def test_unspecified_outputs_need_a_buffer(device: nnrt.CpuDevice) -> None:
    from tests.integration.test_execute import unknown_shape_add

    prepared = await device.prepare_model(unknown_shape_add())
    with pytest.raises(nnrt.InvalidArgumentError, match="unspecified dimensions"):
        await prepared.execute_fenced([ones(3, 2), ones(3, 2)])
    out = np.zeros((3, 2), np.float32)
    fence, _ = await prepared.execute_fenced([ones(3, 2), ones(3, 2)], outputs=[out])
    await fence
    assert out.tolist() == [[2, 2]] * 3


async def test_timeout_after_fence_counts_from_the_fences(device: nnrt.CpuDevice) -> None:
    clock = nnrt.VirtualClock(100.0)
    dev = nnrt.CpuDevice(clock=clock, inline_limit_ns=device.inline_limit_ns)
    prepared = await dev.prepare_model(zoo.one_add())
    gate = SyncFence()
    # A generous budget from the fence: waiting long before the fence does not count.
    fence, _ = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[gate], timeout_after_fence=1.0)
    clock.advance(50.0)
    gate.signal()
    await fence
    # A zero budget is already spent when the execution starts (admission sees it cannot fit).
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], timeout_after_fence=0.0)
    with pytest.raises(nnrt.MissedDeadlineError):
        await fence
    missed = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
    assert callback.get_execution_info().status in missed
    # The absolute deadline still applies when it is earlier.
    gate = SyncFence()
    fence, _ = await prepared.execute_fenced(
        [ones(1, 4), ones(1, 4)], wait_for=[gate], deadline=clock.now() + 1.0, timeout_after_fence=10.0
    )
    clock.advance(2.0)
    gate.signal()
    with pytest.raises(nnrt.MissedDeadlineError):
        await fence
    dev.close()


async def test_cancel_puts_the_fence_in_error(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    gate = SyncFence()
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[gate])
    await spin()
    assert callback.cancel()
    with pytest.raises(nnrt.GeneralFailureError, match="cancelled"):
        await fence
    await spin()
    assert not prepared._tasks


async def test_three_stage_chain_awaits_only_the_last_fence(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    x = ones(1, 4)
    a, b, c = (np.zeros((1, 4), np.float32) for _ in range(3))
    f1, _ = await prepared.execute_fenced([x, x], outputs=[a])
    f2, _ = await prepared.execute_fenced([a, x], outputs=[b], wait_for=[f1])
    f3, _ = await prepared.execute_fenced([b, x], outputs=[c], wait_for=[f2])
    await f3
    assert c.tolist() == [[4, 4, 4, 4]]


async def test_cancel_before_the_execution_starts(device: nnrt.CpuDevice) -> None:
    """Cancelled before its task (or its listener) ever ran: the fence still fails, nothing waits."""
    prepared = await device.prepare_model(zoo.one_add())
    calls = spy_on_first_step(prepared)
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[SyncFence()])
    assert callback.cancel()
    with pytest.raises(nnrt.GeneralFailureError, match="cancelled"):
        await fence.wait(10.0)  # bounded, so a fence left ACTIVE fails the test instead of hanging it
    assert callback.get_execution_info().status is ErrorStatus.GENERAL_FAILURE
    assert not callback.cancel()  # already resolved
    await spin()
    assert not prepared._tasks and not calls


async def test_completed_at_the_call_and_results_in_the_callers_buffers(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    out = np.zeros((1, 4), np.float32)
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], [out])
    if device.inline_limit_ns:  # eager: ran before the call returned (NNAPI's "no fence" case)
        assert fence.state is nnrt.FenceState.SIGNALED
    await fence
    assert out.tolist() == [[2, 2, 2, 2]]
    result = callback.result
    assert result.outputs[0] is out and result.output_shapes[0].dimensions == (1, 4)
    assert callback.result is result
    info = callback.get_execution_info()
    assert info.status is ErrorStatus.NONE and not info.timing_launched.available


async def test_a_resolved_execution_keeps_no_request_alive(device: nnrt.CpuDevice) -> None:
    """The callback drops the request once the fence resolves: the inputs are freed by
    reference counting alone (no cycle for the garbage collector)."""
    import gc
    import weakref

    prepared = await device.prepare_model(zoo.one_add())
    x = ones(1, 4)
    gone = weakref.ref(x)
    gate = SyncFence()
    gc.disable()
    try:
        fence, callback = await prepared.execute_fenced([x, ones(1, 4)], wait_for=[gate])
        del x
        assert gone() is not None  # held while waiting
        gate.signal()
        await fence
        await spin()
        assert gone() is None
        assert callback.result.outputs[0].tolist() == [[2, 2, 2, 2]]
    finally:
        gc.enable()


async def test_a_wait_for_fence_that_never_signals_fails_at_the_deadline(device: nnrt.CpuDevice) -> None:
    """Issue 15, item 1: the execution (and its fence) fails at its deadline, MISSED_DEADLINE_
    TRANSIENT with one status prefix and the right reason, without running; it used to wait
    forever, its fence ACTIVE."""
    clock = nnrt.VirtualClock(100.0)
    dev = nnrt.CpuDevice(clock=clock, inline_limit_ns=device.inline_limit_ns)
    prepared = await dev.prepare_model(zoo.one_add())
    calls = spy_on_first_step(prepared)
    fence, callback = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[SyncFence()],
                                                    deadline=clock.now() + 0.05)
    await spin()
    clock.advance(0.049)
    await spin()
    assert fence.state is nnrt.FenceState.ACTIVE
    clock.advance(0.001)
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await fence.wait(10.0)  # bounded: a fence left ACTIVE fails the test instead of hanging it
    assert str(info.value) == "MISSED_DEADLINE_TRANSIENT: the deadline passed while the execution waited for its fences"
    assert callback.get_execution_info().status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    await spin()
    assert not prepared._tasks and not calls
    dev.close()


async def test_fences_signaled_after_the_deadline_give_the_right_reason(device: nnrt.CpuDevice) -> None:
    """Item 1's second half: the fences signal after the deadline (the clock jumped past it
    without firing timers): the reason names the deadline, once, not an estimate."""

    class Jump:
        def __init__(self) -> None:
            self.t = 100.0

        def now(self) -> float:
            return self.t

    clock = Jump()
    dev = nnrt.CpuDevice(clock=clock, inline_limit_ns=device.inline_limit_ns)
    prepared = await dev.prepare_model(zoo.one_add())
    gate = SyncFence()
    fence, _ = await prepared.execute_fenced([ones(1, 4), ones(1, 4)], wait_for=[gate], deadline=100.5)
    await spin()
    clock.t = 101.0
    gate.signal()
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await fence.wait(10.0)
    message = str(info.value)
    assert message.count("MISSED_DEADLINE") == 1 and "deadline passed" in message and "needs about" not in message
    dev.close()


on_trio_too(globals())
