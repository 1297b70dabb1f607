"""Calibration: the step costs a CPU device measures on this machine at preparation.

Every decision about where a plan runs (inline, in loop slices, on a worker) and the cost
model's prior stand on these figures (``Plan.set_inline_limit``, ``nnrt.execution._cost``), so
they are measured on zero inputs right after compilation, on the thread that prepares.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnrt.errors import NnrtError
from nnrt.execution import ExecContext, Plan, run_plan
from nnrt.execution._interpreter import fp_errors_ignored, fp_errors_restored

__all__ = ["CALIBRATION_BUDGET_NS", "calibrate"]

#: Calibration repeats its runs (up to five after the cold one) while they took less than this.
CALIBRATION_BUDGET_NS = 12_000_000


def calibrate(plan: Plan) -> None:
    """Measure each top-level step on zero inputs (the best of its timed runs); keep the
    estimates where that fails."""
    if plan.has_control_flow:
        return
    args: list[Any] = []
    for i in plan.inputs:
        op = plan.model.operands[i]
        if not op.fully_specified:
            return
        args.append(op.type.dtype.type(0).item() if op.type.is_scalar else np.zeros(op.dimensions, op.type.dtype))
    # The first run is cold (allocator, caches, lazy imports, compiled kernels compiling or
    # loading): it counts for neither the estimates nor the time spent. Keep the best of the
    # later ones; plans of up to a few ms get more runs, since a noisy measurement decides
    # where they run (on a loaded machine one run of a 2 ms model measured 6.6 ms, which put a
    # step above the loop slice).
    best: dict[int, float] = {}
    runs, spent = 0, 0
    while runs < 2 or (runs < 6 and spent < CALIBRATION_BUDGET_NS):
        profile: dict[int, int] = {}
        token = fp_errors_ignored()
        try:
            for _ in run_plan(plan, args, ExecContext(profile=profile)):
                pass
        except NnrtError:
            return
        finally:
            fp_errors_restored(token)
        runs += 1
        if runs > 1:
            spent += sum(profile.values())
            for key, ns in profile.items():
                best[key] = min(best.get(key, float("inf")), float(ns))
    for step in plan.steps:
        if id(step) in best:
            step.cost_ns = best[id(step)]
