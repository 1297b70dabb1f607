"""``nnrt simulate`` as a new user meets it: a legend, --duration and --real on any scenario,
matplotlib checked first, a status line while the host is measured."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from nnrt import cli
from nnrt.sim import _cli as sim_cli
from nnrt.sim._models import load_models
from nnrt.sim._report import LEGEND
from nnrt.sim._scenario import ModelSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def test_the_report_explains_its_abbreviations(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--duration", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert LEGEND in out
    for short in ("MD-T", "MD-P", "RE-T", "RE-P", "preempt", "queued"):
        assert short in LEGEND


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_duration_applies_to_every_example_scenario(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", str(EXAMPLES / name), "--duration", "0.5", "--no-progress"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    simulated = float(head.split(" over ")[1].split(" s ")[0])
    assert simulated <= 0.5 + 1.0  # arrivals stop at 0.5 s; the last executions drain


def test_real_accepts_an_example_scenario_and_says_what_it_ignores(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", str(EXAMPLES / "overload.toml"), "--real", "--duration", "0.2", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "service/MEDIUM" in out
    assert "--real ignores models.net.cost_ms, models.net.jitter" in err


def test_a_missing_matplotlib_is_reported_before_anything_runs(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("simulated although the plot cannot be written")

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setattr(sim_cli, "simulate", boom)
    assert cli.main(["simulate", "--plot", "x.png", "--no-progress"]) == 1
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_bad_duration_is_an_argument_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["simulate", "--duration", "0"])
    assert info.value.code == 2 and "--duration must be a positive" in capsys.readouterr().err


def test_measuring_the_host_shows_a_status_line_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NNRT_SIM_COSTS", str(tmp_path / "costs.json"))  # nothing cached

    def stop(*_a: object, **_k: object) -> None:
        raise RuntimeError("stop before measuring")

    monkeypatch.setattr("nnrt.sim._overhead.measure_host", stop)
    stream = io.StringIO()
    with pytest.raises(RuntimeError, match="stop before measuring"):
        load_models({"one_add": ModelSpec("one_add", builtin="one_add")}, overheads=True, progress=stream)
    text = stream.getvalue()
    assert "model 1/1: measuring this host's overheads for one_add" in text and text.endswith("\r")
