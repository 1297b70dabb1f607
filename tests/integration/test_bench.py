"""``nnrt bench``: every mode, ``--json``, ``--profile``, the reference comparison, ``--crash-test``
(SUCCESS / FAILURE / HANG / CRASH in child processes) and the errors a user meets."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt import zoo
from nnrt.bench import (
    BenchOptions,
    ReferenceUnavailable,
    compare,
    crash_test,
    input_specs,
    make_inputs,
    open_model,
    open_reference,
    run_bench,
)
from nnrt.bench._crash import run_quietly
from nnrt.bench._inputs import LoadedModel
from nnrt.bench._report import TerminalProgress
from nnrt.cli import main
from tests.helpers import on_trio_too

DATA = Path(__file__).resolve().parents[1] / "data" / "models"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Zoo models saved with ``Model.save``, a dynamic-shape model, an endless loop, a broken file."""
    root = tmp_path_factory.mktemp("bench")
    out = {}
    for name in ("small_cnn", "mobilenet_block"):
        out[name] = str(root / f"{name}.nnrt")
        zoo.build(name).save(out[name])
    out["dynamic"] = str(root / "dynamic.nnrt")
    dynamic_add().save(out["dynamic"])
    out["forever"] = str(root / "forever.nnrt")
    endless_loop().save(out["forever"])
    out["garbage"] = str(root / "garbage.onnx")
    Path(out["garbage"]).write_bytes(b"\x08\x07 this is not a protobuf \xff\xff" * 4)
    return out


def dynamic_add() -> nnrt.Model:
    """ADD of two [?, 3] inputs named "a" and "b"; output "sum"."""
    m = nnrt.Model("dynamic_add")
    a = m.add_operand(T.TENSOR_FLOAT32, dimensions=[0, 3], name="a")
    b = m.add_operand(T.TENSOR_FLOAT32, dimensions=[0, 3], name="b")
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    c = m.add_operand(T.TENSOR_FLOAT32, dimensions=[0, 3], name="sum")
    m.add_operation(Op.ADD, inputs=[a, b, act], outputs=[c])
    m.identify_inputs_and_outputs(inputs=[a, b], outputs=[c])
    m.finish()
    return m


def endless_loop(limit: float | None = None) -> nnrt.Model:
    """WHILE x >= x: x = x + 1 (never ends; NNAPI's loop timeout is what stops it), or with a
    ``limit``, WHILE x < limit."""
    cond = nnrt.Model("cond")
    x = cond.add_operand(T.TENSOR_FLOAT32, dimensions=[1])
    t = cond.add_operand(T.TENSOR_BOOL8, dimensions=[1])
    if limit is None:
        cond.add_operation(Op.GREATER_EQUAL, inputs=[x, x], outputs=[t])
    else:
        lim = cond.add_operand(T.TENSOR_FLOAT32, dimensions=[1])
        cond.set_operand_value(lim, np.full(1, limit, np.float32))
        cond.add_operation(Op.LESS, inputs=[x, lim], outputs=[t])
    cond.identify_inputs_and_outputs(inputs=[x], outputs=[t])
    cond.finish()
    body = nnrt.Model("body")
    x = body.add_operand(T.TENSOR_FLOAT32, dimensions=[1])
    one = body.add_operand(T.TENSOR_FLOAT32, dimensions=[1])
    body.set_operand_value(one, np.ones(1, np.float32))
    act = body.add_operand(T.INT32)
    body.set_operand_value(act, 0)
    y = body.add_operand(T.TENSOR_FLOAT32, dimensions=[1])
    body.add_operation(Op.ADD, inputs=[x, one, act], outputs=[y])
    body.identify_inputs_and_outputs(inputs=[x], outputs=[y])
    body.finish()
    m = nnrt.Model("forever")
    c = m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(c, cond)
    b = m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(b, body)
    x = m.add_operand(T.TENSOR_FLOAT32, dimensions=[1], name="x")
    y = m.add_operand(T.TENSOR_FLOAT32, dimensions=[1], name="y")
    m.add_operation(Op.WHILE, inputs=[c, b, x], outputs=[y])
    m.identify_inputs_and_outputs(inputs=[x], outputs=[y])
    m.finish()
    return m


