"""The simulator's fidelity: the built-in scenario for 20 s on the real clock, and in virtual time.

Both runs use the same scenario, seed and arrivals. The real run (``simulate(real=True)``)
runs real ``CpuDevice``s, real kernels and worker threads on an asyncio loop; the virtual
runs use step costs and host models measured on this machine in this process (a fresh cost
file, not the cache), just before the real runs: ``virtual`` models kernels only (their
calibrated best times), ``+host`` adds the host model (``nnrt.sim._overhead``: wake-up
lateness, hand-offs and kernel-time samples, alone and beside a busy unit), ``+scenario``
the host model calibrated on the scenario itself (``nnrt.sim._calibrate``: two real runs of its
first ``--calibration`` seconds or more, with other seeds, before the real runs compared: the
window grows until each open-loop class is expected to offer 400 requests). Printed per
class: p50 and p99 latency (from the intended arrival, successful executions) and the miss
rate (missed deadlines / offered, %), real beside virtual, with the difference and whether
it is within the issue's bound (10% of the real figure for latencies, 2 percentage points
for miss rates).

By default the scenario is the built-in one as it is, as the issue's target says: its
background app keeps both units busy with two closed-loop clients, so the camera and the
assistant wait for a background execution to end. ``--moderate`` gives the background app
one client with 10 ms of think time instead, so a unit is usually free and the tails come
from running beside the background (the loop thread, two workers and other processes on two
cores). ``--saturate`` is accepted for the default, as before.

The built-in deadlines (33 and 100 ms) are far above the latencies, so nothing misses;
``--tight`` sets them near the tail latencies (camera 8 ms, assistant 4 ms), where a few
percent miss, to compare miss rates. Misses are split into late (MISSED_DEADLINE_TRANSIENT)
and refused at admission (MISSED_DEADLINE_PERSISTENT: the plan's learned service time, mean
+ 3 mean deviations, ``Plan.admission_cost_ns``, does not fit before the deadline; refusals
decay that estimate until an execution is admitted and measured again, ``Plan.refused``).
``--repeat N`` runs the real side N times (the virtual side is deterministic), to show the
real side's variance; a summary gives each figure's median over the runs, and the noise
floor: every real run judged against every other real run with the same bounds, beside each
model judged against every real run (a model cannot be expected to match a real run more
often than another real run does).

Run: python benchmarks/fidelity.py [--duration 20] [--repeat 1] [--moderate] [--tight] [--calibration 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from nnrt.sim import Report, builtin_scenario_text, parse_scenario, simulate
from nnrt.sim._calibrate import CALIBRATION_RUNS, CALIBRATION_S, calibration_seed, calibration_window
from nnrt.sim._report import FAILURE_KEYS

LAT_BOUND = 0.10  # relative, on p50 and p99
MISS_BOUND = 2.0  # percentage points


TIGHT_MS = {"camera": 8.0, "assistant": 4.0}  # --tight: deadlines near the classes' tail latencies


def scenario_text(duration: float, saturate: bool, tight: bool = False) -> str:
    text = builtin_scenario_text(duration)
    if not saturate:
        text = text.replace("clients = 2", "clients = 1\nthink_ms = 10.0", 1)
    if tight:
        for old, new in (("deadline_ms = 33.0", f"deadline_ms = {TIGHT_MS['camera']}"),
                         ("deadline_ms = 100.0", f"deadline_ms = {TIGHT_MS['assistant']}")):
            if old not in text:  # pragma: no cover - the built-in scenario changed
                raise AssertionError(f"the built-in scenario has no {old!r}")
            text = text.replace(old, new, 1)
    return text


def miss_pct(rep: Report, app: str, prio: str) -> float:
    c = rep.get(app, prio)
    return 100.0 * (c.failures[FAILURE_KEYS[0]] + c.failures[FAILURE_KEYS[1]]) / max(c.offered, 1)


def _late_refused(rep: Report, app: str, prio: str) -> str:
    """Missed deadlines as late (TRANSIENT) / refused at admission (PERSISTENT)."""
    f = rep.get(app, prio).failures
    return f"{f[FAILURE_KEYS[0]]}/{f[FAILURE_KEYS[1]]}"


def _check(real: float, sim: float, miss: bool) -> tuple[str, bool]:
    if miss:
        return f"{sim - real:+7.2f}pp", abs(sim - real) <= MISS_BOUND
    rel = (sim - real) / real if real else 0.0
    return f"{rel * 100:+7.1f}% ", abs(rel) <= LAT_BOUND


def side_by_side(real: Report, sims: list[tuple[str, Report]]) -> tuple[str, list[int], int]:
    """The real run beside each virtual one: figure, difference, within the bound."""
    head = f"{'class':18} {'figure':8} {'real':>8}"
    for label, _ in sims:
        head += f" | {label:>10} {'diff':>9} {'':3}"
    rows = [head]
    ok = [0] * len(sims)
    total = 0
    for c in real.classes:
        figures: list[tuple[str, float | None, list[float | None]]] = []
        for key in ("p50", "p99"):
            figures.append((key + " ms", c.latency_ms[key], [s.get(c.app, c.priority).latency_ms[key] for _, s in sims]))
        figures.append(("miss %", miss_pct(real, c.app, c.priority), [miss_pct(s, c.app, c.priority) for _, s in sims]))
        for label, a, bs in figures:
            total += 1
            row = f"{c.name:18} {label:8} {'-' if a is None else f'{a:8.3f}':>8}"
            for k, b in enumerate(bs):
                if a is None or b is None:
                    row += f" | {'-':>10} {'':9} {'':3}"
                    continue
                diff, within = _check(a, b, label == "miss %")
                ok[k] += within
                row += f" | {b:10.3f} {diff:>9} {'ok' if within else 'OUT':3}"
            rows.append(row)
        rows.append(f"{'':18} {'offered':8} {c.offered:8d}" + "".join(
            f" | {s.get(c.app, c.priority).offered:10d} {'':9} {'':3}" for _, s in sims))
        rows.append(f"{'':18} {'late/ref':8} {_late_refused(real, c.app, c.priority):>8}" + "".join(
            f" | {_late_refused(s, c.app, c.priority):>10} {'':9} {'':3}" for _, s in sims))
    util = f"{'device':18} {'util %':8} {real.devices[0].utilisation_pct:8.1f}"
    rows.append(util + "".join(f" | {s.devices[0].utilisation_pct:10.1f} {'':9} {'':3}" for _, s in sims))
    return "\n".join(rows), ok, total


def figures(rep: Report) -> dict[tuple[str, str], float | None]:
    """(class, figure) -> value, for the summary over repeated real runs."""
    out: dict[tuple[str, str], float | None] = {}
    for c in rep.classes:
        out[c.name, "p50 ms"] = c.latency_ms["p50"]
        out[c.name, "p99 ms"] = c.latency_ms["p99"]
        out[c.name, "miss %"] = miss_pct(rep, c.app, c.priority)
    return out


def summary(reals: list[Report], sims: list[tuple[str, Report]]) -> str:
    """Each figure's median (and range) over the real runs, beside the virtual runs."""
    head = f"{'class':18} {'figure':8} {'real med':>8} {'[min, max]':>17}"
    for label, _ in sims:
        head += f" | {label:>10} {'diff':>9} {'':3}"
    rows = [head]
    per_run = [figures(r) for r in reals]
    sim_figs = [figures(s) for _, s in sims]
    for key in per_run[0]:
        vals = [f[key] for f in per_run if f.get(key) is not None]
        if not vals:
            continue
        med = statistics.median(vals)  # type: ignore[type-var]
        row = f"{key[0]:18} {key[1]:8} {med:8.3f} [{min(vals):7.3f}, {max(vals):7.3f}]"  # type: ignore[type-var]
        for sf in sim_figs:
            b = sf.get(key)
            if b is None:
                row += f" | {'-':>10} {'':9} {'':3}"
                continue
            diff, within = _check(med, b, key[1] == "miss %")
            row += f" | {b:10.3f} {diff:>9} {'ok' if within else 'OUT':3}"
        rows.append(row)
    return "\n".join(rows)


