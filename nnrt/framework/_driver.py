"""``PartitionedDriver``: a partitioned model is one more driver behind the one execution path.

A partitioned model is an ordinary ``PreparedModel`` (request validation, deadline checks,
outputs, timing, fenced executions, bursts: all its own code) whose plan has one DELEGATED
step per device step and whose driver is this one. The interpreter runs that plan: at each
step it hands the step's input values over (``ctx.handoff``, ``nnrt.execution._interpreter``)
and this driver runs the step's own prepared model on its device, through that device's
driver, under its scheduler, with the execution's app and priority and the same deadline;
the outputs go back into the plan's slots, where the next step reads them. So:

* intermediates pass between steps as the arrays the kernels produced (no copy, no
  re-validation), and temporaries are freed after their last reading step, as in any plan;
* dynamic output shapes propagate: a step's output has the shape its kernel gave it;
* one deadline covers the whole execution: refused at once (MISSED_DEADLINE_PERSISTENT, no
  step run) when the steps' cost estimates together cannot fit, then carried by every step's
  context (each device admits its step against it) and checked by the interpreter between
  steps; the times the steps spend computing add up into ``Timing``;
* each hook of the ``Driver`` protocol maps onto the same hook of every step's driver:
  ``run_now`` (the inline fast path, only when every step may run now; and ``execute_sync``
  outside the scheduler),
  ``drive`` (each step awaited on its device's scheduler).

A step that fails on its device at execution (GENERAL_FAILURE, DEVICE_UNAVAILABLE,
DEAD_OBJECT) runs again on the reference CPU when the compilation may fall back (NNAPI's
partial fallback): its model is prepared there at its first failure, kept, and the execution
goes on with the next step. Each execution tries the step's own device first.

A fenced execution of a partitioned model is one fenced execution: it waits for its fences,
then runs the steps in order, each starting when the previous one has finished (what chaining
the steps by fences would do, without a fence per step); a burst runs its requests through
the same driver.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from typing import Any

from nnrt._log import get_logger
from nnrt.clock import Clock
from nnrt.devices import CpuDevice
from nnrt.errors import MissedDeadlineError, NnrtError
from nnrt.execution import DELEGATED, ExecContext, Plan, PreparedModel, Step, run_plan
from nnrt.execution._plan import _fetcher
from nnrt.framework._partition import PlannedStep
from nnrt.model import Model
from nnrt.types import ErrorStatus, ExecutionPreference, OperationType, Partition, Priority

__all__ = ["PartitionedDriver", "build_plan", "device_name", "partitioned_model"]

_Gen = Generator[int, None, list[Any]]
_log = get_logger("execution")


def build_plan(model: Model, steps: Sequence[tuple[PreparedModel, tuple[int, ...], tuple[int, ...], str]]) -> Plan:
    """The plan of a partitioned ``model``: one DELEGATED step per (prepared step model, input
    operands, output operands, label). Slots are numbered densely over the operands that cross
    a boundary (the model's inputs and outputs, the steps'), so a run copies a short template."""
    slot: dict[int, int] = {}

    def number(i: int) -> int:
        if i not in slot:
            slot[i] = len(slot)
        return slot[i]

    inputs = tuple(number(i) for i in model.input_indexes)
    plan_steps: list[Step] = []
    for k, (prepared, ins, outs, label) in enumerate(steps):
        s_ins = tuple(number(i) for i in ins)
        s_outs = tuple(number(i) for i in outs)
        first = prepared.model.operations[0].type if prepared.model.operations else OperationType.ADD
        step = Step(k, first, label, DELEGATED, s_ins, s_outs, target=prepared)
        step.fetch = _fetcher(s_ins)
        step.out = s_outs[0] if len(s_outs) == 1 else -1
        step.cost_ns = prepared.plan.cost_ns
        plan_steps.append(step)
    outputs = tuple(number(i) for i in model.output_indexes)
    # Free each crossing operand after the last step reading it (never an input or output).
    keep = set(inputs) | set(outputs)
    last: dict[int, int] = {}
    for k, step in enumerate(plan_steps):
        for s in step.outs:
            last.setdefault(s, k)
        for s in step.ins:
            last[s] = k
    frees: dict[int, list[int]] = {}
    for s, k in last.items():
        if s not in keep:
            frees.setdefault(k, []).append(s)
    for k, step in enumerate(plan_steps):
        step.free = tuple(frees.get(k, ()))
    has_cf = any(st.target.plan.has_control_flow for st in plan_steps)
    return Plan(model, [None] * len(slot), inputs, outputs, plan_steps, has_cf)


class PartitionedDriver:
    """Runs a partitioned plan's steps on their devices (see the module docstring)."""

    def __init__(self, clock: Clock, steps: Sequence[PreparedModel], fallback: CpuDevice | None = None) -> None:
        self.clock = clock
        self.name = "+".join(dict.fromkeys(device_name(p) for p in steps))
        self._steps = tuple(steps)
        #: The reference CPU device that re-runs a step its device failed (None: no fallback).
        self._fallback = fallback
        #: Per step index: its model prepared on ``_fallback`` (at its first failure).
        self._twins: dict[int, PreparedModel] = {}

    def __repr__(self) -> str:
        return f"<PartitionedDriver {self.name} steps={len(self._steps)}>"

    def can_run_now(self, plan: Plan) -> bool:
        for p in self._steps:  # noqa: SIM110  # a loop: cheaper than all() on the hot path
            if not p._driver.can_run_now(p.plan):
                return False
        return True

    def runs_inline(self, plan: Plan) -> bool:
        return all(p._driver.runs_inline(p.plan) for p in self._steps)

    def refuse_if_late(self, deadline: float) -> None:
        """The idle-device admission test over the whole execution: MISSED_DEADLINE_PERSISTENT,
        before any step runs, when the steps' admission costs together do not fit before
        ``deadline`` (each step's device then tests its own step again)."""
        cost_s = sum(p.plan.admission_cost_ns for p in self._steps) / 1e9
        if cost_s > deadline - self.clock.now():
            for p in self._steps:
                p.plan.refused()
            raise MissedDeadlineError(
                f"the execution's {len(self._steps)} steps need about {cost_s * 1e3:.3f} ms, more than is left "
                "before its deadline", status=ErrorStatus.MISSED_DEADLINE_PERSISTENT,
            )

    def run_now(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable = "default", priority: Priority = Priority.MEDIUM
    ) -> tuple[list[Any], int]:
        total = 0
        try:
            if ctx.deadline is not None:
                self.refuse_if_late(ctx.deadline)
            # One context for every step: each runs to its end here, where nothing can
            # interrupt it (the inline path's cost per step boundary).
            sub = ExecContext(ctx.clock, ctx.deadline, ctx.loop_timeout)
            while True:
                next(gen)  # DELEGATE: nothing else can stop the partitioned plan's interpreter
                step, args = ctx.handoff
                p: PreparedModel = step.target
                try:
                    ctx.handoff, ns = p._driver.run_now(run_plan(p.plan, args, sub), sub, p.plan, app, priority)
                except NnrtError as err:
                    if not self._may_fall_back(p, err):
                        raise
                    twin = self._twins.get(step.index) or self._twin_sync(step.index, p, err)
                    ctx.handoff, ns = twin._driver.run_now(run_plan(twin.plan, args, sub), sub, twin.plan, app, priority)
                total += ns
        except StopIteration as stop:
            return stop.value, total
        finally:
            gen.close()

    async def drive(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable = "default", priority: Priority = Priority.MEDIUM
    ) -> tuple[list[Any], int]:
        total = 0
        try:
            if ctx.deadline is not None:
                self.refuse_if_late(ctx.deadline)
            while True:
                next(gen)
                step, args = ctx.handoff
                p: PreparedModel = step.target
                sub = ExecContext(ctx.clock, ctx.deadline, ctx.loop_timeout)
                try:
                    ctx.handoff, ns = await p._driver.drive(run_plan(p.plan, args, sub), sub, p.plan, app, priority)
                except NnrtError as err:
                    if not self._may_fall_back(p, err):
                        raise
                    twin = self._twins.get(step.index) or await self._twin(step.index, p, err)
                    sub = ExecContext(ctx.clock, ctx.deadline, ctx.loop_timeout)
                    ctx.handoff, ns = await twin._driver.drive(run_plan(twin.plan, args, sub), sub, twin.plan, app,
                                                               priority)
                total += ns
        except StopIteration as stop:
            return stop.value, total
        finally:
            gen.close()

    # -- CPU fallback at execution time ------------------------------------------------------------

    def _may_fall_back(self, p: PreparedModel, err: NnrtError) -> bool:
        """NNAPI's partial fallback: a step that failed on its device (GENERAL_FAILURE,
        DEVICE_UNAVAILABLE, DEAD_OBJECT; never a missed deadline, a refusal by the scheduler or
        a bad request) runs again on the reference CPU, when the compilation allows it."""
        return self._fallback is not None and p._driver is not self._fallback and err.status in _FALLBACK_STATUSES

    async def _twin(self, k: int, p: PreparedModel, err: NnrtError) -> PreparedModel:
        assert self._fallback is not None
        self._log_fallback(k, p, err)
        twin = await self._fallback.prepare_model(p.model, preference=p.preference, priority=p.priority, app=p.app)
        return self._twins.setdefault(k, twin)

    def _twin_sync(self, k: int, p: PreparedModel, err: NnrtError) -> PreparedModel:
        assert self._fallback is not None
        self._log_fallback(k, p, err)
        twin = self._fallback.prepare_model_sync(p.model, preference=p.preference, priority=p.priority, app=p.app)
        return self._twins.setdefault(k, twin)

    def _log_fallback(self, k: int, p: PreparedModel, err: NnrtError) -> None:
        assert self._fallback is not None
        _log.warning("execution.fallback", step=k, device=device_name(p), to=self._fallback.name,
                     status=err.status.name, error=str(err))