# -- the command on nnrt's own model files ------------------------------------------------------


def test_bench_prints_every_mode_and_writes_json(saved: dict[str, str], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "r.json"
    assert main(["bench", saved["small_cnn"], "--runs", "8", "--warmup", "2", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"nnrt bench: {saved['small_cnn']} (nnrt, ") and "6 operations: CONV_2D" in out
    assert "latency, ms (8 runs per mode after warm-up):" in out
    for mode in ("execute", "fenced", "burst"):
        assert re.search(rf"^  {mode}( +\d+\.\d+){{6}}$", out, re.M), mode
    assert "outputs identical in every mode (execute, fenced, burst)" in out
    assert "reference: none (an nnrt model file has no reference runtime)" in out
    doc = json.loads(out_json.read_text())
    assert doc["format"] == "nnrt" and doc["operations"] == 6 and doc["modes_agree"] is True
    assert set(doc["modes"]) == {"execute", "fenced", "burst"}
    for lat in doc["modes"].values():
        assert lat["runs"] == 8 and 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] and lat["cpu_p50"] > 0
    assert doc["inputs"] == [{"name": "input0", "type": "TENSOR_FLOAT32", "shape": [1, 32, 32, 3]}]
    assert doc["reference"] is None and doc["profile"] is None


def test_profile_accounts_for_the_execution(saved: dict[str, str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "p.json"
    assert main(["bench", saved["mobilenet_block"], "--runs", "5", "--warmup", "1", "--modes", "execute",
                 "--profile", "--top", "3", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"profile \(5 runs .*; medians\): kernels \d+\.\d+ ms \+ interpreter \d+\.\d+ ms per execution "
                     r"\(median run as measured: \d+\.\d+ ms\)", out)
    assert re.search(r"^  DEPTHWISE_CONV_2D +\d+\.\d+ +\d+\.\d%", out, re.M)
    assert "slowest steps (of 6):" in out and len(re.findall(r"^  operation \d+ \(", out, re.M)) == 3
    prof = json.loads(out_json.read_text())["profile"]
    by_type = {t["op_type"]: t for t in prof["op_types"]}
    assert set(by_type) == {"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "RESHAPE", "FULLY_CONNECTED"}
    assert by_type["CONV_2D"]["steps"] == 2 and len(prof["steps"]) == 6
    # Per type and per step add up to the kernels' time; with the interpreter's share they make
    # up the median run (which preemptions on a shared machine can only lengthen).
    assert sum(t["ms"] for t in prof["op_types"]) == pytest.approx(prof["kernels_ms"])
    assert sum(s["ms"] for s in prof["steps"]) == pytest.approx(prof["kernels_ms"])
    assert sum(t["share"] for t in prof["op_types"]) == pytest.approx(1.0)
    assert prof["interpreter_ms"] < prof["kernels_ms"] and prof["kernels_ms"] + prof["interpreter_ms"] <= 1.1 * prof["total_ms"]


def test_profile_times_the_steps_inside_control_flow(saved: dict[str, str]) -> None:
    from nnrt.bench import profile_plan
    from nnrt.devices import CpuDevice

    device = CpuDevice()
    try:
        prepared = device.prepare_model_sync(endless_loop(limit=100.0))
        prof = profile_plan(prepared.plan, [np.zeros(1, np.float32)], runs=2, warmup=1)
        assert {s.label for s in prof.steps} == {"operation 0 (WHILE) > operation 0 (LESS)",
                                                 "operation 0 (WHILE) > operation 0 (ADD)"}
        assert {t.op_type: t.steps for t in prof.op_types} == {"LESS": 1, "ADD": 1}
        assert prof.kernels_ms + prof.interpreter_ms <= 1.1 * prof.total_ms
        forever = device.prepare_model_sync(open_model(saved["forever"]).model)
        with pytest.raises(nnrt.MissedDeadlineError, match=r"loop timeout of 0\.05 s exceeded"):
            profile_plan(forever.plan, [np.zeros(1, np.float32)], runs=1, warmup=0, loop_timeout=0.05)
    finally:
        device.close()


def test_dynamic_dimensions_need_a_shape(saved: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", saved["dynamic"], "--runs", "2"]) == 1
    err = capsys.readouterr().err
    assert "input 'a' has dynamic dimensions ([0, 3], 0 = unknown): give them with --input-shape a=D1,D2,..." in err
    assert main(["bench", saved["dynamic"], "--runs", "2", "--input-shape", "a=2,3", "--input-shape", "b=2,3",
                 "--input-value", "b=1.5", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)  # --json -: stdout is the JSON alone
    assert [i["shape"] for i in doc["inputs"]] == [[2, 3], [2, 3]] and doc["modes_agree"]


def test_seeded_inputs_respect_types_and_values() -> None:
    m = nnrt.Model()
    q = m.add_operand(T.TENSOR_QUANT8_ASYMM_SIGNED, dimensions=[4000], scale=0.5, zero_point=-3, name="q")
    u = m.add_operand(T.TENSOR_QUANT8_ASYMM, dimensions=[4000], scale=0.5, zero_point=7, name="u")
    i = m.add_operand(T.TENSOR_INT32, dimensions=[5], name="i")
    s = m.add_operand(T.INT32, name="s")
    out = m.add_operand(T.TENSOR_QUANT8_ASYMM_SIGNED, dimensions=[4000], scale=0.5, zero_point=-3)
    m.add_operation(Op.DEQUANTIZE, inputs=[q], outputs=[m.add_operand(T.TENSOR_FLOAT32, dimensions=[4000])])
    m.add_operation(Op.QUANTIZE, inputs=[m.operands[5].index], outputs=[out])
    m.identify_inputs_and_outputs(inputs=[q, u, i, s], outputs=[out])
    specs = input_specs(m)
    a = make_inputs(specs, seed=1, values={"s": 16000})
    b = make_inputs(specs, seed=1, values={"s": 16000})
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert a[0].dtype == np.int8 and a[0].min() == -128 and a[0].max() == 127
    assert a[1].dtype == np.uint8 and a[1].min() == 0 and a[1].max() == 255
    assert a[2].dtype == np.int32 and a[2].min() >= 0 and a[2].max() < 4 and a[3] == 16000
    with pytest.raises(nnrt.InvalidArgumentError, match=r"--input-value x: the model has no input 'x'"):
        make_inputs(specs, values={"x": 1})
    with pytest.raises(nnrt.InvalidArgumentError, match=r"input 'q': --input-shape \[3\] contradicts the model's \[4000\]"):
        input_specs(m, {"q": [3]})


@pytest.mark.parametrize(("argv", "message"), [
    (["bench"], "give one MODEL, or --crash-test MODEL"),
    (["bench", "m.onnx", "--runs", "0"], "--runs must be positive"),
    (["bench", "m.onnx", "--modes", "execute,warp"], "--modes 'execute,warp': choose from execute, fenced, burst"),
    (["bench", "m.onnx", "--input-shape", "x=1,a"], "--input-shape 'x=1,a': expected NAME=D1,D2,..."),
    (["bench", "m.onnx", "--input-value", "sr"], "--input-value 'sr': expected NAME=NUMBER"),
    (["bench", "m.onnx", "--crash-test", "n.onnx"], "give one MODEL, or --crash-test MODEL"),
    (["bench", "m.onnx", "--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_and_unreadable_files_are_invalid_argument(saved: dict[str, str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.tflite")
    assert main(["bench", missing]) == 1
    expected = f"nnrt bench: {missing}: INVALID_ARGUMENT: {missing}: cannot open the model: No such file or directory\n"
    assert capsys.readouterr().err == expected
    out_json = tmp_path / "e.json"
    assert main(["bench", saved["garbage"], "--json", str(out_json)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"nnrt bench: {saved['garbage']}: INVALID_ARGUMENT: ")
    assert json.loads(out_json.read_text())["error"]["status"] == "INVALID_ARGUMENT"
    with pytest.raises(nnrt.InvalidArgumentError, match="cannot open the model"):
        open_model(str(tmp_path))  # a directory


def test_progress_bar_draws_only_on_a_terminal_and_erases_itself() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    tick = TerminalProgress(tty, delay_s=0.0)("execute", 3)
    tick()
    assert re.fullmatch(r"\r  execute  \[#{10}\.{20}\] 1/3", tty.getvalue())
    tick()
    tick()
    assert tty.getvalue().endswith("\r" + " " * 70 + "\r")
    plain = io.StringIO()
    tick = TerminalProgress(plain, delay_s=0.0)("execute", 3)
    for _ in range(3):
        tick()
    assert plain.getvalue() == ""


# -- the reference comparison ------------------------------------------------------------------


def onnx_add(path: Path, *, scale: float = 1.0) -> None:
    """An ONNX model sum = (a + b) * scale over [2, 3] float inputs named like ``nnrt_add``."""
    from onnx import TensorProto, helper, save

    nodes = [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Mul", ["t", "k"], ["sum"])]
    graph = helper.make_graph(
        nodes, "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b")],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("k", TensorProto.FLOAT, [], [scale])],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize(("scale", "accurate"), [(1.0, True), (1.01, False)])
async def test_reference_comparison_with_onnx_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      scale: float, accurate: bool) -> None:
    """The whole reference path (pairing by name, accuracy, interleaved latency, ratio) on an
    ONNX file, with nnrt's side standing in for the importer: the same ADD built in code."""
    path = tmp_path / "add.onnx"
    onnx_add(path, scale=scale)
    model = dynamic_add()
    monkeypatch.setattr("nnrt.bench._run.open_model",
                        lambda p, shapes, values=None: LoadedModel(model, str(p), "onnx", os.path.getsize(p)))
    report = await run_bench(str(path), BenchOptions(runs=6, warmup=1, input_shapes={"a": [2, 3], "b": [2, 3]},
                                                     reference_spread=True))
    assert report.reference is not None and report.reference.startswith("ONNX Runtime ")
    assert report.reference_latency is not None and report.reference_latency.runs == 6
    assert report.ratio is not None and report.ratio > 0 and report.cpu_ratio is not None and report.cpu_ratio > 0
    (acc,) = report.accuracy
    assert acc.output == "sum" and acc.shape == (2, 3) and acc.quant_units is None
    assert acc.ok is accurate and report.accurate is accurate
    (spread,) = report.reference_spread  # ONNX Runtime without graph optimizations: the same sums
    assert spread.output == "sum" and spread.ok and spread.max_abs == 0.0
    if accurate:
        assert acc.max_abs == 0.0
    else:
        assert acc.max_rel == pytest.approx(0.01 / 1.01, rel=1e-3) and acc.tolerance_used is not None and acc.tolerance_used > 1
    from nnrt.bench import format_report

    text = format_report(report)
    assert re.search(r"^  reference \(ONNX Runtime [\d.]+\)( +\d+\.\d+){6}$", text, re.M)
    assert re.search(r"ratio nnrt execute / reference \(p50\): \d+\.\d+x, CPU time \d+\.\d+x", text)
    assert ("yes (tolerance used 0)" if accurate else "NO (tolerance used") in text
    assert "noise floor: the reference's plainer path (LiteRT: reference kernels; ONNX Runtime: no graph optimizations)" in text
    assert report.as_dict()["reference"]["spread"][0]["max_abs"] == 0.0


def test_reference_litert_runs_a_real_model_with_one_thread() -> None:
    ref = open_reference(str(DATA / "mediapipe_hand_recrop.tflite"), "tflite", {})
    assert ref.name.startswith("LiteRT") and ref.input_names == ["input_1"] and ref.output_names == ["output_crop"]
    x = np.random.default_rng(0).standard_normal((1, 256, 256, 3)).astype(np.float32)
    (out,) = ref.run({"input_1": x})
    assert out.shape == (1, 1, 1, 4) and np.isfinite(out).all()
    assert np.array_equal(ref.run({"input_1": x})[0], out)


def test_reference_not_installed_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)
    with pytest.raises(ReferenceUnavailable, match=r"pip install onnxruntime \(or pip install 'nnrt\[bench\]'\)"):
        open_reference(str(tmp_path / "m.onnx"), "onnx", {})
    monkeypatch.setitem(__import__("sys").modules, "ai_edge_litert", None)
    monkeypatch.setitem(__import__("sys").modules, "ai_edge_litert.interpreter", None)
    with pytest.raises(ReferenceUnavailable, match=r"pip install ai-edge-litert"):
        open_reference(str(tmp_path / "m.tflite"), "tflite", {})


def test_reference_that_cannot_run_the_file_is_reported() -> None:
    with pytest.raises(ReferenceUnavailable, match="LiteRT cannot run this model"):
        open_reference(str(DATA / "silero_vad_16k_op15.onnx"), "tflite", {})


def test_compare_follows_the_mlts_tolerances() -> None:
    ref = np.array([0.0, 1.0, 100.0], np.float32)
    assert compare("y", ref + np.float32(5e-5), ref, quantized=False).ok
    near = compare("y", ref + np.array([0, 0, 0.09], np.float32), ref, quantized=False)
    assert near.ok and near.tolerance_used == pytest.approx(0.09 / (1e-4 + 0.1), rel=1e-3)
    far = compare("y", ref + np.array([2e-4, 0, 0], np.float32), ref, quantized=False)
    assert not far.ok and far.max_rel == 0.0  # the error is at a zero reference: no relative figure
    q = np.array([10, 20, 30], np.uint8)
    assert compare("q", q + np.uint8(3), q, quantized=True).quant_units == 3
    assert not compare("q", q + np.uint8(4), q, quantized=True).ok
    nan = np.array([np.nan, 1.0])
    assert compare("n", nan, nan, quantized=False).ok and not compare("n", nan, np.array([0.0, 1.0]), quantized=False).ok
    bad = compare("s", np.zeros((2, 3)), np.zeros((3, 3)), quantized=False)
    assert not bad.ok and bad.problem == "shape [2, 3] but the reference gives [3, 3]"


# -- crash test --------------------------------------------------------------------------------


def abort_on_crash_models(path: str, options: dict[str, Any]) -> str:
    """A child runner for the CRASH case: dies by SIGABRT on a model named ``*crash*``."""
    if "crash" in os.path.basename(path):
        os.abort()
    return run_quietly(path, options)


def test_crash_test_reports_success_failure_hang_and_crash(saved: dict[str, str], tmp_path: Path) -> None:
    crash = tmp_path / "crash.nnrt"
    zoo.build("one_add").save(crash)
    seen: list[str] = []
    options = {"runs": 2, "warmup": 0, "loop_timeout": 15.0}
    # A generous watchdog for the models that end (a loaded machine must not turn them into
    # hangs), a short one for the endless loop.
    results = crash_test([saved["small_cnn"], saved["garbage"], str(crash)], timeout_s=60.0, options=options,
                         runner=abort_on_crash_models, on_result=lambda r: seen.append(r.outcome))
    (hung,) = crash_test([saved["forever"]], timeout_s=2.0, options=options, on_result=lambda r: seen.append(r.outcome))
    assert [r.outcome for r in results] == seen[:3] == ["SUCCESS", "FAILURE", "CRASH"] and seen[3] == "HANG"
    ok, failed, crashed = results
    assert re.fullmatch(r"6 operations, 2 executions, p50 \d+\.\d+ ms", ok.detail)
    assert failed.detail.startswith("INVALID_ARGUMENT: ")
    assert crashed.detail == "killed by signal SIGABRT"
    assert hung.detail == "no result within 2 s: killed" and hung.seconds >= 2.0
    import multiprocessing

    assert multiprocessing.active_children() == []


def test_crash_test_command(saved: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "c.json"
    code = main(["bench", "--crash-test", saved["small_cnn"], saved["garbage"], "--runs", "2", "--warmup", "0",
                 "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 1
    assert "nnrt bench --crash-test: 2 model(s), each in a child process, watchdog 60 s, 2 executions each" in out
    assert re.search(rf"{re.escape(saved['small_cnn'])} +SUCCESS ", out)
    assert re.search(rf"{re.escape(saved['garbage'])} +FAILURE .*INVALID_ARGUMENT", out)
    assert "summary: SUCCESS 1, FAILURE 1, HANG 0, CRASH 0" in out
    doc = json.loads(out_json.read_text())
    assert [r["outcome"] for r in doc["crash_test"]] == ["SUCCESS", "FAILURE"]
    assert main(["bench", "--crash-test", saved["small_cnn"], "--runs", "1", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)  # --json -: the JSON alone
    assert doc["summary"] == {"SUCCESS": 1, "FAILURE": 0, "HANG": 0, "CRASH": 0}


async def test_a_reference_that_fails_to_run_is_reported_and_the_bench_goes_on(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing:
        name, input_names, output_names = "Broken Runtime 1.0", ["a", "b"], ["sum"]

        def run(self, feeds: Any) -> list[np.ndarray]:
            raise ReferenceUnavailable("Broken Runtime failed to run this model: out of luck")

    path = tmp_path / "add.onnx"
    onnx_add(path)
    model = dynamic_add()
    monkeypatch.setattr("nnrt.bench._run.open_model", lambda p, shapes, values=None: LoadedModel(model, str(p), "onnx", 1))
    monkeypatch.setattr("nnrt.bench._run.open_reference", lambda *a, **k: Failing())
    report = await run_bench(str(path), BenchOptions(runs=2, warmup=0, input_shapes={"a": [2, 3], "b": [2, 3]}))
    assert report.reference is None and report.accuracy == [] and report.reference_latency is None
    assert report.reference_note == "Broken Runtime failed to run this model: out of luck"
    assert set(report.modes) == {"execute", "fenced", "burst"}


async def test_every_phase_reports_its_progress(saved: dict[str, str]) -> None:
    ticks: dict[str, list[int]] = {}

    def progress(label: str, total: int) -> Any:
        ticks[label] = [total, 0]

        def tick() -> None:
            ticks[label][1] += 1

        return tick

    await run_bench(saved["small_cnn"],
                    BenchOptions(runs=3, warmup=2, profile=True, progress=progress))
    assert ticks == {"execute": [5, 5], "fenced": [5, 5], "burst": [5, 5], "profile": [5, 5]}


def test_a_value_for_an_input_of_unknown_rank_makes_a_0d_tensor() -> None:
    from nnrt.bench._inputs import parse_shape_options

    assert parse_shape_options(["sr=", "x=1,3,8,8"]) == {"sr": [], "x": [1, 3, 8, 8]}
    m = nnrt.Model()
    sr = m.add_operand(T.TENSOR_INT32, dimensions=[], name="sr")  # ONNX's int64 scalar tensor, rank unknown
    m.identify_inputs_and_outputs(inputs=[sr], outputs=[])
    with pytest.raises(nnrt.InvalidArgumentError, match=r"input 'sr' has dynamic dimensions \(unknown rank"):
        input_specs(m)
    (spec,) = input_specs(m, values={"sr": 16000})
    assert spec.shape == () and make_inputs([spec], values={"sr": 16000})[0] == np.array(16000, np.int32)
    assert input_specs(m, {"sr": []})[0].shape == ()


async def test_operations_are_counted_inside_control_flow(tmp_path: Path) -> None:
    path = tmp_path / "count.nnrt"
    endless_loop(limit=5.0).save(path)
    report = await run_bench(str(path), BenchOptions(runs=1, warmup=0, modes=("execute",)))
    assert report.operations == 3 and report.op_types == {"WHILE": 1, "LESS": 1, "ADD": 1}


on_trio_too(globals())
