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

A fenced execution of a partitioned model is one fenced execution: it waits for its fences,
then runs the steps in order, each starting when the previous one has finished (what chaining
the steps by fences would do, without a fence per step); a burst runs its requests through
the same driver.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from typing import Any

from nnrt.clock import Clock
from nnrt.errors import MissedDeadlineError
from nnrt.execution import DELEGATED, ExecContext, Plan, PreparedModel, Step, run_plan
from nnrt.execution._plan import _fetcher
from nnrt.framework._partition import PlannedStep
from nnrt.model import Model
from nnrt.types import ErrorStatus, ExecutionPreference, OperationType, Partition, Priority

__all__ = ["PartitionedDriver", "build_plan", "device_name", "partitioned_model"]

_Gen = Generator[int, None, list[Any]]


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

    def __init__(self, clock: Clock, steps: Sequence[PreparedModel]) -> None:
        self.clock = clock
        self.name = "+".join(dict.fromkeys(device_name(p) for p in steps))
        self._steps = tuple(steps)

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
            # ``_next_step`` inlined, one context for every step: each runs to its end here,
            # where nothing can interrupt it (the inline path's cost per step boundary).
            sub = ExecContext(ctx.clock, ctx.deadline, ctx.loop_timeout)
            while True:
                next(gen)
                step, args = ctx.handoff
                p: PreparedModel = step.target
                ctx.handoff, ns = p._driver.run_now(run_plan(p.plan, args, sub), sub, p.plan, app, priority)
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
                p, step_gen, sub = _next_step(gen, ctx)
                ctx.handoff, ns = await p._driver.drive(step_gen, sub, p.plan, app, priority)
                total += ns
        except StopIteration as stop:
            return stop.value, total
        finally:
            gen.close()


def _next_step(gen: _Gen, ctx: ExecContext) -> tuple[PreparedModel, _Gen, ExecContext]:
    """Resume the partitioned plan up to its next step (StopIteration: it is done); that step's
    prepared model, its interpreter on the step's inputs, and its context: the execution's
    clock, deadline and loop timeout (the partitioned plan yields only DELEGATE: nothing
    interrupts it, and its steps are never heavy)."""
    next(gen)
    step, args = ctx.handoff
    p: PreparedModel = step.target
    sub = ExecContext(ctx.clock, ctx.deadline, ctx.loop_timeout)
    return p, run_plan(p.plan, args, sub), sub


def device_name(prepared: PreparedModel) -> str:
    """The name of the device a prepared model runs on."""
    return str(getattr(prepared._driver, "name", type(prepared._driver).__name__))


def partitioned_model(
    model: Model,
    steps: Sequence[tuple[PreparedModel, PlannedStep, str]],
    *,
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
    priority: Priority = Priority.MEDIUM,
    app: str = "default",
) -> PreparedModel:
    """The prepared model of ``model`` partitioned into ``steps``: per step, its prepared step
    model, what the partitioner planned for it, and the device that failed to prepare it ("")."""
    prepared = [p for p, _, _ in steps]
    names = [device_name(p) for p in prepared]
    plan = build_plan(model, [(p, st.inputs, st.outputs, f"step {k} on {names[k]}")
                              for k, (p, st, _) in enumerate(steps)])
    result = PreparedModel(PartitionedDriver(prepared[0]._driver.clock, prepared), model, plan,
                           preference=preference, priority=priority, app=app)
    result._partitions = tuple(Partition(names[k], st.operations, failed) for k, (_, st, failed) in enumerate(steps))
    return result
