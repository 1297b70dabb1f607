"""Real TFLite models vendored under tests/data/models, through nnrt.load against LiteRT.

Float models: every output within atol 1e-4 + rtol 1e-3 of LiteRT's default CPU path. The
int8 streaming keyword spotters: 6 steps carrying their state (resource variables become
``state_in``/``state_out``), the score and the new state within 3 quantized units of what
LiteRT (reference kernels, intermediates kept) computes and assigns to its variables (the
issue's end-to-end budget).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nnrt
from nnrt.importers import state_variables
from tests.importers.tflite_builder import assert_close

DATA = Path(__file__).resolve().parent.parent / "data" / "models"


@pytest.mark.parametrize("name", ["mediapipe_face_detection_short_range", "mediapipe_face_landmark",
                                  "mediapipe_hand_recrop"])
def test_float_cnn_matches_litert(device: nnrt.CpuDevice, name: str) -> None:
    from ai_edge_litert.interpreter import Interpreter

    path = DATA / f"{name}.tflite"
    model = nnrt.load(path)
    it = Interpreter(model_path=str(path), num_threads=1)
    it.allocate_tensors()
    (d,) = it.get_input_details()
    x = np.random.default_rng(3).standard_normal(d["shape"]).astype(np.float32)
    it.set_tensor(d["index"], x)
    it.invoke()
    want = [it.get_tensor(o["index"]) for o in it.get_output_details()]
    got = device.prepare_model_sync(model).execute_sync([x]).outputs
    assert [model.operands[i].name for i in model.output_indexes] == [o["name"] for o in it.get_output_details()]
    for g, w in zip(got, want):
        assert_close(np.asarray(g), w)


@pytest.mark.parametrize("name", ["microwakeword_okay_nabu", "microwakeword_hey_jarvis"])
def test_int8_streaming_model_carries_its_state(device: nnrt.CpuDevice, name: str) -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    path = DATA / f"{name}.tflite"
    model = nnrt.load(path)
    variables = state_variables(model)
    assert len(variables) == 6
    assert [v.input for v in variables] == list(range(1, 7)) and [v.output for v in variables] == list(range(1, 7))
    x_op = model.operands[model.input_indexes[0]]
    assert x_op.type is nnrt.OperandType.TENSOR_QUANT8_ASYMM_SIGNED and x_op.dimensions == (1, 3, 40)
    it = Interpreter(model_path=str(path), num_threads=1, experimental_preserve_all_tensors=True,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    tensors = {t["name"]: t["index"] for t in it.get_tensor_details()}
    # each state output is a copy of the operand named after the tensor LiteRT assigns
    sources = []
    for v in variables:
        out = model.output_indexes[v.output]
        sources.append(model.operands[next(op for op in model.operations if out in op.outputs).inputs[0]].name)
    prepared = device.prepare_model_sync(model)
    state = [v.initial for v in variables]
    rng = np.random.default_rng(11)
    moved = 0
    for step in range(6):
        base = np.sin(np.arange(40) * 0.3 * (1 + step)) * 100
        x = np.clip(base + rng.normal(0, 30, (1, 3, 40)), -128, 127).astype(np.int8)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        outs = prepared.execute_sync([x, *state]).outputs
        assert_close(np.asarray(outs[0]), it.get_tensor(it.get_output_details()[0]["index"]), units=3)
        for new, src in zip(outs[1:], sources):
            assert_close(np.asarray(new), it.get_tensor(tensors[src]), units=3)
        moved += sum(int(np.any(a != b)) for a, b in zip(outs[1:], state))
        state = list(outs[1:])
    assert moved > 0  # the state really changes from step to step


def test_an_imported_model_saves_and_reloads(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    """Constants that are views of the loaded file survive ``Model.save`` / ``Model.load``."""
    model = nnrt.load(DATA / "mediapipe_hand_recrop.tflite")
    model.save(tmp_path / "recrop.nnrt")
    again = nnrt.Model.load(tmp_path / "recrop.nnrt")
    x = np.random.default_rng(5).standard_normal((1, 256, 256, 3)).astype(np.float32)
    a = device.prepare_model_sync(model).execute_sync([x]).outputs[0]
    b = device.prepare_model_sync(again).execute_sync([x]).outputs[0]
    np.testing.assert_array_equal(a, b)
    assert [again.operands[i].name for i in again.input_indexes] == ["input_1"]
