"""``nnrt bench`` and the README's "Run your own model" on the real models vendored in
``tests/data/models/`` (from public PyPI wheels; see its README): each one loads, runs in every
mode with identical outputs, and matches its reference runtime within MLTS's tolerances."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from nnrt.bench import BenchOptions, format_report, input_specs, make_inputs, open_model, run_bench
from nnrt.bench._inputs import with_initial_state
from nnrt.cli import main
from nnrt.importers import state_variables

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "models"


#: The vendored model that nothing can run (MediaPipe's custom op), kept as the rejection example.
REJECTED = DATA / "mediapipe_selfie_segmentation.tflite"


def models(suffix: str) -> list[Path]:
    return sorted(p for p in DATA.glob(f"*{suffix}") if p != REJECTED)


@pytest.mark.parametrize("path", models(".tflite"), ids=lambda p: p.stem)
def test_vendored_tflite_model_matches_litert(path: Path) -> None:
    report = asyncio.run(run_bench(str(path), BenchOptions(runs=2, warmup=0, modes=("execute", "burst"))))
    assert report.format == "tflite" and report.operations > 0
    assert report.reference is not None and report.reference.startswith("LiteRT"), report.reference_note
    assert report.accuracy and report.accurate, format_report(report)
    assert not report.disagreeing_modes


def test_int8_streaming_model_is_compared_in_quantized_units() -> None:
    """microWakeWord: int8 in, uint8 out, its resource variables as explicit state inputs that
    the reference does not have (they start at real zero: the zero point)."""
    report = asyncio.run(run_bench(str(DATA / "microwakeword_okay_nabu.tflite"), BenchOptions(runs=1, warmup=0,
                                                                                               modes=("execute",))))
    assert report.inputs[0].type.name == "TENSOR_QUANT8_ASYMM_SIGNED" and len(report.inputs) > 1
    (acc,) = report.accuracy
    assert acc.quant_units is not None and acc.quant_units <= 3


def test_state_inputs_start_at_their_initial_values() -> None:
    model = open_model(DATA / "microwakeword_okay_nabu.tflite").model
    state = state_variables(model)
    assert len(state) == 6
    inputs = with_initial_state(model, make_inputs(input_specs(model), seed=3))
    for var in state:
        assert inputs[var.input].dtype == np.int8 and np.array_equal(inputs[var.input], var.initial)
    assert not np.array_equal(inputs[0], np.full_like(inputs[0], inputs[0].flat[0]))  # the audio stays random


def test_bench_command_on_a_real_model_with_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "mediapipe_hand_recrop.tflite"
    out_json = tmp_path / "r.json"
    assert main(["bench", str(path), "--runs", "3", "--warmup", "1", "--profile", "--reference-spread",
                 "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  reference \(LiteRT [\d.]+\)( +\d+\.\d+){6}$", out, re.M)
    assert re.search(r"^  output_crop +\[1, 1, 1, 4\] .* yes \(tolerance used", out, re.M)
    assert re.search(r"^  PRELU +\d+\.\d+ +\d+\.\d%", out, re.M)
    doc = json.loads(out_json.read_text())
    assert doc["reference"]["accurate"] is True and doc["reference"]["ratio"] > 0
    (spread,) = doc["reference"]["spread"]  # LiteRT's reference kernels against XNNPACK
    assert spread["output"] == "output_crop" and spread["max_abs"] > 0
    assert {t["op_type"] for t in doc["profile"]["op_types"]} >= {"CONV_2D", "DEPTHWISE_CONV_2D", "PRELU"}


def test_a_model_with_a_custom_op_is_refused_naming_the_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", str(REJECTED)]) == 1
    err = capsys.readouterr().err
    prefix = f"nnrt bench: {REJECTED}: INVALID_ARGUMENT: load: mediapipe_selfie_segmentation.tflite: 1 tflite node(s)"
    assert err.startswith(prefix)
    assert "Convolution2DTransposeBias" in err
    out_json = tmp_path / "c.json"
    assert main(["bench", "--crash-test", str(DATA / "mediapipe_hand_recrop.tflite"), str(REJECTED), "--runs", "1",
                 "--warmup", "0", "--json", str(out_json)]) == 1
    assert "summary: SUCCESS 1, FAILURE 1, HANG 0, CRASH 0" in capsys.readouterr().out
    failure = json.loads(out_json.read_text())["crash_test"][1]
    assert failure["outcome"] == "FAILURE" and "Convolution2DTransposeBias" in failure["detail"]


def test_readme_run_your_own_model_example(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "README.md").read_text()
    block = text.split("### Run your own model", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == "[(1, 896, 16), (1, 896, 1)]\n"


def test_without_the_reference_runtime_the_bench_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("ai_edge_litert", "ai_edge_litert.interpreter"):
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["bench", str(DATA / "mediapipe_hand_recrop.tflite"), "--runs", "2", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert "reference: none (LiteRT is not installed: pip install ai-edge-litert (or pip install 'nnrt[bench]'))" in out
    assert re.search(r"^  burst( +\d+\.\d+){6}$", out, re.M) and "accuracy vs" not in out


def test_a_stream_carries_the_state_like_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    """hey_mycroft over 40 steps: its output moves (0 to about 20 units), and nnrt, fed each
    step's state_out as the next state_in, follows LiteRT's stateful interpreter. Resetting the
    state each step instead stays at 2 units: far outside the tolerance."""
    path = DATA / "microwakeword_hey_mycroft.tflite"
    report = asyncio.run(run_bench(str(path), BenchOptions(runs=1, warmup=0, modes=("execute",), stream_steps=40)))
    (acc,) = report.stream
    assert report.stream_steps == 40 and report.stream_varied and acc.quant_units is not None and acc.quant_units <= 3
    assert main(["bench", str(path), "--runs", "1", "--warmup", "0", "--modes", "execute", "--stream", "5"]) == 0
    assert "over a stream of 5 steps, state carried from step to step (worst step per output):" in capsys.readouterr().out
    stateless = asyncio.run(run_bench(str(DATA / "mediapipe_hand_recrop.tflite"),
                                      BenchOptions(runs=1, warmup=0, modes=("execute",), stream_steps=3)))
    assert stateless.stream == [] and stateless.stream_steps == 0
