"""``SyncFence``: the awaitable shell around the pure fence state machine in ``_state``.

A fence is NNAPI's sync fence made Pythonic: ``await fence`` returns once the work it stands
for has finished and raises the matching ``NnrtError`` if that work failed. The same fence can
be awaited from any number of tasks, on asyncio, uvloop or trio, and an app-created fence may
be signaled from any thread.

Wakeup path. Each suspended waiter registers one listener on the fence core. The listener is a
small per-waiter object (``_AsyncioWaiter`` / ``_TrioWaiter``) that knows its event loop and
thread. When the fence resolves, the core calls every listener in the resolving thread:

* same thread as the waiter (the common case: one task signals, another awaits): the waiter is
  woken directly: ``future.set_result`` on asyncio, ``trio.lowlevel.reschedule`` on trio. On
  asyncio this costs one future round trip, the cheapest wakeup the loop has;
* another thread: the wakeup is posted to the waiter's loop with
  ``loop.call_soon_threadsafe`` (asyncio) or the trio token's ``run_sync_soon``, so loop state
  is only ever touched from its own thread. A loop that has already closed has no waiters left
  to wake, and the post is dropped.

An anyio ``Event`` per waiter would add its own layer (an ``asyncio.Event`` or ``trio.Event``
underneath) and could not be set from a foreign thread without an ``anyio.from_thread`` portal,
hence the two direct implementations. Waiting with a timeout uses the loop's own timer
(``call_later`` / ``trio.move_on_after``): a wait suspends on the loop, so only the loop's clock
can wake it. A cancelled or timed-out waiter removes its listener and never touches the fence.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import math
import threading
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator
from typing import Any, Protocol, final

import sniffio

from nnrt.errors import InvalidArgumentError, NnrtError, error_for
from nnrt.fences._state import FenceCore, FenceState
from nnrt.types import ErrorStatus

__all__ = ["SyncFence", "all_of", "any_of", "as_fences", "from_awaitable", "from_future"]

_ACTIVE = FenceState.ACTIVE
_SIGNALED = FenceState.SIGNALED


# -- the fence ------------------------------------------------------------------------------------


@final
class SyncFence:
    """A one-shot completion signal that async code awaits.

    ``SyncFence()`` makes an *app fence*: ACTIVE until the app calls ``signal()`` or
    ``signal_error()``, from any thread. Fences made by nnrt (``execute_fenced``, the
    combinators, ``from_awaitable``, ``signaled()``/``failed()``) are read-only to the app.

    ``await fence`` returns None once signaled and raises ``error_for(status, message)`` once
    failed; it waits without a time limit (wrap it in a cancel scope, or use ``wait``). Awaiting
    a resolved fence does not suspend. ``await fence.wait(timeout)`` is the bounded form.
    """

    __slots__ = ("__weakref__", "_app", "_cause", "_core", "_source")

    def __init__(self) -> None:
        self._core = FenceCore()
        self._app = True
        # The exception behind an error, chained as __cause__ to what waiters see.
        self._cause: BaseException | None = None
        # What resolves a derived fence (a task or future); kept so its owner is visible.
        self._source: object = None

    @classmethod
    def _derived(cls) -> SyncFence:
        """An ACTIVE fence resolved by nnrt through ``fence._core``; the app cannot signal it."""
        fence = cls()
        fence._app = False
        return fence

    @classmethod
    def signaled(cls) -> SyncFence:
        """A fence that is already signaled (NNAPI's "-1" fence: the work was already done)."""
        fence = cls._derived()
        fence._core.signal()
        return fence

    @classmethod
    def failed(cls, status: ErrorStatus, message: str = "") -> SyncFence:
        """A fence already in ERROR with ``status`` (not NONE)."""
        fence = cls._derived()
        fence._core.fail(*_failure_args(status, message, "SyncFence.failed"))
        return fence

    # -- state ----------------------------------------------------------------------------------

    @property
    def state(self) -> FenceState:
        """ACTIVE, SIGNALED or ERROR."""
        return self._core.state

    @property
    def status(self) -> ErrorStatus | None:
        """None while ACTIVE, ``ErrorStatus.NONE`` once signaled, the failing status in ERROR."""
        return self._core.status

    @property
    def message(self) -> str:
        """Why the fence failed ("" unless in ERROR)."""
        return self._core.message

    def done(self) -> bool:
        """True once the fence is signaled or failed."""
        return self._core.state is not _ACTIVE

    # -- app signaling --------------------------------------------------------------------------

    def signal(self) -> None:
        """Signal an app fence (thread-safe). Signaling twice or after an error is ``InternalError``."""
        if not self._app:
            raise _not_app("signal")
        self._core.signal()

    def signal_error(self, status: ErrorStatus, message: str = "") -> None:
        """Put an app fence into ERROR with ``status`` (thread-safe; NONE is not an error)."""
        if not self._app:
            raise _not_app("signal_error")
        self._core.fail(*_failure_args(status, message, "SyncFence.signal_error"))

    # -- waiting --------------------------------------------------------------------------------

    # Generators all the way down to the loop's future (no coroutine per layer): this is the
    # path whose cost a fenced pipeline pays on every step.
    def __await__(self) -> Generator[Any, None, None]:
        core = self._core
        if core.state is _ACTIVE:
            # _park, inlined: one generator frame less between the loop and this one.
            waiter = _new_waiter()
            handle = core.add_listener(waiter.wake)
            if handle is not None:
                try:
                    yield from waiter.park(None)
                finally:
                    if core.state is _ACTIVE:  # else the core has dropped its listeners already
                        core.remove_listener(handle)
            if core.state is _SIGNALED:
                return
        self._outcome()

    # A timeout parameter is what ASYNC109 warns about, but this *is* the timed-wait primitive
    # (NNAPI's SyncFence::syncWait(timeout), threading.Event.wait): a cancel scope around
    # ``await fence`` is the other way, and costs a scope per wait.
    async def wait(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait at most ``timeout`` seconds (on the event loop's clock).

        Returns True if signaled, False if still ACTIVE when the time is up; raises the fence's
        ``NnrtError`` if it failed. ``timeout <= 0`` polls without suspending.
        """
        core = self._core
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout != timeout:
            raise InvalidArgumentError(f"SyncFence.wait: timeout must be a number of seconds, got {timeout!r:.40}")
        if core.state is _ACTIVE and timeout > 0:
            await _Parking(core, timeout)
        return self._outcome()

    def _outcome(self) -> bool:
        state = self._core.state
        if state is _SIGNALED:
            return True
        if state is _ACTIVE:
            return False
        status = self._core.status
        assert status is not None
        # A fresh exception per waiter: a shared instance would grow its traceback every raise.
        raise error_for(status, self._core.message) from self._cause

    def __repr__(self) -> str:
        core = self._core
        kind = "app " if self._app else ""
        if core.state is FenceState.ERROR:
            assert core.status is not None
            return f"<SyncFence {kind}ERROR {core.status.name}: {core.message!r}>"
        return f"<SyncFence {kind}{core.state.name}>"


def _failure_args(status: object, message: object, where: str) -> tuple[ErrorStatus, str]:
    """An app's failure status (an ``ErrorStatus`` or its number, not NONE) and message (a str)."""
    try:
        failure = ErrorStatus(status)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"{where}: {status!r:.40} is not an ErrorStatus") from None
    if failure is ErrorStatus.NONE or isinstance(status, bool):
        raise InvalidArgumentError(f"{where}: {status!r} is not a failure status (signal the fence instead)")
    if not isinstance(message, str):
        raise InvalidArgumentError(f"{where}: message must be a str, got {type(message).__name__}")
    return failure, message


def as_fences(values: object, where: str) -> tuple[SyncFence, ...]:
    """An iterable of ``SyncFence`` (not a str or a fence itself) as a tuple; INVALID_ARGUMENT naming
    ``where`` and the position of anything else."""
    if isinstance(values, (str, bytes, SyncFence)) or not isinstance(values, Iterable):
        raise InvalidArgumentError(f"{where} must be a list of SyncFence, got {type(values).__name__}")
    fences = tuple(values)
    for k, fence in enumerate(fences):
        if not isinstance(fence, SyncFence):
            raise InvalidArgumentError(f"{where}[{k}]: {type(fence).__name__} is not a SyncFence")
    return fences


def _not_app(what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what}(): this fence is resolved by nnrt, only app-created fences can be signaled")


# -- per-waiter wakeups ---------------------------------------------------------------------------


class _Waiter(Protocol):
    def wake(self, core: FenceCore) -> None:
        """Called once, from any thread, when the fence resolves."""

    def park(self, limit: float | None) -> Iterator[Any]:
        """Suspend (via ``yield from``) until woken or ``limit`` seconds pass (None: no limit). Cancellable."""


class _AsyncioWaiter:
    """Wakes one asyncio (or uvloop) task through a bare future of its loop."""

    __slots__ = ("_fut", "_loop", "_thread")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.get_ident()
        self._fut: asyncio.Future[None] = loop.create_future()

    def wake(self, core: FenceCore) -> None:
        try:
            if threading.get_ident() == self._thread:
                fut = self._fut  # _set, inlined: this is the hot path
                if not fut.done():
                    fut.set_result(None)
            else:
                self._loop.call_soon_threadsafe(self._set)
        except RuntimeError:
            pass  # the loop is closed: whoever waited on it is gone

    def _set(self) -> None:
        # Guards a waiter that timed out or was cancelled before the wakeup arrived.
        if not self._fut.done():
            self._fut.set_result(None)

    def park(self, limit: float | None) -> Iterator[Any]:
        if limit is None or math.isinf(limit):
            return self._fut.__await__()  # the future's own iterator: no frame of ours in between
        return self._park_until(limit)

    def _park_until(self, limit: float) -> Generator[Any, None, None]:
        timer = self._loop.call_later(limit, self._set)
        try:
            yield from self._fut.__await__()
        finally:
            timer.cancel()


@functools.cache
def _trio_waiter_type() -> Callable[[], _Waiter]:
    """The trio waiter class, defined on first use: trio is optional, and imported only once it runs."""
    import trio
    from trio.lowlevel import Abort, current_task, current_trio_token, in_trio_run, reschedule, wait_task_rescheduled

    class _TrioWaiter:
        """Wakes one trio task with ``reschedule``; its fields are touched only in the trio thread."""

        __slots__ = ("_parked", "_task", "_thread", "_token", "_woken")

        def __init__(self) -> None:
            self._task = current_task()
            self._token = current_trio_token()
            self._thread = threading.get_ident()
            self._woken = False
            self._parked = False

        def wake(self, core: FenceCore) -> None:
            if threading.get_ident() == self._thread and in_trio_run():
                self._wake_here()
                return
            with contextlib.suppress(trio.RunFinishedError):  # the run is over: its tasks are gone
                self._token.run_sync_soon(self._wake_here)

        def _wake_here(self) -> None:
            if self._woken:
                return
            self._woken = True
            if self._parked:  # else: woken before parking, or the wait was aborted meanwhile
                self._parked = False
                reschedule(self._task)

        def _abort(self, raise_cancel: Callable[[], Any]) -> Abort:
            self._parked = False
            return Abort.SUCCEEDED

        def park(self, limit: float | None) -> Iterator[Any]:
            if self._woken:  # woken while registering: the fence resolved already
                return iter(())
            if limit is None or math.isinf(limit):
                return self._park().__await__()  # no cancel scope unless there is a time limit
            return self._park_until(limit).__await__()

        async def _park(self) -> None:
            self._parked = True
            await wait_task_rescheduled(self._abort)

        async def _park_until(self, limit: float) -> None:
            with trio.move_on_after(limit):
                await self._park()

    return _TrioWaiter


def _new_waiter() -> _Waiter:
    # sniffio's own answer, minus its slow asyncio sniff (current_task() through Python code):
    # trio announces itself in sniffio's thread-local, asyncio is found by its running loop.
    library = sniffio.thread_local.name or sniffio.current_async_library_cvar.get()
    if library is None or library == "asyncio":
        try:
            return _AsyncioWaiter(asyncio.get_running_loop())
        except RuntimeError:
            raise RuntimeError("a SyncFence can only be awaited inside asyncio or trio") from None
    if library == "trio":
        return _trio_waiter_type()()
    raise RuntimeError(f"SyncFence does not support the {library!r} event loop")


def _park(core: FenceCore, limit: float | None) -> Generator[Any, None, None]:
    """Suspend until ``core`` resolves or ``limit`` seconds pass; the caller reads the outcome."""
    waiter = _new_waiter()
    handle = core.add_listener(waiter.wake)
    if handle is None:  # resolved meanwhile; the listener has already run
        return
    try:
        yield from waiter.park(limit)
    finally:
        # Timed out or cancelled: a stale listener would keep this waiter alive as long as the
        # fence, and a long-lived app fence would collect them. (Woken: the core dropped them.)
        if core.state is _ACTIVE:
            core.remove_listener(handle)


class _Parking:
    """``_park`` as an awaitable, for ``async def`` callers."""

    __slots__ = ("_core", "_limit")

    def __init__(self, core: FenceCore, limit: float | None) -> None:
        self._core = core
        self._limit = limit

    def __await__(self) -> Generator[Any, None, None]:
        return _park(self._core, self._limit)


# -- combinators ----------------------------------------------------------------------------------


def all_of(fences: Iterable[SyncFence]) -> SyncFence:
    """A fence that signals once every input has signaled and fails as soon as one fails.

    The failure carries that input's status and message. ``all_of([])`` is already signaled.
    """
    inputs = as_fences(fences, "all_of")
    if not inputs:
        return SyncFence.signaled()
    return _Combine(inputs, want_all=True).result


def any_of(fences: Iterable[SyncFence]) -> SyncFence:
    """A fence that signals as soon as one input signals; it fails only once every input has failed.

    The failure carries the status and message of the first input to fail. An empty list is
    ``InvalidArgumentError`` (nothing could ever signal it).
    """
    inputs = as_fences(fences, "any_of")
    if not inputs:
        raise InvalidArgumentError("any_of() needs at least one fence")
    return _Combine(inputs, want_all=False).result


class _Combine:
    """Listens on every input fence and resolves ``result`` once the outcome is decided.

    Inputs may resolve on any thread, hence the lock around the counters. Once decided, the
    listeners still registered on unresolved inputs are removed, so a never-signaled input does
    not keep every combination it was ever part of alive.
    """

    __slots__ = ("_decided", "_first_failure", "_handles", "_lock", "_pending", "_want_all", "result")

    def __init__(self, inputs: tuple[SyncFence, ...], *, want_all: bool) -> None:
        self.result = SyncFence._derived()
        self._want_all = want_all
        self._lock = threading.Lock()
        self._pending = len(inputs)
        self._decided = False
        self._first_failure: SyncFence | None = None
        self._handles: list[tuple[FenceCore, int]] = []
        for fence in inputs:
            if self._decided:
                break
            core = fence._core
            handle = core.add_listener(self._listener_for(fence))
            if handle is not None:
                self._handles.append((core, handle))
        if self._decided:  # decided while registering (possibly on another thread)
            self._detach()

    def _listener_for(self, fence: SyncFence) -> Callable[[FenceCore], None]:
        return lambda _core: self._on_input(fence)

    def _on_input(self, fence: SyncFence) -> None:
        with self._lock:
            if self._decided:
                return
            self._pending -= 1
            failed = fence._core.state is FenceState.ERROR
            if failed and self._first_failure is None:
                self._first_failure = fence
            if self._want_all:
                decided_by = fence if failed else (None if self._pending else fence)
            else:
                decided_by = fence if not failed else (self._first_failure if not self._pending else None)
            if decided_by is None:
                return
            self._decided = True
        core = decided_by._core
        if core.state is FenceState.ERROR:
            assert core.status is not None
            self.result._cause = decided_by._cause
            self.result._core.try_fail(core.status, core.message)
        else:
            self.result._core.try_signal()
        self._detach()

    def _detach(self) -> None:
        for core, handle in tuple(self._handles):
            core.remove_listener(handle)


# -- conversions ----------------------------------------------------------------------------------

#: Tasks created by ``from_awaitable`` on asyncio. asyncio keeps only weak references to tasks,
#: so this set holds them until they finish; the done callback removes them.
_LIVE_TASKS: set[asyncio.Future[Any]] = set()


def from_future(future: asyncio.Future[Any] | concurrent.futures.Future[Any]) -> SyncFence:
    """A fence resolved by ``future``: result -> signaled, exception -> ERROR, cancelled -> ERROR.

    An ``NnrtError`` keeps its status; any other exception becomes GENERAL_FAILURE, and
    cancellation GENERAL_FAILURE too. Works for asyncio futures (no await needed, resolved on the
    future's loop) and ``concurrent.futures`` futures (resolved in the completing thread). The
    fence references the future; the caller keeps owning it (cancelling it fails the fence).
    """
    if not isinstance(future, (asyncio.Future, concurrent.futures.Future)):
        raise InvalidArgumentError(f"from_future: {type(future).__name__} is not an asyncio or concurrent.futures Future")
    fence = SyncFence._derived()
    fence._source = future
    if future.done():  # asyncio would deliver the callback a loop iteration later
        _settle(fence, future)
    else:
        future.add_done_callback(lambda done: _settle(fence, done))
    return fence


def from_awaitable(aw: Awaitable[Any]) -> SyncFence:
    """A fence resolved when ``aw`` completes, with ``from_future``'s mapping of outcomes.

    A future (asyncio or concurrent) is watched as is, and a ``SyncFence`` is returned unchanged.
    Anything else (a coroutine, a custom awaitable) is run in a new task, so this must be called
    inside asyncio or trio. Ownership: on asyncio the task belongs to nnrt, held in a module set
    until it finishes and referenced by the fence; the event loop cancels it at shutdown
    (``asyncio.run`` does), which fails the fence. On trio it is a system task, cancelled when
    the run's main task returns, which also fails the fence. Nothing here outlives its loop.
    """
    if isinstance(aw, SyncFence):
        return aw
    if isinstance(aw, (asyncio.Future, concurrent.futures.Future)):
        return from_future(aw)
    if not inspect.isawaitable(aw):
        raise InvalidArgumentError(f"from_awaitable: {type(aw).__name__} is not awaitable")
    library = sniffio.current_async_library()
    if library == "asyncio":
        task = asyncio.ensure_future(aw)
        _LIVE_TASKS.add(task)
        task.add_done_callback(_LIVE_TASKS.discard)
        return from_future(task)
    if library == "trio":
        import trio

        fence = SyncFence._derived()
        fence._source = trio.lowlevel.spawn_system_task(_drive, aw, fence, name=f"nnrt.from_awaitable({aw!r})")
        return fence
    raise RuntimeError(f"from_awaitable does not support the {library!r} event loop")


async def _drive(aw: Awaitable[Any], fence: SyncFence) -> None:
    # A trio system task: whatever escapes it crashes the run, so only BaseExceptions that are
    # not errors of the work (cancellation, KeyboardInterrupt) go on up, after failing the fence.
    try:
        await aw
    except BaseException as exc:
        _fail_from(fence, exc)
        if not isinstance(exc, Exception):
            raise
    else:
        fence._core.try_signal()


def _settle(fence: SyncFence, future: asyncio.Future[Any] | concurrent.futures.Future[Any]) -> None:
    if future.cancelled():
        fence._core.try_fail(ErrorStatus.GENERAL_FAILURE, "the work behind this fence was cancelled")
        return
    exc = future.exception()  # also marks an asyncio exception as retrieved: no "never retrieved" log
    if exc is None:
        fence._core.try_signal()
    else:
        _fail_from(fence, exc)


def _fail_from(fence: SyncFence, exc: BaseException) -> None:
    if not isinstance(exc, Exception):
        # Cancellation (asyncio.CancelledError, trio.Cancelled) or an interrupt: not chained, a
        # waiter elsewhere must not appear to have been cancelled itself.
        fence._core.try_fail(ErrorStatus.GENERAL_FAILURE, f"the work behind this fence was interrupted ({type(exc).__name__})")
        return
    if isinstance(exc, NnrtError):
        status, message = exc.status, str(exc.args[0]) if exc.args else ""
    else:
        status, message = ErrorStatus.GENERAL_FAILURE, f"{type(exc).__name__}: {exc}"
    if fence._core.state is _ACTIVE:
        fence._cause = exc
    fence._core.try_fail(status, message)
