"""``SyncFence`` on real event loops: asyncio, uvloop and trio.

Most tests are written once and run on all three loops through ``on_every_loop``, which turns
an ``async def`` into a plain test parametrized by backend and runs it with ``anyio.run``. Why
not anyio's pytest plugin: the repo runs pytest-asyncio in auto mode, which claims *every*
``async def`` test, anyio-marked or not, and would silently run the "trio" case on asyncio.
A sync wrapper is invisible to both plugins. Each run also checks that it is on the loop it
claims, that every test finishes within a time limit and leaks no task or thread.

The rest are plain ``async def`` tests that pytest-asyncio runs on asyncio and uvloop
(``tests/conftest.py``) and ``tests.helpers.on_trio_too`` on trio, but for the few about
asyncio's own objects (asyncio futures, task ownership).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import sniffio

from nnrt._aio import to_thread
from nnrt.errors import (
    GeneralFailureError,
    InternalError,
    InvalidArgumentError,
    MissedDeadlineError,
    NnrtError,
    ResourceExhaustedError,
)
from nnrt.fences import FenceState, SyncFence, all_of, any_of, from_awaitable, from_future
from nnrt.fences import _fence as fence_impl
from nnrt.types import ErrorStatus
from tests.helpers import on_trio_too

LIMIT = 10.0  # seconds; no test may hang past this

BACKENDS = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    pytest.param(("trio", {}), id="trio"),
]

AsyncTest = Callable[[], Awaitable[None]]


def on_every_loop(test: AsyncTest) -> Callable[[tuple[str, dict[str, Any]]], None]:
    """Run ``test`` on asyncio, uvloop and trio (see the module docstring for why not a plugin)."""

    def run(backend: tuple[str, dict[str, Any]]) -> None:
        name, options = backend
        threads_before = set(threading.enumerate())
        anyio.run(_checked, test, options.get("use_uvloop", False), backend=name, backend_options=options)
        leaked = [t.name for t in threading.enumerate() if t not in threads_before]
        assert not leaked, f"the test leaked threads: {leaked}"

    # Not functools.wraps: pytest-asyncio would follow __wrapped__ to the coroutine function.
    run.__name__ = test.__name__
    run.__qualname__ = test.__qualname__
    run.__doc__ = test.__doc__
    parametrized: Callable[[tuple[str, dict[str, Any]]], None] = pytest.mark.parametrize("backend", BACKENDS)(run)
    return parametrized


async def _checked(test: AsyncTest, uvloop: bool) -> None:
    library = sniffio.current_async_library()
    if library == "asyncio":
        is_uvloop = type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        assert is_uvloop is uvloop, "not running on the loop this case is named after"
    with anyio.fail_after(LIMIT):
        await test()
    if library == "asyncio":
        leftover = asyncio.all_tasks() - {asyncio.current_task()}
        assert not leftover, f"the test leaked tasks: {leftover}"


def listeners(fence: SyncFence) -> int:
    """How many listeners the fence core still holds (0 once resolved)."""
    return len(fence._core._listeners or {})


async def parked(fences: list[SyncFence], n: int) -> None:
    """Wait until ``n`` waiters are parked on ``fences`` (their listeners registered): the
    tasks just started get to run, however long a loaded machine makes them wait (the test's
    time limit bounds it). Never more than ``n``: each waiter registers once."""
    while (count := sum(listeners(f) for f in fences)) < n:
        await anyio.lowlevel.checkpoint()
    assert count == n


async def signal_later(fence: SyncFence, delay: float = 0.01) -> None:
    await anyio.sleep(delay)
    fence.signal()


def signal_from_thread(fence: SyncFence, delay: float = 0.01, status: ErrorStatus | None = None) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        if status is None:
            fence.signal()
        else:
            fence.signal_error(status, "from a thread")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# -- awaiting -------------------------------------------------------------------------------------


@on_every_loop
async def test_resolved_fences() -> None:
    assert await SyncFence.signaled() is None  # type: ignore[func-returns-value]
    assert await SyncFence.signaled().wait(0) is True
    failed = SyncFence.failed(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "too late")
    with pytest.raises(MissedDeadlineError) as first:
        await failed
    assert first.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert str(first.value) == "MISSED_DEADLINE_PERSISTENT: too late"
    with pytest.raises(MissedDeadlineError) as second:
        await failed.wait(1.0)
    assert second.value is not first.value  # a fresh exception per waiter
    assert failed.state is FenceState.ERROR and failed.message == "too late"


@on_every_loop
async def test_signal_wakes_waiter() -> None:
    fence = SyncFence()
    assert (fence.state, fence.status, fence.done()) == (FenceState.ACTIVE, None, False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(signal_later, fence)
        await fence
    assert (fence.state, fence.status, fence.done()) == (FenceState.SIGNALED, ErrorStatus.NONE, True)
    assert listeners(fence) == 0


@on_every_loop
async def test_error_wakes_every_waiter() -> None:
    fence = SyncFence()
    errors: list[NnrtError] = []

    async def waiter() -> None:
        try:
            await fence
        except NnrtError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(50):
            tg.start_soon(waiter)
        await parked([fence], 50)
        fence.signal_error(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, "busy")
    assert len(errors) == 50
    assert all(isinstance(e, ResourceExhaustedError) and e.status is ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT for e in errors)
    assert len({id(e) for e in errors}) == 50


@on_every_loop
async def test_wait_times_out_without_touching_the_fence() -> None:
    fence = SyncFence()
    start = anyio.current_time()
    assert await fence.wait(0.02) is False
    assert anyio.current_time() - start >= 0.015
    assert fence.state is FenceState.ACTIVE and listeners(fence) == 0
    assert await fence.wait(0) is False  # polls
    assert await fence.wait(-1) is False
    async with anyio.create_task_group() as tg:
        tg.start_soon(signal_later, fence)
        assert await fence.wait(LIMIT) is True
    assert await fence.wait(0) is True


@on_every_loop
async def test_wait_raises_on_error() -> None:
    fence = SyncFence()
    async with anyio.create_task_group() as tg:

        async def fail() -> None:
            await anyio.sleep(0.01)
            fence.signal_error(ErrorStatus.DEVICE_UNAVAILABLE, "unplugged")

        tg.start_soon(fail)
        with pytest.raises(NnrtError, match="unplugged") as info:
            await fence.wait(LIMIT)
    assert info.value.status is ErrorStatus.DEVICE_UNAVAILABLE


@on_every_loop
async def test_cancelled_waiter_leaves_the_fence_alone() -> None:
    fence = SyncFence()
    with anyio.move_on_after(0.01) as scope:
        await fence
    assert scope.cancelled_caught
    assert fence.state is FenceState.ACTIVE and listeners(fence) == 0

    async with anyio.create_task_group() as tg:
        tg.start_soon(fence.wait, LIMIT)
        tg.start_soon(fence.wait, LIMIT)
        await parked([fence], 2)
        tg.cancel_scope.cancel()
    assert fence.state is FenceState.ACTIVE and listeners(fence) == 0
    fence.signal()  # still signals normally afterwards
    await fence


@on_every_loop
async def test_signal_from_another_thread() -> None:
    fence = SyncFence()
    thread = signal_from_thread(fence)
    await fence
    thread.join()
    failing = SyncFence()
    thread = signal_from_thread(failing, status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
    with pytest.raises(MissedDeadlineError, match="from a thread"):
        assert await failing.wait(LIMIT)
    thread.join()


@on_every_loop
async def test_many_fences_signaled_by_a_thread_race_their_waiters() -> None:
    # Half the waiters are parked when a thread starts signaling every fence in order; the other
    # half register while it runs. Each must wake exactly once, whichever side it lands on.
    fences = [SyncFence() for _ in range(300)]
    woken: list[int] = []

    async def waiter(i: int) -> None:
        await fences[i]
        woken.append(i)

    def signal_all() -> None:
        for fence in fences:
            fence.signal()

    thread = threading.Thread(target=signal_all)
    async with anyio.create_task_group() as tg:
        for i in range(150):
            tg.start_soon(waiter, i)
        await parked(fences, 150)
        thread.start()
        for i in range(150, 300):
            tg.start_soon(waiter, i)
            await anyio.lowlevel.checkpoint()
    thread.join()
    assert sorted(woken) == list(range(300))
    assert all(listeners(f) == 0 for f in fences)


@on_every_loop
async def test_app_and_nnrt_fences() -> None:
    fence = SyncFence()
    fence.signal()
    with pytest.raises(InternalError, match="illegal fence transition"):
        fence.signal()
    with pytest.raises(InternalError):
        fence.signal_error(ErrorStatus.GENERAL_FAILURE, "late")
    with pytest.raises(InvalidArgumentError, match="NONE"):  # the app's mistake, not nnrt's
        SyncFence().signal_error(ErrorStatus.NONE, "not an error")
    derived = all_of([SyncFence()])
    with pytest.raises(InvalidArgumentError, match="only app-created"):
        derived.signal()
    with pytest.raises(InvalidArgumentError):
        SyncFence.signaled().signal_error(ErrorStatus.GENERAL_FAILURE)
    assert repr(fence) == "<SyncFence app SIGNALED>"
    assert repr(SyncFence.failed(ErrorStatus.DEAD_OBJECT, "x")) == "<SyncFence ERROR DEAD_OBJECT: 'x'>"


# -- combinators ----------------------------------------------------------------------------------


@on_every_loop
async def test_all_of_waits_for_every_input() -> None:
    a, b, c = SyncFence(), SyncFence(), SyncFence()
    joined = all_of([a, b, c])
    a.signal()
    c.signal()
    assert await joined.wait(0.01) is False
    async with anyio.create_task_group() as tg:
        tg.start_soon(signal_later, b)
        await joined
    assert await all_of([]).wait(0) is True


@on_every_loop
async def test_all_of_fails_as_soon_as_one_fails() -> None:
    a, b = SyncFence(), SyncFence()
    joined = all_of([a, b])
    b.signal_error(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "b was late")
    with pytest.raises(MissedDeadlineError, match="b was late"):
        await joined
    assert a.state is FenceState.ACTIVE and listeners(a) == 0  # detached from the undecided input
    a.signal()
    assert joined.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    already = all_of([SyncFence.signaled(), SyncFence.failed(ErrorStatus.INVALID_ARGUMENT, "bad")])
    assert already.status is ErrorStatus.INVALID_ARGUMENT


@on_every_loop
async def test_any_of_first_signal_wins() -> None:
    a, b = SyncFence(), SyncFence()
    first = any_of([a, b])
    a.signal_error(ErrorStatus.GENERAL_FAILURE, "a broke")
    assert await first.wait(0.01) is False  # one failure is not enough
    async with anyio.create_task_group() as tg:
        tg.start_soon(signal_later, b)
        await first
    c = SyncFence()
    assert await any_of([c, SyncFence.signaled()]).wait(0) is True
    assert listeners(c) == 0


@on_every_loop
async def test_any_of_fails_only_when_all_fail() -> None:
    a, b = SyncFence(), SyncFence()
    first = any_of([a, b])
    b.signal_error(ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT, "b full")
    a.signal_error(ErrorStatus.DEVICE_UNAVAILABLE, "a gone")
    with pytest.raises(ResourceExhaustedError, match="b full"):  # the first failure's status
        await first
    with pytest.raises(InvalidArgumentError):
        any_of([])


@on_every_loop
async def test_combinators_across_threads() -> None:
    inputs = [SyncFence() for _ in range(20)]
    joined, first = all_of(inputs), any_of(inputs)
    threads = [signal_from_thread(f, delay=0.001 * (i % 5)) for i, f in enumerate(inputs)]
    await joined
    await first
    for t in threads:
        t.join()


# -- conversions ----------------------------------------------------------------------------------


@on_every_loop
async def test_from_awaitable_outcomes() -> None:
    async def ok() -> int:
        await anyio.sleep(0.001)
        return 7

    async def nnrt_failure() -> None:
        await anyio.lowlevel.checkpoint()
        raise MissedDeadlineError("deadline", status=ErrorStatus.MISSED_DEADLINE_PERSISTENT)

    async def bug() -> None:
        await anyio.lowlevel.checkpoint()
        raise ValueError("boom")

    assert await from_awaitable(ok()) is None  # type: ignore[func-returns-value]
    with pytest.raises(MissedDeadlineError) as info:
        await from_awaitable(nnrt_failure())
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert str(info.value) == "MISSED_DEADLINE_PERSISTENT: deadline"
    with pytest.raises(GeneralFailureError, match="ValueError: boom") as info2:
        await from_awaitable(bug())
    assert isinstance(info2.value.__cause__, ValueError)
    fence = SyncFence()
    assert from_awaitable(fence) is fence


@on_every_loop
async def test_from_concurrent_future() -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert await from_future(pool.submit(time.sleep, 0.01)) is None  # type: ignore[func-returns-value]
        with pytest.raises(GeneralFailureError, match="ZeroDivisionError"):
            await from_awaitable(pool.submit(lambda: 1 / 0))  # type: ignore[arg-type]
        done = pool.submit(int)
        done.result()
        assert from_future(done).state is FenceState.SIGNALED  # resolved at once
    cancelled: concurrent.futures.Future[None] = concurrent.futures.Future()
    fence = from_future(cancelled)
    cancelled.cancel()
    with pytest.raises(GeneralFailureError, match="cancelled"):
        await fence


def test_from_awaitable_is_cancelled_with_its_run() -> None:
    """Work still pending when the run ends is cancelled by the loop, and its fence fails."""
    fences: list[SyncFence] = []

    async def main() -> None:
        fences.append(from_awaitable(anyio.sleep_forever()))
        await anyio.sleep(0.01)
        assert fences[0].state is FenceState.ACTIVE

    for name, options in [("asyncio", {}), ("asyncio", {"use_uvloop": True}), ("trio", {})]:
        fences.clear()
        anyio.run(main, backend=name, backend_options=options)
        assert fences[0].status is ErrorStatus.GENERAL_FAILURE, name
        assert "interrupted" in fences[0].message or "cancelled" in fences[0].message


def test_awaiting_outside_a_loop_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="asyncio or trio"):
        SyncFence().__await__().send(None)
    with pytest.raises(StopIteration):  # a resolved fence needs no loop
        SyncFence.signaled().__await__().send(None)


# -- plain async tests (pytest-asyncio: asyncio and uvloop; trio: on_trio_too, but those skipped) -


async def test_from_asyncio_future() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    fence = from_future(fut)
    loop.call_later(0.01, fut.set_result, 1)
    await fence
    bad: asyncio.Future[int] = loop.create_future()
    bad.set_exception(InvalidArgumentError("operand 3"))
    fence = from_future(bad)
    assert fence.status is ErrorStatus.INVALID_ARGUMENT and fence.message == "operand 3"
    gone: asyncio.Future[int] = loop.create_future()
    fence = from_awaitable(gone)
    gone.cancel()
    with pytest.raises(GeneralFailureError, match="cancelled"):
        await fence.wait(LIMIT)


async def test_from_awaitable_task_is_owned_until_done() -> None:
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.sleep(0.01)

    fence = from_awaitable(work())
    task = fence._source
    assert isinstance(task, asyncio.Task) and task in fence_impl._LIVE_TASKS
    del task
    gc.collect()  # the module set keeps the task alive without the caller holding it
    await started.wait()
    await fence
    await asyncio.sleep(0)
    assert not fence_impl._LIVE_TASKS


async def test_task_cancelled_fails_its_fence() -> None:
    fence = from_awaitable(asyncio.sleep(LIMIT))
    assert isinstance(fence._source, asyncio.Task)
    fence._source.cancel()  # before it even started: the fence must still fail
    with pytest.raises(GeneralFailureError, match="cancelled"):
        await fence
    assert not fence_impl._LIVE_TASKS


async def test_wakeup_on_a_closed_loop_is_dropped() -> None:
    other = asyncio.new_event_loop()
    waiter = fence_impl._AsyncioWaiter(other)
    other.close()
    core = SyncFence()._core
    waiter.wake(core)  # same thread: set_result on a closed loop's future
    thread = threading.Thread(target=waiter.wake, args=(core,))  # other thread: call_soon_threadsafe
    thread.start()
    thread.join()


async def test_waiter_on_its_own_loop_in_another_thread() -> None:
    # A fence awaited on a loop in a worker thread, signaled from this loop's thread.
    fence = SyncFence()
    result: list[object] = []

    def worker() -> None:
        async def wait() -> None:
            start = time.monotonic()
            result.append(await fence.wait(LIMIT))
            result.append(time.monotonic() - start < LIMIT / 2)  # woken, not timed out

        asyncio.run(wait())

    thread = threading.Thread(target=worker)
    thread.start()
    # No event to await: the state is another loop's. Poll until the waiter is parked there.
    while listeners(fence) == 0:  # noqa: ASYNC110
        await anyio.sleep(0.001)
    fence.signal()  # from this loop's thread (asyncio, uvloop or trio)
    await to_thread(thread.join)
    assert result == [True, True]


# The tests above on trio too, but those of asyncio's own objects: an asyncio future
# (from_future), an asyncio task owned by nnrt and cancelled (on trio from_awaitable runs a
# system task, cancelled with its run: test_from_awaitable_is_cancelled_with_its_run), the
# asyncio waiter on a closed asyncio loop.
on_trio_too(globals(), skip={
    "test_from_asyncio_future", "test_from_awaitable_task_is_owned_until_done", "test_task_cancelled_fails_its_fence",
    "test_wakeup_on_a_closed_loop_is_dropped",
})
