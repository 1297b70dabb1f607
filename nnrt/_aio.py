"""The few async primitives the runtime needs, on asyncio (and uvloop) and on trio.

The scheduler, the devices, fenced executions and bursts wait for a compute unit, for a worker
thread, for a timer, for a request; everything else they do is synchronous. On asyncio each primitive here
is the loop's own object, returned as is, so the hot paths pay one thread-local read to learn
which library runs (``sniffio``'s, as ``nnrt.fences`` does) and nothing else. On trio:

* ``create_future()``: a one-shot future (``done``, ``set_result``, ``set_exception``,
  ``await``) over a ``trio.Event``;
* ``wait_future(cf)``: a ``concurrent.futures.Future`` of a worker thread, awaited through the
  run's token (``run_sync_soon`` from the thread that completes it);
* ``call_later(delay, callback)``: a system task sleeping in a cancel scope (``cancel()``);
* ``call_soon_threadsafe()``: the run's token's ``run_sync_soon``;
* ``spawn(coro, name)``: a system task in a cancel scope (``cancel``, ``add_done_callback``);
* ``to_thread(fn, *args)``: ``anyio.to_thread.run_sync`` (on asyncio the loop's default
  executor, as before).

trio is imported only once a trio run calls in (it is an optional dependency of apps).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Protocol, TypeVar

import sniffio

T = TypeVar("T")

__all__ = [
    "Future", "Task", "call_later", "call_soon_threadsafe", "checkpoint", "create_future", "in_trio", "shield", "spawn",
    "to_thread", "wait_done", "wait_future", "wait_future_to_end",
]


class Future(Protocol[T]):
    """What nnrt (and a burst's caller) uses of a future: resolved once from the loop thread,
    awaited by any number of tasks. ``asyncio.Future`` is one."""

    def done(self) -> bool: ...
    def result(self) -> T: ...
    def exception(self) -> BaseException | None: ...
    def set_result(self, result: T, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...
    def add_done_callback(self, callback: Callable[[Any], object], /) -> None: ...
    def __await__(self) -> Generator[Any, None, T]: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


def in_trio() -> bool:
    """True when the calling thread runs trio (not asyncio)."""
    return (sniffio.thread_local.name or sniffio.current_async_library_cvar.get()) == "trio"


def create_future() -> Future[Any]:
    """A new future on the running loop."""
    if in_trio():
        return _trio()._Future()  # type: ignore[no-any-return]
    return asyncio.get_running_loop().create_future()


def shield(fut: Future[T]) -> Awaitable[T]:
    """Await ``fut`` without cancelling it when the waiting task is cancelled (asyncio's
    ``shield``; a trio future is never cancelled by its waiters)."""
    if in_trio():
        return fut
    return asyncio.shield(fut)


async def checkpoint() -> None:
    """Let the other ready tasks run once (``asyncio.sleep(0)``)."""
    if in_trio():
        import trio

        await trio.lowlevel.checkpoint()
    else:
        await asyncio.sleep(0)


async def wait_done(task: Task) -> None:
    """Wait until ``task`` (cancelled by the caller) has ended, however it ends, without
    raising its outcome; on trio even in a cancelled scope."""
    if in_trio():
        await _trio().wait_done(task)
    else:
        await asyncio.wait([task])  # type: ignore[type-var]  # an asyncio.Task here


async def wait_future_to_end(cf: concurrent.futures.Future[Any]) -> None:
    """Wait until a worker's future is done, even in a task being cancelled (it was asked to
    stop; its work must not be left half done)."""
    if in_trio():
        import trio

        with trio.CancelScope(shield=True):
            await _trio().wait_future(cf)
    else:
        await asyncio.wait([asyncio.wrap_future(cf)])


def wait_future(cf: concurrent.futures.Future[Any], *, shielded: bool = False) -> Awaitable[Any]:
    """Await a worker thread's future (``shielded``: a cancelled waiter leaves it running)."""
    if in_trio():
        return _trio().wait_future(cf)  # type: ignore[no-any-return]
    return asyncio.shield(asyncio.wrap_future(cf)) if shielded else asyncio.wrap_future(cf)


def call_later(delay: float, callback: Callable[[], object]) -> Timer:
    """Run ``callback`` on the running loop in ``delay`` seconds (loop time)."""
    if in_trio():
        return _trio()._Timer(delay, callback)  # type: ignore[no-any-return]
    return asyncio.get_running_loop().call_later(delay, callback)


class Task(Protocol):
    """What nnrt uses of a task it owns: cancel it, learn when it ends."""

    def cancel(self) -> bool: ...
    def done(self) -> bool: ...
    def add_done_callback(self, callback: Callable[[Any], object], /) -> None: ...


