"""Plots of a simulation (the ``plot`` extra: matplotlib): PNG, or one self-contained HTML page.

One row per policy: on the left, the latency distribution of each class (a CDF of successful
executions' latency from the intended arrival, log time axis, with p99 marked); on the
right, a timeline of the compute units over the first 250 ms (or the whole run if
shorter): one bar per run segment, coloured by class, hatched when the execution failed.
The HTML page embeds the same figure as SVG above the report tables.
"""

from __future__ import annotations

import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed; must precede pyplot

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from nnrt.sim._engine import SimulationResult
from nnrt.sim._report import comparison_table, report_table
from nnrt.types import ErrorStatus

__all__ = ["write_plot"]

_WINDOW_S = 0.25


def _figure(result: SimulationResult) -> Figure:
    runs = result.data
    fig, axes = plt.subplots(len(runs), 2, figsize=(13, 3.6 * len(runs)), squeeze=False)
    classes = list(runs[0].latencies_s)
    colours = {c: plt.get_cmap("tab10")(k % 10) for k, c in enumerate(classes)}
    for row, data in enumerate(runs):
        ax = axes[row][0]
        for name in classes:
            lat = np.sort(data.latencies_s.get(name, np.zeros(0))) * 1e3
            if lat.size == 0:
                continue
            frac = np.arange(1, lat.size + 1) / lat.size
            ax.step(lat, frac, where="post", color=colours[name], label=f"{name} (n={lat.size})")
            ax.axvline(float(np.percentile(lat, 99)), color=colours[name], linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("latency from intended arrival (ms, log); dotted: p99")
        ax.set_ylabel("fraction of successes")
        ax.set_title(f"{data.policy}: latency distribution per class")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")

        ax = axes[row][1]
        window = min(_WINDOW_S, data.simulated_s) or _WINDOW_S
        units: set[tuple[str, int]] = set()
        for dev, segments in data.timelines.items():
            for seg in segments:
                if seg.start >= window:
                    continue
                units.add((dev, seg.unit))
        lanes = {u: k for k, u in enumerate(sorted(units))}
        for dev, segments in data.timelines.items():
            for seg in segments:
                if seg.start >= window:
                    continue
                name = f"{seg.app}/{seg.priority.name}"
                ax.broken_barh([(seg.start * 1e3, (min(seg.end, window) - seg.start) * 1e3)], (lanes[dev, seg.unit] - 0.4, 0.8),
                               facecolors=colours.get(name, "grey"), edgecolor="black", linewidth=0.2,
                               hatch=None if seg.status is ErrorStatus.NONE else "xx")
        ax.set_yticks(range(len(lanes)), [f"{d} unit {u}" for d, u in sorted(lanes)])
        ax.set_xlim(0, window * 1e3)
        ax.set_xlabel("virtual time (ms); hatched: the execution failed")
        ax.set_title(f"{data.policy}: compute units over the first {window * 1e3:g} ms")
    fig.tight_layout()
    return fig


def write_plot(result: SimulationResult, path: str | Path) -> None:
    """Write the figure to ``path`` (``.png``, or ``.html`` with the report tables)."""
    p = Path(path)
    fig = _figure(result)
    try:
        if p.suffix.lower() == ".html":
            buf = io.StringIO()
            fig.savefig(buf, format="svg")
            tables = [report_table(rep) for rep in result.reports]
            if len(result.reports) > 1:
                tables.append(comparison_table(result.reports))
            title = html.escape(f"nnrt simulate: {result.reports[0].scenario}")
            body = "\n".join(f"<pre>{html.escape(t)}</pre>" for t in tables)
            p.write_text(f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{title}</title></head>\n"
                         f"<body><h1>{title}</h1>\n{buf.getvalue()}\n{body}\n</body></html>\n", encoding="utf-8")
        else:
            fig.savefig(p, dpi=110)
    finally:
        plt.close(fig)
