"""The examples the README points to run and print what they promise (04, the streaming burst,
is run in ``test_burst.py``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples"


def run(name: str) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def test_execute_example() -> None:
    out = run("01_execute.py")
    assert "supported operations: [True, True]" in out
    assert "[11. 14. 17. 20.]]" in out  # the model's output, in place
    assert "bad request -> INVALID_ARGUMENT: " in out and "late request -> MISSED_DEADLINE_PERSISTENT" in out


def test_fenced_pipeline_example() -> None:
    # a frame that missed its deadline has no latency (nan): on a loaded machine that happens
    rows = re.findall(r"^\s*(\d+)\s+([A-Z_]+)\s+(?:\d+\.\d+|nan)\s+(\S+)$", run("02_fenced_pipeline.py"), re.MULTILINE)
    assert [int(k) for k, _, _ in rows] == list(range(20))
    # a stage whose upstream stage missed its deadline fails with GENERAL_FAILURE (its wait-for fence failed)
    allowed = {"NONE", "MISSED_DEADLINE_TRANSIENT", "MISSED_DEADLINE_PERSISTENT", "GENERAL_FAILURE"}
    assert {status for _, status, _ in rows} <= allowed


def test_priorities_deadlines_example() -> None:
    out = run("03_priorities_deadlines.py")
    # Every request is accounted for; how many of those with a deadline meet it depends on the
    # machine's load, so only the kind of failure is checked: a missed deadline, never anything
    # else, and none at all for the requests without a deadline.
    missed = {"MISSED_DEADLINE_TRANSIENT", "MISSED_DEADLINE_PERSISTENT"}
    for label, n, failures in (("assistant MEDIUM mlp", 40, set()), ("camera HIGH classify", 60, missed),
                               ("camera LOW enhance", 6, set()), ("camera MEDIUM meta", 6, missed)):
        row = next(line for line in out.splitlines() if line.startswith(label))
        counts = dict(re.findall(r"(succeeded|[A-Z_]+) (\d+)", row.removeprefix(label)))
        assert sum(map(int, counts.values())) == n and set(counts) - {"succeeded"} <= failures, row
    assert re.search(r"camera\s+LOW\s+completed\s+6\s+preemptions\s+\d+", out)


def test_partitioning_example() -> None:
    out = run("05_partitioning.py")
    assert "operation 3 AVERAGE_POOL_2D    no: npu does not support AVERAGE_POOL_2D" in out
    assert re.search(r"step 0 on npu\s+operations 0:CONV_2D, 1:DEPTHWISE_CONV_2D, 2:CONV_2D\n", out)
    assert re.search(r"step 1 on nnrt-cpu operations 3:AVERAGE_POOL_2D, 4:RESHAPE\n", out)
    assert "output (1, 1000), identical to the CPU alone: True" in out
    assert re.search(r"step 0 on nnrt-cpu operations .*\(fallback: npu failed to prepare it\)", out)
    assert "output identical to the CPU alone: True" in out
    assert "without the CPU -> INVALID_ARGUMENT: npu cannot prepare the model: operation 3 (AVERAGE_POOL_2D)" in out


def test_driver_process_example() -> None:
    out = run("06_driver_process.py")
    assert re.search(r"frame 1[2-5]: DEAD_OBJECT", out)
    assert "device dead: True" in out
    assert re.search(r"restarted: new service pid \d+, model re-prepared from the cache", out)
    assert "frames done 30/30" in out and "outputs identical to in-process: True" in out
