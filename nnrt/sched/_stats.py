"""The scheduler's introspection: frozen snapshots, and the mutable counters behind them.

``Policy.statistics()`` returns a ``SchedulerStatistics``; it never changes after it is made,
so a simulator or a test can keep snapshots and compare them. Counters are kept per class,
a class being one (app, priority) pair, because NNAPI priorities only mean something within
one app and reports are read per class.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nnrt.types import ErrorStatus, Priority

__all__ = ["ClassStatistics", "SchedulerStatistics"]


@dataclass(frozen=True, slots=True)
class ClassStatistics:
    """Counters for one (app, priority) class.

    ``queued`` and ``running`` are the current numbers (preempted jobs count as queued).
    The others count since the policy was made: ``completed`` succeeded; ``preemptions``
    yields at checkpoints; ``rejected`` refused at ``submit``, by status; ``failures`` failed
    after admission, by status (``expired`` of them while waiting, ``aborted`` of them at a
    checkpoint); ``cancelled`` cancelled by the caller.
    """

    app: Hashable
    priority: Priority
    queued: int
    running: int
    completed: int
    preemptions: int
    cancelled: int
    expired: int
    aborted: int
    rejected: Mapping[ErrorStatus, int] = field(default_factory=lambda: MappingProxyType({}))
    failures: Mapping[ErrorStatus, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    """A snapshot of a whole policy: its units and every class it has seen, in first-seen order."""

    units: int
    busy_units: int
    queued: int
    running: int
    classes: tuple[ClassStatistics, ...]

    def get(self, app: Hashable, priority: Priority) -> ClassStatistics:
        """The counters of one class (``KeyError`` if that app was never seen)."""
        for c in self.classes:
            if c.app == app and c.priority is priority:
                return c
        raise KeyError((app, priority))

    def for_app(self, app: Hashable) -> tuple[ClassStatistics, ...]:
        """The classes of one app, LOW to HIGH."""
        return tuple(c for c in self.classes if c.app == app)


class _Counters:
    """Mutable counters of one class; ``snapshot`` freezes them."""

    __slots__ = ("aborted", "cancelled", "completed", "expired", "failures", "preemptions", "rejected")

    def __init__(self) -> None:
        self.completed = 0
        self.preemptions = 0
        self.cancelled = 0
        self.expired = 0
        self.aborted = 0
        self.rejected: dict[ErrorStatus, int] = {}
        self.failures: dict[ErrorStatus, int] = {}

    def reject(self, status: ErrorStatus) -> None:
        self.rejected[status] = self.rejected.get(status, 0) + 1

    def fail(self, status: ErrorStatus) -> None:
        self.failures[status] = self.failures.get(status, 0) + 1

    def snapshot(self, app: Hashable, priority: Priority, queued: int, running: int) -> ClassStatistics:
        return ClassStatistics(
            app=app,
            priority=priority,
            queued=queued,
            running=running,
            completed=self.completed,
            preemptions=self.preemptions,
            cancelled=self.cancelled,
            expired=self.expired,
            aborted=self.aborted,
            rejected=MappingProxyType(dict(self.rejected)),
            failures=MappingProxyType(dict(self.failures)),
        )
