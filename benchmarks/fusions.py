"""Preparation-time fusions on the real models: CPU time per execution of each model's plan
with the fusions (``nnrt/execution/_fuse.py``, ``_fuse_pad.py``, ...) against the same model's
plan compiled without them (constant folding kept), measured in the same run, interleaved.

    python benchmarks/fusions.py --models /work/models [--quick] [--only NAME]

Each plan runs synchronously on this thread (``run_plan``, no scheduler); the figure is the
median of ``time.thread_time`` per execution, which the load of a shared machine distorts far
less than wall time. The process takes the latency settings ``nnrt bench`` runs with
(``CpuDevice(tune_process=True)``: one BLAS thread, glibc keeping freed blocks for reuse;
without the latter, page faults on fresh intermediates dominate every comparison). The
outputs of both plans are compared first (the fusions are exact: the largest difference is
printed, and must be 0 unless a fusion says it rounds differently). The fused plan's top
three op types (``nnrt bench --profile``'s attribution) follow. A third plan has every fusion
but the convolution epilogues (``_fuse_epilogue``, "no epi"); the "epi" column is fused / that,
the epilogues' own effect.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from real_models import VENDORED, find_models

import nnrt.execution._fuse as fuse_module
import nnrt.execution._plan as plan_module
from nnrt import CpuDevice
from nnrt.bench._inputs import input_specs, make_inputs, open_model, with_initial_state
from nnrt.bench._profile import profile_plan
from nnrt.errors import NnrtError
from nnrt.execution._interpreter import ExecContext, fp_errors_ignored, fp_errors_restored, run_plan
from nnrt.execution._plan import Plan, compile_plan


@contextmanager
def unfused() -> Iterator[None]:
    """Compile plans without the fusions inside the block."""
    original = plan_module.fuse_steps
    plan_module.fuse_steps = lambda model, steps, fetcher, operands: steps
    try:
        yield
    finally:
        plan_module.fuse_steps = original


@contextmanager
def without_epilogues() -> Iterator[None]:
    """Compile plans with every fusion but the convolution epilogues (``_fuse_epilogue``)."""
    original = fuse_module.fold_epilogues
    fuse_module.fold_epilogues = lambda model, steps, *rest: steps
    try:
        yield
    finally:
        fuse_module.fold_epilogues = original


def execute(plan: Plan, args: list[Any]) -> tuple[list[np.ndarray], int]:
    """The plan's outputs and the thread's CPU time, in ns, of one execution (on this thread)."""
    token = fp_errors_ignored()
    t = time.thread_time_ns()
    gen = run_plan(plan, args, ExecContext())
    try:
        while True:
            next(gen)  # nothing interrupts the run; a heavy step asking to be offloaded stays here
    except StopIteration as stop:
        result = [np.asarray(v) for v in stop.value]
    finally:
        fp_errors_restored(token)
    return result, time.thread_time_ns() - t


def main() -> int:
    CpuDevice(tune_process=True).close()  # the process settings nnrt bench runs with
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, action="append", default=[])
    parser.add_argument("--only", default="")
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    rounds, per_round = (3, 4) if args.quick else (5, 10)
    models = [(p, e) for p, e in find_models([*args.models, VENDORED]) if args.only in p.name]
    print(f"{'model':46} {'steps':>13} {'unfused ms':>11} {'no epi ms':>9} {'fused ms':>9} {'ratio':>6} "
          f"{'epi':>5}  max diff  top op types (fused)")
    ratios, epi_ratios = [], []
    for path, entry in models:
        try:
            loaded = open_model(path, entry.get("input_shapes"), entry.get("load_values"))
            specs = input_specs(loaded.model, entry.get("input_shapes"), entry.get("input_values"))
            inputs = with_initial_state(loaded.model, make_inputs(specs, values=entry.get("input_values")))
            fused = compile_plan(loaded.model)
            with unfused():
                base = compile_plan(loaded.model)
            with without_epilogues():
                plain = compile_plan(loaded.model)
        except NnrtError as err:
            print(f"{path.name:46} skipped: {str(err).splitlines()[0][:80]}")
            continue
        want = execute(base, inputs)[0]
        diff = max((float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
                    for plan in (fused, plain) for a, b in zip(want, execute(plan, inputs)[0], strict=True)),
                   default=0.0)
        times: dict[str, list[int]] = {"base": [], "plain": [], "fused": []}
        for _ in range(rounds):
            for name, plan in (("base", base), ("plain", plain), ("fused", fused)):
                for _ in range(per_round):
                    times[name].append(execute(plan, inputs)[1])
        b_ms, p_ms, f_ms = (statistics.median(times[k]) / 1e6 for k in ("base", "plain", "fused"))
        ratios.append(f_ms / b_ms)
        epi_ratios.append(f_ms / p_ms)
        prof = profile_plan(fused, inputs, runs=per_round)
        top = ", ".join(f"{t.op_type} {t.share:.0%}" for t in prof.op_types[:3])
        steps = f"{len(base.steps)}>{len(plain.steps)}>{len(fused.steps)}"
        print(f"{path.name:46} {steps:>13} {b_ms:11.3f} {p_ms:9.3f} {f_ms:9.3f} {f_ms / b_ms:6.2f} {f_ms / p_ms:5.2f}"
              f"  {diff:8.2g}  {top}")
        sys.stdout.flush()
    if ratios:
        print(f"median fused/unfused CPU time over {len(ratios)} models: {statistics.median(ratios):.2f}; "
              f"with/without the convolution epilogues: {statistics.median(epi_ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
