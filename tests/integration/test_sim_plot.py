"""The simulator's PNG plot: readable log axes, every class listed, a legend on the timeline."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

import matplotlib.pyplot as plt

from nnrt.sim._engine import simulate
from nnrt.sim._plot import _figure, write_plot
from nnrt.sim._scenario import parse_scenario

SCENARIO = """
duration_s = 0.5
[devices.cpu]
compute_units = 1
[[workloads]]
app = "ok"
model = "one_add"
arrival = "periodic"
period_ms = 5
[[workloads]]
app = "late"
model = "mlp"
priority = "high"
arrival = "periodic"
period_ms = 20
deadline_ms = 0.0001
"""


def test_plot_lists_every_class_labels_log_axes_once_and_has_a_timeline_legend(tmp_path: Path) -> None:
    result = simulate(parse_scenario(SCENARIO), timeline=True, progress=False)
    assert result.reports[0].get("late", result.reports[0].classes[1].priority).succeeded == 0
    fig = _figure(result)
    try:
        fig.canvas.draw()
        cdf, timeline = fig.axes[0], fig.axes[1]
        legend = [t.get_text() for t in cdf.get_legend().get_texts()]
        assert "late/HIGH (no successes)" in legend and any(t.startswith("ok/MEDIUM (n=") for t in legend)
        lo, hi = cdf.get_xlim()
        labels = [t.get_text() for t in cdf.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
        assert labels and len(labels) == len(set(labels))
        assert all("^" not in t and "times" not in t for t in labels)  # plain ms, no 2x10^0
        boxes = [t.get_window_extent() for t in cdf.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
        assert all(a.x1 <= b.x0 for a, b in itertools.pairwise(boxes))  # no two labels overlap
        names = [t.get_text() for t in timeline.get_legend().get_texts()]
        assert {"ok/MEDIUM", "late/HIGH"} <= set(names)
    finally:
        plt.close(fig)
    png = tmp_path / "p.png"
    write_plot(result, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
