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
  once started runs to its end, and admission counts it as the job's longest step). Each
  request keeps its deadline, and its outcome goes back to the loop as it ends.
  ``execute`` would pay a hand-off to the worker and back and
  an admission per request.

Keep both in step with the functions they specialise. A device whose ``run_now`` or
``can_run_now`` is not ``CpuDevice``'s own (say, one that accounts for each run) gets no lean
runner: its lanes run through ``Driver.run_now`` / ``drive`` as ``PreparedModel.execute``'s
would.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt._aio import call_soon_threadsafe, wait_future, wait_future_to_end
from nnrt._log import get_logger, vlog_enabled
from nnrt.burst._packet import Location
from nnrt.clock import perf_ns
from nnrt.errors import GeneralFailureError, MissedDeadlineError, NnrtError
from nnrt.execution import ExecutionResult
from nnrt.execution._interpreter import fp_errors_ignored, fp_errors_restored, run_kernels
from nnrt.execution._plan import KERNEL, Plan
from nnrt.sched import Job
from nnrt.types import ErrorStatus

if TYPE_CHECKING:
    from nnrt.devices import CpuDevice
    from nnrt.execution import PreparedModel

__all__ = ["Deliver", "Lane", "LeanRunner", "Request", "RunFlag"]

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
#: Called on the loop with (index in the batch, outcome) as each request of a batch ends.
Deliver = Callable[[int, "ExecutionResult | NnrtError"], None]


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
        "_app", "_clock", "_device", "_prepared", "_priority", "_sched",
    )

    @staticmethod
    def for_model(prepared: PreparedModel) -> LeanRunner | None:
        """A runner when the device is a plain ``CpuDevice`` and the plan kernels only, else None.

        The device says so itself (``CpuDevice.runs_lean``): the device layer is not imported
        from here, so that no import circle runs through bursts."""
        runs_lean = getattr(prepared._driver, "runs_lean", None)
        if runs_lean is None or not runs_lean():
            return None
        if prepared.plan.dynamic or any(step.kind != KERNEL for step in prepared.plan.steps):
            return None  # (a dynamic plan's cost depends on each request's sizes)
        return LeanRunner(prepared)

    def __init__(self, prepared: PreparedModel) -> None:
        device: CpuDevice = prepared._driver  # type: ignore[assignment]  # checked by for_model
        self._device = device
        self._prepared = prepared
        self._clock = device.clock
        self._sched = device.scheduler
        self._app = prepared.app
        self._priority = prepared.priority

    @property
    def _plan(self) -> Plan:
        """The prepared model's plan now (a provisional plan's compiled successor once adopted:
        same steps' kinds, as those come from the model)."""
        return self._prepared.plan

    def run(self, lane: Lane, measure: bool, deadline: float | None, loop_timeout: float | None) -> ExecutionResult:
        """Execute ``lane`` now; the caller checked ``can_run_now``. Raises the ``NnrtError``."""
        t0 = perf_ns() if measure else 0
        try:
            if deadline is not None or loop_timeout is not None:
                self.admit(deadline, loop_timeout)
            plan = self._plan
            if plan.fast_countdown:
                plan.fast_countdown -= 1
                results = self._kernels(lane.args, deadline)
            else:  # the cost model learns on this path too (``Plan.observe_fast``)
                t = perf_ns()
                results = self._kernels(lane.args, deadline)
                plan.observe_fast(perf_ns() - t)
            self._sched.ran_fast(self._app, self._priority)
            return self._finish(lane, results, measure, t0)
        except NnrtError as err:
            self._prepared._log_failure(err)
            raise

    async def run_on_worker(self, batch: list[Request], deliver: Deliver) -> list[ExecutionResult | NnrtError]:
        """Run ``batch`` back to back on the device's worker under one job of the scheduler;
        ``deliver(k, outcome)`` is called on the loop as each request ends, in order.

        Each request keeps its own deadline: it fails without compute (MISSED_DEADLINE_
        TRANSIENT) when that has passed, or its estimate no longer fits before it, as its turn
        comes; its deadline is checked before each operation and after the last, so none
        succeeds late. (The job itself has no deadline: failing it would fail the requests
        that can still make theirs.)

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
        call_soon = call_soon_threadsafe()
        each = plan.admission_cost_ns / 1e9
        job = Job(self._app, self._priority, cost=each * len(batch), step=each)  # a request runs to its end
        flag = RunFlag()
        try:
            sched.admit(job, flag)
        except NnrtError as err:  # refused (RESOURCE_EXHAUSTED_*, say): every request alike
            if err.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT:  # the estimate alone is too long
                plan.refused()
            self._prepared._log_failure(err)
            for k in range(len(batch)):
                deliver(k, err)
            return [err] * len(batch)
        try:
            granted = await sched.wait_turn(job)

            def post(k: int, outcome: ExecutionResult | NnrtError) -> None:  # on the worker
                call_soon(functools.partial(deliver, k, outcome))

            cf = device.workers_for(self._priority).submit(self._run_batch, batch, flag, post, each)
            outcomes: list[ExecutionResult | NnrtError]
            try:
                outcomes = await wait_future(cf, shielded=True)
            except Exception as exc:  # nnrt's own bug: fail the batch, keep the server
                _log.warning("burst.batch_failed", error=f"{type(exc).__name__}: {exc}")
                outcomes = [GeneralFailureError(f"{type(exc).__name__}: {exc}")] * len(batch)
                for k in range(len(batch)):
                    deliver(k, outcomes[k])
            except BaseException:  # cancelled (asyncio or trio): the burst is closing
                flag.stop = True  # end after the request in progress
                await wait_future_to_end(cf)
                if cf.cancelled() or cf.exception() is not None:  # retrieved: nobody wants it
                    raise
                # Its results were delivered already (the client may be closing the burst
                # because it has them all): account for them as for a batch that ended.
                self._account(job, cf.result(), granted)
                raise
        except BaseException:
            sched.withdraw(job)  # (a no-op once accounted)
            raise
        self._account(job, outcomes, granted)
        return outcomes

    def _account(self, job: Job, outcomes: list[ExecutionResult | NnrtError], granted: int) -> None:
        """End a batch's job: one completion for it, the scheduler's fast-path counter for the
        other requests that succeeded (so ``completed`` counts requests), the cost model learns
        the service time per request, and each failure is logged."""
        sched = self._sched
        held_ns = perf_ns() - granted
        ok = sum(1 for outcome in outcomes if type(outcome) is ExecutionResult)
        failed = next((o.status for o in outcomes if isinstance(o, NnrtError)), ErrorStatus.NONE)
        sched.finish(job, ErrorStatus.NONE if ok or not outcomes else failed)
        for _ in range(ok - 1):
            sched.ran_fast(self._app, self._priority)
        if outcomes:
            self._plan.observe(held_ns / len(outcomes))
        for outcome in outcomes:
            if isinstance(outcome, NnrtError):
                self._prepared._log_failure(outcome)

    def _run_batch(self, batch: list[Request], flag: RunFlag, post: Deliver, each_s: float) -> list[ExecutionResult | NnrtError]:
        """On the worker: run requests back to back, stopping (between two requests) once
        ``flag.interrupt`` or ``flag.stop`` is set, and ``post`` each outcome as it ends. One
        outcome per request run, in order; touches no loop-side state. A request whose deadline
        passed while it waited in its burst, or that its estimate (``each_s``) can no longer
        fit before it, is MISSED_DEADLINE_TRANSIENT without compute, as an execution expiring
        in the queue."""
        outcomes: list[ExecutionResult | NnrtError] = []
        for k, (lane, measure, deadline, t0) in enumerate(batch):
            if flag.interrupt or flag.stop:
                break
            outcome: ExecutionResult | NnrtError
            try:
                if deadline is not None:
                    left = deadline - self._clock.now()
                    if left <= 0 or each_s > left:
                        why = "passed" if left <= 0 else f"is {left * 1e3:.3f} ms away, less than its {each_s * 1e3:.3f} ms"
                        raise MissedDeadlineError(f"the deadline {why} when its turn came in its burst",
                                                  status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
                outcome = self._finish(lane, self._kernels(lane.args, deadline), measure, t0)
            except NnrtError as err:
                outcome = err
            outcomes.append(outcome)
            post(k, outcome)
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
            self._device.refuse_if_late(self._plan.cost, deadline)
