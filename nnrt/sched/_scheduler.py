"""The scheduler's thin async layer: carries out ``Policy`` decisions on an event loop.

One ``Scheduler`` per device, used from one event loop. The device's drive loop calls it:

* ``admit(job, ctx)`` when an execution arrives: the policy admits it or refuses it (the
  refusal is raised as the matching ``NnrtError``), and every waiting job gets a future;
* ``await wait_turn(job)`` until the policy starts the job on a compute unit (or fails it:
  expired in the queue, which raises MISSED_DEADLINE_TRANSIENT at the deadline, promptly);
* ``checkpoint(job, remaining_s)`` when the interpreter stopped because its interrupt flag
  was set: CONTINUE, YIELD (then ``wait_turn`` again; the context stays in the interpreter's
  frames) or ABORT;
* ``finish(job, status)`` / ``withdraw(job)`` at the end.

After every event the layer polls the policy once (``_pump``): it resolves the futures of the
jobs to start or fail, sets the interrupt flag of running jobs that should yield (so they stop
at their next operation boundary), and arms a single timer at the next queued deadline, on the
loop for a real clock or on a ``VirtualClock`` (whose ``advance`` fires it) in tests and
simulations. The policy never sees a clock or a future: this module is the only glue.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Hashable
from typing import Any, Protocol

from nnrt._aio import Future, call_later, create_future
from nnrt._log import get_logger, vlog_enabled
from nnrt.clock import Cancellable, Clock, VirtualClock, call_at, perf_ns
from nnrt.errors import error_for
from nnrt.sched._decisions import Action, Decision
from nnrt.sched._job import Job
from nnrt.sched._policy import Policy
from nnrt.sched._stats import ClassStatistics, SchedulerStatistics
from nnrt.types import ErrorStatus, Priority

__all__ = ["Interruptible", "Scheduler"]

#: How early the expiry timer wakes before a deadline on a real clock (see ``_arm``).
_SPIN_S = 0.0011

_log = get_logger("manager")


class Interruptible(Protocol):
    """What the scheduler needs of a running execution: a flag it can raise."""

    interrupt: bool


class _Ticket:
    """The async side of one job: its execution context, the future it waits on, and when it
    was last granted a unit (``perf_ns``: the service time a cost model must learn starts
    there, not when the waiting coroutine gets to run)."""

    __slots__ = ("ctx", "future", "granted_ns")

    def __init__(self, ctx: Interruptible) -> None:
        self.ctx = ctx
        self.future: Future[None] | None = None
        self.granted_ns = 0


class Scheduler:
    """Per-device QoS scheduling on one event loop (see the module docstring)."""

    def __init__(self, clock: Clock, units: int = 1, **policy_options: Any) -> None:
        self.clock = clock
        self.policy = Policy(units, **policy_options)
        self._timer: Cancellable | None = None
        self._timer_at: float | None = None
        # Executions that ran on the idle fast path (never queued): counted for statistics.
        self._fast: defaultdict[tuple[Hashable, Priority], int] = defaultdict(int)
        self._active = 0
        # Real event loops wait in whole milliseconds; clocks whose timers land exactly (virtual
        # time) need no early wake-up, and must not get one: a virtual loop that always has a
        # ready callback never moves its time.
        precise = isinstance(clock, VirtualClock) or bool(getattr(clock, "precise_timers", False))
        self._spin_s = 0.0 if precise else _SPIN_S

    # -- the fast path ----------------------------------------------------------------------------

    def idle(self) -> bool:
        """True when no job is admitted: a cheap execution may run at once, inline."""
        return self._active == 0

    def alone(self) -> bool:
        """True when exactly one job is admitted: the caller's own, nothing else waits or runs."""
        return self._active == 1

    def ran_fast(self, app: Hashable, priority: Priority) -> None:
        """Count an execution that ran on the idle fast path (it never needed the policy)."""
        self._fast[app, priority] += 1

    # -- events -----------------------------------------------------------------------------------

    def admit(self, job: Job, ctx: Interruptible) -> None:
        """Submit ``job``; raise the policy's refusal as an ``NnrtError``."""
        now = self.clock.now()
        job.owner = _Ticket(ctx)
        admission = self.policy.submit(job, now)
        if not admission:
            if vlog_enabled("manager"):
                _log.debug("manager.refused", job=job.id, app=job.app, priority=job.priority.name,
                           status=admission.status.name, reason=admission.reason)
            raise error_for(admission.status, f"not admitted: {admission.reason}" if admission.reason else "not admitted")
        self._active += 1
        self._pump(now)

    async def wait_turn(self, job: Job) -> int:
        """Wait until ``job`` runs on a unit; raises if it fails while waiting. Returns when the
        unit was granted (``perf_ns``)."""
        ticket: _Ticket = job.owner  # type: ignore[assignment]
        if job.state.value == "running" and ticket.future is None:
            return ticket.granted_ns or perf_ns()
        fut = ticket.future
        if fut is None:
            fut = ticket.future = create_future()
        try:
            await fut
        except BaseException:  # cancelled (asyncio or trio): it no longer wants the unit
            self.withdraw(job)
            raise
        finally:
            ticket.future = None
        return ticket.granted_ns

    def checkpoint(self, job: Job, remaining_s: float) -> Decision:
        """The job stopped at an operation boundary because it was interrupted."""
        ticket: _Ticket = job.owner  # type: ignore[assignment]
        ticket.ctx.interrupt = False
        now = self.clock.now()
        decision = self.policy.checkpoint(job, now, remaining_s)
        if decision.action is not Action.CONTINUE and vlog_enabled("manager"):
            _log.debug(f"manager.{decision.action.value}", job=job.id, app=job.app, priority=job.priority.name,
                       successor=decision.successor.id if decision.successor else None)
        if decision.action is Action.ABORT:
            self._active -= 1
        elif decision.successor is not None:
            self._resolve(decision.successor, None)  # the unit was handed over to it directly
        self._pump(now)
        return decision

    def finish(self, job: Job, status: ErrorStatus = ErrorStatus.NONE) -> ErrorStatus:
        """A running job ended with ``status``; returns the status to report (late success fails)."""
        now = self.clock.now()
        if job.state.value != "running":
            return status if status is not ErrorStatus.NONE else job.status
        reported = self.policy.complete(job, now, status)
        self._active -= 1
        self._pump(now)
        return reported

    def withdraw(self, job: Job) -> None:
        """Cancel a waiting or running job (its task was cancelled); frees its unit."""
        now = self.clock.now()
        if self.policy.cancel(job, now):
            self._active -= 1
            self._pump(now)

    def statistics(self) -> SchedulerStatistics:
        """The policy's counters, with executions of the idle fast path counted as completed."""
        stats = self.policy.statistics()
        if not self._fast:
            return stats
        classes = list(stats.classes)
        seen = set()
        for k, cls in enumerate(classes):
            key = (cls.app, cls.priority)
            if key in self._fast:
                classes[k] = dataclasses.replace(cls, completed=cls.completed + self._fast[key])
                seen.add(key)
        for (app, priority), n in self._fast.items():
            if (app, priority) not in seen:
                classes.append(_empty_class(app, priority, n))
        return dataclasses.replace(stats, classes=tuple(classes))

    # -- carrying out decisions -------------------------------------------------------------------

    def _pump(self, now: float) -> None:
        actions = self.policy.poll(now)
        for job in actions.start:
            self._resolve(job, None)
        for job in actions.failed:
            self._active -= 1
            self._resolve(job, error_for(job.status, "the deadline passed while the execution was queued"))
        for job in actions.interrupt:
            ticket: _Ticket = job.owner  # type: ignore[assignment]
            ticket.ctx.interrupt = True
        self._arm(actions.next_expiry)

    @staticmethod
    def _resolve(job: Job, error: BaseException | None) -> None:
        ticket: _Ticket = job.owner  # type: ignore[assignment]
        if error is None:
            ticket.granted_ns = perf_ns()
        fut = ticket.future
        if fut is None:
            if error is not None:
                # Not waiting right now (between admission and wait_turn): park the outcome.
                fut = ticket.future = create_future()
                fut.set_exception(error)
            return
        if not fut.done():
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)

    def _arm(self, when: float | None) -> None:
        if when == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, when
        if when is None:
            return
        # Event loops wait in whole milliseconds (epoll), so a timer can fire up to 1 ms late:
        # on a real clock wake up _SPIN_S early and re-check each loop iteration until it is due.
        self._timer = call_at(self.clock, when - self._spin_s, self._on_timer)

    def _on_timer(self) -> None:
        when = self._timer_at
        if self._spin_s and when is not None and self.clock.now() < when:
            self._timer = call_later(0.0, self._on_timer)
            return
        self._timer = self._timer_at = None
        self._pump(self.clock.now())


def _empty_class(app: Hashable, priority: Priority, completed: int) -> ClassStatistics:
    return ClassStatistics(app, priority, 0, 0, completed, 0, 0, 0, 0)
