"""Scenario files: a full scenario parses into the right specs; every mistake names its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnrt import ErrorStatus, Priority
from nnrt.sim import ScenarioError, builtin_scenario, load_scenario, parse_scenario

FULL = """
name = "full"
duration_s = 20
seed = 7

[devices.npu]
compute_units = 2
speed = 4.0
memory_mb = 64
app_memory_mb = 16
fairness = "weighted"
aging_s = 0.5
max_queued_per_app = 8

[devices.cpu]

[apps.camera]
weight = 3

[models.det]
builtin = "small_cnn"
cost_ms = 2.5
jitter = 0.1

[[workloads]]
app = "camera"
model = "det"
device = "npu"
priority = "HIGH"
deadline_ms = 33
arrival = "periodic"
period_ms = 33.3
jitter_ms = 1
count = 10

[[workloads]]
app = "assistant"
models = ["det", "mlp"]
mode = "fenced"
device = "cpu"
arrival = "poisson"
rate_hz = 5
start_s = 2

[[workloads]]
app = "bg"
model = "one_add"
mode = "burst"
priority = "low"
arrival = "closed"
think_ms = 5
clients = 3
duration_s = 4

[[workloads]]
app = "bg"
model = "one_add"
arrival = "onoff"
rate_hz = 100
on_ms = 100
off_ms = 900
"""


def test_a_full_scenario_parses() -> None:
    sc = parse_scenario(FULL)
    assert sc.name == "full" and sc.seed == 7 and sc.duration_s == 20.0
    npu = sc.device("npu")
    assert (npu.compute_units, npu.speed, npu.memory_mb, npu.app_memory_mb, npu.fairness) == (2, 4.0, 64.0, 16.0, "weighted")
    assert (npu.aging_s, npu.max_queued_per_app) == (0.5, 8)
    assert sc.device("cpu").compute_units == 1
    assert [a.name for a in sc.apps] == ["camera", "assistant", "bg"]
    assert sc.app("camera").weight == 3.0 and sc.app("bg").weight == 1.0
    assert sc.model("det").cost_ms == 2.5 and sc.model("det").jitter == 0.1
    w0, w1, w2, w3 = sc.workloads
    assert (w0.priority, w0.deadline_s, w0.period_s, w0.jitter_s, w0.count, w0.device) == (
        Priority.HIGH, 0.033, pytest.approx(0.0333), 0.001, 10, "npu")
    assert w1.mode == "fenced" and w1.models == ("det", "mlp") and w1.rate_hz == 5.0 and w1.duration_s == 18.0
    assert w2.mode == "burst" and w2.arrival == "closed" and w2.clients == 3 and w2.think_s == 0.005 and w2.duration_s == 4.0
    assert w2.priority is Priority.LOW and w2.device == "npu"  # the first device by default
    assert (w3.on_s, w3.off_s, w3.rate_hz, w3.duration_s) == (0.1, 0.9, 100.0, 20.0)
    assert sc.max_time_s == 10 * 20 + 60


def test_defaults_give_one_cpu_device() -> None:
    sc = parse_scenario('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\nrate_hz = 1\n')
    assert [(d.name, d.compute_units, d.speed) for d in sc.devices] == [("cpu", 1, 1.0)]
    assert sc.duration_s == 10.0 and sc.workloads[0].priority is Priority.MEDIUM and sc.workloads[0].mode == "execute"


BASE = '[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\nrate_hz = 1\n'


@pytest.mark.parametrize(
    ("text", "where", "why"),
    [
        ("duration_s = -1\n" + BASE, "duration_s", "> 0"),
        ("durration_s = 1\n" + BASE, "durration_s", "unknown field"),
        ("[devices.x]\ncompute_units = 0\n" + BASE, "devices.x.compute_units", ">= 1"),
        ("[devices.x]\nspeed = 'fast'\n" + BASE, "devices.x.speed", "finite number"),
        ("[devices.x]\nfairness = 'lottery'\n" + BASE, "devices.x.fairness", "not one of"),
        ("[apps.a]\nweight = 0\n" + BASE, "apps.a.weight", "> 0"),
        ("[models.m]\ncost_ms = 1\n" + BASE, "models.m", "exactly one of builtin"),
        ("[models.m]\nbuiltin = 'resnet'\n" + BASE, "models.m.builtin", "unknown built-in"),
        ("[models.m]\npath = 'nowhere.nnrt'\n" + BASE, "models.m.path", "no saved model"),
        ("[models.m]\nbuiltin = 'mlp'\nstep_costs_us = [1, -2]\n" + BASE, "models.m.step_costs_us", "numbers >= 0"),
        ("[models.m]\nbuiltin = 'mlp'\ncost_ms = 1\nstep_costs_us = [1]\n" + BASE, "models.m.cost_ms", "not both"),
        ("x = 1", "workloads", "at least one"),
        ('[[workloads]]\nmodel = "one_add"\narrival = "poisson"\nrate_hz = 1\n', "workloads[0].app", "missing"),
        ('[[workloads]]\napp = "a"\nmodel = "nope"\narrival = "poisson"\nrate_hz = 1\n', "workloads[0].model", "no model named"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "sometimes"\n', "workloads[0].arrival", "not one of"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\n', "workloads[0].rate_hz", "missing"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "periodic"\nperiod_ms = -3\n', "workloads[0].period_ms", "> 0"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\nrate_hz = 1\nperiod_ms = 3\n',
         "workloads[0].period_ms", "not a field of arrival = 'poisson'"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\nrate_hz = 1\npriority = "urgent"\n',
         "workloads[0].priority", "not one of"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\nrate_hz = 1\nmode = "batch"\n',
         "workloads[0].mode", "not one of"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\nrate_hz = 1\ndevice = "gpu"\n',
         "workloads[0].device", "no device named"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "poisson"\nrate_hz = 1\ncount = 0\n',
         "workloads[0].count", ">= 1"),
        ('[[workloads]]\napp = "a"\nmodels = []\nmode = "fenced"\narrival = "poisson"\nrate_hz = 1\n',
         "workloads[0].models", "non-empty list"),
        ('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "trace"\n', "workloads[0].file", "missing"),
        ("[[workloads]\n", "<string>", "not valid TOML"),
    ],
)
def test_mistakes_name_the_field(text: str, where: str, why: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    message = info.value.args[0]
    assert message.startswith(where + ":") or message.startswith(where), message
    assert why in message, message


def test_trace_files_are_read_relative_to_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("# arrivals\n0.0\n0.5  # half a second\n\n1.25\n")
    (tmp_path / "s.toml").write_text('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "trace"\nfile = "t.txt"\n')
    sc = load_scenario(tmp_path / "s.toml")
    assert sc.workloads[0].trace == (0.0, 0.5, 1.25) and sc.name == "s"


@pytest.mark.parametrize(("body", "why"), [("0.5\n0.1\n", "line 2"), ("abc\n", "line 1"), ("", "no arrival times")])
def test_bad_trace_files_name_the_line(tmp_path: Path, body: str, why: str) -> None:
    (tmp_path / "t.txt").write_text(body)
    with pytest.raises(ScenarioError, match=why) as info:
        parse_scenario('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "trace"\nfile = "t.txt"\n', base_dir=str(tmp_path))
    assert info.value.args[0].startswith("workloads[0].file:")


def test_a_missing_scenario_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "absent.toml")


def test_the_builtin_scenario_parses_and_scales() -> None:
    sc = builtin_scenario(5)
    assert sc.duration_s == 5.0
    assert [(w.app, w.priority) for w in sc.workloads] == [
        ("camera", Priority.HIGH), ("assistant", Priority.MEDIUM), ("background", Priority.LOW)]
    assert sc.workloads[0].deadline_s == 0.033


def test_example_scenarios_parse() -> None:
    files = sorted((Path(__file__).parents[2] / "examples" / "scenarios").glob("*.toml"))
    assert files
    for f in files:
        load_scenario(f)
