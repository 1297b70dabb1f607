"""The policy's vocabulary: the answers it gives and the records it keeps.

``Policy`` (``_policy``) answers each event with one of these values: ``Decision`` at a
checkpoint (``Action`` CONTINUE / YIELD / ABORT), ``Admission`` at submit, ``Actions`` from
``poll``; the async layer (``_scheduler``, the simulator) reads them and carries them out. The
records ``_App`` and ``_Class`` are the per-app, per-priority state the policy's rules work on
(waiting jobs in EDF order, running counts, aging clock, fair-share virtual time). They live
apart from the rules so ``_policy`` reads as the rules alone, and so a baseline policy of the
simulator (``nnrt.sim._baselines``) can reuse the records without the rules.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

from nnrt.sched._job import Job
from nnrt.sched._stats import _Counters
from nnrt.types import ErrorStatus, Priority

__all__ = ["ADMITTED", "CONTINUE", "Action", "Actions", "Admission", "Decision"]

_INF = math.inf
#: A job's sort key, smaller first: (-level, base priority, deadline, arrival).
_Key = tuple[int, int, float, int]


class Action(enum.Enum):
    """What a running job does after a checkpoint."""

    CONTINUE = "continue"
    YIELD = "yield"  # give the unit to ``Decision.successor`` and wait to be started again
    ABORT = "abort"  # stop and fail with ``Decision.status``


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer of ``Policy.checkpoint``.

    On YIELD the policy has already parked the job (PREEMPTED) and started ``successor`` on the
    freed unit; on ABORT the job has failed with ``status`` and its unit is free.
    """

    action: Action
    status: ErrorStatus = ErrorStatus.NONE
    successor: Job | None = None


#: The fast-path answer: carry on.
CONTINUE = Decision(Action.CONTINUE)


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer of ``Policy.submit``: admitted (status NONE), or refused with a status and why."""

    status: ErrorStatus
    reason: str = ""

    @property
    def admitted(self) -> bool:
        """True if the job was queued."""
        return self.status is ErrorStatus.NONE

    def __bool__(self) -> bool:
        return self.admitted


#: The answer for every admitted job.
ADMITTED = Admission(ErrorStatus.NONE)


class Actions(NamedTuple):
    """Everything the async layer must carry out after an event (see ``Policy.poll``). A named
    tuple: immutable, and made twice per execution (a frozen dataclass costs 4x as much)."""

    start: tuple[Job, ...]  # now RUNNING on ``job.unit``: let them run
    failed: tuple[Job, ...]  # failed while waiting (``job.status``): fail their futures
    interrupt: tuple[Job, ...]  # running jobs that should reach a checkpoint soon
    next_expiry: float | None  # arm one timer here (None: no timer needed)


#: ``poll``'s answer when nothing waits.
_NOTHING = Actions((), (), (), None)


class _Class:
    """The waiting jobs of one (app, priority), in EDF-then-FIFO order, and its aging clock.

    ``since`` is when the class last started waiting with nothing running (None otherwise);
    ``credit`` is aging levels carried over from a preemption; ``held`` is the boost its
    running jobs were dispatched with.
    """

    __slots__ = ("base", "counters", "credit", "held", "running", "since", "waiting")

    def __init__(self, base: Priority) -> None:
        self.base = base
        self.waiting: list[Job] = []
        self.running = 0
        self.since: float | None = None
        self.credit = 0
        self.held = 0
        self.counters = _Counters()


class _App:
    __slots__ = ("classes", "n_waiting", "name", "running", "served", "vtime", "weight")

    def __init__(self, name: Hashable, weight: float) -> None:
        self.name = name
        self.weight = weight
        self.vtime = 0.0  # device seconds / weight ("weighted" fairness)
        self.served = -1  # dispatch sequence number of its last dispatch
        self.classes = {p: _Class(p) for p in Priority}
        self.running: list[Job] = []
        self.n_waiting = 0

    @property
    def active(self) -> bool:
        return bool(self.n_waiting or self.running)


def _order(job: Job) -> tuple[float, int]:
    return (_INF if job.deadline is None else job.deadline, job.seq)


def _seq(job: Job | None) -> int:
    return -1 if job is None else job.seq
