"""One execution as the scheduler sees it: a ``Job`` and its state machine.

Theory, h11 style: a job's life is a small state machine written as a table, so a reader can
check every path at a glance and an illegal move is caught where it happens::

    NEW --admit--> QUEUED --dispatch--> RUNNING --finish--> DONE
     |               |                  |     ^
     | reject        | expire, cancel   |yield| dispatch
     v               v                  v     |
    FAILED     FAILED, CANCELLED       PREEMPTED --expire, cancel--> FAILED, CANCELLED

    and RUNNING --fail (abort at a checkpoint, driver error)--> FAILED, RUNNING --cancel--> CANCELLED

Only the policy (``nnrt.sched._policy``) moves jobs; it does so through ``Job._move``, which
consults ``_TRANSITIONS``. A move that is not in the table is nnrt's own bug, so it raises
``InternalError`` rather than an error an app could react to. The job also carries the
scheduler's bookkeeping (arrival order, the cost estimate and when it was last refined, the
unit it holds) because the async layer and the statistics read them; none of it reads a clock.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Hashable

from nnrt.errors import InternalError
from nnrt.types import ErrorStatus, Priority

__all__ = ["Job", "JobState"]


class JobState(enum.Enum):
    """Where a job is in its life. DONE, FAILED and CANCELLED are terminal."""

    NEW = "new"
    QUEUED = "queued"
    RUNNING = "running"
    PREEMPTED = "preempted"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True once the job can never move again."""
        return self in _TERMINAL

    @property
    def waiting(self) -> bool:
        """True while the job is admitted and waits for a unit (queued or preempted)."""
        return self is JobState.QUEUED or self is JobState.PREEMPTED


_TERMINAL = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})


class _Event(enum.Enum):
    ADMIT = "admit"
    REJECT = "reject"
    DISPATCH = "dispatch"
    YIELD = "yield"
    FINISH = "finish"
    FAIL = "fail"
    CANCEL = "cancel"


S, E = JobState, _Event
#: The whole state machine: (state, event) -> next state. Anything else is a bug.
_TRANSITIONS: dict[tuple[JobState, _Event], JobState] = {
    (S.NEW, E.ADMIT): S.QUEUED,
    (S.NEW, E.REJECT): S.FAILED,
    (S.QUEUED, E.DISPATCH): S.RUNNING,
    (S.QUEUED, E.FAIL): S.FAILED,  # expired in the queue, or doomed at dispatch
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.RUNNING, E.YIELD): S.PREEMPTED,
    (S.RUNNING, E.FINISH): S.DONE,
    (S.RUNNING, E.FAIL): S.FAILED,  # aborted at a checkpoint, or the driver failed it
    (S.RUNNING, E.CANCEL): S.CANCELLED,
    (S.PREEMPTED, E.DISPATCH): S.RUNNING,
    (S.PREEMPTED, E.FAIL): S.FAILED,
    (S.PREEMPTED, E.CANCEL): S.CANCELLED,
}
del S, E
# The same table keyed by the members' values: an enum member's hash is a Python-level call,
# a string's is not, and every job moves three times or more (the simulator's hot path).
_BY_VALUE = {(s.value, e.value): t for (s, e), t in _TRANSITIONS.items()}

_ids = itertools.count(1)


class Job:
    """One execution submitted to a ``Policy``.

    Construct it with what the caller knows: the ``app`` it belongs to (any hashable identity),
    its ``priority`` (relative within that app, as in NNAPI), its estimated ``cost`` in seconds
    of device time, and an absolute ``deadline`` on the runtime's clock (``None``: none);
    ``step``, its longest stretch between two checkpoints (0: it can yield at any moment).
    ``owner`` is free for the async layer (say, the execution's future); the policy never
    looks at it. ``id`` defaults to a process-wide counter.

    The policy fills in the rest: ``arrival`` and ``seq`` (arrival order, the FIFO tie-break) at
    ``submit``; ``remaining`` (the cost estimate, refined at every checkpoint) and ``mark`` (the
    time that estimate refers to); ``unit`` while it runs; ``status`` once it ends.
    """

    __slots__ = (
        "_charged",
        "app",
        "arrival",
        "cost",
        "deadline",
        "finished",
        "id",
        "mark",
        "owner",
        "preemptions",
        "priority",
        "remaining",
        "seq",
        "started",
        "state",
        "status",
        "step",
        "unit",
    )

    def __init__(
        self,
        app: Hashable,
        priority: Priority = Priority.MEDIUM,
        cost: float = 0.0,
        deadline: float | None = None,
        *,
        id: int | None = None,  # noqa: A002 - the natural name, as in NNAPI's execution ids
        owner: object = None,
        step: float = 0.0,
    ) -> None:
        if not cost >= 0.0 or math.isinf(cost):
            raise ValueError(f"a job's cost must be a finite number of seconds >= 0, not {cost!r}")
        if not step >= 0.0 or math.isinf(step):
            raise ValueError(f"a job's step must be a finite number of seconds >= 0, not {step!r}")
        if deadline is not None and math.isnan(deadline):
            raise ValueError("a deadline cannot be NaN")
        self.id: int = next(_ids) if id is None else id
        self.app: Hashable = app
        self.priority = priority if type(priority) is Priority else Priority(priority)
        self.cost = float(cost)
        #: The longest stretch it runs without a checkpoint (its longest operation, seconds): a
        #: job it should yield to may wait that long for the unit (admission counts it).
        self.step = float(step)
        self.deadline = deadline
        self.owner = owner
        self.state = JobState.NEW
        self.status = ErrorStatus.NONE
        self.arrival = math.nan
        self.seq = -1
        self.remaining = self.cost
        self.mark = math.nan
        self.unit: int | None = None
        self.started: float | None = None  # first dispatch
        self.finished: float | None = None  # reached a terminal state
        self.preemptions = 0
        self._charged = math.nan  # last time its device time was charged to its app

    def remaining_at(self, now: float) -> float:
        """The estimated device time still needed at ``now``.

        While running, the last reported estimate minus the time run since it was reported;
        otherwise the last estimate. Never negative.
        """
        if self.state is JobState.RUNNING:
            return max(0.0, self.remaining - (now - self.mark))
        return self.remaining

    def late(self, now: float, remaining: float) -> bool:
        """True if finishing ``remaining`` seconds of work from ``now`` misses the deadline."""
        return self.deadline is not None and now + remaining > self.deadline

    def _move(self, event: _Event) -> None:
        try:
            self.state = _BY_VALUE[self.state._value_, event._value_]
        except KeyError:
            raise InternalError(f"job {self.id}: illegal transition {event.value!r} from {self.state.value!r}") from None

    def __repr__(self) -> str:
        dl = "none" if self.deadline is None else f"{self.deadline:g}"
        return (
            f"Job(id={self.id}, app={self.app!r}, priority={self.priority.name}, state={self.state.value}, "
            f"remaining={self.remaining:g}, deadline={dl})"
        )
