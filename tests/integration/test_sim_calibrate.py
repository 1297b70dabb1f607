"""The host model calibrated on the scenario (``simulate(..., overheads="scenario")``; ``nnrt.sim._calibrate``).

The samples' construction is checked on hand-made recordings; the simulation's use of them
in virtual time with the real-clock recording replaced by a given one (so figures are exact
and no test depends on this machine's timing); the calibration window (its length, another seed,
capped durations), the cache, determinism and the command line likewise. One test records
for real, for the structure of what it records (never for timing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnrt import cli
from nnrt.sim import ScenarioError, _calibrate, parse_scenario, simulate, to_json
from nnrt.sim._calibrate import (
    CALIBRATION_RUNS,
    Recording,
    build_hosts,
    calibration_scenario,
    calibration_seed,
    calibration_window,
)
from nnrt.sim._engine import _models
from nnrt.sim._overhead import HostSamples
from nnrt.sim._real import Request

pytestmark = pytest.mark.usefixtures("cost_cache")  # tests/integration/conftest.py


ONE = """
duration_s = 1.0
[devices.cpu]
compute_units = 1
[[workloads]]
app = "a"
model = "one_add"
arrival = "periodic"
period_ms = 10
duration_s = 1.0
"""

TWO = """
duration_s = 2.0
[devices.cpu]
compute_units = 2
[[workloads]]
app = "a"
model = "one_add"
arrival = "periodic"
period_ms = 10
duration_s = 2.0
[[workloads]]
app = "bg"
model = "mlp"
priority = "low"
arrival = "closed"
think_ms = 5
count = 40
"""


def _req(granted: float | None = 0.0, busy: bool = False, waited: float = 0.0, preempted: bool = False) -> Request:
    return Request(granted=granted, busy=busy, waited_s=waited, preempted=preempted)


def _fake_record(monkeypatch: pytest.MonkeyPatch, make: Any) -> list[Any]:
    """Replace the real-clock recording with ``make(calibration scenario, models)``."""
    calls: list[Any] = []

    def fake(calib: Any, models: Any) -> Recording:
        calls.append(calib)
        rec: Recording = make(calib, models)
        return rec

    monkeypatch.setattr(_calibrate, "record", fake)
    return calls


def _constant(wake_s: float, handoff_s: float) -> Any:
    """A recording where every one_add request woke ``wake_s`` late and spent ``handoff_s``
    beyond its calibrated cost (device idle)."""

    def make(calib: Any, models: Any) -> Recording:
        cost = models["one_add"].cost_ns / 1e9
        rec = Recording(held={"cpu": []})
        for k in range(5):
            t0 = 0.01 * k
            rec.requests.append((0, t0, t0 + wake_s, t0 + wake_s + handoff_s + cost, True, _req(t0 + wake_s)))
        return rec

    return make


def test_build_hosts_takes_wake_ups_and_service_beyond_the_cost_by_condition() -> None:
    sc = parse_scenario(TWO)
    models = _models(sc)
    cost_a, cost_bg = models["one_add"].cost_ns / 1e9, models["mlp"].cost_ns / 1e9
    rec = Recording(held={"cpu": [(1.0, 2.0), (1.5, 3.0), (5.0, 6.0)]})
    rec.requests += [
        (0, 0.5, 0.501, 0.501 + cost_a + 0.002, True, _req(0.501)),  # idle at 0.5: alone
        (0, 2.5, 2.504, 2.504 + 0.010 + cost_a + 0.003, True, _req(2.51, busy=True, waited=0.010)),  # busy at 2.5
        (0, 4.0, 4.0, 4.0 + cost_a - 0.001, True, _req(4.0)),  # faster than calibrated: clipped at 0
        (0, 5.5, 5.507, 6.0, False, _req(5.6, busy=True)),  # failed: its wake-up counts, not its service
        (0, 7.0, 7.001, 7.5, True, _req(7.01, preempted=True)),  # preempted: no hand-off sample
        (1, 0.0, 0.0, 0.0 + cost_bg + 0.004, True, _req(0.0, busy=True)),  # closed loop: no wake-up from the request
    ]
    rec.wakes += [(1, 1.2, 0.0006), (1, 4.5, 0.0002)]
    hosts = build_hosts(sc, models, rec)
    a, bg = hosts["one_add"], hosts["mlp"]
    assert a.neighbour == "scenario" and not a.alone.ratios and not a.busy.ratios
    assert a.alone.wake_s == pytest.approx((0.001, 0.0, 0.001)) and a.busy.wake_s == pytest.approx((0.004, 0.007))
    assert a.alone.handoff_s == pytest.approx((0.002, 0.0)) and a.busy.handoff_s == pytest.approx((0.003,))
    assert bg.alone.wake_s == pytest.approx((0.0002,)) and bg.busy.wake_s == pytest.approx((0.0006,))
    assert bg.busy.handoff_s == pytest.approx((0.004,)) and bg.alone.handoff_s == bg.busy.handoff_s  # borrowed
    # Each open-loop wake-up keeps its request's hand-off (-1: failed or preempted); closed loops have none.
    assert a.alone.paired_s == pytest.approx((0.002, 0.0, -1.0)) and a.busy.paired_s == pytest.approx((0.003, -1.0))
    assert bg.alone.paired_s == () and bg.busy.paired_s == ()


def test_paired_samples_round_trip_through_the_cache_form() -> None:
    s = HostSamples((0.001, 0.002), (0.0005,), paired_s=(0.0003, -1.0))
    assert HostSamples.from_json(json.loads(json.dumps(s.to_json())), 0) == s
    assert HostSamples.from_json({**s.to_json(), "paired_s": [0.1]}, 0) is None  # not one per wake-up
    assert HostSamples.from_json({**s.to_json(), "paired_s": [0.1, -2]}, 0) is None
    legacy = s.to_json()
    del legacy["paired_s"]
    assert HostSamples.from_json(legacy, 0) == HostSamples((0.001, 0.002), (0.0005,))


def test_a_request_takes_the_hand_off_its_wake_up_came_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two recorded requests: late by 1 ms with no hand-off, on time with a 1 ms one. Paired,
    every simulated request takes 1 ms beyond its cost; drawn apart, 0, 1 or 2 ms."""

    def make(calib: Any, models: Any) -> Recording:
        cost = models["one_add"].cost_ns / 1e9
        rec = Recording(held={"cpu": []})
        for k in range(20):
            t0 = 0.01 * k
            wake, ho = (0.001, 0.0) if k % 2 else (0.0, 0.001)
            rec.requests.append((0, t0, t0 + wake, t0 + wake + ho + cost, True, _req(t0 + wake)))
        return rec

    _fake_record(monkeypatch, make)
    sc = parse_scenario(ONE)
    base = np.sort(simulate(sc, progress=False).data[0].latencies_s["a/MEDIUM"])
    extra = np.sort(simulate(sc, progress=False, overheads="scenario").data[0].latencies_s["a/MEDIUM"])
    assert extra - base == pytest.approx(np.full(100, 0.001), abs=1e-9)


