"""Lanes: a burst's requests resolved once, and the lean runner that executes them.

A ``Lane`` is one set of location objects (a request's inputs and outputs) resolved to
zero-copy views of their pools and validated against the model: the argument list the
interpreter takes and the output buffers results are copied into. The server caches lanes
per set of location objects, so a stream that reuses its locations pays for slicing and
validation once (NNAPI maps each pool once, not per request).

``LeanRunner`` executes lanes of a plan of kernels on a ``CpuDevice``, two ways:

* ``run``: at once, on the loop, when the burst has nothing queued and ``can_run_now``
  holds (a cheap plan, nothing admitted). It is ``CpuDevice.run_now`` + ``run_plan`` +
  ``PreparedModel._finish`` specialised for arguments already validated, and keeps every
  rule of that path: a passed deadline is MISSED_DEADLINE_PERSISTENT before any work, so is
  a deadline the plan's admission cost cannot meet; the deadline is checked before each step
  (MISSED_DEADLINE_TRANSIENT); a kernel's exception is GENERAL_FAILURE naming the operation;
  floating-point warnings are off; the scheduler counts a fast-path completion; results are
  copied into the pools only once every output is computed. What it saves is per-request
  set-up: the interpreter generator and its checks for yields a synchronous run never takes,
  the execution context when there is no deadline, the layers between.
* ``run_on_worker``: a batch of queued requests of a plan too heavy for the loop, back to
  back on the device's worker thread in one hand-off, under one scheduler job that holds a
  compute unit for the batch and gives it back between two requests when the scheduler
  raises its interrupt flag (so priorities and preemption work between requests; a request
  once started runs to its end). ``execute`` would pay a hand-off to the worker and back and
  an admission per request.

Keep both in step with the functions they specialise. A device whose ``run_now`` or
``can_run_now`` is not ``CpuDevice``'s own (say, one that accounts for each run) gets no lean
runner: its lanes run through ``Driver.run_now`` / ``drive`` as ``PreparedModel.execute``'s
would.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt._log import get_logger, vlog_enabled
from nnrt.burst._packet import Location
from nnrt.clock import perf_ns
from nnrt.errors import GeneralFailureError, MissedDeadlineError, NnrtError
from nnrt.execution import ExecutionResult
from nnrt.execution._interpreter import fp_errors_ignored, fp_errors_restored, run_kernels
from nnrt.execution._plan import KERNEL
from nnrt.sched import Job
from nnrt.types import ErrorStatus

if TYPE_CHECKING:
    from nnrt.devices import CpuDevice
    from nnrt.execution import PreparedModel

__all__ = ["Lane", "LeanRunner", "Request", "RunFlag"]

_log = get_logger("execution")


class Lane:
    """One set of location objects resolved and validated: the arguments the interpreter
    takes (``args``) and the output buffers results are copied into (``bufs``, pool views)."""

    __slots__ = ("args", "bufs", "exact", "locs")

    def __init__(self, locs: tuple[Location | None, ...], args: list[Any], bufs: Any, exact: bool) -> None:
        self.locs = locs
        self.args = args
        self.bufs = bufs
        #: Every output region has exactly its operand's (fully specified) dimensions, so a
        #: result is never reshaped.
        self.exact = exact


#: One request of a worker batch: its lane, measure_timing, deadline, and when it was taken
#: from the channel (``perf_ns``, for timing).
Request = tuple[Lane, bool, "float | None", int]


class RunFlag:
    """Raised by the scheduler (``interrupt``: give the unit back) or the server (``stop``: the
    burst is closing) to end a worker batch between two requests."""

    __slots__ = ("interrupt", "stop")

    def __init__(self) -> None:
        self.interrupt = False
        self.stop = False


class LeanRunner:
    """Runs lanes of one prepared model at once on its ``CpuDevice`` (see the module docstring)."""

    __slots__ = (
        "_app", "_clock", "_device", "_plan", "_prepared", "_priority", "_sched",
    )

    @staticmethod
    def for_model(prepared: PreparedModel) -> LeanRunner | None:
        """A runner when the device is a plain ``CpuDevice`` and the plan kernels only, else None."""
        from nnrt.devices import CpuDevice  # the device layer sits beside this one

        driver = prepared._driver
        cls = type(driver)
        if not isinstance(driver, CpuDevice) or (cls.run_now, cls.can_run_now) != (CpuDevice.run_now, CpuDevice.can_run_now):
            return None
        if any(step.kind != KERNEL for step in prepared.plan.steps):
            return None
        return LeanRunner(prepared)

    def __init__(self, prepared: PreparedModel) -> None:
        plan = prepared.plan
        device: CpuDevice = prepared._driver  # type: ignore[assignment]  # checked by for_model
        self._device = device
        self._prepared = prepared
        self._plan = plan
        self._clock = device.clock
        self._sched = device.scheduler
        self._app = prepared.app
        self._priority = prepared.priority

    def run(self, lane: Lane, measure: bool, deadline: float | None, loop_timeout: float | None) -> ExecutionResult:
        """Execute ``lane`` now; the caller checked ``can_run_now``. Raises the ``NnrtError``."""
        t0 = perf_ns() if measure else 0
        try:
            if deadline is not None or loop_timeout is not None:
                self.admit(deadline, loop_timeout)
            results = self._kernels(lane.args, deadline)
            self._sched.ran_fast(self._app, self._priority)
            return self._finish(lane, results, measure, t0)
        except NnrtError as err:
            self._prepared._log_failure(err)
            raise

    async def run_on_worker(self, batch: list[Request]) -> list[ExecutionResult | NnrtError]:
        """Run ``batch`` back to back on the device's worker under one job of the scheduler.

        The job is admitted and waits its turn like any execution (a refusal fails every
        request alike); once granted it holds a compute unit while the worker runs request
        after request, and gives it back when the batch is done or, between two requests,
        when the scheduler raises its interrupt flag (the requests not run come back without
        an outcome: the caller queues them again). Cancelled (the burst is closing), it lets
        the request in progress finish, so no output is left half written, and re-raises.
        The job counts one completion; the scheduler's fast-path counter gets the others, so
        the per-class ``completed`` figure counts requests.
        """
        device, sched, plan = self._device, self._sched, self._plan
        each = plan.admission_cost_ns / 1e9
        job = Job(self._app, self._priority, cost=each * len(batch), step=each)  # a request runs to its end
        flag = RunFlag()
        try:
            sched.admit(job, flag)
        except NnrtError as err:  # refused (RESOURCE_EXHAUSTED_*, say): every request alike
            if err.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT:  # the estimate alone is too long
                plan.refused()
            self._prepared._log_failure(err)
            return [err] * len(batch)
        try:
            granted = await sched.wait_turn(job)
            future = asyncio.wrap_future(device.workers_for(self._priority).submit(self._run_batch, batch, flag))
            try:
                outcomes = await asyncio.shield(future)
            except asyncio.CancelledError:
                flag.stop = True  # end after the request in progress
                await asyncio.wait([future])
                if not future.cancelled():
                    future.exception()  # retrieved: the burst is closing, nobody wants it
                raise
            except Exception as exc:  # nnrt's own bug: fail the batch, keep the server
                _log.warning("burst.batch_failed", error=f"{type(exc).__name__}: {exc}")
                outcomes = [GeneralFailureError(f"{type(exc).__name__}: {exc}")] * len(batch)
        except BaseException:
            sched.withdraw(job)
            raise
        held_ns = perf_ns() - granted
        ok = sum(1 for outcome in outcomes if type(outcome) is ExecutionResult)
        failed = next((o.status for o in outcomes if isinstance(o, NnrtError)), ErrorStatus.NONE)
        sched.finish(job, ErrorStatus.NONE if ok or not outcomes else failed)
        for _ in range(ok - 1):
            sched.ran_fast(self._app, self._priority)
        if outcomes:
            plan.observe(held_ns / len(outcomes))
        for outcome in outcomes:
            if isinstance(outcome, NnrtError):
                self._prepared._log_failure(outcome)
        return outcomes

    def _run_batch(self, batch: list[Request], flag: RunFlag) -> list[ExecutionResult | NnrtError]:
        """On the worker: run requests back to back, stopping (between two requests) once
        ``flag.interrupt`` or ``flag.stop`` is set. One outcome per request run, in order;
        touches no loop-side state. A deadline that passed while the request waited in its
        burst is MISSED_DEADLINE_TRANSIENT, as for an execution expiring in the queue."""
        outcomes: list[ExecutionResult | NnrtError] = []
        for lane, measure, deadline, t0 in batch:
            if flag.interrupt or flag.stop:
                break
            try:
                if deadline is not None and self._clock.now() >= deadline:
                    raise MissedDeadlineError("the deadline passed while the request waited in its burst",
                                              status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
                outcomes.append(self._finish(lane, self._kernels(lane.args, deadline), measure, t0))
            except NnrtError as err:
                outcomes.append(err)
        return outcomes

    def _kernels(self, args: list[Any], deadline: float | None) -> list[Any]:
        """``run_plan`` for kernels run to completion (no yields to offer), warnings off."""
        token = fp_errors_ignored()
        try:
            return run_kernels(self._plan, args, self._clock, deadline)
        finally:
            fp_errors_restored(token)

    def _finish(self, lane: Lane, results: list[Any], measure: bool, t0: int) -> ExecutionResult:
        """Write the results into the lane's pools and make the ``ExecutionResult``."""
        prepared = self._prepared
        bufs = lane.bufs
        if lane.exact and not measure:
            # PreparedModel._fill_into, for buffers known to have the model's shapes.
            for value, buf in zip(results, bufs):
                if type(value) is not np.ndarray or value.shape != buf.shape or value.dtype != buf.dtype:
                    break
            else:
                for value, buf in zip(results, bufs):
                    buf[...] = value
                prepared._n_executions += 1
                if vlog_enabled("execution"):
                    _log.debug("execution.completed", app=self._app, priority=self._priority.name, status="NONE",
                               outputs=len(bufs))
                return ExecutionResult(list(bufs), prepared._exact_shapes)
        return prepared._finish(results, bufs, lane.args, measure, t0, perf_ns() - t0 if measure else 0)

    def admit(self, deadline: float | None, loop_timeout: float | None) -> None:
        """The checks of ``PreparedModel._context`` and ``CpuDevice.run_now``'s admission test
        (MISSED_DEADLINE_PERSISTENT for a deadline passed or out of reach)."""
        self._prepared._context(deadline, loop_timeout)  # a passed deadline, bad values: refused here
        if deadline is not None:
            self._device.refuse_if_late(self._plan, deadline)
