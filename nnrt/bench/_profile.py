"""``nnrt bench --profile``: where an execution's time goes, per step and per op type.

The interpreter already has the hook: an ``ExecContext`` with a ``profile`` dict makes
``run_plan`` add each kernel step's time to it (calibration uses the same). This module runs
the prepared plan's own steps through ``run_plan`` with that hook on, synchronously on the
calling thread (no scheduler, no hand-offs: the kernels' time, not the service time), and
attributes the time of steps inside IF/WHILE bodies to those steps. What the kernels do not
account for (the interpreter's loop, slot bookkeeping, control-flow conditions) is reported
as the interpreter's share of the measured total. When the hook is off, the interpreter pays
one ``is not None`` test per step.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from nnrt.execution._compiled_plan import SEGMENT_LABEL, SEGMENT_TYPE
from nnrt.execution._interpreter import ExecContext, fp_errors_ignored, fp_errors_restored, run_plan
from nnrt.execution._plan import KERNEL, Plan, Step

__all__ = ["OpTypeTime", "Profile", "StepTime", "profile_plan"]


@dataclass(frozen=True)
class StepTime:
    """One kernel step: median milliseconds per execution (its runs inside a loop summed)."""

    label: str
    op_type: str
    ms: float

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.label, "op_type": self.op_type, "ms": self.ms}


@dataclass(frozen=True)
class OpTypeTime:
    op_type: str
    ms: float
    steps: int
    share: float

    def as_dict(self) -> dict[str, Any]:
        return {"op_type": self.op_type, "ms": self.ms, "steps": self.steps, "share": self.share}


@dataclass(frozen=True)
class Profile:
    """Medians per execution over ``runs`` profiled runs."""

    runs: int
    #: The median run, as measured (preemptions by other processes included).
    total_ms: float
    #: The sum of the kernel steps' medians.
    kernels_ms: float
    #: The median of each run's time outside the kernels (the interpreter's loop, bookkeeping).
    interpreter_ms: float
    steps: tuple[StepTime, ...]
    op_types: tuple[OpTypeTime, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "total_ms": self.total_ms, "kernels_ms": self.kernels_ms,
                "interpreter_ms": self.interpreter_ms, "op_types": [t.as_dict() for t in self.op_types],
                "steps": [s.as_dict() for s in self.steps]}


def _walk(plan: Plan) -> Iterator[Step]:
    """Every step of ``plan`` and of the sub-plans it runs, parents first."""
    for step in plan.steps:
        yield step
        for sub in step.branches:
            yield from _walk(sub)


def profile_plan(plan: Plan, args: Sequence[Any], *, runs: int, warmup: int = 1,
                 loop_timeout: float | None = None, tick: Callable[[], None] | None = None) -> Profile:
    """Run ``plan`` ``warmup + runs`` times with the interpreter's per-step timer on.

    Each step's time is its median over the runs (0 in a run that did not reach it, such as an
    IF branch not taken): on a shared machine a run preempted in one step must not make that
    step look expensive. The interpreter's share is the median of each run's time outside the
    kernels; ``total_ms`` is the median run as measured, preemptions included.
    """
    steps = list(_walk(plan))
    per_step: dict[int, list[int]] = {}
    totals: list[int] = []
    outside: list[int] = []
    for k in range(warmup + runs):
        times: dict[int, int] = {}
        ctx = ExecContext(profile=times) if loop_timeout is None else ExecContext(loop_timeout=loop_timeout, profile=times)
        token = fp_errors_ignored()
        t0 = time.perf_counter_ns()
        try:
            for _ in run_plan(plan, list(args), ctx):
                pass  # nothing interrupts a profiled run; heavy steps ask to be offloaded: stay here
        finally:
            fp_errors_restored(token)
        spent = time.perf_counter_ns() - t0
        if tick is not None:
            tick()
        if k < warmup:
            continue
        totals.append(spent)
        outside.append(max(0, spent - sum(times.values())))
        for key, ns in times.items():
            per_step.setdefault(key, []).append(ns)
    n = max(runs, 1)

    def median_ms(samples: list[int]) -> float:
        return float(statistics.median(samples + [0] * (n - len(samples)))) / 1e6

    timed = [StepTime(s.label, SEGMENT_TYPE if s.label.startswith(SEGMENT_LABEL) else s.type.name,
                      median_ms(per_step[id(s)])) for s in steps if s.kind == KERNEL and id(s) in per_step]
    kernels_ms = sum(s.ms for s in timed)
    by_type: dict[str, list[StepTime]] = {}
    for s in timed:
        by_type.setdefault(s.op_type, []).append(s)
    types = [OpTypeTime(t, sum(s.ms for s in group), len(group), sum(s.ms for s in group) / kernels_ms if kernels_ms else 0.0)
             for t, group in by_type.items()]
    types.sort(key=lambda t: -t.ms)
    timed.sort(key=lambda s: -s.ms)
    return Profile(runs, median_ms(totals), kernels_ms, median_ms(outside), tuple(timed), tuple(types))
