"""The ``nnrt`` command: ``demo`` (the README's first command), ``devices`` and argument errors."""

from __future__ import annotations

import re

import pytest

from nnrt.cli import WARM_UP, main


def outcomes(out: str) -> dict[str, int]:
    line = next(line for line in out.splitlines() if line.startswith("outcomes: "))
    return {k: int(v) for k, v in re.findall(r"([A-Z_]+) (\d+)", line)}


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_demo_runs_and_accounts_for_every_execution(capsys: pytest.CaptureFixture[str], loop: str) -> None:
    assert main(["--loop", loop, "demo", "--executions", "40", "--no-qos"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nnrt demo: model small_cnn (6 operations)")
    assert f"warm-up ({WARM_UP} executions)" in out and "output shape [1, 10]" in out
    assert re.search(r"admission: about \d+\.\d+ ms per execution on \d+ compute unit", out)
    counts = outcomes(out)
    assert sum(counts.values()) == 40 and set(counts) <= {"NONE", "MISSED_DEADLINE_TRANSIENT", "MISSED_DEADLINE_PERSISTENT"}
    refused = int(re.search(r"refused at admission \(predicted to miss\): (\d+)", out).group(1))  # type: ignore[union-attr]
    assert refused <= sum(v for k, v in counts.items() if k != "NONE")
    assert "latency of successful executions: " in out
    assert "priorities and deadlines" not in out


def test_demo_without_deadlines_runs_everything(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", "one_add", "--executions", "25", "--deadline-ms", "0", "--no-qos"]) == 0
    out = capsys.readouterr().out
    assert outcomes(out) == {"NONE": 25} and "admission:" not in out
    assert re.search(r"latency of successful executions: p50 \d+\.\d+ ms", out)


def test_demo_priorities_phase(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--executions", "5"]) == 0
    out = capsys.readouterr().out
    assert "priorities and deadlines: LOW mobilenet_block in the background, HIGH small_cnn every 1 ms" in out
    high = re.search(r"HIGH outcomes: (.*); preemptions (\d+)", out)
    low = re.search(r"LOW  outcomes: (.*); preemptions (\d+)", out)
    assert high and low
    assert sum(int(n) for n in re.findall(r"\d+", high.group(1))) == 50
    assert sum(int(n) for n in re.findall(r"\d+", low.group(1))) == 4


def test_devices_lists_the_cpu_device(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nnrt-cpu: CPU, version") and "TENSOR_FLOAT32" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["demo", "--executions", "0"], "--executions must be positive"),
    (["demo", "--model", "resnet"], "invalid choice"),
    (["demo", "--bogus"], "unrecognized arguments: --bogus"),
    ([], "the following arguments are required: command"),
])
def test_bad_arguments_exit_with_a_message(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err
