"""The simulation report: per class and per device figures, as a table, JSON and CSV.

A class is one (app, priority) pair, the unit NNAPI priorities mean something in. For each:
``offered`` executions (arrivals), ``succeeded``, failures by status (the four QoS statuses
and ``other``), latency percentiles of successful executions measured from the *intended*
arrival time (open-loop, so a backlog shows up in the tail: no coordinated omission),
throughput (successes per simulated second; a success is always on time, since nnrt never
lets an execution succeed after its deadline), the on-time share of offered work,
preemptions, time queued (from submission to end, minus device time), device time, and the
device time *wasted* on executions that ran and then failed. Per device: utilisation of each
compute unit over the simulated time.

Everything in a ``Report`` depends only on the scenario and the seed: figures are rounded
to fixed precision and wall-clock measurements live elsewhere (``RunStats``), so the same
scenario and seed give a byte-identical table, JSON and CSV.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["FAILURE_KEYS", "PERCENTILES", "ClassReport", "DeviceReport", "Report", "RunStats", "comparison_table",
           "report_table", "to_csv", "to_json"]

FAILURE_KEYS = ("MISSED_DEADLINE_TRANSIENT", "MISSED_DEADLINE_PERSISTENT", "RESOURCE_EXHAUSTED_TRANSIENT",
                "RESOURCE_EXHAUSTED_PERSISTENT", "other")
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9))
#: What the table's abbreviated columns mean (printed under every table).
LEGEND = ("ok: succeeded; MD-T / MD-P: failed MISSED_DEADLINE_TRANSIENT / _PERSISTENT; RE-T / RE-P: failed "
          "RESOURCE_EXHAUSTED_TRANSIENT / _PERSISTENT\n(queue or memory full); other: any other failure; "
          "preempt: times an execution yielded to a more urgent one; queued: mean ms waiting for a compute unit")
_SHORT = {"MISSED_DEADLINE_TRANSIENT": "MD-T", "MISSED_DEADLINE_PERSISTENT": "MD-P",
          "RESOURCE_EXHAUSTED_TRANSIENT": "RE-T", "RESOURCE_EXHAUSTED_PERSISTENT": "RE-P", "other": "other"}


@dataclass(frozen=True)
class ClassReport:
    """The figures of one (app, priority) class under one policy (module docstring)."""

    app: str
    priority: str
    offered: int
    succeeded: int
    failures: dict[str, int]
    latency_ms: dict[str, float | None]  # p50, p90, p99, p99.9, max of successes
    throughput_per_s: float
    on_time_pct: float
    preemptions: int
    queued_ms_mean: float
    queued_ms_p99: float
    device_s: float
    wasted_s: float

    @property
    def name(self) -> str:
        return f"{self.app}/{self.priority}"


@dataclass(frozen=True)
class DeviceReport:
    name: str
    units: int
    speed: float
    utilisation_pct: float
    unit_utilisation_pct: list[float]
    device_s: float
    wasted_s: float


@dataclass(frozen=True)
class Report:
    """One run: a scenario under one policy with one seed."""

    scenario: str
    seed: int
    policy: str
    simulated_s: float
    executions: int
    models: dict[str, dict[str, object]]  # name -> cost_ms per execution at speed 1, cost source, steps
    classes: list[ClassReport]
    devices: list[DeviceReport]

    def get(self, app: str, priority: str) -> ClassReport:
        for c in self.classes:
            if c.app == app and c.priority == priority.upper():
                return c
        raise KeyError((app, priority))


@dataclass(frozen=True)
class RunStats:
    """Wall-clock figures of one run (never part of the report: they vary run to run)."""

    policy: str
    wall_s: float
    simulated_s: float
    executions: int
    loop_iterations: int

    @property
    def speedup(self) -> float:
        """Simulated seconds per wall second."""
        return self.simulated_s / self.wall_s if self.wall_s > 0 else float("inf")

    def line(self) -> str:
        return (f"{self.policy}: {self.executions} executions, {self.simulated_s:.1f} s simulated in {self.wall_s:.2f} s "
                f"wall ({self.speedup:,.0f} simulated s per wall s, {self.executions / max(self.wall_s, 1e-9):,.0f} "
                f"executions/s)")


def r(x: float, digits: int = 3) -> float:
    """Round for the report (fixed precision keeps reports byte-identical)."""
    return round(float(x), digits)


def latency_summary(latencies_s: Sequence[float]) -> dict[str, float | None]:
    if not len(latencies_s):
        return {k: None for k, _ in (*PERCENTILES, ("max", 0.0))}
    arr = np.asarray(latencies_s) * 1e3
    values = np.percentile(arr, [q for _, q in PERCENTILES])
    out: dict[str, float | None] = {k: r(v) for (k, _), v in zip(PERCENTILES, values)}
    out["max"] = r(arr.max())
    return out


# -------------------------------------------------------------------------------- output formats


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def report_table(rep: Report) -> str:
    """The terminal table of one run."""
    head = ["class", "offered", "ok", "p50", "p90", "p99", "p99.9", "max", "ok/s", "on-time%",
            *(_SHORT[k] for k in FAILURE_KEYS), "preempt", "queued", "wasted"]
    rows = [head]
    for c in rep.classes:
        lat = c.latency_ms
        rows.append([c.name, str(c.offered), str(c.succeeded), *(_fmt(lat[k]) for k in ("p50", "p90", "p99", "p99.9", "max")),
                     _fmt(c.throughput_per_s), _fmt(c.on_time_pct, 1), *(str(c.failures[k]) for k in FAILURE_KEYS),
                     str(c.preemptions), _fmt(c.queued_ms_mean), _fmt(c.wasted_s, 3)])
    lines = [f"scenario {rep.scenario!r}, policy {rep.policy}, seed {rep.seed}: {rep.executions} executions over "
             f"{rep.simulated_s:.3f} s simulated", _grid(rows),
             "latencies and queued time in ms from the intended arrival; wasted: device s spent on executions that failed",
             LEGEND, ""]
    for d in rep.devices:
        units = " ".join(f"{u:.1f}" for u in d.unit_utilisation_pct)
        lines.append(f"device {d.name}: {d.units} unit(s) at speed {d.speed:g}, utilisation {d.utilisation_pct:.1f}% "
                     f"(per unit {units}), wasted {d.wasted_s:.3f} s")
    for name, m in rep.models.items():
        lines.append(f"model {name}: {m['cost_ms']} ms per execution at speed 1 ({m['steps']} steps, {m['source']})")
    return "\n".join(lines)


def comparison_table(reports: Sequence[Report]) -> str:
    """The same scenario under several policies, side by side."""
    head = ["class", "figure", *(rep.policy for rep in reports)]
    rows = [head]
    figures: list[tuple[str, str]] = [("p50 ms", "p50"), ("p99 ms", "p99"), ("p99.9 ms", "p99.9")]
    for c0 in reports[0].classes:
        cs = [rep.get(c0.app, c0.priority) for rep in reports]
        for label, key in figures:
            rows.append([c0.name, label, *(_fmt(c.latency_ms[key]) for c in cs)])
        rows.append([c0.name, "on-time %", *(_fmt(c.on_time_pct, 1) for c in cs)])
        rows.append([c0.name, "ok/s", *(_fmt(c.throughput_per_s) for c in cs)])
        rows.append([c0.name, "missed deadline", *(str(c.failures[FAILURE_KEYS[0]] + c.failures[FAILURE_KEYS[1]]) for c in cs)])
        rows.append([c0.name, "resource exh.", *(str(c.failures[FAILURE_KEYS[2]] + c.failures[FAILURE_KEYS[3]]) for c in cs)])
        rows.append([c0.name, "preemptions", *(str(c.preemptions) for c in cs)])
        rows.append([c0.name, "wasted s", *(_fmt(c.wasted_s, 3) for c in cs)])
    for k, d0 in enumerate(reports[0].devices):
        rows.append([f"device {d0.name}", "utilisation %", *(_fmt(rep.devices[k].utilisation_pct, 1) for rep in reports)])
    return f"scenario {reports[0].scenario!r}, seed {reports[0].seed}: policies side by side\n" + _grid(rows)


def _grid(rows: list[list[str]]) -> str:
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        cells = [cell.ljust(w) if k == 0 or (k == 1 and rows[0][1] == "figure") else cell.rjust(w)
                 for k, (cell, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def to_json(reports: Sequence[Report]) -> str:
    """Every run as JSON (``{"runs": [...]}``), keys sorted."""
    return json.dumps({"runs": [asdict(rep) for rep in reports]}, indent=1, sort_keys=True) + "\n"


def to_csv(reports: Sequence[Report]) -> str:
    """One row per (policy, class), for spreadsheets and scripts."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    lat_keys = [k for k, _ in PERCENTILES] + ["max"]
    w.writerow(["scenario", "seed", "policy", "app", "priority", "offered", "succeeded", *FAILURE_KEYS,
                *(f"latency_{k}_ms" for k in lat_keys), "throughput_per_s", "on_time_pct", "preemptions",
                "queued_ms_mean", "queued_ms_p99", "device_s", "wasted_s"])
    for rep in reports:
        for c in rep.classes:
            lat = ("" if c.latency_ms[k] is None else c.latency_ms[k] for k in lat_keys)
            w.writerow([rep.scenario, rep.seed, rep.policy, c.app, c.priority, c.offered, c.succeeded,
                        *(c.failures[k] for k in FAILURE_KEYS), *lat, c.throughput_per_s, c.on_time_pct, c.preemptions,
                        c.queued_ms_mean, c.queued_ms_p99, c.device_s, c.wasted_s])
    return buf.getvalue()
