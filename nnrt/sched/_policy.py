"""The scheduler's decisions, as a pure state machine: who runs, who waits, who is refused.

``Policy`` holds the jobs of one device and answers the questions an async layer asks at each
event: admit this job? (``submit``), which job takes a free unit? (``next_to_run``), must this
running job stop here? (``checkpoint``), which waiting jobs are past saving? (``expire``), when
must I look again? (``next_expiry``), whom should I interrupt? (``preemption_targets``).
Nothing here awaits, logs or reads a clock: every call is given ``now``, so the same code runs
on a monotonic clock and in a virtual-time simulation, and is tested with plain function calls.

The rules, and why:

* **Apps are isolated.** NNAPI priorities are relative within one app, so priority and
  deadline preemption only happen between jobs of the same app. Across apps a free unit goes
  to the app with the least device time per unit of weight (``weighted``, a virtual-time fair
  queue; the default, so an app of short requests beside one of long executions gets its
  share of the *time*, not one turn per long execution), or to the least recently served app
  with waiting work (``round_robin``). A running job is never stopped for another app's sake.
* **Within an app** a class is one priority. Higher (effective) priority first; within a class,
  earliest deadline first, then first come first served. Jobs without a deadline come last.
* **Aging bounds starvation.** A class whose jobs wait without any of them running rises one
  level per ``aging_s`` waited (LOW to MEDIUM to HIGH), and at equal level a raised class goes
  before a native one. A job dispatched while raised keeps the level until it leaves its unit,
  so it finishes; a job preempted while raised keeps its credit. Aging applies to whole classes,
  never to single jobs, so the order inside a class stays pure EDF.
* **Admission is an EDF demand test.** All waiting and running jobs are released, so EDF runs
  them in deadline order and job k finishes at ``now`` plus the work ordered before it (higher
  classes of the app, then its own class in EDF order). The new job is refused if it would
  miss, or would make an admitted job miss that would otherwise make it. For one app, one
  priority and one unit this is exact: it never refuses a feasible set and never admits a job
  that makes another miss. With several units or apps it is an estimate (work divides over the
  units; another app takes at most its fair share of the time, and at most the work it has, but
  at least the rest of its running executions, which are never stopped for another app). Work
  that cannot be preempted counts too: a job of the app that the new one would preempt holds
  its unit until its next checkpoint, up to its longest step (``Job.step``).
* **Nothing succeeds late.** A running job whose deadline has passed, or (``abort_predicted``)
  that cannot finish its remaining estimate in time, is aborted at its next checkpoint; a
  waiting one fails as soon as ``expire`` sees it; ``complete`` after the deadline reports
  MISSED_DEADLINE_TRANSIENT, not success; a job that cannot make it is never dispatched: one
  dispatch test (``_startable``) decides for a free unit and a unit handed over at a checkpoint.

The answers (``Decision``, ``Admission``, ``Actions``) and the per-app and per-class records
live in ``_decisions``; this module is the rules.

The async layer's loop: after every event (submit, checkpoint YIELD/ABORT, complete, cancel,
timer) call ``poll(now)`` (or its parts: ``expire``, ``next_to_run`` until ``None``, ``expire``
again, ``preemption_targets``), start the jobs it returns, fail the failed ones, set the
interrupt flag of the targets so they reach ``checkpoint`` soon, and arm one timer at
``next_expiry()``.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right, insort
from collections.abc import Hashable, Mapping
from typing import Literal

from nnrt.errors import InternalError
from nnrt.sched._decisions import (
    _NOTHING,
    ADMITTED,
    CONTINUE,
    Action,
    Actions,
    Admission,
    Decision,
    _App,
    _Class,
    _Key,
    _order,
    _seq,
)
from nnrt.sched._job import Job, JobState, _Event
from nnrt.sched._stats import ClassStatistics, SchedulerStatistics
from nnrt.types import ErrorStatus, Priority

__all__ = ["ADMITTED", "CONTINUE", "Action", "Actions", "Admission", "Decision", "Policy"]

_INF = math.inf
_HIGHEST = max(Priority)


class Policy:
    """The scheduling policy of one device with ``units`` compute units.

    ``fairness`` shares units across apps: ``"weighted"`` (the default: device time in
    proportion to ``app_weights``, default weight ``default_weight``) or ``"round_robin"``
    (least recently served app first). ``aging`` (default on) raises a starving class one level per
    ``aging_s`` seconds. ``max_queued_per_app`` bounds an app's waiting jobs (None: no bound).
    ``abort_predicted`` fails jobs whose remaining estimate cannot fit before their deadline,
    not only those whose deadline has passed.
    """

    def __init__(
        self,
        units: int = 1,
        *,
        app_weights: Mapping[Hashable, float] | None = None,
        default_weight: float = 1.0,
        fairness: Literal["round_robin", "weighted"] = "weighted",
        aging: bool = True,
        aging_s: float = 0.25,
        max_queued_per_app: int | None = 256,
        abort_predicted: bool = True,
    ) -> None:
        if units < 1:
            raise ValueError(f"a device needs at least one unit, not {units}")
        if fairness not in ("round_robin", "weighted"):
            raise ValueError(f"fairness must be 'round_robin' or 'weighted', not {fairness!r}")
        if not aging_s > 0:
            raise ValueError(f"aging_s must be > 0, not {aging_s!r}")
        weights = dict(app_weights or {})
        for app, w in [*weights.items(), ("default", default_weight)]:
            if not (w > 0 and math.isfinite(w)):
                raise ValueError(f"weight of app {app!r} must be a finite number > 0, not {w!r}")
        if max_queued_per_app is not None and max_queued_per_app < 1:
            raise ValueError(f"max_queued_per_app must be >= 1 or None, not {max_queued_per_app}")
        self.units = units
        self.fairness = fairness
        self.aging = aging
        self.aging_s = float(aging_s)
        self.max_queued_per_app = max_queued_per_app
        self.abort_predicted = abort_predicted
        self._weights = weights
        self._default_weight = float(default_weight)
        self._apps: dict[Hashable, _App] = {}
        self._free = list(range(units))  # a heap: the lowest free unit is granted first
        self._running: dict[int, Job] = {}
        self._seq = itertools.count()
        self._serves = itertools.count()
        self._reaped: list[Job] = []  # failed at dispatch, reported by the next expire()
        self._n_waiting = 0  # over all apps (``poll`` and admission skip work when it is 0)

    # ----------------------------------------------------------------- events

    def submit(self, job: Job, now: float) -> Admission:
        """Admit ``job`` into its app's queue, or refuse it. Refused jobs end FAILED with the status.

        Deadline passed, or ``job.cost`` longer than the time left even on an idle device:
        MISSED_DEADLINE_PERSISTENT. The app's queue full: RESOURCE_EXHAUSTED_TRANSIENT. The job,
        or an admitted job it would push back, would miss because of the work ahead:
        MISSED_DEADLINE_TRANSIENT. Jobs without a deadline are never refused for time. After an
        admission, the caller dispatches (``next_to_run``/``poll``).
        """
        if job.state is not JobState.NEW:
            raise InternalError(f"job {job.id} submitted twice (state {job.state.value})")
        app = self._app(job.app)
        cls = app.classes[job.priority]
        job.arrival = job.mark = now
        status, reason = self._admit(app, job, now)
        if status is not ErrorStatus.NONE:
            job._move(_Event.REJECT)
            job.status, job.finished = status, now
            cls.counters.reject(status)
            return Admission(status, reason)
        if self.fairness == "weighted" and not app.active:
            # An app waking up joins at the current virtual time: idle time is not banked credit.
            busy = [a.vtime for a in self._apps.values() if a.active and a is not app]
            if busy:
                app.vtime = max(app.vtime, min(busy))
        job.seq = next(self._seq)
        job._move(_Event.ADMIT)
        if cls.since is None and cls.running == 0:
            cls.since, cls.credit = now, 0
        self._enqueue(app, cls, job)
        return ADMITTED

    def next_to_run(self, now: float) -> Job | None:
        """Start the best waiting job on a free unit and return it (None: no free unit or no job).

        The job is RUNNING on ``job.unit`` when this returns. A job that can no longer meet its
        deadline is failed instead of started, and reported by the next ``expire``.
        """
        while self._free:
            app = self._pick_app()
            if app is None:
                return None
            job = self._best_waiting(app, now)
            cls = app.classes[job.priority]
            if not self._startable(job, now):
                self._fail_waiting(app, cls, job, now)
                self._reaped.append(job)
                continue
            self._dispatch(app, cls, job, now, heapq.heappop(self._free))
            return job
        return None

    def checkpoint(self, job: Job, now: float, remaining_cost: float) -> Decision:
        """A running job reached a step boundary with ``remaining_cost`` seconds of work left.

        ABORT(MISSED_DEADLINE_TRANSIENT) if it can no longer finish in time; YIELD if a waiting
        job of the same app should have its unit (higher effective priority, or the same class
        and an earlier deadline); else CONTINUE. Jobs of other apps never cause a yield.
        """
        if job.state is not JobState.RUNNING:
            raise InternalError(f"checkpoint of job {job.id}, which is {job.state.value}, not running")
        app = self._apps[job.app]
        self._charge(app, job, now)
        job.remaining, job.mark = max(0.0, float(remaining_cost)), now
        if self._hopeless(job, now, job.remaining):
            self._end_running(app, job, now, ErrorStatus.MISSED_DEADLINE_TRANSIENT, aborted=True)
            return Decision(Action.ABORT, ErrorStatus.MISSED_DEADLINE_TRANSIENT)
        if app.n_waiting:
            self._reap(app, now)  # the dispatch test of ``next_to_run``: never yield to a doomed job
        if not app.n_waiting or self._key(self._best_waiting(app, now), now) >= self._key(job, now):
            return CONTINUE  # the fast path: nobody waiting in this app beats this job
        for loser, winner in self._pairs(app, now):
            if loser is job:
                unit = job.unit
                assert unit is not None
                cls = app.classes[job.priority]
                self._release(app, cls, job, now, preempted=True, hand_over=True)
                job._move(_Event.YIELD)
                job.preemptions += 1
                cls.counters.preemptions += 1
                self._enqueue(app, cls, job)
                self._dispatch(app, app.classes[winner.priority], winner, now, unit)
                return Decision(Action.YIELD, successor=winner)
        return CONTINUE

    def complete(self, job: Job, now: float, status: ErrorStatus = ErrorStatus.NONE) -> ErrorStatus:
        """A running job ended with ``status``; free its unit. Returns the status to report.

        Success after the deadline is reported as MISSED_DEADLINE_TRANSIENT: no job succeeds late.
        """
        if job.state is not JobState.RUNNING:
            raise InternalError(f"complete of job {job.id}, which is {job.state.value}, not running")
        app = self._apps[job.app]
        if status is ErrorStatus.NONE and job.deadline is not None and now > job.deadline:
            status = ErrorStatus.MISSED_DEADLINE_TRANSIENT
        self._end_running(app, job, now, status, aborted=False)
        return status

    def cancel(self, job: Job, now: float) -> bool:
        """Withdraw a waiting or running job (its unit becomes free). False if it had already ended."""
        if job.state.terminal or job.state is JobState.NEW:
            return False
        app = self._apps[job.app]
        cls = app.classes[job.priority]
        if job.state is JobState.RUNNING:
            self._release(app, cls, job, now, preempted=False)
        else:
            self._remove_waiting(app, cls, job)
        job._move(_Event.CANCEL)
        job.finished = now
        cls.counters.cancelled += 1
        return True

    def expire(self, now: float) -> list[Job]:
        """Fail (MISSED_DEADLINE_TRANSIENT) and return the waiting jobs that can no longer make it.

        That is: the deadline has come, or (``abort_predicted``) the remaining estimate no longer
        fits before it; plus the jobs ``next_to_run`` refused to start since the last call.
        """
        out, self._reaped = self._reaped, []
        for app in self._apps.values():
            if not app.n_waiting:
                continue
            for cls in app.classes.values():
                if self.abort_predicted:
                    dead = [j for j in cls.waiting if self._hopeless(j, now, j.remaining)]
                else:  # sorted by deadline: only a prefix can have passed
                    dead = list(itertools.takewhile(lambda j: j.deadline is not None and j.deadline <= now, cls.waiting))
                    dead = [j for j in dead if self._hopeless(j, now, j.remaining)]
                for job in dead:
                    self._fail_waiting(app, cls, job, now)
                out.extend(dead)
        return out

    # ------------------------------------------------------------ questions

    def next_expiry(self) -> float | None:
        """The earliest deadline of a waiting job: when ``expire`` must run next (None: never)."""
        best = _INF
        for app in self._apps.values():
            if app.n_waiting:
                for cls in app.classes.values():
                    if cls.waiting and cls.waiting[0].deadline is not None:
                        best = min(best, cls.waiting[0].deadline)
        return None if best == _INF else best

    def preemption_targets(self, now: float) -> list[Job]:
        """Running jobs that a checkpoint now would make yield: interrupt them so they check soon."""
        return [loser for app in self._apps.values() if app.n_waiting and app.running for loser, _ in self._pairs(app, now)]

    def poll(self, now: float) -> Actions:
        """Everything to do after an event: expire, fill free units, find targets, next timer."""
        if not self._n_waiting and not self._reaped:
            return _NOTHING  # nothing waits: nothing to expire, start, preempt for or time
        failed = self.expire(now)
        start: list[Job] = []
        while (job := self.next_to_run(now)) is not None:
            start.append(job)
        if self._reaped:  # refused at dispatch (nothing else changed since ``expire``)
            failed.extend(self._reaped)
            self._reaped = []
        return Actions(tuple(start), tuple(failed), tuple(self.preemption_targets(now)), self.next_expiry())

    def effective_priority(self, job: Job, now: float) -> int:
        """The level ``job`` competes at now: its priority plus its class's aging boost (0..2)."""
        cls = self._apps[job.app].classes[job.priority]
        return int(job.priority) + self._boost(cls, now)

    def running(self) -> list[Job]:
        """The running jobs, by unit."""
        return [self._running[u] for u in sorted(self._running)]

    def waiting(self, app: Hashable) -> list[Job]:
        """The waiting jobs of one app, best class first, each class in EDF-then-FIFO order."""
        a = self._apps.get(app)
        return [] if a is None else [j for p in reversed(Priority) for j in a.classes[p].waiting]

    def statistics(self) -> SchedulerStatistics:
        """A frozen snapshot of every class's counters (see ``ClassStatistics``)."""
        classes: list[ClassStatistics] = []
        for app in self._apps.values():
            for p, cls in app.classes.items():
                running = sum(1 for j in app.running if j.priority is p)
                classes.append(cls.counters.snapshot(app.name, p, len(cls.waiting), running))
        return SchedulerStatistics(
            units=self.units,
            busy_units=len(self._running),
            queued=sum(a.n_waiting for a in self._apps.values()),
            running=len(self._running),
            classes=tuple(classes),
        )

    # ------------------------------------------------------------ admission

    def _admit(self, app: _App, job: Job, now: float) -> tuple[ErrorStatus, str]:
        d = job.deadline
        if d is not None:
            if now >= d:
                return ErrorStatus.MISSED_DEADLINE_PERSISTENT, f"deadline {d:g} already passed at {now:g}"
            if job.cost > d - now:
                return (
                    ErrorStatus.MISSED_DEADLINE_PERSISTENT,
                    f"needs {job.cost:g} s but only {d - now:g} s are left, even on an idle device",
                )
        if self.max_queued_per_app is not None and app.n_waiting >= self.max_queued_per_app:
            return ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, f"app queue full ({app.n_waiting} waiting)"
        if d is not None and (self._n_waiting or self._running):  # (an idle device: the cost test above)
            why = self._demand_test(app, job, now)
            if why:
                return ErrorStatus.MISSED_DEADLINE_TRANSIENT, why
        return ErrorStatus.NONE, ""

    def _demand_test(self, app: _App, new: Job, now: float) -> str:
        """Why admitting ``new`` breaks EDF feasibility of its class ("" if it does not).

        Runs on every submit, so it avoids re-sorting: a class's waiting list is already in
        EDF order, and only the few running jobs of the class are merged into it.
        """
        ahead = 0.0  # work of the app's higher classes: runs before any job of this class
        running_same: list[tuple[float, int, float, Job]] = []
        for job in app.running:
            if job.priority > new.priority:
                ahead += job.remaining_at(now)
            elif job.priority is new.priority:
                running_same.append((*_order(job), job.remaining_at(now), job))
        for p, cls in app.classes.items():
            if p > new.priority and cls.waiting:
                ahead += sum(j.remaining for j in cls.waiting)
        waiting = app.classes[new.priority].waiting
        if running_same:
            running_same.sort(key=lambda t: (t[0], t[1]))
            same: list[tuple[float, float, Job | None]] = [
                (d, rem, job) for d, _, rem, job in running_same
            ]
            merged = sorted(same + [(_order(j)[0], j.remaining, j) for j in waiting], key=lambda t: (t[0], _seq(t[2])))
        else:
            merged = [(_INF if j.deadline is None else j.deadline, j.remaining, j) for j in waiting]
        new_d = _INF if new.deadline is None else new.deadline
        # The new job goes after every job with an earlier (or equal: FIFO) deadline.
        pos = bisect_right([t[0] for t in merged], new_d)
        merged.insert(pos, (new_d, new.cost, None))
        others = [(*self._work(a, now), a.weight) for a in self._apps.values() if a is not app and a.active]
        units = self.units
        blocked = self._blocking(app, new, now)
        work, passed_new = ahead, False
        for d, rem, other in merged:
            work += rem
            if d == _INF:
                break  # the rest have no deadline
            if other is None:
                passed_new = True
            elif not passed_new:
                continue  # ahead of the new job in EDF order: its finish time does not change
            span = blocked + (max(rem, work / units) if not others else self._span(work, rem, others, app.weight))
            if now + span <= d:
                continue
            if other is None:
                return f"would finish at {now + span:g}, after its deadline {d:g}"
            before = max(rem, (work - new.cost) / units) if not others else self._span(work - new.cost, rem, others, app.weight)
            if now + before <= d:
                return f"would make job {other.id} miss its deadline {d:g}"
        return ""

    def _span(self, work: float, own: float, others: list[tuple[float, float, float]], weight: float) -> float:
        """Time to get ``work`` of one app done: other apps take at most their fair share, and
        at most what they have, but at least the rest of their running executions (never
        stopped for another app's sake); the total spreads over the units; a job never goes
        faster alone."""
        interference = sum(max(run_b, min(w_b, work * weight_b / weight)) for w_b, run_b, weight_b in others)
        return max(own, (work + interference) / self.units)

    @staticmethod
    def _work(app: _App, now: float) -> tuple[float, float]:
        """(all the app's remaining work, the part of it its running jobs hold)."""
        running = sum(j.remaining_at(now) for j in app.running)
        return running + sum(j.remaining for c in app.classes.values() for j in c.waiting), running

    def _blocking(self, app: _App, new: Job, now: float) -> float:
        """How long ``new`` waits for a unit beyond the work counted ahead of it: with every unit
        busy and one held by a job of the app that ``new`` would preempt, until that job reaches
        its next checkpoint (at most its ``step`` away), or until any running job ends."""
        if len(self._running) < self.units:
            return 0.0
        level = new.priority + self._boost(app.classes[new.priority], now)
        mine = (-level, int(new.priority), _INF if new.deadline is None else new.deadline)
        block, soonest = _INF, _INF
        for job in self._running.values():
            rem = job.remaining_at(now)
            soonest = min(soonest, rem)
            if job.app == new.app and self._key(job, now)[:3] > mine:
                block = min(block, rem, job.step)
        # Work ahead (the app's own) and other apps' running jobs are counted already.
        return 0.0 if block == _INF else min(block, soonest)

    # ------------------------------------------------------------ ordering

    def _boost(self, cls: _Class, now: float) -> int:
        if not self.aging or cls.base is _HIGHEST:
            return 0
        if cls.running:
            return cls.held
        if cls.since is None:
            return 0
        return min(_HIGHEST - cls.base, cls.credit + int((now - cls.since) // self.aging_s))

    def _key(self, job: Job, now: float) -> _Key:
        """Sort key, smaller first: level, then raised classes first, then EDF, then FIFO."""
        level = job.priority + self._boost(self._apps[job.app].classes[job.priority], now)
        return (-level, int(job.priority), _INF if job.deadline is None else job.deadline, job.seq)

    def _best_waiting(self, app: _App, now: float) -> Job:
        return min((c.waiting[0] for c in app.classes.values() if c.waiting), key=lambda j: self._key(j, now))

    def _pairs(self, app: _App, now: float) -> list[tuple[Job, Job]]:
        """(running job, waiting job that should replace it): best waiting against worst running."""
        losers = sorted(app.running, key=lambda j: self._key(j, now), reverse=True)
        k = len(losers)
        winners = sorted((j for c in app.classes.values() for j in c.waiting[:k]), key=lambda j: self._key(j, now))[:k]
        pairs = []
        for winner, loser in zip(winners, losers):
            if self._key(winner, now) >= self._key(loser, now):
                break
            pairs.append((loser, winner))
        return pairs

    def _pick_app(self) -> _App | None:
        ready = [a for a in self._apps.values() if a.n_waiting]
        if not ready:
            return None
        if self.fairness == "weighted":
            return min(ready, key=lambda a: (a.vtime, a.served))
        return min(ready, key=lambda a: a.served)

    def _startable(self, job: Job, now: float) -> bool:
        """The dispatch test, for a free unit (``next_to_run``) and a unit handed over at a
        checkpoint alike: a waiting job starts only if it can still make its deadline."""
        return not self._hopeless(job, now, job.remaining)

    def _reap(self, app: _App, now: float) -> None:
        """Fail the waiting jobs of ``app`` that may not start (reported by the next ``expire``)."""
        for cls in app.classes.values():
            for job in [j for j in cls.waiting if not self._startable(j, now)]:
                self._fail_waiting(app, cls, job, now)
                self._reaped.append(job)

    def _hopeless(self, job: Job, now: float, remaining: float) -> bool:
        d = job.deadline
        if d is None:
            return False
        if now > d or (remaining > 0 and now >= d):
            return True
        return self.abort_predicted and now + remaining > d

    # ------------------------------------------------------------ bookkeeping

    def _app(self, name: Hashable) -> _App:
        app = self._apps.get(name)
        if app is None:
            app = self._apps[name] = _App(name, float(self._weights.get(name, self._default_weight)))
        return app

    def _enqueue(self, app: _App, cls: _Class, job: Job) -> None:
        insort(cls.waiting, job, key=_order)
        app.n_waiting += 1
        self._n_waiting += 1

    def _remove_waiting(self, app: _App, cls: _Class, job: Job) -> None:
        cls.waiting.remove(job)
        app.n_waiting -= 1
        self._n_waiting -= 1
        if not cls.waiting and not cls.running:
            cls.since, cls.credit = None, 0

    def _dispatch(self, app: _App, cls: _Class, job: Job, now: float, unit: int) -> None:
        boost = self._boost(cls, now)
        self._remove_waiting(app, cls, job)
        cls.held = max(cls.held, boost) if cls.running else boost
        cls.running += 1
        cls.since, cls.credit = None, 0
        job._move(_Event.DISPATCH)
        job.unit, job.mark, job._charged = unit, now, now
        if job.started is None:
            job.started = now
        app.running.append(job)
        app.served = next(self._serves)
        self._running[unit] = job

    def _release(self, app: _App, cls: _Class, job: Job, now: float, *, preempted: bool, hand_over: bool = False) -> None:
        """Take ``job`` off its unit (kept busy if ``hand_over``: the caller dispatches onto it).

        A class left with nothing running starts aging again; after a preemption it keeps the
        levels it had, so yielding never costs a starving class its place.
        """
        self._charge(app, job, now)
        unit = job.unit
        if unit is None or self._running.get(unit) is not job:
            raise InternalError(f"job {job.id} holds no unit")
        del self._running[unit]
        if not hand_over:
            heapq.heappush(self._free, unit)
        job.unit = None
        app.running.remove(job)
        cls.running -= 1
        if not cls.running:
            if cls.waiting or preempted:
                cls.since, cls.credit = now, (cls.held if preempted else 0)
            else:
                cls.since, cls.credit = None, 0
            cls.held = 0

    def _end_running(self, app: _App, job: Job, now: float, status: ErrorStatus, *, aborted: bool) -> None:
        cls = app.classes[job.priority]
        self._release(app, cls, job, now, preempted=False)
        job._move(_Event.FINISH if status is ErrorStatus.NONE else _Event.FAIL)
        job.status, job.finished = status, now
        if status is ErrorStatus.NONE:
            job.remaining = 0.0
            cls.counters.completed += 1
        else:
            cls.counters.fail(status)
            cls.counters.aborted += aborted

    def _fail_waiting(self, app: _App, cls: _Class, job: Job, now: float) -> None:
        self._remove_waiting(app, cls, job)
        job._move(_Event.FAIL)
        job.status, job.finished = ErrorStatus.MISSED_DEADLINE_TRANSIENT, now
        cls.counters.fail(job.status)
        cls.counters.expired += 1

    def _charge(self, app: _App, job: Job, now: float) -> None:
        if self.fairness == "weighted":
            app.vtime += max(0.0, now - job._charged) / app.weight
        job._charged = now

    def __repr__(self) -> str:
        return (
            f"Policy(units={self.units}, fairness={self.fairness!r}, running={len(self._running)}, "
            f"waiting={sum(a.n_waiting for a in self._apps.values())})"
        )