def spawn(coro: Coroutine[Any, Any, None], name: str) -> Task:
    """Run ``coro`` as a task owned by nnrt on the running loop: an asyncio task, or a trio
    system task in a cancel scope (cancelled when the run's main task returns)."""
    if in_trio():
        return _trio()._Task(coro, name)  # type: ignore[no-any-return]
    return asyncio.get_running_loop().create_task(coro, name=name)


def call_soon_threadsafe() -> Callable[[Callable[[], object]], object]:
    """A function that schedules a callback on the running loop, callable from any thread."""
    if in_trio():
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    return asyncio.get_running_loop().call_soon_threadsafe


async def to_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` in a worker thread and await its result (the loop's default executor
    on asyncio, as before; anyio's worker threads on trio)."""
    if in_trio():
        import anyio.to_thread

        return await anyio.to_thread.run_sync(fn, *args)
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


@functools.cache
def _trio() -> Any:
    """The trio implementations, defined on first use."""
    import types

    import trio

    class _Future:
        __slots__ = ("_callbacks", "_done", "_event", "_exc", "_result")

        def __init__(self) -> None:
            self._event = trio.Event()
            self._exc: BaseException | None = None
            self._result: Any = None
            self._done = False
            self._callbacks: list[Callable[[Any], object]] = []

        def done(self) -> bool:
            return self._done

        def result(self) -> Any:
            if not self._done:
                raise asyncio.InvalidStateError("the result is not set yet")
            if self._exc is not None:
                raise self._exc
            return self._result

        def exception(self) -> BaseException | None:
            if not self._done:
                raise asyncio.InvalidStateError("the result is not set yet")
            return self._exc

        def set_result(self, result: Any, /) -> None:
            self._result = result
            self._resolve()

        def set_exception(self, exception: BaseException, /) -> None:
            self._exc = exception
            self._resolve()

        def _resolve(self) -> None:
            if self._done:
                raise asyncio.InvalidStateError("the future is already done")
            self._done = True
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                callback(self)

        def add_done_callback(self, callback: Callable[[Any], object], /) -> None:
            if self._done:
                callback(self)
            else:
                self._callbacks.append(callback)

        def __await__(self) -> Generator[Any, None, Any]:
            return self._wait().__await__()

        async def _wait(self) -> Any:
            await self._event.wait()
            if self._exc is not None:
                raise self._exc
            return self._result

    class _Timer:
        __slots__ = ("_scope",)

        def __init__(self, delay: float, callback: Callable[[], object]) -> None:
            self._scope = trio.CancelScope()
            trio.lowlevel.spawn_system_task(self._run, delay, callback, name="nnrt.timer")

        async def _run(self, delay: float, callback: Callable[[], object]) -> None:
            with self._scope:
                await trio.sleep(delay)
                callback()

        def cancel(self) -> None:
            self._scope.cancel()

    class _Task:
        __slots__ = ("_callbacks", "_done", "_ended", "_scope")

        def __init__(self, coro: Coroutine[Any, Any, None], name: str) -> None:
            self._scope = trio.CancelScope()
            self._done = False
            self._ended = trio.Event()
            self._callbacks: list[Callable[[Any], object]] = []
            trio.lowlevel.spawn_system_task(self._run, coro, name=name)

        async def _run(self, coro: Coroutine[Any, Any, None]) -> None:
            try:
                with self._scope:
                    await coro
            finally:
                self._done = True
                self._ended.set()
                for callback in self._callbacks:
                    callback(self)

        def cancel(self) -> bool:
            if self._done:
                return False
            self._scope.cancel()
            return True

        def done(self) -> bool:
            return self._done

        def add_done_callback(self, callback: Callable[[Any], object], /) -> None:
            self._callbacks.append(callback)

    async def wait_future(cf: concurrent.futures.Future[Any]) -> Any:
        # Always through the token, even when ``cf`` is done already: what the worker posted
        # with ``run_sync_soon`` before it finished must run first (asyncio's ``wrap_future``
        # goes through ``call_soon_threadsafe`` likewise).
        event = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def wake(_f: concurrent.futures.Future[Any]) -> None:
            with contextlib.suppress(trio.RunFinishedError):  # the run is over: nobody waits any more
                token.run_sync_soon(event.set)

        cf.add_done_callback(wake)
        await event.wait()
        return cf.result()

    async def wait_done(task: _Task) -> None:
        # Shielded: a burst closing in a cancelled scope (its owner was cancelled) must still
        # see its server end; trio would fail every await there, asyncio fails only the first.
        with trio.CancelScope(shield=True):
            await task._ended.wait()

    return types.SimpleNamespace(_Future=_Future, _Task=_Task, _Timer=_Timer, wait_done=wait_done, wait_future=wait_future)
