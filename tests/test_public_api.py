"""The public surface: ``nnrt.__all__`` is exactly what the package exports, nothing private leaks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nnrt
from nnrt import ErrorStatus, OperandType, OperationType


def test_all_matches_public_names() -> None:
    public = {name for name in vars(nnrt) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(nnrt, name)).__name__ == "module"}
    assert set(nnrt.__all__) - {"__version__"} == public - modules
    for name in nnrt.__all__:
        assert hasattr(nnrt, name)


def test_nnapi_numbers() -> None:
    assert [s.value for s in ErrorStatus] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10000]
    assert len([o for o in OperationType if o.value < 1000]) == 106
    assert OperationType.REVERSE.value == 105 and OperationType.REVERSE.feature_level == 7
    assert OperationType.BATCH_MATMUL.feature_level == 6
    assert OperationType.WHILE.feature_level == 4 and OperationType.HARD_SWISH.feature_level == 4
    assert OperationType.TRANSPOSE.feature_level == 2 and OperationType.ABS.feature_level == 3
    assert OperationType.DENSIFY.feature_level == 0
    assert OperandType.TENSOR_QUANT8_ASYMM_SIGNED.value == 14 and OperandType.SUBGRAPH.value == 15


def test_errors_carry_status() -> None:
    err = nnrt.errors.error_for(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "late")
    assert isinstance(err, nnrt.MissedDeadlineError) and err.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert not err.transient
    assert nnrt.errors.error_for(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, "busy").transient
    assert str(nnrt.InvalidArgumentError("bad")) == "INVALID_ARGUMENT: bad"


def test_timing_invariant() -> None:
    import pytest

    with pytest.raises(ValueError, match="exceeds"):
        nnrt.Timing(2, 1)
    assert not nnrt.TIMING_UNAVAILABLE.available


def run_example(name: str) -> str:
    script = Path(__file__).parent.parent / "examples" / name
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=True).stdout


def test_example_01_runs() -> None:
    out = run_example("01_execute.py")
    assert "bad request -> INVALID_ARGUMENT" in out
    assert "late request -> MISSED_DEADLINE_PERSISTENT" in out


def test_example_02_fenced_pipeline_runs() -> None:
    lines = run_example("02_fenced_pipeline.py").splitlines()
    assert lines[0].split() == ["frame", "status", "latency", "ms", "class"]
    statuses = {line.split()[1] for line in lines[1:]}
    assert len(lines) == 21 and statuses <= {status.name for status in ErrorStatus}


def test_example_03_priorities_runs() -> None:
    out = run_example("03_priorities_deadlines.py")
    assert "camera HIGH classify" in out and "scheduler statistics:" in out


def test_capabilities_are_measured_per_operand_type() -> None:
    caps = nnrt.CpuDevice(name="caps").capabilities
    assert caps.operand_performance[OperandType.TENSOR_FLOAT32].exec_time == 1.0
    for t in (OperandType.TENSOR_FLOAT16, OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED):
        assert caps.operand_performance[t].exec_time > 0
        assert caps.measurements_us[f"reference_us_{t.name}"] > 0
    assert caps.relaxed_float32_tensor == caps.operand_performance[OperandType.TENSOR_FLOAT32]