def test_the_calibration_runs_are_pooled_each_with_its_own_conditions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two recordings: the same moment is busy in one (its timeline) and idle in the other, and
    the simulation draws the wake-ups and hand-offs of both runs."""
    sc = parse_scenario(ONE)
    models = _models(sc)
    cost = models["one_add"].cost_ns / 1e9
    busy = Recording(held={"cpu": [(1.0, 2.0)]}, requests=[(0, 1.5, 1.503, 1.503 + cost + 0.001, True, _req(1.503))])
    idle = Recording(held={"cpu": []}, requests=[(0, 1.5, 1.501, 1.501 + cost + 0.002, True, _req(1.501))])
    host = build_hosts(sc, models, busy, idle)["one_add"]
    assert host.busy.wake_s == pytest.approx((0.003,)) and host.alone.wake_s == pytest.approx((0.001,))
    assert host.busy.paired_s == pytest.approx((0.001,)) and host.alone.paired_s == pytest.approx((0.002,))
    assert sorted(host.alone.handoff_s) == pytest.approx([0.001, 0.002])  # hand-offs by their grant's condition

    monkeypatch.setattr(_calibrate, "CALIBRATION_SAMPLES", 0)
    runs = iter([_constant(0.001, 0.0), _constant(0.003, 0.0)])
    calls = _fake_record(monkeypatch, lambda calib, models: next(runs)(calib, models))
    base = np.sort(simulate(sc, progress=False).data[0].latencies_s["a/MEDIUM"])
    extra = np.sort(simulate(sc, progress=False, overheads="scenario", calibration_s=0.25).data[0].latencies_s["a/MEDIUM"])
    assert len(calls) == CALIBRATION_RUNS == 2
    assert set(np.round(extra - base, 9)) == {0.001, 0.003}  # both runs' wake-ups are drawn


def test_a_model_without_samples_gets_zeros() -> None:
    sc = parse_scenario(ONE)
    hosts = build_hosts(sc, _models(sc), Recording())
    assert hosts["one_add"].alone.wake_s == (0.0,) and hosts["one_add"].busy.handoff_s == (0.0,)


def test_the_calibration_window_has_another_seed_and_capped_durations() -> None:
    sc = parse_scenario(TWO.replace("duration_s = 2.0\n[devices", "duration_s = 2.0\nseed = 7\n[devices"))
    calib = calibration_scenario(sc, 0.5)
    assert calib.seed == calibration_seed(sc) != sc.seed and calibration_seed(sc) == calibration_seed(sc)
    assert calibration_scenario(sc, 0.5, 1).seed == calibration_seed(sc, 1) not in (sc.seed, calib.seed)
    assert calib.duration_s == 0.5 and calib.workloads[0].duration_s == 0.5
    assert calib.workloads[1].count == 10  # 40 over 2 s: a quarter in 0.5 s
    assert calibration_scenario(sc, 5.0).workloads[0].duration_s == 2.0  # never longer than the scenario
    with pytest.raises(ScenarioError, match="calibration_s: must be a positive number"):
        calibration_scenario(sc, 0.0)


def test_the_window_grows_until_every_open_loop_class_offers_enough_requests() -> None:
    sc = parse_scenario(ONE.replace("duration_s = 1.0", "duration_s = 60.0").replace("period_ms = 10", "period_ms = 50")
                        + '[[workloads]]\napp = "b"\nmodel = "mlp"\narrival = "poisson"\nrate_hz = 100\n'
                        + '[[workloads]]\napp = "c"\nmodel = "mlp"\narrival = "closed"\n')
    assert calibration_window(sc, 5.0) == 20.0  # 400 periodic requests at 20 Hz; the others need less
    assert calibration_window(sc, 25.0) == 25.0  # never shorter than asked
    assert calibration_window(sc, 5.0, samples=2000) == 30.0  # at most CALIBRATION_MAX_S
    assert calibration_window(sc, 5.0, samples=2000, max_s=90.0) == 60.0  # nor longer than the scenario
    ends = parse_scenario(ONE.replace("period_ms = 10", "period_ms = 50").replace("duration_s = 1.0", "duration_s = 60.0", 1)
                          .replace("duration_s = 1.0", "duration_s = 8.0"))
    assert calibration_window(ends, 5.0) == 8.0  # a class that ends sooner counts to its end
    assert calibration_window(sc, 5.0, samples=0) == 5.0
    with pytest.raises(ScenarioError, match="calibration_s: must be a positive number"):
        simulate(sc, progress=False, overheads="scenario", calibration_s=float("nan"))


def test_the_calibration_run_has_the_sized_window(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_record(monkeypatch, _constant(0.002, 0.0005))
    sc = parse_scenario(ONE.replace("duration_s = 1.0", "duration_s = 60.0").replace("period_ms = 10", "period_ms = 100"))
    simulate(sc, progress=False, overheads="scenario", calibration_s=0.25)
    assert len(calls) == CALIBRATION_RUNS and {c.duration_s for c in calls} == {30.0}  # 400 at 10 Hz need 40 s: the maximum


def test_simulation_draws_the_calibrated_wake_up_and_hand_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_calibrate, "CALIBRATION_SAMPLES", 0)  # the window asked for, not sized
    calls = _fake_record(monkeypatch, _constant(0.002, 0.0005))
    sc = parse_scenario(ONE)
    plain = simulate(sc, progress=False)
    hosted = simulate(sc, progress=False, overheads="scenario", calibration_s=0.25)
    assert len(calls) == CALIBRATION_RUNS and {c.duration_s for c in calls} == {0.25}
    assert len({c.seed for c in calls}) == CALIBRATION_RUNS and sc.seed not in {c.seed for c in calls}
    base, extra = (np.sort(r.data[0].latencies_s["a/MEDIUM"]) for r in (plain, hosted))
    assert len(base) == len(extra) == 100
    assert extra - base == pytest.approx(np.full(100, 0.0025), abs=1e-9)  # wake-up + hand-off, every request


def test_calibrated_samples_are_cached_and_reports_are_byte_identical(monkeypatch: pytest.MonkeyPatch,
                                                                      cost_cache: Path) -> None:
    monkeypatch.setattr(_calibrate, "CALIBRATION_SAMPLES", 0)  # the window asked for, not sized
    def varied(calib: Any, models: Any) -> Recording:
        rng = np.random.default_rng(3)
        cost = models["one_add"].cost_ns / 1e9
        rec = Recording(held={"cpu": []})
        for k in range(50):
            t0, wake, ho = 0.01 * k, float(rng.uniform(0, 0.003)), float(rng.uniform(0, 0.002))
            rec.requests.append((0, t0, t0 + wake, t0 + wake + ho + cost, True, _req(t0 + wake)))
        return rec

    calls = _fake_record(monkeypatch, varied)
    sc = parse_scenario(ONE)
    one = to_json(simulate(sc, progress=False, overheads="scenario").reports)
    two = to_json(simulate(sc, progress=False, overheads="scenario").reports)
    assert one == two and len(calls) == CALIBRATION_RUNS  # the second simulation read the cache
    keys = [k for k in json.loads(cost_cache.read_text()) if ":host:scenario:" in k]
    assert len(keys) == 1 and keys[0].startswith("builtin:one_add:")
    assert to_json(simulate(sc, seed=5, progress=False, overheads="scenario").reports) != one
    simulate(sc, progress=False, overheads="scenario", calibration_s=0.5)  # another window: measured again
    assert len(calls) == 2 * CALIBRATION_RUNS


def test_a_scenario_a_real_run_cannot_honour_cannot_be_calibrated() -> None:
    sc = parse_scenario(ONE.replace('model = "one_add"', 'model = "m"') + '[models.m]\nbuiltin = "one_add"\ncost_ms = 1\n')
    with pytest.raises(ScenarioError, match=r"models\.m\.cost_ms: cannot apply in a real-clock run"):
        simulate(sc, progress=False, overheads="scenario")
    with pytest.raises(ScenarioError, match="--overheads: unknown host model 'nope'"):
        simulate(sc, progress=False, overheads="nope")


def test_command_line_overheads_scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_calibrate, "CALIBRATION_SAMPLES", 0)  # the window asked for, not sized
    calls = _fake_record(monkeypatch, _constant(0.003, 0.001))
    path = tmp_path / "one.toml"
    path.write_text(ONE)
    assert cli.main(["simulate", str(path), "--overheads=scenario", "--calibration-s", "0.3", "--no-progress"]) == 0
    hosted = capsys.readouterr().out
    assert cli.main(["simulate", str(path), "--no-progress"]) == 0
    assert "a/MEDIUM" in hosted and hosted != capsys.readouterr().out
    assert len(calls) == CALIBRATION_RUNS and {c.duration_s for c in calls} == {0.3}


def test_recording_a_real_run() -> None:
    """Structure only: every request recorded, with a unit granted and samples >= 0."""
    sc = parse_scenario(TWO)
    calib = calibration_scenario(sc, 0.2)  # one_add for 0.2 s, mlp 4 times (40 over 2 s)
    models = _models(sc)
    rec = _calibrate.record(calib, models)
    mine = [r for r in rec.requests if r[0] == 0]
    assert len(mine) == 20 and len([r for r in rec.requests if r[0] == 1]) == 4 and len(rec.wakes) == 4
    assert all(ok and req.granted is not None and issued >= t0 and end >= issued for _, t0, issued, end, ok, req in mine)
    assert rec.held["cpu"] and all(end >= start for start, end in rec.held["cpu"])
    hosts = build_hosts(calib, models, rec)
    assert set(hosts) == {"one_add", "mlp"}
    assert all(x >= 0 for h in hosts.values() for s in (h.alone, h.busy) for x in (*s.wake_s, *s.handoff_s))
