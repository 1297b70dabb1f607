"""Real-clock runs of a scenario: the simulator's yardstick.

``simulate(scenario, real=True)`` (``nnrt simulate --real``) runs the same apps, arrivals and
report as a simulation, but on an ordinary asyncio loop on the real clock, with a real
``CpuDevice`` per scenario device: real kernels on its worker threads, real hand-offs, real
interference. Comparing the two (``benchmarks/fidelity.py``) says how far the simulator's
cost model can be trusted.

``RealDevice`` is that ``CpuDevice`` (its own drive path, scheduler and calibration,
untouched) with the simulator's bookkeeping around it: a ``Scheduler`` that records when each
job takes and gives back a compute unit, which gives the run segments per unit (utilisation,
timeline), and per class the time executions held units (``device_s``; it includes the
hand-offs), the time wasted on executions that then failed, preemptions and time queued.
Executions on the idle fast path hold no unit in the scheduler's eyes; they are counted on
unit 0 for the time they ran.

A real run can only honour what is real: a device's ``speed`` must be 1, and a model's
``cost_ms``, ``step_costs_us`` and ``jitter`` cannot apply (the kernels take what they take),
so ``check_real`` rejects them, naming the field.

For the scenario-calibrated host model (``nnrt.sim._calibrate``) a real run can record, per
request, how it went on the device: the engine sets ``CURRENT`` to a ``Request`` in the
request's task, and the device fills in when it first got a unit, whether another unit was
held then, how long it waited for units, and whether it was preempted.
"""

from __future__ import annotations

from collections.abc import Hashable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from nnrt.clock import Clock
from nnrt.errors import NnrtError
from nnrt.execution import ExecContext, Plan, PreparedModel
from nnrt.sched import Action, Decision, Job, Policy, Scheduler
from nnrt.sim._device import AccountingDevice, _Gen, device_bytes
from nnrt.sim._models import SimModel
from nnrt.sim._scenario import DeviceSpec, Scenario, ScenarioError
from nnrt.types import ErrorStatus, Priority

__all__ = ["CURRENT", "RealDevice", "Request", "check_real"]


@dataclass(slots=True)
class Request:
    """What the device saw of one request of a recording real run (module docstring)."""

    #: When it first got a unit (the run's clock; None: it never did).
    granted: float | None = None
    #: Another unit was held when it got its unit.
    busy: bool = False
    #: Time spent waiting for a unit (queued, and again after a preemption).
    waited_s: float = 0.0
    preempted: bool = False


#: The ``Request`` the running task serves (None: not recording).
CURRENT: ContextVar[Request | None] = ContextVar("nnrt_sim_request", default=None)


def check_real(scenario: Scenario) -> None:
    """Raise ``ScenarioError`` naming the first field a real-clock run cannot honour."""
    for d in scenario.devices:
        if d.speed != 1.0:
            raise ScenarioError(f"devices.{d.name}.speed: must be 1 in a real-clock run (the real CPU runs at its own "
                                f"speed), not {d.speed:g}")
    for m in scenario.models:
        for key, value in (("cost_ms", m.cost_ms), ("step_costs_us", m.step_costs_us), ("jitter", m.jitter or None)):
            if value is not None:
                raise ScenarioError(f"models.{m.name}.{key}: cannot apply in a real-clock run (real kernels take "
                                    "the time they take); remove it")


class _TracingScheduler(Scheduler):
    """A ``Scheduler`` that records, per job, the stretches it held a compute unit."""

    def __init__(self, clock: Clock, units: int) -> None:
        super().__init__(clock, units)
        self.segments: dict[int, list[tuple[int, float, float]]] = {}
        self._open: dict[int, tuple[int, float]] = {}

    def _close(self, job: Job) -> None:
        held = self._open.pop(job.id, None)
        if held is not None:
            self.segments.setdefault(job.id, []).append((held[0], held[1], self.clock.now()))

    async def wait_turn(self, job: Job) -> int:
        before = self.clock.now()
        granted = await super().wait_turn(job)
        now = self.clock.now()
        if job.id not in self._open and job.unit is not None:
            self._open[job.id] = (job.unit, now)
        rec = CURRENT.get()
        if rec is not None:
            rec.waited_s += now - before
            if rec.granted is None:
                rec.granted, rec.busy = now, len(self._open) > 1
        return granted

    def checkpoint(self, job: Job, remaining_s: float) -> Decision:
        decision = super().checkpoint(job, remaining_s)
        if decision.action is not Action.CONTINUE:
            self._close(job)
            rec = CURRENT.get()
            if rec is not None:
                rec.preempted = True
        return decision

    def finish(self, job: Job, status: ErrorStatus = ErrorStatus.NONE) -> ErrorStatus:
        self._close(job)
        return super().finish(job, status)

    def withdraw(self, job: Job) -> None:
        self._close(job)
        super().withdraw(job)


class RealDevice(AccountingDevice):
    """A real ``CpuDevice`` keeping the simulator's per-class figures (module docstring)."""

    def __init__(self, spec: DeviceSpec, clock: Clock, policy: Policy, *, timeline: bool = False) -> None:
        super().__init__(f"nnrt-real-{spec.name}", clock=clock, compute_units=spec.compute_units,
                         memory_budget=device_bytes(spec.memory_mb), app_memory_limit=device_bytes(spec.app_memory_mb),
                         tune_process=True)
        self.name = spec.name
        self.scheduler = _TracingScheduler(clock, spec.compute_units)
        self.scheduler.policy = policy
        self.spec = spec
        self.speed = spec.speed
        self._init_accounting(spec.compute_units, timeline)

    async def prepare(self, sim: SimModel, app: str, priority: Priority) -> PreparedModel:
        """Prepare ``sim``'s model for real (compiled and calibrated on this machine)."""
        return await self.prepare_model(sim.model, priority=priority, app=app)

    def run_now(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable = "default", priority: Priority = Priority.MEDIUM
    ) -> tuple[list[Any], int]:
        start = self.clock.now()
        rec = CURRENT.get()
        if rec is not None and rec.granted is None:  # the fast path: the device is idle
            rec.granted = start
        status = ErrorStatus.NONE
        try:
            return super().run_now(gen, ctx, plan, app, priority)
        except NnrtError as err:
            status = err.status
            raise
        finally:
            # Accounted here: ``PreparedModel.execute`` calls the fast path without ``drive``.
            self._ran[id(ctx)] = (None, None, [(0, start, self.clock.now())])
            self._account(ctx, str(app), priority, status)

    async def _run_admitted(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, job: Job, granted: int
    ) -> tuple[list[Any], int, int]:
        sched = self.scheduler
        assert isinstance(sched, _TracingScheduler)
        try:
            return await super()._run_admitted(gen, ctx, plan, job, granted)
        finally:
            # The list is completed when the job finishes (after this returns), before ``_account``.
            self._ran[id(ctx)] = (job, None, sched.segments.setdefault(job.id, []))

    def _account(self, ctx: ExecContext, app: str, priority: Priority, status: ErrorStatus) -> None:
        ran = self._ran.get(id(ctx))
        if ran is not None and ran[0] is not None:
            sched = self.scheduler
            assert isinstance(sched, _TracingScheduler)
            sched._close(ran[0])  # failed jobs may still hold their open stretch
            sched.segments.pop(ran[0].id, None)
        super()._account(ctx, app, priority, status)
