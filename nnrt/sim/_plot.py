"""Plots of a simulation (the ``plot`` extra: matplotlib): PNG, or one self-contained HTML page.

One row per policy: on the left, the latency distribution of each class (a CDF of successful
executions' latency from the intended arrival, log time axis labelled in plain ms, with p99
marked; a class with no successes stays in the legend); on the right, a timeline of the
compute units over the first 250 ms (or the whole run if shorter): one bar per run segment,
coloured by class, hatched when the execution failed, with a legend of the classes
(segments shorter than 0.4% of the window are drawn that wide, on top, to stay visible).
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
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from nnrt.sim._engine import SimulationResult
from nnrt.sim._report import comparison_table, report_table
from nnrt.types import ErrorStatus

__all__ = ["write_plot"]

_WINDOW_S = 0.25
#: The narrowest bar drawn on a timeline, as a fraction of its window (shorter segments are widened).
_MIN_BAR = 0.004


def _log_axis(ax: Axes, values_ms: list[float]) -> None:
    """A log time axis labelled in plain milliseconds, each label once and none crowded:
    1-2-5 steps over up to three decades, one label per decade beyond."""
    ax.set_xscale("log")
    if values_ms:
        lo, hi = max(min(values_ms), 1e-9), max(max(values_ms), 1e-9)
        if hi / lo < 5:  # a narrow range (identical latencies in virtual time): widen it to hold two labels
            lo, hi = lo / 2.5, hi * 2.5
            ax.set_xlim(lo, hi)
        subs = (1.0, 2.0, 5.0) if np.log10(hi / lo) <= 3 else (1.0,)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _figure(result: SimulationResult) -> Figure:
    runs = result.data
    fig, axes = plt.subplots(len(runs), 2, figsize=(14, 3.8 * len(runs)), squeeze=False)
    classes = list(runs[0].latencies_s)
    for data in runs[1:]:
        classes += [c for c in data.latencies_s if c not in classes]
    colours = {c: plt.get_cmap("tab10")(k % 10) for k, c in enumerate(classes)}
    for row, data in enumerate(runs):
        ax = axes[row][0]
        shown: list[float] = []
        for name in classes:
            lat = np.sort(data.latencies_s.get(name, np.zeros(0))) * 1e3
            if lat.size == 0:  # still listed, so a class that never succeeded does not vanish
                ax.plot([], [], color=colours[name], label=f"{name} (no successes)")
                continue
            frac = np.arange(1, lat.size + 1) / lat.size
            ax.step(lat, frac, where="post", color=colours[name], label=f"{name} (n={lat.size})")
            ax.axvline(float(np.percentile(lat, 99)), color=colours[name], linestyle=":", linewidth=1)
            shown += [float(lat[0]), float(lat[-1])]
        _log_axis(ax, shown)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("latency from intended arrival (ms, log scale); dotted: p99")
        ax.set_ylabel("fraction of successes")
        ax.set_title(f"{data.policy}: latency distribution per class")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")

        ax = axes[row][1]
        window = min(_WINDOW_S, data.simulated_s) or _WINDOW_S
        units: set[tuple[str, int]] = set()
        for dev, segments in data.timelines.items():
            for seg in segments:
                if seg.start >= window:
                    continue
                units.add((dev, seg.unit))
        lanes = {u: k for k, u in enumerate(sorted(units))}
        failed = False
        narrow = window * 1e3 * _MIN_BAR
        for dev, segments in data.timelines.items():
            for seg in segments:
                if seg.start >= window:
                    continue
                name = f"{seg.app}/{seg.priority.name}"
                failed = failed or seg.status is not ErrorStatus.NONE
                width = (min(seg.end, window) - seg.start) * 1e3
                # Short segments are widened to stay visible, and drawn over the long ones.
                ax.broken_barh([(seg.start * 1e3, max(width, narrow))], (lanes[dev, seg.unit] - 0.4, 0.8),
                               facecolors=colours.get(name, "grey"), edgecolor="black", linewidth=0.2,
                               hatch=None if seg.status is ErrorStatus.NONE else "xx", zorder=3 if width < narrow else 2)
        ax.set_yticks(range(len(lanes)), [f"{d} unit {u}" for d, u in sorted(lanes)])
        ax.set_xlim(0, window * 1e3)
        ax.set_xlabel(f"virtual time (ms); segments under {narrow:.2g} ms drawn that wide")
        ax.set_title(f"{data.policy}: compute units over the first {window * 1e3:g} ms")
        handles = [Patch(facecolor=colours[c], edgecolor="black", linewidth=0.4, label=c) for c in classes]
        if failed:
            handles.append(Patch(facecolor="white", edgecolor="black", hatch="xx", label="failed"))
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
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
