"""The simulator's host model (``simulate(..., overheads=True)``; ``nnrt.sim._overhead``).

Each component is checked in virtual time on a hand-computable scenario, with host samples
given by the test (``measure_host`` replaced): wake-up lateness by condition, hand-offs by
condition, the step rate changing mid-step with the condition, a closed loop's wake-up,
the hand-off a preempted execution pays on resuming, and determinism. One test measures
for real, for the structure of what is cached (never for timing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnrt import cli, zoo
from nnrt.errors import InvalidArgumentError
from nnrt.sim import _overhead, parse_scenario, simulate
from nnrt.sim._engine import _neighbours
from nnrt.sim._overhead import HostModel, HostSamples, measure_host

pytestmark = pytest.mark.usefixtures("cost_cache")  # tests/integration/conftest.py


def _samples(wake_ms: float = 0.0, handoff_ms: float = 0.0, ratio: float = 1.0, steps: int = 1,
             handback_ms: float | None = None) -> HostSamples:
    back = () if handback_ms is None else (handback_ms / 1e3,)
    return HostSamples((wake_ms / 1e3,), (handoff_ms / 1e3,), tuple((ratio,) for _ in range(steps)), back)


def _fake(monkeypatch: pytest.MonkeyPatch, hosts: dict[str, HostModel]) -> list[tuple[str, Any]]:
    """Replace the measurement: each model (by its zoo name) gets ``hosts[name]``."""
    calls: list[tuple[str, Any]] = []

    def fake(model: Any, inputs: Any, neighbour: Any = None, **_kw: Any) -> HostModel:
        calls.append((model.name, None if neighbour is None else (neighbour[0].name, neighbour[2])))
        return hosts[model.name]

    monkeypatch.setattr(_overhead, "measure_host", fake)
    return calls


def _latencies_ms(result: Any, cls: str) -> list[float]:
    return sorted(round(float(x) * 1e3, 6) for x in result.data[0].latencies_s[cls])


def _models(units: int, m_us: int) -> str:
    """A device of ``units`` units; model m (one_add, one step of ``m_us``) and big (mlp, 4 x 2.5 ms)."""
    return (f'[devices.cpu]\ncompute_units = {units}\n[models.m]\nbuiltin = "one_add"\nstep_costs_us = [{m_us}]\n'
            '[models.big]\nbuiltin = "mlp"\nstep_costs_us = [2500, 2500, 2500, 2500]\n')


TWO = _models(2, 500) + """
[[workloads]]
app = "a"
model = "m"
arrival = "periodic"
period_ms = 10
count = 10
[[workloads]]
app = "bg"
model = "big"
priority = "low"
arrival = "periodic"
period_ms = 1000
start_s = 0.015
count = 1
"""


def test_wake_lateness_is_drawn_for_the_condition_at_the_arrival(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake(monkeypatch, {
        "one_add": HostModel(_samples(wake_ms=1.0), _samples(wake_ms=3.0), "mlp"),
        "mlp": HostModel(_samples(steps=4), _samples(steps=4), "one_add"),
    })
    result = simulate(parse_scenario(TWO), progress=False, overheads=True)
    # bg runs 15-25 ms (the device idle when it arrives): only a's arrival at 20 ms meets a busy
    # unit, wakes 3 ms late and ends at 23.5 ms; every other arrival wakes 1 ms late.
    assert _latencies_ms(result, "a/MEDIUM") == [1.5] * 9 + [3.5]
    assert _latencies_ms(result, "bg/LOW") == [10.0]
    # Each model is measured beside the other, with the idle gap its workload has.
    assert sorted(calls) == [("mlp", ("one_add", 0.01)), ("one_add", ("mlp", 1.0))]
    plain = simulate(parse_scenario(TWO), progress=False)
    assert _latencies_ms(plain, "a/MEDIUM") == [0.5] * 10


def test_handoff_holds_the_unit_for_the_condition_when_it_is_granted(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, {
        "one_add": HostModel(_samples(handoff_ms=2.0), _samples(handoff_ms=4.0), "mlp"),
        "mlp": HostModel(_samples(steps=4), _samples(steps=4), "one_add"),
    })
    result = simulate(parse_scenario(TWO), progress=False, overheads=True)
    assert _latencies_ms(result, "a/MEDIUM") == [2.5] * 9 + [4.5]
    (rep,) = result.reports
    assert rep.get("a", "medium").device_s == pytest.approx(9 * 0.0025 + 0.0045)  # hand-offs hold the unit


def _big_then_m(app: str, at_ms: float, extra: str = "") -> str:
    """Workloads: one execution of big at LOW from t=0, then one of m by ``app`` at ``at_ms``."""
    return ('[[workloads]]\napp = "bg"\nmodel = "big"\npriority = "low"\narrival = "closed"\ncount = 1\n'
            f'[[workloads]]\napp = "{app}"\nmodel = "m"\narrival = "periodic"\nperiod_ms = 1000\n'
            f'start_s = {at_ms / 1e3}\ncount = 1\n{extra}')


OVERLAP = _models(2, 2000) + _big_then_m("a", 2.0)


def test_a_step_slows_down_only_while_another_unit_is_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, {
        "one_add": HostModel(_samples(), _samples(), "mlp"),
        "mlp": HostModel(_samples(steps=4), _samples(ratio=2.0, steps=4), "one_add"),
    })
    result = simulate(parse_scenario(OVERLAP), progress=False, overheads=True)
    # bg's 10 ms of work: 2 ms alone, then 2 ms at half rate beside a (1 ms of work), then the
    # remaining 7 ms alone: it ends at 11 ms. (Reading the condition only when each step
    # starts would give 12.5 ms: the second step would take 5 ms.)
    assert _latencies_ms(result, "bg/LOW") == [11.0]
    assert _latencies_ms(result, "a/MEDIUM") == [2.0]
    (rep,) = result.reports
    assert rep.get("bg", "low").device_s == pytest.approx(0.011)


def test_a_closed_loop_client_wakes_late_after_thinking_without_counting_it(monkeypatch: pytest.MonkeyPatch) -> None:
    text = """
