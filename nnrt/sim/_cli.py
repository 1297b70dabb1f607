"""``nnrt simulate [SCENARIO.toml] [--seed N] [--policy nnrt,fifo,...] [--json F] [--csv F] [--plot F] [--compute]
[--overheads[=probe|scenario]] [--calibration-s S] [--real]``.

Without a file it runs the built-in scenario (``nnrt.sim._builtin``). The report goes to
stdout (one table per run; with several policies, a side-by-side comparison after them);
the wall-clock figures (simulated seconds per wall second) go to stderr, since they are not
part of the deterministic report. A bad scenario prints the field and why, and exits 2.

``--duration`` shortens or lengthens any scenario (arrivals stop then; a workload's own
shorter ``duration_s`` or ``count`` still applies). ``--real`` runs any scenario on the real
clock: what a real run cannot honour (a device speed, a model's ``cost_ms``, ``step_costs_us``
or ``jitter``: real kernels take the time they take) is dropped, and stderr says which. Progress
lines (measuring this host, calibrating, simulating) appear on stderr when stdout and stderr
are terminals. ``--plot`` checks for matplotlib before anything runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from nnrt._progress import progress_stream
from nnrt.errors import NnrtError
from nnrt.sim._baselines import POLICIES
from nnrt.sim._builtin import builtin_scenario
from nnrt.sim._calibrate import CALIBRATION_S
from nnrt.sim._engine import simulate
from nnrt.sim._report import comparison_table, report_table, to_csv, to_json
from nnrt.sim._scenario import Scenario, ScenarioError, load_scenario

__all__ = ["main"]


def _policies(text: str) -> list[str]:
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in POLICIES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown policy {bad[0] if bad else text!r}; choose from {','.join(POLICIES)}")
    return list(dict.fromkeys(names))


def with_duration(scenario: Scenario, seconds: float) -> Scenario:
    """``scenario`` with arrivals stopping after ``seconds`` (a workload's own earlier end stays)."""
    workloads = []
    for w in scenario.workloads:
        left = max(0.0, seconds - w.start_s)
        workloads.append(dataclasses.replace(w, duration_s=left if w.duration_s is None else min(w.duration_s, left)))
    return dataclasses.replace(scenario, duration_s=seconds, workloads=tuple(workloads),
                               max_time_s=max(scenario.max_time_s, 10 * seconds + 60))


def for_real_clock(scenario: Scenario) -> tuple[Scenario, list[str]]:
    """``scenario`` without what a real-clock run cannot honour, and the fields dropped."""
    dropped = [f"devices.{d.name}.speed" for d in scenario.devices if d.speed != 1.0]
    for m in scenario.models:
        fields = (("cost_ms", m.cost_ms), ("step_costs_us", m.step_costs_us), ("jitter", m.jitter or None))
        dropped += [f"models.{m.name}.{key}" for key, value in fields if value is not None]
    devices = tuple(dataclasses.replace(d, speed=1.0) for d in scenario.devices)
    models = tuple(dataclasses.replace(m, cost_ms=None, step_costs_us=None, jitter=0.0) for m in scenario.models)
    return dataclasses.replace(scenario, devices=devices, models=models), dropped


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="nnrt simulate",
                                     description="Replay a QoS scenario on nnrt's scheduler in virtual time.")
    parser.add_argument("scenario", nargs="?", help="scenario file (TOML); default: the built-in scenario")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the scenario's)")
    parser.add_argument("--policy", type=_policies, default=["nnrt"], metavar="P[,P...]",
                        help=f"policies to run and compare: {','.join(POLICIES)} (default: nnrt)")
    parser.add_argument("--json", metavar="FILE", help="write every run's report as JSON")
    parser.add_argument("--csv", metavar="FILE", help="write one row per (policy, class) as CSV")
    parser.add_argument("--plot", metavar="FILE",
                        help="latency distributions and unit timelines (.png or .html; needs matplotlib)")
    parser.add_argument("--compute", action="store_true", help="also run the kernels (default: stubs of the right shapes)")
    parser.add_argument("--overheads", nargs="?", const="probe", default=None, choices=("probe", "scenario"),
                        help="model this host too: wake-up lateness, hand-offs and kernel-time variance, alone and "
                             "beside a busy unit, measured once on this machine, then cached: by synthetic probes "
                             "beside a neighbour model (probe, the default), or by two short real runs of the scenario "
                             "itself with other seeds (scenario)")
    parser.add_argument("--calibration-s", type=float, default=CALIBRATION_S, metavar="S",
                        help=f"--overheads=scenario: seconds of the scenario run for real (twice), at least "
                             f"(default {CALIBRATION_S:g}; longer until each class offers 400 requests)")
    parser.add_argument("--real", action="store_true",
                        help="run on the real clock with real devices and kernels (takes the scenario's duration)")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="stop arrivals after S seconds (default: the scenario's duration_s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(list(argv))
    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".html"):
        parser.error("--plot: the file must end in .png or .html")
    if args.seed is not None and args.seed < 0:
        parser.error("--seed must be >= 0")
    if args.duration is not None and not args.duration > 0:
        parser.error("--duration must be a positive number of seconds")
    if args.plot:
        try:
            import matplotlib  # noqa: F401 - only checking it is there, before a long run
        except ImportError:
            sys.stderr.write("nnrt simulate: --plot needs matplotlib (pip install 'nnrt[plot]'); nothing was run\n")
            return 1
    try:
        scenario = load_scenario(args.scenario) if args.scenario else builtin_scenario()
        if args.duration is not None:
            scenario = with_duration(scenario, args.duration)
        if args.real:
            scenario, dropped = for_real_clock(scenario)
            if dropped:
                sys.stderr.write(f"nnrt simulate: --real ignores {', '.join(dropped)} (real kernels on this machine take "
                                 "the time they take)\n")
        result = simulate(scenario, seed=args.seed, policies=args.policy, compute=args.compute,
                          timeline=bool(args.plot), progress=False if args.no_progress else (progress_stream() or False),
                          real=args.real, overheads=args.overheads or False, calibration_s=args.calibration_s)
    except ScenarioError as err:
        sys.stderr.write(f"nnrt simulate: {err.args[0]}\n")
        return 2
    except NnrtError as err:
        sys.stderr.write(f"nnrt simulate: {err}\n")
        return 1
    out = sys.stdout
    for k, rep in enumerate(result.reports):
        out.write(("\n" if k else "") + report_table(rep) + "\n")
    if len(result.reports) > 1:
        out.write("\n" + comparison_table(result.reports) + "\n")
    for stats in result.stats:
        sys.stderr.write(stats.line() + "\n")
    if args.json:
        Path(args.json).write_text(to_json(result.reports), encoding="utf-8")
    if args.csv:
        Path(args.csv).write_text(to_csv(result.reports), encoding="utf-8")
    if args.plot:
        from nnrt.sim._plot import write_plot

        write_plot(result, args.plot)
    return 0
