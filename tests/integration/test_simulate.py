"""``nnrt simulate`` end to end: hand-computable figures, determinism, every execution mode,
failure statuses, the policy comparison, the command line and its outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnrt import cli
from nnrt.sim import (
    Report,
    SimulationError,
    comparison_table,
    parse_scenario,
    report_table,
    simulate,
    to_csv,
    to_json,
)

pytestmark = pytest.mark.usefixtures("cost_cache")  # tests/integration/conftest.py


def run(text: str, **kw: object) -> list[Report]:
    return simulate(parse_scenario(text), progress=False, **kw).reports  # type: ignore[arg-type]


HAND = """
[devices.npu]
speed = 2.0

[models.m]
builtin = "one_add"
step_costs_us = [1000]

[[workloads]]
app = "a"
model = "m"
priority = "high"
deadline_ms = 5
arrival = "periodic"
period_ms = 10
count = 100
"""


def test_figures_of_a_hand_computable_scenario() -> None:
    (rep,) = run(HAND)
    c = rep.get("a", "high")
    # 1 ms at speed 1 is 0.5 ms on a device twice as fast; nothing ever waits.
    assert (c.offered, c.succeeded, c.preemptions) == (100, 100, 0)
    assert all(v == 0.5 for v in c.latency_ms.values())
    assert sum(c.failures.values()) == 0 and c.on_time_pct == 100.0
    assert rep.simulated_s == pytest.approx(0.99 + 0.0005)
    assert c.throughput_per_s == pytest.approx(100 / 0.9905, abs=1e-3)
    assert c.device_s == pytest.approx(0.05) and c.wasted_s == 0 and c.queued_ms_mean == 0
    (dev,) = rep.devices
    assert dev.utilisation_pct == pytest.approx(100 * 0.05 / 0.9905, abs=0.01)
    assert rep.models["m"] == {"cost_ms": 1.0, "source": "scenario", "steps": 1}


def test_queueing_and_deadline_misses_are_exact(tmp_path: Path) -> None:
    # Four requests at t=0 for one unit, 1 ms each, deadline 2.5 ms: two finish (at 1 and 2 ms);
    # admission refuses the other two at once (they would end at 3 and 4 ms): no work wasted.
    (tmp_path / "t.txt").write_text("0\n0\n0\n0\n")
    text = HAND.replace("speed = 2.0", "speed = 1.0").replace("deadline_ms = 5", "deadline_ms = 2.5")
    text = text.replace('arrival = "periodic"\nperiod_ms = 10\ncount = 100', 'arrival = "trace"\nfile = "t.txt"')
    (rep,) = simulate(parse_scenario(text, base_dir=str(tmp_path)), progress=False).reports
    c = rep.get("a", "high")
    assert c.succeeded == 2 and c.latency_ms["p50"] == 1.5 and c.latency_ms["max"] == 2.0
    assert c.failures["MISSED_DEADLINE_TRANSIENT"] == 2 and c.wasted_s == 0.0
    assert c.queued_ms_mean == 0.5  # 0 and 1 ms


PRIORITIES = """
duration_s = 10
[models.short]
builtin = "small_cnn"
cost_ms = 1.0
[models.long]
builtin = "add_chain"
cost_ms = 50.0
[[workloads]]
app = "gallery"
model = "short"
priority = "high"
deadline_ms = 5
arrival = "periodic"
period_ms = 100
jitter_ms = 7
[[workloads]]
app = "gallery"
model = "long"
priority = "low"
arrival = "closed"
"""


def test_policy_comparison_preemption_keeps_high_on_time() -> None:
    reports = run(PRIORITIES, policies=["nnrt", "fifo", "priority", "edf"])
    by = {r.policy: r for r in reports}
    for p in ("nnrt", "edf"):  # preempt LOW at the next 1 ms step boundary
        high = by[p].get("gallery", "high")
        assert high.on_time_pct == 100.0 and high.latency_ms["max"] <= 2.0 + 1e-9
        assert by[p].get("gallery", "low").preemptions == high.offered
    for p in ("fifo", "priority"):  # wait for the 50 ms LOW execution: the 5 ms deadline is lost
        high = by[p].get("gallery", "high")
        assert high.succeeded < high.offered / 5
        assert by[p].get("gallery", "low").preemptions == 0
    table = comparison_table(reports)
    assert table.splitlines()[1].split() == ["class", "figure", "nnrt", "fifo", "priority", "edf"]
    assert "gallery/HIGH" in table and "preemptions" in table


OVERLOAD = """
duration_s = 5
[models.net]
builtin = "mlp"
cost_ms = 2.0
[[workloads]]
app = "s"
model = "net"
deadline_ms = 20
arrival = "poisson"
rate_hz = 1000
"""


def test_overload_admission_sheds_without_waste_edf_wastes() -> None:
    nnrt, edf = run(OVERLOAD, policies=["nnrt", "edf"])
    a, b = nnrt.get("s", "medium"), edf.get("s", "medium")
    assert a.wasted_s == 0.0 and a.succeeded > 2 * b.succeeded
    assert a.throughput_per_s == pytest.approx(500, rel=0.02)  # the device's capacity
    assert b.wasted_s > 1.0 and b.failures["MISSED_DEADLINE_TRANSIENT"] > 0


def test_same_seed_byte_identical_other_seed_differs() -> None:
    text = PRIORITIES.replace("cost_ms = 1.0", "cost_ms = 1.0\njitter = 0.3")  # random step times and arrivals
    a = run(text, seed=3, policies=["nnrt", "edf"])
    b = run(text, seed=3, policies=["nnrt", "edf"])
    c = run(text, seed=4, policies=["nnrt", "edf"])
    assert to_json(a) == to_json(b) and to_csv(a) == to_csv(b)
    assert [report_table(r) for r in a] == [report_table(r) for r in b]
    assert to_json(a) != to_json(c)


MODES = """
duration_s = 1
[devices.cpu]
compute_units = 2
[models.pre]
builtin = "small_cnn"
cost_ms = 1.0
[models.post]
builtin = "mlp"
cost_ms = 0.5
[[workloads]]
app = "cam"
models = ["pre", "post"]
mode = "fenced"
deadline_ms = 10
arrival = "periodic"
period_ms = 20
[[workloads]]
app = "stream"
model = "post"
mode = "burst"
arrival = "closed"
think_ms = 4.5
"""


def test_fenced_chains_bursts_and_closed_loops() -> None:
    (rep,) = run(MODES)
    cam = rep.get("cam", "medium")
    assert cam.offered == 50 and cam.succeeded == 50 and cam.latency_ms["max"] == 1.5  # the two stages back to back
    stream = rep.get("stream", "medium")
    # Closed loop: one request every 0.5 ms of service + 4.5 ms of thinking.
    assert stream.offered == pytest.approx(200, abs=1) and stream.latency_ms["p50"] == 0.5  # (float sums of 5 ms)


def test_compute_mode_runs_the_kernels_with_the_same_report() -> None:
    assert to_json(run(MODES)) == to_json(run(MODES, compute=True))


def test_memory_budget_refuses_a_model_that_does_not_fit() -> None:
    text = """
