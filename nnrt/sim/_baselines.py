"""Baseline scheduling policies to compare nnrt's scheduler against (``--policy``).

Each baseline is a small ``Policy`` subclass, so it runs in exactly the same async layer,
device and execution path as nnrt's own policy; only the decisions differ:

* ``fifo``: one queue for the whole device, first come first served, across apps and
  priorities; no preemption, no admission control.
* ``priority``: one queue, highest priority first (FIFO within a priority), across apps;
  no preemption, no admission control.
* ``edf``: one queue, earliest deadline first across apps and priorities (jobs without a
  deadline last), preemptive at checkpoints; no admission control.

What all baselines keep, because it is the runtime's contract rather than a policy choice:
a deadline already passed is refused (MISSED_DEADLINE_PERSISTENT), a bounded queue refuses
when full (RESOURCE_EXHAUSTED_TRANSIENT), a queued job fails when its deadline *passes* (no
predicted aborts), and nothing succeeds late. They have no aging and no per-app isolation:
every job belongs to one shared pseudo-app, so the policy's statistics are per priority
only (the simulator keeps its own per-app figures). ``make_policy`` builds any of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from nnrt.sched import Job, Policy
from nnrt.sched._decisions import _App, _Key
from nnrt.types import ErrorStatus

__all__ = ["POLICIES", "make_policy"]

POLICIES = ("nnrt", "fifo", "priority", "edf")
_INF = float("inf")


class _OneApp(dict[Hashable, _App]):
    """The policy's app table, with every app name mapped to the one shared entry ``"*"``."""

    def __getitem__(self, key: Hashable) -> _App:
        return super().__getitem__("*")

    def __setitem__(self, key: Hashable, value: _App) -> None:
        super().__setitem__("*", value)

    def get(self, key: Hashable, default: _App | None = None) -> _App | None:  # type: ignore[override]
        return super().get("*", default)


class _Shared(Policy):
    """No admission test, no aging, no predicted aborts, one queue for every app."""

    preemptive = False

    def __init__(self, units: int, *, max_queued_per_app: int | None = 256) -> None:
        super().__init__(units, aging=False, abort_predicted=False, max_queued_per_app=max_queued_per_app)
        self._apps = _OneApp()

    def _app(self, name: Hashable) -> _App:
        return super()._app("*")

    def _admit(self, app: _App, job: Job, now: float) -> tuple[ErrorStatus, str]:
        if job.deadline is not None and now >= job.deadline:
            return ErrorStatus.MISSED_DEADLINE_PERSISTENT, f"deadline {job.deadline:g} already passed at {now:g}"
        if self.max_queued_per_app is not None and app.n_waiting >= self.max_queued_per_app:
            return ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, f"queue full ({app.n_waiting} waiting)"
        return ErrorStatus.NONE, ""

    def _pairs(self, app: _App, now: float) -> list[tuple[Job, Job]]:
        return super()._pairs(app, now) if self.preemptive else []


class FifoPolicy(_Shared):
    """First come, first served; never preempts."""

    def _key(self, job: Job, now: float) -> _Key:
        return (0, 0, 0.0, job.seq)

    def _best_waiting(self, app: _App, now: float) -> Job:
        # Class queues are kept in EDF order: the oldest job may be anywhere in them.
        return min((j for c in app.classes.values() for j in c.waiting), key=lambda j: j.seq)


class PriorityPolicy(_Shared):
    """Strict priority across apps, FIFO within a priority; never preempts."""

    def _key(self, job: Job, now: float) -> _Key:
        return (-int(job.priority), 0, 0.0, job.seq)

    def _best_waiting(self, app: _App, now: float) -> Job:
        top = max((c for c in app.classes.values() if c.waiting), key=lambda c: c.base)
        return min(top.waiting, key=lambda j: j.seq)


class EdfPolicy(_Shared):
    """Earliest deadline first across apps and priorities; preempts at checkpoints."""

    preemptive = True

    def _key(self, job: Job, now: float) -> _Key:
        return (0, 0, _INF if job.deadline is None else job.deadline, job.seq)


def make_policy(name: str, units: int, *, app_weights: Mapping[Hashable, float] | None = None,
                fairness: str | None = None, aging_s: float = 0.25, max_queued_per_app: int | None = 256) -> Policy:
    """The policy called ``name`` (one of ``POLICIES``) for a device with ``units`` units."""
    if name == "nnrt":
        weights = dict(app_weights or {})
        fair = fairness or "weighted"
        return Policy(units, app_weights=weights, fairness=fair, aging_s=aging_s,  # type: ignore[arg-type]
                      max_queued_per_app=max_queued_per_app)
    classes: dict[str, type[_Shared]] = {"fifo": FifoPolicy, "priority": PriorityPolicy, "edf": EdfPolicy}
    if name not in classes:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    return classes[name](units, max_queued_per_app=max_queued_per_app)
