"""``simulate(real=True)`` (``nnrt simulate --real``): the same scenario on the real clock with real
devices. Structure and counts only: real runs are never asserted on for timing. (The host
model a simulation can add, ``overheads=True``, is tested in ``test_sim_host.py``.)"""

from __future__ import annotations

import threading

import pytest

from nnrt import cli
from nnrt.sim import ScenarioError, parse_scenario, simulate
from nnrt.types import ErrorStatus

pytestmark = pytest.mark.usefixtures("cost_cache")  # tests/integration/conftest.py


SMALL = """
duration_s = 0.3
[devices.npu]
compute_units = 2
[[workloads]]
app = "cam"
model = "small_cnn"
priority = "high"
deadline_ms = 250
arrival = "periodic"
period_ms = 10
count = 24
[[workloads]]
app = "bg"
model = "one_add"
priority = "low"
arrival = "closed"
think_ms = 5
count = 20
"""


def test_real_run_has_the_virtual_runs_structure_and_counts() -> None:
    threads = set(threading.enumerate())
    scenario = parse_scenario(SMALL)
    (virtual,) = simulate(scenario, progress=False).reports
    result = simulate(scenario, real=True, timeline=True)
    (real,) = result.reports
    assert [(c.app, c.priority) for c in real.classes] == [(c.app, c.priority) for c in virtual.classes]
    cam, bg = real.get("cam", "high"), real.get("bg", "low")
    assert (cam.offered, bg.offered) == (24, 20)
    assert cam.succeeded + sum(cam.failures.values()) == 24 and bg.succeeded == 20 and sum(bg.failures.values()) == 0
    lat = cam.latency_ms
    assert lat["p50"] is not None and 0 < lat["p50"] <= lat["p99"] <= lat["max"]  # type: ignore[operator]
    assert cam.device_s > 0 and cam.throughput_per_s > 0
    (dev,) = real.devices
    assert (dev.name, dev.units, dev.speed) == ("npu", 2, 1.0) and len(dev.unit_utilisation_pct) == 2
    assert 0 < dev.utilisation_pct <= 100
    assert real.models["small_cnn"]["source"] == "calibrated in this run"
    assert real.simulated_s >= 0.23  # the last arrival is at 230 ms of the run's own time
    segments = result.data[0].timelines["npu"]
    assert segments and all(s.end >= s.start >= 0 and s.unit in (0, 1) for s in segments)
    assert {s.app for s in segments} == {"cam", "bg"} and all(s.status is ErrorStatus.NONE for s in segments
                                                                if s.app == "bg")
    assert len(result.data[0].latencies_s["cam/HIGH"]) == cam.succeeded
    leaked = [t.name for t in threading.enumerate() if t not in threads]
    assert not leaked, f"threads outlived the run: {leaked}"  # the real devices' workers are stopped


def test_real_run_of_a_fenced_chain_and_a_deadline_it_cannot_meet() -> None:
    text = """
duration_s = 0.2
[[workloads]]
app = "a"
mode = "fenced"
models = ["one_add", "small_cnn"]
arrival = "periodic"
period_ms = 20
count = 8
[[workloads]]
app = "b"
model = "mobilenet_block"
deadline_ms = 0.01
arrival = "periodic"
period_ms = 25
count = 6
"""
    (rep,) = simulate(parse_scenario(text), real=True).reports
    a, b = rep.get("a", "medium"), rep.get("b", "medium")
    assert a.offered == 8 and a.succeeded == 8
    assert b.offered == 6 and b.succeeded == 0
    assert b.failures["MISSED_DEADLINE_PERSISTENT"] + b.failures["MISSED_DEADLINE_TRANSIENT"] == 6


@pytest.mark.parametrize(
    ("snippet", "field"),
    [
        ('[devices.npu]\nspeed = 2.0\n', "devices.npu.speed"),
        ('[models.one_add]\nbuiltin = "one_add"\ncost_ms = 1.0\n', "models.one_add.cost_ms"),
        ('[models.one_add]\nbuiltin = "one_add"\nstep_costs_us = [5]\n', "models.one_add.step_costs_us"),
        ('[models.one_add]\nbuiltin = "one_add"\njitter = 0.2\n', "models.one_add.jitter"),
    ],
)
def test_real_run_rejects_what_it_cannot_honour(snippet: str, field: str) -> None:
    text = snippet + '[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "periodic"\nperiod_ms = 10\ncount = 2\n'
    with pytest.raises(ScenarioError, match=rf"INVALID_ARGUMENT: {field}: "):
        simulate(parse_scenario(text), real=True)
    simulate(parse_scenario(text), progress=False)  # fine in virtual time


def test_command_line_real(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--real", "--duration", "0.1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "camera/HIGH" in out and "calibrated in this run" in out
