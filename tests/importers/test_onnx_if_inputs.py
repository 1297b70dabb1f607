"""An If decided by a graph input, with an LSTM inside a nested If: silero_vad.onnx's structure.

silero_vad.onnx picks its 16 kHz or 8 kHz network with ``If(sr == 16000)``. Each branch turns
the audio chunk into frames whose count depends on the chunk's length, squeezes the frame axis
away when there is one frame (an If on a shape, decided at load), and runs an LSTM inside a
further If (on the state's batch size, also decided at load). With a 512-sample chunk only the
16 kHz branch yields the 3-D LSTM input: the 8 kHz branch would feed it a higher rank, and ONNX
Runtime fails too if that branch is taken. NNAPI's IF needs both branches valid at
preparation, so nnrt loads the model when the sample rate is fixed at load
(``input_values``) and otherwise refuses it naming the If, the LSTM and the input to fix.

The model here (``onnx_silero_like``) is built with ``onnx.helper`` at the same structure (a few
kB instead of silero's 2.3 MB) and compared with ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from nnrt import CpuDevice
from nnrt.importers import UnsupportedModelError
from tests.importers.onnx_build import make_model, run_nnrt, run_ort, save

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper

from tests.importers.onnx_silero_like import H, N, silero_like_model

RNG = np.random.default_rng(6)


def test_input_fixed_at_load_picks_the_branch_and_matches_onnx_runtime(device: CpuDevice, tmp_path: object) -> None:
    model = silero_like_model()
    path = save(model, tmp_path)
    loaded = nnrt.load(path, input_shapes={"x": [1, N]}, input_values={"sr": 16000})
    assert [loaded.operands[i].name for i in loaded.input_indexes] == ["x", "state"]
    assert "IF" not in {op.type.name for op in loaded.operations}  # every If decided at load
    state = np.zeros((2, 1, H), np.float32)
    for _ in range(3):  # a stream: the state is carried from chunk to chunk
        x = RNG.uniform(-1, 1, (1, N)).astype(np.float32)
        want = run_ort(model, {"x": x, "state": state, "sr": np.asarray(16000, np.int64)})
        got = run_nnrt(device, path, [x, state], input_shapes={"x": [1, N]}, input_values={"sr": 16000})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.reshape(w.shape), w, atol=1e-5, rtol=1e-4)
        state = want[1]


def test_branch_invalid_for_the_fixed_shapes_is_refused_naming_node_and_input(tmp_path: object) -> None:
    path = save(silero_like_model(), tmp_path)
    with pytest.raises(UnsupportedModelError) as info:
        nnrt.load(path, input_shapes={"x": [1, N]})
    (rej,) = info.value.rejections
    assert (rej.node, rej.op_type) == ("If_0", "If")
    assert "else_branch" in rej.reason and "8k/LSTM (LSTM): X must be 3-D, got shape [1, 1, 2, 4]" in rej.reason
    assert "known only at run time" in rej.reason and "input_values={'sr': ...}" in rej.reason
    # ONNX Runtime agrees that branch cannot run on this chunk: it fails when the branch is taken.
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    with pytest.raises(InvalidArgument, match="LSTM"):
        run_ort(silero_like_model(), {"x": np.zeros((1, N), np.float32), "state": np.zeros((2, 1, H), np.float32),
                                 "sr": np.asarray(8000, np.int64)})


def test_the_other_value_picks_the_other_branch(tmp_path: object) -> None:
    path = save(silero_like_model(), tmp_path)
    with pytest.raises(UnsupportedModelError, match=r"8k/LSTM \(LSTM\): X must be 3-D") as info:
        nnrt.load(path, input_shapes={"x": [1, N]}, input_values={"sr": 8000})
    assert "known only at run time" not in str(info.value)  # decided at load: no run-time hint


def test_fixed_array_value_leaves_the_inputs(device: CpuDevice, tmp_path: object) -> None:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(n, f, [2, 3]) for n in ("a", "b")]
    model = make_model(nodes, ins, [helper.make_tensor_value_info("y", f, None)])
    path = save(model, tmp_path)
    b = RNG.standard_normal((2, 3)).astype(np.float32)
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    (got,) = run_nnrt(device, path, [a], input_values={"b": b})
    np.testing.assert_allclose(got, a + b, rtol=1e-6)
    (got,) = run_nnrt(device, path, [a], input_values={"b": 2.5})  # a number fills the input's shape
    np.testing.assert_allclose(got, a + 2.5, rtol=1e-6)


@pytest.mark.parametrize(("values", "shapes", "message"), [
    ({"nope": 1}, {}, r"input_values names \['nope'\], which are not graph inputs"),
    ({"sr": 16000.5}, {}, r"input_values\['sr'\]: 16000.5 does not fit the input's element type int64"),
    ({"sr": "16k"}, {}, r"input_values\['sr'\] = '16k' is not a number or numeric array"),
    ({"x": 1.0}, {}, r"input_values\['x'\]: the input's shape \[1, -1\] has unknown dimensions"),
    ({"x": np.zeros((1, 3), np.float32)}, {"x": [1, N]}, r"input_values\['x'\] has shape \[1, 3\]; the input's is"),
    ({1: 2}, {}, r"input_values key 1 is not an input name"),
])
def test_bad_input_values_are_invalid_argument(tmp_path: object, values: dict[object, object],
                                               shapes: dict[str, list[int]], message: str) -> None:
    path = save(silero_like_model(), tmp_path)
    with pytest.raises(nnrt.InvalidArgumentError, match=message):
        nnrt.load(path, input_shapes=shapes, input_values=values)  # type: ignore[arg-type]


def test_input_values_on_a_tflite_file_is_invalid_argument() -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "data" / "models" / "microwakeword_okay_nabu.tflite"
    with pytest.raises(nnrt.InvalidArgumentError, match="input_values is supported for ONNX files only"):
        nnrt.load(path, input_values={"x": 1})
