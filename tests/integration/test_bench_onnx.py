"""``nnrt bench`` on ONNX files through the ONNX importer: a tiny model built with ``onnx.helper``
and the real ONNX models vendored in ``tests/data/models/``, against ONNX Runtime."""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from pathlib import Path

import pytest

from nnrt.bench import BenchOptions, format_report, run_bench
from nnrt.cli import main
from nnrt.importers import UnsupportedModelError
from tests.integration.test_bench import onnx_add
from tests.integration.test_bench_real import ROOT, models


def _listed_inputs(path: Path) -> tuple[dict[str, list[int]], dict[str, float]]:
    """The input shapes and values ``benchmarks/models.toml`` gives a model."""
    with open(ROOT / "benchmarks" / "models.toml", "rb") as f:
        entry = next(e for e in tomllib.load(f)["model"] if e["file"] == path.name)
    return entry.get("input_shapes", {}), entry.get("input_values", {})


@pytest.mark.parametrize("path", models(".onnx"), ids=lambda p: p.stem)
def test_vendored_onnx_model_matches_onnx_runtime_or_is_refused_by_node(path: Path) -> None:
    """Each real ONNX model either matches ONNX Runtime in every mode or is refused at load with
    every node nnrt cannot express listed (as the importer grows, more of them run)."""
    shapes, values = _listed_inputs(path)
    # Every mode, burst included: a 0-d array for a tensor input of unknown rank (silero's sample
    # rate) is rank 0 in a burst as in execute (tests/integration/test_burst.py).
    opts = BenchOptions(runs=1, warmup=0, modes=("execute", "fenced", "burst"), input_shapes=shapes, input_values=values)
    try:
        report = asyncio.run(run_bench(str(path), opts))
    except UnsupportedModelError as err:
        assert err.rejections and all(r.op_type and r.reason for r in err.rejections)
        assert all(str(r) in str(err) for r in err.rejections[:50])
        return
    assert report.reference is not None and report.reference.startswith("ONNX Runtime"), report.reference_note
    assert report.accuracy and report.accurate, format_report(report)
    assert not report.disagreeing_modes


def test_onnx_file_through_the_importer_against_onnx_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "add.onnx"
    onnx_add(path)
    assert main(["bench", str(path), "--runs", "3", "--warmup", "0", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"nnrt bench: {path} (onnx, ") and "outputs identical in every mode" in out
    assert re.search(r"^  sum +\[2, 3\] +0 +0  yes \(tolerance used 0\)$", out, re.M)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [i["name"] for i in doc["inputs"]] == ["a", "b"] and doc["reference"]["accurate"] is True


def test_load_value_fixes_an_input_at_load_and_still_feeds_the_reference(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """silero_vad.onnx's case (benchmarks/models.toml ``load_values``): an If on the sample rate
    whose 8 kHz branch cannot run on the chunk; fixed at load, nnrt's model has no ``sr`` input
    and ONNX Runtime is still fed it."""
    pytest.importorskip("onnx")
    from tests.importers.onnx_build import save
    from tests.importers.onnx_silero_like import N, silero_like_model

    path = save(silero_like_model(), tmp_path)
    argv = ["bench", path, "--input-shape", f"x=1,{N}", "--runs", "2", "--warmup", "0", "--json", "-"]
    assert main([*argv, "--load-value", "sr=16000"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [i["name"] for i in doc["inputs"]] == ["x", "state"]
    assert doc["reference"]["accurate"] is True and [a["output"] for a in doc["reference"]["accuracy"]] == ["score", "state_n"]
    assert main([*argv, "--input-value", "sr=16000"]) == 1  # a run-time sample rate: refused at load, naming why
    assert "input_values={'sr': ...}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--load-value", "sr"])
    assert "--load-value 'sr': expected NAME=NUMBER" in capsys.readouterr().err