def _within(real: dict[tuple[str, str], float | None], other: dict[tuple[str, str], float | None]) -> int:
    """How many of ``real``'s figures ``other`` matches within the bounds."""
    return sum(_check(a, b, key[1] == "miss %")[1] for key, a in real.items()
               if a is not None and (b := other.get(key)) is not None)


def noise_floor(reals: list[Report], sims: list[tuple[str, Report]]) -> str:
    """Each real run judged against each other real run with the same bounds, beside each
    model judged against each real run: a model can do no better than a second real run."""
    per_run = [figures(r) for r in reals]
    total = len(per_run[0])

    def line(label: str, counts: list[int]) -> str:
        return (f"  {label:34} {statistics.mean(counts):4.1f}/{total} on average "
                f"(min {min(counts)}, max {max(counts)}; all within in {sum(c == total for c in counts)} of {len(counts)})")

    pairs = [_within(a, b) for i, a in enumerate(per_run) for j, b in enumerate(per_run) if i != j]
    rows = [line("another real run (the noise floor)", pairs)]
    for label, rep in sims:
        fig = figures(rep)
        rows.append(line(label, [_within(a, fig) for a in per_run]))
    return "\n".join(rows)


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of traffic (default 20)")
    parser.add_argument("--repeat", type=int, default=1, help="real-clock runs (default 1)")
    parser.add_argument("--moderate", action="store_true", help="one background client thinking 10 ms")
    parser.add_argument("--saturate", action="store_true", help="the built-in scenario as is (the default)")
    parser.add_argument("--calibration", type=float, default=CALIBRATION_S,
                        help=f"+scenario: seconds of the scenario run for real to calibrate (default {CALIBRATION_S:g})")
    parser.add_argument("--tight", action="store_true", help="deadlines near the latencies (misses to compare)")
    args = parser.parse_args()
    out = sys.stdout.write
    if args.moderate and args.saturate:
        parser.error("--moderate and --saturate exclude each other")
    scenario = parse_scenario(scenario_text(args.duration, not args.moderate, args.tight), source="<fidelity>")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NNRT_SIM_COSTS"] = os.path.join(tmp, "costs.json")  # calibrate now, in this run
        plain = simulate(scenario, progress=False)
        t = time.perf_counter()
        hosted = simulate(scenario, progress=False, overheads=True)
        measured = time.perf_counter() - t - hosted.stats[0].wall_s
        t = time.perf_counter()
        scen = simulate(scenario, progress=False, overheads="scenario", calibration_s=args.calibration)
        calibrated = time.perf_counter() - t - scen.stats[0].wall_s
    window = calibration_window(scenario, args.calibration)
    sims = [("virtual", plain.reports[0]), ("+host", hosted.reports[0]), ("+scenario", scen.reports[0])]
    load = "moderate" if args.moderate else "saturating (built-in)"
    deadlines = ("tight deadlines: " + ", ".join(f"{a} {d:g} ms" for a, d in TIGHT_MS.items())) if args.tight \
        else "built-in deadlines"
    out(f"scenario {scenario.name!r} ({load} background, {deadlines}), {args.duration:g} s, seed {scenario.seed}\n")
    for name, m in plain.reports[0].models.items():
        out(f"model {name}: {m['cost_ms']} ms per execution ({m['source']} in this run)\n")
    out(f"virtual runs: {plain.stats[0].wall_s:.2f} s and {hosted.stats[0].wall_s:.2f} s wall "
        f"(host model measured in {measured:.1f} s), {scen.stats[0].wall_s:.2f} s (calibrated on the scenario in "
        f"{calibrated:.1f} s: {window:g} s of it on the real clock {CALIBRATION_RUNS} times, seeds "
        f"{', '.join(str(calibration_seed(scenario, k)) for k in range(CALIBRATION_RUNS))}); "
        f"{_load()}\n")
    reals = []
    for k in range(args.repeat):
        real = simulate(scenario, real=True)
        (rrep,) = real.reports
        reals.append(rrep)
        table, ok, total = side_by_side(rrep, sims)
        verdict = ", ".join(f"{label} {n}/{total}" for (label, _), n in zip(sims, ok))
        out(f"\nreal run {k + 1}/{args.repeat}: {real.stats[0].wall_s:.1f} s wall, {_load()}; within bounds: {verdict}\n")
        out(table + "\n")
        costs = ", ".join(f"{name} {m['cost_ms']} ms" for name, m in rrep.models.items())
        out(f"  real devices calibrated at preparation: {costs}\n")
    if len(reals) > 1:
        out(f"\nmedian over {len(reals)} real runs:\n{summary(reals, sims)}\n")
        out(f"\nfigures within bounds of a real run, judged by:\n{noise_floor(reals, sims)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