[models.m]
builtin = "one_add"
step_costs_us = [1000]
[[workloads]]
app = "c"
model = "m"
arrival = "closed"
think_ms = 10
count = 5
"""
    _fake(monkeypatch, {"one_add": HostModel(_samples(wake_ms=1.0), _samples(wake_ms=1.0))})
    result = simulate(parse_scenario(text), progress=False, overheads=True)
    assert _latencies_ms(result, "c/MEDIUM") == [1.0] * 5  # the lateness only delays the next request
    # 1 ms of work, 10 ms of thought and 1 ms late waking up: a request every 12 ms (11 without).
    assert result.reports[0].simulated_s == pytest.approx(5 * 0.012)


@pytest.mark.parametrize("handback_ms", [None, 0.4])
def test_a_preempted_execution_hops_back_then_pays_the_rest_of_a_handoff(monkeypatch: pytest.MonkeyPatch,
                                                                         handback_ms: float | None) -> None:
    text = _models(1, 500) + _big_then_m("bg", 3.0, 'priority = "high"\ndeadline_ms = 20\n')
    one = _samples(handoff_ms=1.0, handback_ms=handback_ms)
    big = _samples(handoff_ms=1.0, steps=4, handback_ms=handback_ms)
    _fake(monkeypatch, {"one_add": HostModel(one, one, "mlp"), "mlp": HostModel(big, big, "one_add")})
    result = simulate(parse_scenario(text), progress=False, overheads=True)
    (rep,) = result.reports
    low = rep.get("bg", "low")
    assert low.preemptions == 1 and low.succeeded == 1
    # Its steps, a hand-off at the start, then the hop back at the checkpoint (3.5 ms) and the
    # rest of a hand-off on resuming: one more hand-off in all.
    assert low.device_s == pytest.approx(0.010 + 2 * 0.001)
    # The high-priority request (at 3 ms) gets the unit once the hop back is over, then takes
    # its own hand-off and step: it ends at 5.0 ms, or 5.4 ms with a 0.4 ms hop back.
    assert _latencies_ms(result, "bg/HIGH") == [2.0 + (handback_ms or 0.0)]
    (plain,) = simulate(parse_scenario(text), progress=False).reports
    assert plain.get("bg", "low").device_s == pytest.approx(0.010)


def test_reports_with_the_host_model_are_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)

    def spread(n: int, steps: int) -> HostSamples:
        return HostSamples(tuple(rng.uniform(0, 0.003, n)), tuple(rng.uniform(0, 0.002, n)),
                           tuple(tuple(rng.uniform(0.8, 3.0, n)) for _ in range(steps)))

    hosts = {"one_add": HostModel(spread(50, 1), spread(50, 1), "mlp"),
             "mlp": HostModel(spread(50, 4), spread(50, 4), "one_add")}
    _fake(monkeypatch, hosts)
    text = TWO.replace("count = 10", "count = 300").replace("period_ms = 1000", "period_ms = 7")
    text = text.replace("count = 1\n", "count = 400\n")
    one = simulate(parse_scenario(text), progress=False, overheads=True)
    two = simulate(parse_scenario(text), progress=False, overheads=True)
    assert one.reports == two.reports
    lat = one.data[0].latencies_s["a/MEDIUM"]
    assert len(set(np.round(lat, 9))) > 50  # the samples are drawn, not one fixed value
    other_seed = simulate(parse_scenario(text), seed=1, progress=False, overheads=True)
    assert other_seed.reports[0].get("a", "medium").latency_ms != one.reports[0].get("a", "medium").latency_ms


def test_the_host_model_is_cached_and_read_back(cost_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake(monkeypatch, {
        "one_add": HostModel(_samples(wake_ms=1.0), _samples(wake_ms=3.0), "mlp"),
        "mlp": HostModel(_samples(steps=4), _samples(ratio=2.0, steps=4), "one_add"),
    })
    first = simulate(parse_scenario(TWO), progress=False, overheads=True).reports
    assert len(calls) == 2
    data = json.loads(cost_cache.read_text())
    keys = [k for k in data if ":host:" in k]
    assert len(keys) == 2 and all(set(data[k]) == {"alone", "busy", "neighbour"} for k in keys)
    again = simulate(parse_scenario(TWO), progress=False, overheads=True).reports
    assert len(calls) == 2 and again == first  # read from the cache, not measured again


def test_malformed_cached_samples_are_refused() -> None:
    good = _samples(wake_ms=1.0, steps=2).to_json()
    assert HostSamples.from_json(good, 2) == _samples(wake_ms=1.0, steps=2)
    assert HostSamples.from_json(good, 3) is None  # another model's steps
    assert HostSamples.from_json({**good, "wake_s": []}, 2) is None
    assert HostSamples.from_json({**good, "handoff_s": [-1.0]}, 2) is None
    assert HostSamples.from_json({**good, "ratios": [[1.0], []]}, 2) is None
    assert HostSamples.from_json({"wake_s": "x"}, 2) is None
    assert HostSamples.from_json({**good, "handback_s": [0.001, 0.002]}, 2) is None  # one per hand-off
    assert _samples(handoff_ms=1.0, handback_ms=3.0).split(5) == (0.001, 0.0)  # the hop back is part of it


def test_neighbours_are_the_other_workloads_models_on_the_same_device() -> None:
    text = TWO + """
