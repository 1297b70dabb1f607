"""Simulated devices with feature levels and supported operations, and partitioned workloads:
the framework's partitioning over the scenario's devices, each step at its device's speed."""

from __future__ import annotations

from pathlib import Path

import pytest

import nnrt
from nnrt.execution import compile_plan
from nnrt.sim import Report, ScenarioError, parse_scenario, simulate

pytestmark = pytest.mark.usefixtures("cost_cache")  # tests/integration/conftest.py

MODELS = Path(__file__).parents[1] / "data" / "models"

TWO_DEVICES = """
[devices.cpu]
speed = 1.0

[devices.npu]
speed = 4.0
feature_level = 3
operations = ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"]

[models.block]
builtin = "mobilenet_block"    # CONV_2D, DEPTHWISE_CONV_2D, CONV_2D, AVERAGE_POOL_2D, RESHAPE, FULLY_CONNECTED
step_costs_us = [1000, 500, 1000, 200, 100, 1200]

[[workloads]]
app = "camera"
model = "block"
{placement}
priority = "high"
deadline_ms = 8
arrival = "periodic"
period_ms = 10
count = 50
"""


def run(placement: str) -> Report:
    (rep,) = simulate(parse_scenario(TWO_DEVICES.format(placement=placement)), progress=False).reports
    return rep


def test_partitioned_workload_runs_each_step_at_its_devices_speed() -> None:
    across = run('devices = ["npu", "cpu"]')
    c = across.get("camera", "high")
    assert (c.offered, c.succeeded) == (50, 50)
    # npu: operations 0-2 then 5 at speed 4 (2500 + 1200 us / 4); cpu: operations 3-4 (300 us).
    assert all(v == pytest.approx(0.925 + 0.3) for v in c.latency_ms.values() if v is not None)
    devices = {d.name: d for d in across.devices}
    assert devices["npu"].device_s == pytest.approx(50 * 0.925e-3)
    assert devices["cpu"].device_s == pytest.approx(50 * 0.3e-3)
    alone = run('device = "cpu"').get("camera", "high")
    assert all(v == pytest.approx(4.0) for v in alone.latency_ms.values() if v is not None)


def test_slow_npu_gets_nothing() -> None:
    slow = TWO_DEVICES.replace("speed = 4.0", "speed = 0.5")
    (rep,) = simulate(parse_scenario(slow.format(placement='devices = ["npu", "cpu"]')), progress=False).reports
    assert {d.name: d.device_s for d in rep.devices}["npu"] == 0
    assert all(v == pytest.approx(4.0) for v in rep.get("camera", "high").latency_ms.values() if v is not None)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (('operations = ["CONV_2D"', 'operations = ["CONV_3D"'),
         r"devices.npu.operations\[0\]: 'CONV_3D' is not a known operation"),
        (("feature_level = 3", "feature_level = 9"), "devices.npu.feature_level: must be an integer from 1 to 8"),
        (("{placement}", 'devices = ["npu", "gpu"]'), r"workloads\[0\].devices\[1\]: 'gpu' is not a known device"),
        (("{placement}", 'devices = ["npu", "npu"]'), r"workloads\[0\].devices\[1\]: 'npu' is listed twice"),
        (("{placement}", 'device = "cpu"\ndevices = ["npu"]'), "give device = NAME or devices"),
    ],
)
def test_scenario_mistakes_name_the_field(change: tuple[str, str], match: str) -> None:
    text = TWO_DEVICES.replace(*change)
    with pytest.raises(ScenarioError, match=match):
        parse_scenario(text.format(placement=""))


def test_partitioned_runs_are_deterministic() -> None:
    text = TWO_DEVICES.replace('step_costs_us = [1000, 500, 1000, 200, 100, 1200]',
                               'step_costs_us = [1000, 500, 1000, 200, 100, 1200]\njitter = 0.3')
    text = text.replace('arrival = "periodic"\nperiod_ms = 10', 'arrival = "poisson"\nrate_hz = 400')
    scenario = parse_scenario(text.format(placement='devices = ["npu", "cpu"]'))
    first, second = (simulate(scenario, progress=False).reports[0] for _ in range(2))
    assert first == second
    c = first.get("camera", "high")
    assert c.offered == 50 and len({v for v in c.latency_ms.values()}) > 1  # jitter and queueing vary latencies


def test_a_slow_cpu_counts_its_speed() -> None:
    """The reference CPU's figure is 1 / speed too: an npu at speed 0.8 beats a CPU at 0.5."""
    text = TWO_DEVICES.replace("[devices.cpu]\nspeed = 1.0", "[devices.cpu]\nspeed = 0.5").replace("speed = 4.0",
                                                                                                    "speed = 0.8")
    (rep,) = simulate(parse_scenario(text.format(placement='devices = ["npu", "cpu"]')), progress=False).reports
    used = {d.name: d.device_s for d in rep.devices}
    assert used["npu"] > 0 and used["cpu"] > 0


def test_no_device_for_an_operation_is_a_scenario_error() -> None:
    scenario = parse_scenario(TWO_DEVICES.format(placement='devices = ["npu"]'))
    with pytest.raises(ScenarioError, match=r"models.block: no device can run operation 3 \(AVERAGE_POOL_2D\)"):
        simulate(scenario, progress=False)


def test_a_real_model_whose_plan_fuses_operations_is_partitioned(tmp_path: Path) -> None:
    """A real network's plan has fewer steps than operations (PAD folded into a convolution,
    elementwise chains, constants folded): each device's part is compiled on its own and gets
    the costs of the operations it runs, so the model's cost is conserved across devices (it
    once indexed the whole plan's per-step costs by operation: IndexError)."""
    model = nnrt.load(MODELS / "mediapipe_hand_recrop.tflite")
    assert len(compile_plan(model).steps) < len(model.operations)
    model.save(tmp_path / "hand.nnrt")
    text = TWO_DEVICES.replace('builtin = "mobilenet_block"', f'path = "{tmp_path / "hand.nnrt"}"')
    text = text.replace("step_costs_us = [1000, 500, 1000, 200, 100, 1200]", "cost_ms = 4.0")
    text = text.replace("deadline_ms = 8\n", "").replace("count = 50", "count = 10")
    (rep,) = simulate(parse_scenario(text.format(placement='devices = ["npu", "cpu"]')), progress=False).reports
    c = rep.get("camera", "high")
    assert (c.offered, c.succeeded) == (10, 10)
    used = {d.name: d.device_s for d in rep.devices}
    assert used["npu"] > 0 and used["cpu"] > 0
    # 4 ms at speed 1 per execution, whichever device ran each operation.
    assert used["npu"] * 4.0 + used["cpu"] * 1.0 == pytest.approx(10 * 4e-3, abs=5e-6)  # (reported in whole µs)