[devices.cpu]
memory_mb = 1.0
[models.big]
builtin = "mobilenet_block"
cost_ms = 1.0
[[workloads]]
app = "big"
model = "big"
arrival = "periodic"
period_ms = 10
count = 20
[[workloads]]
app = "small"
model = "one_add"
arrival = "periodic"
period_ms = 10
count = 20
"""
    (rep,) = run(text)
    big = rep.get("big", "medium")
    assert big.succeeded == 0 and big.failures["RESOURCE_EXHAUSTED_PERSISTENT"] == big.offered == 20
    assert rep.get("small", "medium").succeeded == 20


def test_a_full_queue_is_resource_exhausted_transient() -> None:
    text = OVERLOAD.replace("deadline_ms = 20\n", "").replace("duration_s = 5", "duration_s = 0.5")
    text = text.replace("[models.net]", "[devices.cpu]\nmax_queued_per_app = 4\n[models.net]")
    (rep,) = run(text)
    c = rep.get("s", "medium")
    # 500 requests/s for a device that does 500 per s... at 2 ms each, 250 in 0.5 s, plus the few queued at the end.
    assert c.failures["RESOURCE_EXHAUSTED_TRANSIENT"] > 0 and 250 <= c.succeeded <= 256


def test_a_workload_that_never_ends_hits_the_time_limit() -> None:
    text = 'max_time_s = 5\n[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "periodic"\nperiod_ms = 1\nduration_s = 100\n'
    with pytest.raises(SimulationError, match="max_time_s"):
        run(text)


def test_calibrated_costs_are_measured_once_and_reused(cost_cache: Path) -> None:
    text = '[[workloads]]\napp = "a"\nmodel = "mlp"\narrival = "periodic"\nperiod_ms = 100\ncount = 3\n'
    (first,) = run(text)
    saved = json.loads(cost_cache.read_text())
    assert list(saved) == ["builtin:mlp:2"] and len(saved["builtin:mlp:2"]) == 4
    (second,) = run(text)
    assert first.models["mlp"]["source"] == "calibrated" and to_json([first]) == to_json([second])


def test_command_line_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(PRIORITIES)
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"
    assert cli.main(["simulate", str(scenario), "--policy", "nnrt,fifo", "--seed", "2", "--json", str(js), "--csv", str(cs),
                     "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "policies side by side" in out and "gallery/HIGH" in out
    assert "simulated s per wall s" in err
    runs = json.loads(js.read_text())["runs"]
    assert [r["policy"] for r in runs] == ["nnrt", "fifo"] and runs[0]["seed"] == 2
    rows = cs.read_text().splitlines()
    assert rows[0].startswith("scenario,seed,policy,app,priority") and len(rows) == 1 + 2 * 2


def test_command_line_rejects_a_bad_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "bad.toml"
    scenario.write_text('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\nrate_hz = -1\n')
    assert cli.main(["simulate", str(scenario)]) == 2
    assert "workloads[0].rate_hz: must be a finite number > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--policy", "lottery"])


def test_builtin_scenario_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--duration", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for name in ("camera/HIGH", "assistant/MEDIUM", "background/LOW"):
        assert name in out


def test_plot_png_and_html(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    scenario = tmp_path / "s.toml"
    scenario.write_text(PRIORITIES)
    png, page = tmp_path / "p.png", tmp_path / "p.html"
    assert cli.main(["simulate", str(scenario), "--policy", "nnrt,fifo", "--plot", str(png), "--no-progress"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["simulate", str(scenario), "--plot", str(page), "--no-progress"]) == 0
    text = page.read_text()
    assert "<svg" in text and "gallery/HIGH" in text
