"""``SimDevice``: a CPU device whose steps take their modelled time in virtual time.

It *is* a ``CpuDevice``: executions go through the same ``PreparedModel`` (request
validation, deadline checks), the same ``drive`` (admission into the device's ``Scheduler``,
``wait_turn``, ``finish``, late success reported as MISSED_DEADLINE_TRANSIENT) and the same
interpreter generator. Only ``_run_admitted``, the part that runs kernels once the job holds
a compute unit, differs, plus the fast path, which is off (every execution takes time, so
every one is scheduled):

* Every step of a simulated plan is marked heavy and the context says "on the loop", so the
  interpreter yields OFFLOAD before each step, after its own interrupt and deadline checks.
  The driver resumes it; the step's (stub) kernel runs in no virtual time and adds the
  step's cost to ``_cost``; the driver then sleeps that long on the virtual loop. While it
  sleeps, arrivals and timers happen and the scheduler may raise the interrupt flag.
* The interpreter made its checks for the *next* boundary before that sleep, so the driver
  repeats them after it: an interrupt goes to ``Scheduler.checkpoint`` (CONTINUE, YIELD then
  ``wait_turn``, or ABORT), exactly as ``CpuDevice`` does for INTERRUPTED, and a deadline
  that passed during the step fails the execution with MISSED_DEADLINE_TRANSIENT, as the
  interpreter would have. So preemption is wait-based at operation granularity, as on the
  real device.
* Stub kernels return read-only zero arrays of the shapes one real run produced; with
  ``compute`` they run the real kernel too. A step's actual time is its cost divided by the
  device's ``speed``, times a lognormal factor (mean 1, spread ``jitter``) when the model has
  jitter, while the scheduler's estimate stays the plain cost: admission works on estimates.
* The host model (``simulate(..., overheads=True)``, ``nnrt.sim._overhead``): the device
  counts the units held (``holding``). An execution of a model with a host model first
  holds its unit for a hand-off time (validation, admission, the hops to a worker and back)
  drawn, with the device's generator, from the samples of the condition when it gets its
  unit (another unit busy or not). Each step then has two durations, its cost times a ratio
  drawn from the step's samples alone and beside a busy unit, and progresses at the rate of
  the condition of the moment: when another unit is taken or given back mid-step, the
  step's remaining fraction continues at the other rate (so a long execution is slowed only
  for the part that overlaps another). An execution interrupted at a checkpoint first
  holds its unit for the hop back to the loop (the loop decides only once it hears of it,
  as on the real device), then, once it goes on or resumes, for the rest of a hand-off.
  A host model calibrated on the scenario (``nnrt.sim._calibrate``) pairs each wake-up
  sample with the hand-off the same request took: the engine puts it in ``PAIRED`` and the
  execution's first hand-off is that one (late wake-ups and long hand-offs were negatively
  correlated in real runs: a loop that woke late often found the neighbour done).
* Memory: a device's ``memory_mb`` (and ``app_memory_mb``) is the CPU device's own budget,
  charged at preparation (``CpuDevice._reserve``): a model that does not fit fails to
  prepare with RESOURCE_EXHAUSTED_*, and the simulator reports every request of that
  workload with that status.

The device keeps, per (app, priority), what the report needs beyond the outcome each caller
sees: device time, time wasted on executions that then failed, preemptions, time queued;
and per unit, busy time and (when asked for) the timeline of run segments.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Generator, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnrt.clock import Clock
from nnrt.devices import CpuDevice, Restrictions, capabilities_from
from nnrt.errors import InternalError, MissedDeadlineError, NnrtError
from nnrt.execution import INTERRUPTED, ExecContext, Plan, PreparedModel
from nnrt.sched import Action, Job, Policy, Scheduler
from nnrt.sim._models import SimModel, walk_steps
from nnrt.sim._overhead import HostModel
from nnrt.sim._scenario import DeviceSpec
from nnrt.types import ErrorStatus, Priority

__all__ = ["PAIRED", "AccountingDevice", "ClassTally", "SimDevice", "Segment", "device_bytes"]

_Gen = Generator[int, None, list[Any]]

#: The hand-off the running request's first execution takes, set by the engine when its
#: wake-up sample came with one (``HostSamples.paired_s``); None: drawn by condition.
PAIRED: ContextVar[float | None] = ContextVar("nnrt_sim_paired", default=None)


@dataclass(frozen=True, slots=True)
class Segment:
    """One stretch of one execution on one compute unit."""

    unit: int
    start: float
    end: float
    app: str
    priority: Priority
    status: ErrorStatus


@dataclass
class ClassTally:
    """Device-side figures of one (app, priority) class."""

    device_s: float = 0.0
    wasted_s: float = 0.0
    preemptions: int = 0
    queued_s: list[float] = field(default_factory=list)


class AccountingDevice(CpuDevice):
    """A ``CpuDevice`` that keeps the report's device-side figures per (app, priority) class and
    per compute unit (the module docstring). Subclasses record, in ``_ran[id(ctx)]``, each
    execution's job, its device time (None: the time it held units) and its run segments
    ``(unit, start, end)`` once it has run; ``drive`` accounts for them when it ends."""

    #: Step costs are divided by it (simulated devices; 1 on a real one).
    speed: float = 1.0

    def _init_accounting(self, units: int, timeline: bool) -> None:
        self.tallies: dict[tuple[str, Priority], ClassTally] = {}
        self.busy_s = [0.0] * units
        self.timeline: list[Segment] | None = [] if timeline else None
        self._ran: dict[int, tuple[Job | None, float | None, list[tuple[int, float, float]]]] = {}

    async def drive(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable = "default", priority: Priority = Priority.MEDIUM
    ) -> tuple[list[Any], int]:
        status = ErrorStatus.NONE
        try:
            return await super().drive(gen, ctx, plan, app, priority)
        except NnrtError as err:
            status = err.status
            raise
        finally:
            self._account(ctx, str(app), priority, status)

    def _account(self, ctx: ExecContext, app: str, priority: Priority, status: ErrorStatus) -> None:
        ran = self._ran.pop(id(ctx), None)
        if ran is None:
            return  # refused or expired before it ran
        job, spent, segments = ran
        if spent is None:
            spent = sum(end - start for _, start, end in segments)
        tally = self.tallies.get((app, priority))
        if tally is None:
            tally = self.tallies[app, priority] = ClassTally()
        tally.device_s += spent
        if status is not ErrorStatus.NONE:
            tally.wasted_s += spent
        if job is not None:
            tally.preemptions += job.preemptions
            if job.finished is not None:
                tally.queued_s.append(max(0.0, job.finished - job.arrival - spent))
        for unit, start, end in segments:
            self.busy_s[unit] += end - start
            if self.timeline is not None:
                self.timeline.append(Segment(unit, start, end, app, priority, status))


class SimDevice(AccountingDevice):
    """A simulated device (see the module docstring). Use from a ``VirtualTimeLoop``."""

    def __init__(self, spec: DeviceSpec, clock: Clock, policy: Policy, *, seed: int | np.random.SeedSequence,
                 compute: bool = False, timeline: bool = False) -> None:
        super().__init__(spec.name, clock=clock, compute_units=spec.compute_units, blas_threads=None, calibrate=False,
                         memory_budget=device_bytes(spec.memory_mb), app_memory_limit=device_bytes(spec.app_memory_mb),
                         switch_interval_s=None)
        self.scheduler = Scheduler(clock, spec.compute_units)
        self.scheduler.policy = policy
        self.spec = spec
        self.speed = spec.speed
        # What the framework partitions by: the limits the scenario declares, and a performance
        # figure relative to the CPU of 1 / speed (``nnrt.sim._partitioned``).
        if spec.restricted:
            self.restrictions = Restrictions.of(spec.feature_level or 7, spec.operations, spec.operand_types)
            self.feature_level = self.restrictions.feature_level
        self._capabilities = capabilities_from(1.0 / spec.speed)
        self.compute = compute
        self.rng = np.random.default_rng(seed)
        self._init_accounting(spec.compute_units, timeline)
        self._cost = 0.0
        self._plans: dict[str, Plan] = {}
        self._exact: dict[int, float] = {}
        self._host: dict[int, HostModel] = {}
        #: Units held by executions right now (the host model's condition).
        self.holding = 0
        # The host model: the running execution's ratio rows (alone, busy), the busy-condition
        # time its step charges, and the steps in progress waiting for a change of condition.
        self._rows: tuple[tuple[tuple[float, ...], ...], tuple[tuple[float, ...], ...]] = ((), ())
        self._cost_busy = 0.0
        self._changes: list[asyncio.Future[None]] = []
        skip = getattr(clock, "skip_to", None)
        self._skip_to: Callable[[float], bool] = skip if callable(skip) else _never

    # -- preparation ----------------------------------------------------------------------------

    def prepare(self, sim: SimModel, app: str, priority: Priority) -> PreparedModel:
        """A prepared model of ``sim`` for ``app`` at ``priority`` (one plan per model and device).

        Raises RESOURCE_EXHAUSTED_* when the model does not fit the device's memory budget."""
        nbytes = self._reserve(sim.model, app)
        plan = self._plans.get(sim.name)
        if plan is None:
            plan = self._plans[sim.name] = self._compile_sim(sim)
        return self._held(PreparedModel(self, sim.model, plan, priority=priority, app=app), nbytes)

    def _compile_sim(self, sim: SimModel) -> Plan:
        plan = sim.compile()
        plan.set_inline_limit(-1.0)  # every step heavy: OFFLOAD before each (see the module doc)
        stub = not (self.compute or plan.has_control_flow)
        ratios = sim.host is not None and bool(sim.host.alone.ratios)
        for k, (step, base, out) in enumerate(zip(walk_steps(plan), sim.base_costs_ns, sim.outputs)):
            step.cost_ns = base / self.speed
            if step.fn is not None:
                step.fn = self._timed(step.fn, step.cost_ns / 1e9, sim.jitter, out if stub else None, k if ratios else -1)
        if not (plan.has_control_flow or sim.jitter or sim.host):
            self._exact[id(plan)] = sum(s.cost_ns / 1e9 for s in plan.steps)
        if sim.host is not None:
            self._host[id(plan)] = sim.host
        return plan

    def _timed(self, fn: Any, cost_s: float, jitter: float, stub_out: Any, index: int = -1) -> Any:
        """``fn`` charging its step's time to ``_cost``: ``cost_s``, times a lognormal factor with
        ``jitter``, times the running execution's host ratio for step ``index`` (>= 0)."""
        dev = self
        if jitter > 0:
            sigma = math.sqrt(math.log1p(jitter * jitter))
            mu = -sigma * sigma / 2

            def charge() -> None:
                factor = cost_s * float(dev.rng.lognormal(mu, sigma))
                if index < 0:
                    dev._cost += factor
                    return
                alone, busy = dev._rows[0][index], dev._rows[1][index]
                u = int(dev.rng.integers(1 << 30))
                dev._cost += factor * alone[u % len(alone)]
                dev._cost_busy += factor * busy[u % len(busy)]
        elif index >= 0:

            def charge() -> None:
                alone, busy = dev._rows[0][index], dev._rows[1][index]
                u = int(dev.rng.integers(1 << 30))
                dev._cost += cost_s * alone[u % len(alone)]
                dev._cost_busy += cost_s * busy[u % len(busy)]
        else:

            def charge() -> None:
                dev._cost += cost_s

        if stub_out is not None:

            def stub(*_args: Any) -> Any:
                charge()
                return stub_out

            return stub

        def computed(*args: Any) -> Any:
            charge()
            return fn(*args)

        return computed

    # -- Driver protocol --------------------------------------------------------------------------

    def runs_inline(self, plan: Plan) -> bool:
        return False  # every execution takes virtual time, so every one goes through the scheduler

    async def _run_admitted(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, job: Job, granted: int
    ) -> tuple[list[Any], int, int]:
        """Run a job holding a unit, one step at a time in virtual time (see the module doc).
        Returns (outputs, ns of steps, ns holding a unit), both in virtual time."""
        clock = self.clock
        ctx.on_loop = True
        spent = 0.0
        exact = self._exact.get(id(plan))  # its time, when known in advance (no jitter, no control flow)
        segments: list[tuple[int, float, float]] = []
        on: list[Any] = [job.unit, clock.now()]  # the unit held (None: none) and since when
        host = self._host.get(id(plan))
        rows = (host.alone.ratios, host.busy.ratios) if host is not None and host.alone.ratios else None
        draw = 0  # which hand-off samples the execution takes (see the module doc)
        self._hold(+1)
        try:
            if host is not None:  # validation, admission, hand-offs (see the module doc)
                draw = int(self.rng.integers(1 << 30))
                spent += await self._handoff(host, draw)
            reason = next(gen)
            while True:
                if reason == INTERRUPTED:
                    spent += await self._checkpoint(job, spent, segments, on, host, draw)
                    reason = next(gen)
                    continue
                # OFFLOAD: a step is about to run; its kernel takes no virtual time, its cost does.
                self._cost = self._cost_busy = 0.0
                if rows is not None:
                    self._rows = rows
                elif exact is not None and not ctx.interrupt:
                    end = clock.now() + exact - spent
                    if (ctx.deadline is None or end < ctx.deadline) and self._skip_to(end):
                        # Nothing can happen before the execution ends: run the rest in one go.
                        ctx.on_loop = False
                        try:
                            reason = next(gen)
                        except StopIteration as stop:
                            spent += self._cost
                            held = sum(e - b for _, b, e in segments) + clock.now() - on[1]
                            return stop.value, round(spent * 1e9), round(held * 1e9)
                        raise InternalError("the interpreter stopped in a plan that runs in one go")
                try:
                    reason = next(gen)
                except StopIteration as stop:
                    spent += await (self._spend() if rows is None else self._progress())
                    held = sum(end - start for _, start, end in segments) + clock.now() - on[1]
                    return stop.value, round(spent * 1e9), round(held * 1e9)
                spent += await (self._spend() if rows is None else self._progress())
                # The interpreter checked the next boundary before this step's time passed: again.
                if ctx.interrupt:
                    spent += await self._checkpoint(job, spent, segments, on, host, draw)
                if ctx.deadline is not None and clock.now() >= ctx.deadline:
                    raise MissedDeadlineError("deadline passed during a step", status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
        finally:
            if on[0] is not None:
                self._hold(-1)
                segments.append((on[0], on[1], clock.now()))
            self._ran[id(ctx)] = (job, spent, segments)

    async def _handoff(self, host: HostModel, draw: int) -> float:
        """Hold the unit for a measured hand-off time of the current condition (or the one
        ``PAIRED`` gives the request)."""
        paired = PAIRED.get()
        if paired is not None:
            PAIRED.set(None)
            self._cost = paired
        else:
            handoff = host.pick(self.holding > 1).handoff_s
            self._cost = handoff[draw % len(handoff)]
        return await self._spend()

    def _hold(self, delta: int) -> None:
        """A unit was taken (+1) or given back (-1): steps in progress re-read their condition."""
        self.holding += delta
        if self._changes:
            changes, self._changes = self._changes, []
            for fut in changes:
                if not fut.done():
                    fut.set_result(None)

    async def _progress(self) -> float:
        """Let a step's time pass under the host model: ``_cost`` seconds if no other unit is busy
        throughout, ``_cost_busy`` if one is throughout, pro rata when that changes mid-step."""
        durations = (self._cost, self._cost_busy)
        clock = self.clock
        start = clock.now()
        done = 0.0  # fraction of the step done
        loop: asyncio.AbstractEventLoop | None = None
        while True:
            duration = durations[self.holding > 1]
            need = (1.0 - done) * duration
            now = clock.now()
            if need <= 0.0 or self._skip_to(now + need):
                return clock.now() - start
            loop = loop or asyncio.get_running_loop()
            change: asyncio.Future[None] = loop.create_future()
            self._changes.append(change)
            timer = loop.call_later(need, _resolve, change)
            try:
                await change
            finally:
                timer.cancel()
            elapsed = clock.now() - now
            if elapsed >= need:
                return clock.now() - start
            done += elapsed / duration

    async def _spend(self) -> float:
        """Let the step's time pass: skip the clock forward if nothing can happen meanwhile."""
        cost = self._cost
        if cost > 0 and not self._skip_to(self.clock.now() + cost):
            await asyncio.sleep(cost)
        return cost

    async def _checkpoint(self, job: Job, spent: float, segments: list[tuple[int, float, float]], on: list[Any],
                          host: HostModel | None = None, draw: int = 0) -> float:
        """``CpuDevice``'s answer to INTERRUPTED, keeping the segments on units (and ``holding``) up
        to date. Returns the host model's hand-off time spent (0 without one; module doc)."""
        sched = self.scheduler
        extra = 0.0
        if host is not None:  # the hop back to the loop, holding the unit
            self._cost = host.pick(self.holding > 1).split(draw + 1)[0]
            extra = await self._spend()
        decision = sched.checkpoint(job, max(0.0, job.cost - spent - extra))
        if decision.action is Action.CONTINUE:
            return extra if host is None else extra + await self._hop(host, draw + 1)
        now = self.clock.now()
        segments.append((on[0], on[1], now))
        on[0] = None
        self._hold(-1)
        if decision.action is Action.ABORT:
            raise MissedDeadlineError("aborted at a checkpoint: the deadline cannot be met", status=decision.status)
        await sched.wait_turn(job)
        on[0], on[1] = job.unit, self.clock.now()
        self._hold(+1)
        return extra if host is None else extra + await self._hop(host, draw + 1)

    async def _hop(self, host: HostModel, draw: int) -> float:
        """Hold the unit for the rest of a measured hand-off of the current condition."""
        self._cost = host.pick(self.holding > 1).split(draw)[1]
        return await self._spend()


def device_bytes(mb: float | None) -> int | None:
    """A scenario's megabytes as the CPU device's byte budget (None: no budget)."""
    return None if mb is None else int(mb * 2**20)


def _never(_target: float) -> bool:
    return False


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
