"""The ``nnrt`` command: ``demo`` (the README's first command), ``devices`` and argument errors."""

from __future__ import annotations

import re

import pytest

from nnrt.cli import WARM_UP, main


def outcomes(out: str) -> dict[str, int]:
    line = next(line for line in out.splitlines() if line.startswith("outcomes: "))
    return {k: int(v) for k, v in re.findall(r"([A-Za-z_]+) (\d+)", line)}


def refusals(out: str) -> dict[str, int]:
    line = next(line for line in out.splitlines() if line.startswith("  of the failures: "))
    found = re.search(r"predicted to miss the deadline (\d+), refused because the app's queue was full "
                      r"\(RESOURCE_EXHAUSTED_TRANSIENT\) (\d+), expired while queued (\d+), aborted while running (\d+)", line)
    assert found, line
    return dict(zip(("missed", "full", "expired", "aborted"), map(int, found.groups())))


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_demo_runs_and_accounts_for_every_execution(capsys: pytest.CaptureFixture[str], loop: str) -> None:
    assert main(["--loop", loop, "demo", "--executions", "40", "--no-qos"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nnrt demo: model small_cnn (6 operations)")
    assert f"warm-up ({WARM_UP} executions)" in out and "output shape [1, 10]" in out
    assert re.search(r"admission: about \d+\.\d+ ms per execution on \d+ compute unit", out)
    counts = outcomes(out)
    assert sum(counts.values()) == 40
    assert set(counts) <= {"succeeded", "MISSED_DEADLINE_TRANSIENT", "MISSED_DEADLINE_PERSISTENT"}
    assert "NONE" not in out  # NNAPI's name for success means nothing to a reader
    assert refusals(out)["missed"] <= sum(v for k, v in counts.items() if k != "succeeded")
    assert not re.search(r"about (\d+) of the (\d+)", out) or int(re.search(r"about (\d+) of the", out).group(1)) < 40  # type: ignore[union-attr]
    assert "latency of successful executions: " in out
    assert "priorities and deadlines" not in out


def test_demo_without_deadlines_runs_everything(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", "one_add", "--executions", "25", "--deadline-ms", "0", "--no-qos"]) == 0
    out = capsys.readouterr().out
    assert outcomes(out) == {"succeeded": 25} and "admission:" not in out
    assert re.search(r"latency of successful executions: p50 \d+\.\d+ ms", out)


def test_demo_says_how_many_fit_without_exceeding_the_executions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", "one_add", "--executions", "20", "--deadline-ms", "1000", "--no-qos"]) == 0
    out = capsys.readouterr().out
    assert "a 1000 ms deadline, all 20 should fit" in out


def test_demo_attributes_queue_full_refusals_to_the_queue(capsys: pytest.CaptureFixture[str]) -> None:
    # no deadline, more executions than the app's queue holds (256): the surplus is refused as queue full
    assert main(["demo", "--executions", "400", "--deadline-ms", "0", "--no-qos"]) == 0
    out = capsys.readouterr().out
    counts, why = outcomes(out), refusals(out)
    assert why["missed"] == 0 and why["full"] == counts.get("RESOURCE_EXHAUSTED_TRANSIENT", 0)
    assert counts["succeeded"] + why["full"] == 400


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
