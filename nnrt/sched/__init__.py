"""The scheduler: per-app priority queues, admission, deadlines and preemption decisions.

``Policy`` is the pure core (no ``await``, no I/O, no clock reads: every call takes ``now``);
an async layer carries out its decisions (``_decisions``: the answers it gives and the records it
keeps). ``Job`` is one execution as the policy sees it.
"""

from nnrt.sched._decisions import ADMITTED, CONTINUE, Action, Actions, Admission, Decision
from nnrt.sched._job import Job, JobState
from nnrt.sched._policy import Policy
from nnrt.sched._scheduler import Scheduler
from nnrt.sched._stats import ClassStatistics, SchedulerStatistics

__all__ = [
    "ADMITTED",
    "CONTINUE",
    "Action",
    "Actions",
    "Admission",
    "ClassStatistics",
    "Decision",
    "Job",
    "JobState",
    "Policy",
    "Scheduler",
    "SchedulerStatistics",
]
