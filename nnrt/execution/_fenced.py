"""Fenced execution: ``fence, callback = await prepared.execute_fenced(...)``.

NNAPI's ``executeFenced`` (digest section 3), made Pythonic. The request is validated at the
call, synchronously: a bad request, an output whose size is unknown, a wait-for fence already
in error, or a deadline already passed raise at once. Otherwise the execution becomes a task
owned by the prepared model, and the call returns a ``SyncFence`` that signals when the
outputs are written, plus a ``FencedExecutionCallback``.

The task first awaits every wait-for fence, holding no device compute; a wait-for fence that
fails puts the returned fence in error (GENERAL_FAILURE) at once, without running the model.
Once they have signaled, ``timeout_after_fence`` starts counting: the effective deadline is the
earlier of it and ``deadline``, and missing it puts the fence in error with MISSED_DEADLINE_*.
Cancelling the execution (``callback.cancel()``) puts its fence in error; nothing waits forever.
Cheap plans run eagerly, without a task, the moment their fences signal (see ``_FencedRun``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.clock import perf_ns
from nnrt.errors import GeneralFailureError, InvalidArgumentError, NnrtError
from nnrt.execution._interpreter import ExecContext, run_plan
from nnrt.fences import FenceState, SyncFence, all_of
from nnrt.fences._state import FenceCore
from nnrt.types import TIMING_UNAVAILABLE, ErrorStatus, Timing

if TYPE_CHECKING:
    from nnrt.execution._prepared import ExecutionResult, PreparedModel

__all__ = ["FencedExecutionCallback", "FencedExecutionInfo", "execute_fenced"]


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


class FencedExecutionCallback:
    """The handle a fenced execution returns beside its fence (no public constructor)."""

    __slots__ = ("_fence", "_info", "_result", "_run", "_task")

    def __init__(self, fence: SyncFence) -> None:
        self._fence = fence
        self._info: FencedExecutionInfo | None = None
        self._result: ExecutionResult | None = None
        self._task: asyncio.Task[None] | None = None
        self._run: _FencedRun | None = None

    @property
    def fence(self) -> SyncFence:
        return self._fence

    def get_execution_info(self) -> FencedExecutionInfo:
        """Status and timings; GENERAL_FAILURE while the fence has not resolved yet."""
        if self._info is None:
            raise GeneralFailureError("get_execution_info: the execution's fence has not signaled yet")
        return self._info

    @property
    def result(self) -> ExecutionResult:
        """The ``ExecutionResult`` (outputs, shapes, timing) once the fence has signaled."""
        if self._result is None:
            raise GeneralFailureError("the fenced execution has not completed successfully")
        return self._result

    def cancel(self) -> bool:
        """Cancel the execution if it has not finished; its fence goes into error."""
        if self._run is not None:
            return self._run.cancel()
        return self._task is not None and self._task.cancel()


def _check_fences(wait_for: Sequence[SyncFence]) -> tuple[SyncFence, ...]:
    fences = tuple(wait_for)
    for k, fence in enumerate(fences):
        if not isinstance(fence, SyncFence):
            raise InvalidArgumentError(f"wait_for[{k}]: {type(fence).__name__} is not a SyncFence")
        if fence.state is FenceState.ERROR:
            raise InvalidArgumentError(f"wait_for[{k}] is already in error ({fence.status.name if fence.status else '?'})")
    return fences


async def execute_fenced(
    prepared: PreparedModel,
    inputs: Sequence[Any],
    outputs: Sequence[np.ndarray | None] | None,
    wait_for: Sequence[SyncFence],
    measure_timing: bool,
    deadline: float | None,
    loop_timeout: float | None,
    timeout_after_fence: float | None,
) -> tuple[SyncFence, FencedExecutionCallback]:
    t_call = perf_ns()
    args, bufs = prepared._validate_request(inputs, outputs)
    for j in prepared._unsized_outputs:
        op = prepared._outputs[j]
        if bufs is None or bufs[j] is None:
            raise InvalidArgumentError(
                f"output {j} ({op.label}) has unspecified dimensions {list(op.dimensions)}: a fenced execution "
                "needs fully specified outputs (or an output buffer)"
            )
    fences = _check_fences(wait_for)
    if timeout_after_fence is not None and (not isinstance(timeout_after_fence, (int, float)) or not timeout_after_fence >= 0):
        raise InvalidArgumentError(f"timeout_after_fence must be a non-negative number of seconds, got {timeout_after_fence!r}")
    ctx = prepared._context(deadline, loop_timeout)  # raises MISSED_DEADLINE_PERSISTENT if already late
    fence = SyncFence._derived()
    callback = FencedExecutionCallback(fence)
    run = _FencedRun(prepared, args, bufs, ctx, measure_timing, timeout_after_fence, t_call, fence, callback)
    if prepared._driver.runs_inline(prepared.plan):
        run.start_eagerly(fences)
    else:
        task = asyncio.get_running_loop().create_task(run.run_task(fences))
        callback._task = task
        prepared._track(task)
    return fence, callback


class _FencedRun:
    """One fenced execution: waits for its fences, runs, resolves its fence and callback.

    Two ways to run. A plan the device runs inline (cheap, no control flow) starts *eagerly*:
    a listener on the wait-for fences runs it synchronously the moment they signal on the loop
    thread (or schedules it there when they signal from another thread), so a chain of fenced
    stages runs back to back with no task switch. Other plans run as a task that awaits the
    fences and then the device.
    """

    __slots__ = (
        "after_fence",
        "args",
        "bufs",
        "callback",
        "ctx",
        "fence",
        "gate",
        "handle",
        "loop",
        "measure",
        "prepared",
        "t_call",
        "thread",
    )

    def __init__(
        self,
        prepared: PreparedModel,
        args: list[Any],
        bufs: Sequence[np.ndarray | None] | None,
        ctx: ExecContext,
        measure: bool,
        after_fence: float | None,
        t_call: int,
        fence: SyncFence,
        callback: FencedExecutionCallback,
    ) -> None:
        self.prepared, self.args, self.bufs, self.ctx = prepared, args, bufs, ctx
        self.measure, self.after_fence, self.t_call = measure, after_fence, t_call
        self.fence, self.callback = fence, callback
        self.loop = asyncio.get_running_loop()
        self.thread = threading.get_ident()
        self.handle: int | None = None
        self.gate: SyncFence | None = None

    # -- outcome --------------------------------------------------------------------------------

    def _fail(self, status: ErrorStatus, message: str) -> None:
        self.callback._info = FencedExecutionInfo(status)
        self.fence._core.try_fail(status, message)

    def _succeed(self, result: ExecutionResult, device_ns: int, t_fenced: int) -> None:
        end = perf_ns()
        if self.measure:
            launched = Timing(min(device_ns, end - self.t_call), end - self.t_call)
            fenced = Timing(min(device_ns, end - t_fenced), end - t_fenced)
            self.callback._info = FencedExecutionInfo(ErrorStatus.NONE, launched, fenced)
        else:
            self.callback._info = FencedExecutionInfo(ErrorStatus.NONE)
        self.callback._result = result
        self.fence._core.try_signal()

    def _fences_signaled(self) -> int:
        if self.after_fence is not None:
            limit = self.prepared._driver.clock.now() + self.after_fence
            self.ctx.deadline = limit if self.ctx.deadline is None else min(self.ctx.deadline, limit)
        return perf_ns()

    # -- eager path (inline plans) ----------------------------------------------------------------

    def start_eagerly(self, fences: tuple[SyncFence, ...]) -> None:
        self.callback._run = self
        if not fences:
            self._run_inline()
            return
        self.gate = fences[0] if len(fences) == 1 else all_of(fences)
        self.handle = self.gate._core.add_listener(self._on_gate)

    def _on_gate(self, core: FenceCore) -> None:
        if core.state is FenceState.ERROR:
            self._fail(ErrorStatus.GENERAL_FAILURE, f"a wait-for fence failed: {core.status.name if core.status else '?'}"
                       f" {core.message}".rstrip())
        elif threading.get_ident() == self.thread:
            self._run_inline()
        else:
            self.loop.call_soon_threadsafe(self._run_inline)

    def _run_inline(self) -> None:
        if self.fence.done():  # cancelled meanwhile
            return
        prepared = self.prepared
        if not prepared._driver.can_run_now(prepared.plan):
            # The device is busy: queue like any other execution (fences already signaled).
            task = self.loop.create_task(self.run_task(()))
            self.callback._run = None  # cancel() now cancels the task
            self.callback._task = task
            prepared._track(task)
            return
        t_fenced = self._fences_signaled()
        try:
            gen = run_plan(prepared.plan, self.args, self.ctx)
            results, device_ns = prepared._driver.run_now(gen, self.ctx, prepared.plan, prepared.app, prepared.priority)
            result = prepared._finish(results, self.bufs, self.args, self.measure, self.t_call, device_ns)
        except NnrtError as err:
            self._fail(err.status, str(err))
        else:
            self._succeed(result, device_ns, t_fenced)

    def cancel(self) -> bool:
        if self.fence.done():
            return False
        if self.gate is not None:
            self.gate._core.remove_listener(self.handle)
        self._fail(ErrorStatus.GENERAL_FAILURE, "the fenced execution was cancelled")
        return True

    # -- task path --------------------------------------------------------------------------------

    async def run_task(self, fences: tuple[SyncFence, ...]) -> None:
        prepared = self.prepared
        try:
            if fences:
                try:
                    await (fences[0] if len(fences) == 1 else all_of(fences))
                except NnrtError as err:
                    raise GeneralFailureError(f"a wait-for fence failed: {err}") from err
            t_fenced = self._fences_signaled()
            gen = run_plan(prepared.plan, self.args, self.ctx)
            results, device_ns = await prepared._driver.drive(gen, self.ctx, prepared.plan, prepared.app, prepared.priority)
            result = prepared._finish(results, self.bufs, self.args, self.measure, self.t_call, device_ns)
        except NnrtError as err:
            self._fail(err.status, str(err))
        except asyncio.CancelledError:
            self._fail(ErrorStatus.GENERAL_FAILURE, "the fenced execution was cancelled")
            raise
        else:
            self._succeed(result, device_ns, t_fenced)
