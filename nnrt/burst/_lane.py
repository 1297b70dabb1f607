"""Lanes: a burst's requests resolved once, and the lean runner that executes them at once.

A ``Lane`` is one set of location objects (a request's inputs and outputs) resolved to
zero-copy views of their pools and validated against the model: the argument list the
interpreter takes and the output buffers results are copied into. The server caches lanes
per set of location objects, so a stream that reuses its locations pays for slicing and
validation once (NNAPI maps each pool once, not per request).

``LeanRunner`` runs a lane synchronously on a ``CpuDevice``'s inline fast path, when the
burst has nothing queued and ``can_run_now`` holds (a cheap plan, nothing admitted). It is
``CpuDevice.run_now`` + ``run_plan`` + ``PreparedModel._finish`` specialised for a plan of
kernels only (inline plans have no control flow) whose arguments are already validated, and
it keeps every rule of that path: a passed deadline is MISSED_DEADLINE_PERSISTENT before any
work, so is a deadline the plan's admission cost cannot meet; the deadline is checked before
each step (MISSED_DEADLINE_TRANSIENT); a kernel's exception is GENERAL_FAILURE naming the
operation; floating-point warnings are off; the scheduler counts the run as a fast-path
completion; results are copied into the pools only once every output is computed. What it
saves is per-request set-up: the interpreter generator and its checks for yields that a
synchronous run never takes, the execution context when there is no deadline, and the
layers between. Keep it in step with those three functions. A device whose ``run_now`` or
``can_run_now`` is not ``CpuDevice``'s own (say, one that accounts for each run) gets no lean
runner: its lanes run through ``Driver.run_now`` as ``PreparedModel.execute`` would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt._log import get_logger, vlog_enabled
from nnrt.burst._packet import Location
from nnrt.clock import perf_ns
from nnrt.errors import GeneralFailureError, MissedDeadlineError, NnrtError
from nnrt.execution import ExecutionResult
from nnrt.execution._interpreter import fp_errors_ignored, fp_errors_restored
from nnrt.execution._plan import KERNEL
from nnrt.types import ErrorStatus

if TYPE_CHECKING:
    from nnrt.execution import PreparedModel

__all__ = ["Lane", "LeanRunner"]

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


class LeanRunner:
    """Runs lanes of one prepared model at once on its ``CpuDevice`` (see the module docstring)."""

    __slots__ = ("_app", "_clock", "_inputs", "_outputs", "_plan", "_prepared", "_priority", "_sched", "_steps", "_template")

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
        device = prepared._driver
        self._prepared = prepared
        self._plan = plan
        self._steps = tuple(plan.steps)
        self._template = plan.template
        self._inputs = plan.inputs
        self._outputs = plan.outputs
        self._clock = device.clock
        self._sched = device.scheduler  # type: ignore[attr-defined]
        self._app = prepared.app
        self._priority = prepared.priority

    def run(self, lane: Lane, measure: bool, deadline: float | None, loop_timeout: float | None) -> ExecutionResult:
        """Execute ``lane`` now; the caller checked ``can_run_now``. Raises the ``NnrtError``."""
        prepared = self._prepared
        t0 = perf_ns() if measure else 0
        try:
            if deadline is not None or loop_timeout is not None:
                self._admit(deadline, loop_timeout)
            # run_plan, for kernels run to completion (no yields to offer).
            slots = self._template.copy()
            for slot, value in zip(self._inputs, lane.args):
                slots[slot] = value
            token = fp_errors_ignored()
            try:
                for step in self._steps:
                    if deadline is not None and self._clock.now() >= deadline:
                        transient = ErrorStatus.MISSED_DEADLINE_TRANSIENT
                        raise MissedDeadlineError(f"deadline passed before {step.label}", status=transient)
                    try:
                        result = step.fn(*step.fetch(slots))  # type: ignore[misc]
                    except NnrtError:
                        raise
                    except Exception as exc:
                        raise GeneralFailureError(f"{step.label} failed: {type(exc).__name__}: {exc}") from exc
                    if step.out >= 0:
                        slots[step.out] = result
                    else:
                        for slot, value in zip(step.outs, result):
                            slots[slot] = value
                    for slot in step.free:
                        slots[slot] = None
            finally:
                fp_errors_restored(token)
            results = [slots[i] for i in self._outputs]
            self._sched.ran_fast(self._app, self._priority)
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
        except NnrtError as err:
            prepared._log_failure(err)
            raise

    def _admit(self, deadline: float | None, loop_timeout: float | None) -> None:
        """The checks of ``PreparedModel._context`` and ``CpuDevice.run_now``'s admission test."""
        self._prepared._context(deadline, loop_timeout)  # a passed deadline, bad values: refused here
        if deadline is not None:
            cost_s = self._plan.admission_cost_ns / 1e9
            if cost_s > deadline - self._clock.now():
                raise MissedDeadlineError(
                    f"the execution needs about {cost_s * 1e3:.3f} ms, more than is left before its deadline",
                    status=ErrorStatus.MISSED_DEADLINE_PERSISTENT,
                )