[devices.other]
[[workloads]]
app = "elsewhere"
model = "small_cnn"
device = "other"
arrival = "closed"
think_ms = 4
count = 1
[[workloads]]
app = "elsewhere"
model = "small_cnn"
device = "other"
arrival = "closed"
clients = 2
count = 1
"""
    # A closed loop's clients are one another's neighbours; a workload is not its own otherwise.
    assert _neighbours(parse_scenario(text)) == {"m": {"big": 1.0}, "big": {"m": 0.01}, "small_cnn": {"small_cnn": 0.0}}


# one_add runs inline: rarely seen busy; mobilenet_block back to back: hardly ever idle.
@pytest.mark.parametrize(("neighbour", "gap_s"), [("mobilenet_block", 0.001), ("one_add", 0.001), ("mobilenet_block", 0.0)])
def test_measure_host_records_every_condition_and_step(neighbour: str, gap_s: float) -> None:
    model, other = zoo.build("small_cnn"), zoo.build(neighbour)
    host = measure_host(model, zoo.example_inputs(model), (other, zoo.example_inputs(other), gap_s),
                        samples=4, gap_s=(0.001, 0.002))
    assert host.neighbour == other.name
    for samples in (host.alone, host.busy):
        assert len(samples.wake_s) >= 1 and len(samples.wake_s) == len(samples.handoff_s)
        assert all(v >= 0 for v in (*samples.wake_s, *samples.handoff_s))
        assert len(samples.handback_s) == len(samples.handoff_s)
        assert all(0 <= b <= h for b, h in zip(samples.handback_s, samples.handoff_s))
        assert len(samples.ratios) == 6 and all(row and all(x > 0 for x in row) for row in samples.ratios)
    assert len(host.alone.wake_s) >= 4


def test_measure_host_without_a_neighbour() -> None:
    model = zoo.build("mlp")
    alone = measure_host(model, zoo.example_inputs(model), samples=3, gap_s=(0.001, 0.002))
    assert alone.busy is alone.alone and len(alone.alone.wake_s) == 3 and len(alone.alone.ratios) == 4


def test_measure_host_refuses_costs_of_another_model() -> None:
    model = zoo.build("small_cnn")
    with pytest.raises(InvalidArgumentError, match="costs_ns: has 2 costs; the model has 6 steps"):
        measure_host(model, zoo.example_inputs(model), samples=1, costs_ns=[1.0, 2.0])


def test_command_line_overheads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    _fake(monkeypatch, {
        "one_add": HostModel(_samples(wake_ms=1.0), _samples(wake_ms=3.0), "mlp"),
        "mlp": HostModel(_samples(steps=4), _samples(steps=4), "one_add"),
    })
    path = tmp_path / "two.toml"
    path.write_text(TWO)
    assert cli.main(["simulate", str(path), "--overheads", "--no-progress"]) == 0
    with_host = capsys.readouterr().out
    assert cli.main(["simulate", str(path), "--no-progress"]) == 0
    assert "a/MEDIUM" in with_host and with_host != capsys.readouterr().out  # the host model changed the report
