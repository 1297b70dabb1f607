"""Fenced execution: ``fence, callback = await prepared.execute_fenced(...)``.

NNAPI's ``executeFenced`` (digest section 3), made Pythonic. The request is validated at the
call, synchronously: a bad request, an output whose size is unknown, a wait-for fence already
in error, or a deadline already passed raise at once. Otherwise the call returns a ``SyncFence``
that signals when the outputs are written, plus a ``FencedExecutionCallback``.

The execution first waits for every wait-for fence, holding no device compute; one that
fails puts the returned fence in error (GENERAL_FAILURE) at once, without running the model.
Once they have signaled, ``timeout_after_fence`` starts counting: the effective deadline is the
earlier of it and ``deadline``, and missing it puts the fence in error with MISSED_DEADLINE_*.
Cancelling the execution (``callback.cancel()``) puts its fence in error; nothing waits forever.
Cheap plans run eagerly, without a task, the moment their fences signal; others run as a task
owned by the prepared model (see ``FencedExecutionCallback``). A fenced stage of a cheap plan
costs little more than an ``execute``: one callback object per execution holds the request
until it resolves, timestamps are taken only when timing is asked for, and the execution info
is built when asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from nnrt._aio import Task, call_soon_threadsafe, spawn
from nnrt.clock import Cancellable, call_at, perf_ns
from nnrt.errors import GeneralFailureError, InvalidArgumentError, MissedDeadlineError, NnrtError
from nnrt.execution._interpreter import ExecContext
from nnrt.fences import FenceState, SyncFence, all_of
from nnrt.fences._fence import as_fences
from nnrt.fences._state import FenceCore
from nnrt.types import TIMING_UNAVAILABLE, ErrorStatus, OutputShape, Timing

if TYPE_CHECKING:
    from nnrt.execution._prepared import ExecutionResult, PreparedModel

__all__ = ["FencedExecutionCallback", "FencedExecutionInfo", "execute_fenced"]

# Module constants for the hot path (an enum member read through its class is a descriptor call).
_ACTIVE = FenceState.ACTIVE
_SIGNALED = FenceState.SIGNALED
_ERROR = FenceState.ERROR
_NONE = ErrorStatus.NONE


@dataclass(frozen=True, slots=True)
class FencedExecutionInfo:
    """NNAPI's ``getExecutionInfo``: the status and the two timings of a fenced execution.

    ``timing_launched`` covers the call to the fence signaling; ``timing_fenced`` covers the
    wait-for fences signaling to the fence signaling. Both are unavailable unless timing was
    asked for and the status is NONE.
    """

    status: ErrorStatus
    timing_launched: Timing = TIMING_UNAVAILABLE
    timing_fenced: Timing = TIMING_UNAVAILABLE


#: What an execution that completed before ``execute_fenced`` returned gets as its fence: one
#: shared, already-signaled fence (NNAPI returns no sync fence, -1, in that case). A resolved
#: fence never changes and an nnrt fence cannot be signaled by the app, so sharing it is safe.
_COMPLETED = SyncFence.signaled()
#: Why an execution whose deadline came while it waited for its fences failed.
_WAITED_PAST = "the deadline passed while the execution waited for its fences"
#: The execution info of every successful execution that did not measure timing (immutable).
_INFO_NONE = FencedExecutionInfo(ErrorStatus.NONE)


class FencedExecutionCallback:
    """The handle a fenced execution returns beside its fence (no public constructor).

    It is also the execution's own state, and is kept lean, since a pipeline makes one per
    stage: when the wait-for fences have already signaled and the plan runs inline (the common
    chain), the execution runs before the call returns and the callback keeps only its outcome;
    otherwise it holds the request until the execution resolves, and no longer (no reference
    cycle, so the request's arrays are freed as soon as the fence resolves).

    Two ways to run. A plan the device runs inline (cheap, no control flow) starts *eagerly*:
    at once when its wait-for fences have already signaled, else from a listener on them the
    moment they signal on the loop thread (or scheduled there when they signal from another
    thread), so a chain of fenced stages runs back to back with no task switch. Other plans run
    as a task that awaits the fences and then the device.
    """

    __slots__ = ("_expired", "_fence", "_info", "_req", "_result", "_task", "_timer", "_wait")

    def __init__(self) -> None:
        #: The execution's fence; ``_COMPLETED`` when it completed before the call returned.
        self._fence = _COMPLETED
        #: Set once the execution has resolved (before its fence is).
        self._info: FencedExecutionInfo | None = None
        #: The ExecutionResult, or, when the outputs went straight into the caller's buffers,
        #: (buffers, output shapes), from which ``result`` builds it if someone asks.
        self._result: ExecutionResult | tuple[Sequence[np.ndarray | None], tuple[OutputShape, ...]] | None = None
        self._task: Task | None = None
        #: The request while it waits for its fences or its task: None once it has started.
        self._req: _Request | None = None
        #: (gate fence, listener handle, loop, loop thread) while an eager execution waits.
        #: (the loop's thread-safe ``call_soon``).
        self._wait: tuple[SyncFence, int | None, Callable[[Callable[[], object]], object], int] | None = None
        #: Armed at the deadline while the execution waits for its fences (see ``_arm``).
        self._timer: Cancellable | None = None
        self._expired = False

    @property
    def fence(self) -> SyncFence:
        return self._fence

    def get_execution_info(self) -> FencedExecutionInfo:
        """Status and timings; GENERAL_FAILURE while the fence has not resolved yet."""
        info = self._info
        if info is None:
            raise GeneralFailureError("get_execution_info: the execution's fence has not signaled yet")
        return info

    @property
    def result(self) -> ExecutionResult:
        """The ``ExecutionResult`` (outputs, shapes, timing) once the fence has signaled."""
        result = self._result
        if result is None:
            raise GeneralFailureError("the fenced execution has not completed successfully")
        if type(result) is tuple:
            from nnrt.execution._prepared import ExecutionResult  # a cycle at import time

            bufs, shapes = result
            result = self._result = ExecutionResult([b for b in bufs if b is not None], shapes)
        return cast("ExecutionResult", result)

    def cancel(self) -> bool:
        """Cancel the execution if it has not finished; its fence goes into error."""
        if self._task is not None:
            return self._task.cancel()
        if self._req is None:  # finished (or failed) already
            return False
        if self._wait is not None:
            self._wait[0]._core.remove_listener(self._wait[1])
        self._disarm()
        self._fail(ErrorStatus.GENERAL_FAILURE, "the fenced execution was cancelled")
        return True

    # -- a deadline while waiting for the fences --------------------------------------------------

    def _arm(self, prepared: PreparedModel, ctx: ExecContext) -> None:
        """Fail the execution at its deadline if its fences have not signaled by then (a fence
        that never signals must not keep it, or its own fence, waiting forever)."""
        if ctx.deadline is not None:
            self._timer = call_at(prepared._driver.clock, ctx.deadline, self._on_deadline)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_deadline(self) -> None:
        self._timer = None
        self._expired = True
        if self._task is not None:
            self._task.cancel()  # ``_run_task`` fails the fence with the deadline's status
            return
        wait = self._wait
        if wait is not None:
            wait[0]._core.remove_listener(wait[1])
            self._fail(ErrorStatus.MISSED_DEADLINE_TRANSIENT, _WAITED_PAST)

    # -- outcome --------------------------------------------------------------------------------

    def _pending(self) -> None:
        """The execution will resolve later: it gets a fence of its own."""
        self._fence = SyncFence._derived()

    def _fail(self, status: ErrorStatus, message: str) -> None:
        if self._info is None:
            self._info = FencedExecutionInfo(status)
        self._req = self._wait = None
        if self._fence is _COMPLETED:  # failed before the call returned
            self._fence = SyncFence.failed(status, message)
        else:
            self._fence._core.try_fail(status, message)

    def _succeed(self, device_ns: int, measure: bool, t_call: int, t_fenced: int) -> None:
        if measure:
            end = perf_ns()
            launched, fenced = end - t_call, end - t_fenced
            self._info = FencedExecutionInfo(ErrorStatus.NONE, Timing(min(device_ns, launched), launched),
                                             Timing(min(device_ns, fenced), fenced))
        else:
            self._info = _INFO_NONE
        if self._fence is not _COMPLETED:
            self._fence._core.try_signal()

    @staticmethod
    def _fences_signaled(prepared: PreparedModel, ctx: ExecContext, after_fence: float | None, measure: bool) -> int:
        """Start ``timeout_after_fence``; the time the fences signaled (measured runs only)."""
        if after_fence is not None:
            limit = prepared._driver.clock.now() + after_fence
            ctx.deadline = limit if ctx.deadline is None else min(ctx.deadline, limit)
        return perf_ns() if measure else 0

    def _keep(self, prepared: PreparedModel, results: list[Any], bufs: Sequence[np.ndarray | None] | None,
              args: list[Any], measure: bool, t_call: int, device_ns: int) -> None:
        """Write the outputs out and keep the result (NnrtError if they cannot be)."""
        if not measure and bufs is not None and prepared._fill_into(results, bufs):
            self._result = (bufs, prepared._exact_shapes)
        else:
            self._result = prepared._finish(results, bufs, args, measure, t_call, device_ns)

    # -- eager path (inline plans) ----------------------------------------------------------------

    def _wait_eagerly(self, req: _Request, fences: tuple[SyncFence, ...]) -> None:
        self._pending()
        self._req = req
        gate = fences[0] if len(fences) == 1 else all_of(fences)
        self._wait = (gate, None, call_soon_threadsafe(), threading.get_ident())
        handle = gate._core.add_listener(self._on_gate)
        if self._wait is not None:  # still waiting (else the listener has run already)
            self._wait = (gate, handle, self._wait[2], self._wait[3])
            self._arm(req.prepared, req.ctx)

    def _on_gate(self, core: FenceCore) -> None:
        wait = self._wait
        if wait is None:
            return
        if self._timer is not None and threading.get_ident() == wait[3]:
            self._disarm()  # (from another thread, ``_resume`` disarms it on the loop)
        if core.state is _ERROR:
            self._fail(ErrorStatus.GENERAL_FAILURE, f"a wait-for fence failed: {core.status.name if core.status else '?'}"
                       f" {core.message}".rstrip())
        elif threading.get_ident() == wait[3]:
            self._resume()
        else:
            wait[2](self._resume)

    def _resume(self) -> None:
        req = self._req
        if req is None:  # cancelled or expired meanwhile
            return
        self._disarm()
        self._req = self._wait = None
        self._run_inline(*req)

    def _run_inline(self, prepared: PreparedModel, args: list[Any], bufs: Sequence[np.ndarray | None] | None,
                    ctx: ExecContext, measure: bool, after_fence: float | None, t_call: int) -> None:
        # The hot path of a fenced pipeline: keep it to the calls an ``execute`` makes.
        driver, plan = prepared._driver, prepared.plan
        if not driver.can_run_now(plan):
            # The device is busy: queue like any other execution (fences already signaled).
            self._spawn(_Request(prepared, args, bufs, ctx, measure, after_fence, t_call), ())
            return
        t_fenced = self._fences_signaled(prepared, ctx, after_fence, measure) if after_fence is not None or measure else 0
        try:
            results, device_ns = prepared._now(args, ctx)
            self._keep(prepared, results, bufs, args, measure, t_call, device_ns)
        except NnrtError as err:
            self._fail(err.status, err.message)
            return
        if measure:
            self._succeed(device_ns, measure, t_call, t_fenced)
        else:
            self._info = _INFO_NONE
            if self._fence is not _COMPLETED:
                self._fence._core.try_signal()

    # -- task path --------------------------------------------------------------------------------

    def _spawn(self, req: _Request, fences: tuple[SyncFence, ...]) -> None:
        if self._fence is _COMPLETED:
            self._pending()
        self._req = req
        self._task = task = spawn(self._run_task(fences), "nnrt.execute_fenced")
        task.add_done_callback(self._task_done)
        req.prepared._track(task)

    def _task_done(self, task: Task) -> None:
        # A task cancelled before its first step never enters ``_run_task``: fail the fence here.
        if self._fence._core.state is _ACTIVE:
            self._fail(ErrorStatus.GENERAL_FAILURE, "the fenced execution was cancelled")

    async def _run_task(self, fences: tuple[SyncFence, ...]) -> None:
        req = self._req
        assert req is not None
        self._req = None
        prepared, args, bufs, ctx, measure, after_fence, t_call = req
        try:
            if fences:
                self._arm(prepared, ctx)
                try:
                    await (fences[0] if len(fences) == 1 else all_of(fences))
                except NnrtError as err:
                    raise GeneralFailureError(f"a wait-for fence failed: {err}") from err
                finally:
                    self._disarm()
                if ctx.deadline is not None and prepared._driver.clock.now() >= ctx.deadline:
                    raise MissedDeadlineError(_WAITED_PAST, status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
            t_fenced = self._fences_signaled(prepared, ctx, after_fence, measure)
            results, device_ns = await prepared._drive(args, ctx)
            self._keep(prepared, results, bufs, args, measure, t_call, device_ns)
        except NnrtError as err:
            self._fail(err.status, err.message)  # the message alone: the fence prefixes the status
        except BaseException:  # cancelled (asyncio or trio), or interrupted
            if self._expired:  # our own deadline timer: a failure, not a cancellation
                self._fail(ErrorStatus.MISSED_DEADLINE_TRANSIENT, _WAITED_PAST)
                return
            self._fail(ErrorStatus.GENERAL_FAILURE, "the fenced execution was cancelled")
            raise
        else:
            self._succeed(device_ns, measure, t_call, t_fenced)


class _Request(NamedTuple):
    """A validated fenced request, kept while the execution waits."""

    prepared: PreparedModel
    args: list[Any]
    bufs: Sequence[np.ndarray | None] | None
    ctx: ExecContext
    measure: bool
    after_fence: float | None
    t_call: int


def _check_fences(wait_for: Sequence[SyncFence]) -> tuple[tuple[SyncFence, ...], bool]:
    """The wait-for fences, and whether all have signaled already. INVALID_ARGUMENT for a
    non-fence or a fence already in error."""
    fences = as_fences(wait_for, "wait_for")
    ready = True
    for k, fence in enumerate(fences):
        state = fence._core.state
        if state is not _SIGNALED:
            if state is _ERROR:
                raise InvalidArgumentError(f"wait_for[{k}] is already in error ({fence.status.name if fence.status else '?'})")
            ready = False
    return fences, ready


def _check_sized(prepared: PreparedModel, bufs: Sequence[np.ndarray | None] | None) -> None:
    for j in prepared._unsized_outputs:
        op = prepared._outputs[j]
        if bufs is None or bufs[j] is None:
            raise InvalidArgumentError(
                f"output {j} ({op.label}) has unspecified dimensions {list(op.dimensions)}: a fenced execution "
                "needs fully specified outputs (or an output buffer)"
            )


async def execute_fenced(
    prepared: PreparedModel,
    inputs: Sequence[Any],
    outputs: Sequence[np.ndarray | None] | None = None,
    *,
    wait_for: Sequence[SyncFence] = (),
    measure_timing: bool = False,
    deadline: float | None = None,
    loop_timeout: float | None = None,
    timeout_after_fence: float | None = None,
) -> tuple[SyncFence, FencedExecutionCallback]:
    """Start an execution once every fence in ``wait_for`` has signaled; returns ``(fence, callback)``.

    The call returns without waiting for the fences: ``await fence`` waits for the outputs
    (written into ``outputs`` when given, else ``callback.result.outputs``), and
    ``callback.get_execution_info()`` then gives the status and the two timings (launched:
    from the call; fenced: from the moment the fences signaled). Inputs are read, and outputs
    written, only after every wait-for fence has signaled, so an earlier stage may still be
    producing them at the call; keep them alive and unchanged until ``fence`` signals. A
    stage whose fences had all signaled may run before the call returns.

    At the call (raised here, nothing started): INVALID_ARGUMENT for a bad request, an output
    whose size the model does not fix and no buffer was given, a wait-for fence already in
    error, or a negative ``timeout_after_fence``; MISSED_DEADLINE_PERSISTENT when
    ``deadline`` (absolute, on the device clock) has already passed.

    Later (the fence goes into error, ``callback.get_execution_info()`` tells the status): a
    wait-for fence that fails gives GENERAL_FAILURE without running the model; the deadline,
    or ``timeout_after_fence`` counted from the moment the fences signal, passing gives
    MISSED_DEADLINE_TRANSIENT; ``callback.cancel()`` fails the fence; the other statuses are
    those of ``execute``. An execution holds no compute unit while it waits.
    """
    t_call = perf_ns() if measure_timing else 0
    args, bufs = prepared._validate_request(inputs, outputs)
    if prepared._unsized_outputs:
        _check_sized(prepared, bufs)
    fences: tuple[SyncFence, ...]
    if type(wait_for) is not tuple and type(wait_for) is not list:
        wait_for = as_fences(wait_for, "wait_for")
    if not wait_for:
        fences, ready = (), True
    elif len(wait_for) == 1 and type(wait_for[0]) is SyncFence and wait_for[0]._core.state is _SIGNALED:
        fences, ready = (wait_for[0],), True  # the common chain: the previous stage has run already
    else:
        fences, ready = _check_fences(wait_for)
    if timeout_after_fence is not None and (not isinstance(timeout_after_fence, (int, float)) or not timeout_after_fence >= 0):
        raise InvalidArgumentError(f"timeout_after_fence must be a non-negative number of seconds, got {timeout_after_fence!r}")
    ctx = prepared._context(deadline, loop_timeout)  # raises MISSED_DEADLINE_PERSISTENT if already late
    callback = FencedExecutionCallback()
    if not prepared._driver.runs_inline(prepared.plan):
        callback._spawn(_Request(prepared, args, bufs, ctx, measure_timing, timeout_after_fence, t_call), fences)
    elif ready:  # the common chain: the previous stage has run already
        callback._run_inline(prepared, args, bufs, ctx, measure_timing, timeout_after_fence, t_call)
    else:
        callback._wait_eagerly(_Request(prepared, args, bufs, ctx, measure_timing, timeout_after_fence, t_call), fences)
    return callback._fence, callback


# Bound as ``PreparedModel.execute_fenced`` (no wrapper: a pipeline calls it once per stage);
# help() and tracebacks name it as the public method it is, not as this private module's.
execute_fenced.__qualname__ = "PreparedModel.execute_fenced"
execute_fenced.__module__ = "nnrt.execution"