_FALLBACK_STATUSES = frozenset({ErrorStatus.GENERAL_FAILURE, ErrorStatus.DEVICE_UNAVAILABLE, ErrorStatus.DEAD_OBJECT})


def device_name(prepared: PreparedModel) -> str:
    """The name of the device a prepared model runs on."""
    return str(getattr(prepared._driver, "name", type(prepared._driver).__name__))


def partitioned_model(
    model: Model,
    steps: Sequence[tuple[PreparedModel, PlannedStep, str]],
    *,
    fallback: CpuDevice | None = None,
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
    priority: Priority = Priority.MEDIUM,
    app: str = "default",
) -> PreparedModel:
    """The prepared model of ``model`` partitioned into ``steps``: per step, its prepared step
    model, what the partitioner planned for it, and the device that failed to prepare it ("");
    ``fallback``: the reference CPU device re-running a step that fails on its device."""
    prepared = [p for p, _, _ in steps]
    names = [device_name(p) for p in prepared]
    plan = build_plan(model, [(p, st.inputs, st.outputs, f"step {k} on {names[k]}")
                              for k, (p, st, _) in enumerate(steps)])
    result = PreparedModel(PartitionedDriver(prepared[0]._driver.clock, prepared, fallback), model, plan,
                           preference=preference, priority=priority, app=app)
    result._partitions = tuple(Partition(names[k], st.operations, failed) for k, (_, st, failed) in enumerate(steps))
    return result
