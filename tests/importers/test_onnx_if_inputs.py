"""An If decided by a graph input, with an LSTM inside a nested If: silero_vad.onnx's structure.

silero_vad.onnx picks its 16 kHz or 8 kHz network with ``If(sr == 16000)``. Each branch turns
the audio chunk into frames whose count depends on the chunk's length, squeezes the frame axis
away when there is one frame (an If on a shape, decided at load), and runs an LSTM inside a
further If (on the state's batch size, also decided at load). With a 512-sample chunk only the
16 kHz branch yields the 3-D LSTM input: the 8 kHz branch would feed it a higher rank, and ONNX
Runtime fails too if that branch is taken. NNAPI's IF needs both branches valid at
preparation, so nnrt loads the model when the sample rate is fixed at load
(``input_values``) and otherwise refuses it naming the If, the LSTM and the input to fix.

The model here is built with ``onnx.helper`` at the same structure (a few hundred bytes instead
of silero's 2.3 MB) and compared with ONNX Runtime.
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
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
H, N = 3, 8  # LSTM hidden size; samples per chunk
RNG = np.random.default_rng(5)


def _c(name: str, arr: object, dtype: object = np.int64) -> object:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr, dtype), name))


def _vi(name: str, shape: list[int] | None, elem: int = F) -> object:
    return helper.make_tensor_value_info(name, elem, shape)


def _branch(tag: str, frame_shape: list[int], features: int) -> object:
    """Frames of the chunk, the frame axis squeezed when there is one frame, then an LSTM in a nested If."""
    p = f"{tag}/"
    nodes = [
        _c(p + "fs", frame_shape),
        helper.make_node("Reshape", ["x", p + "fs"], [p + "frames"]),  # [1, features, T]
        helper.make_node("Shape", [p + "frames"], [p + "shape"]),
        _c(p + "last", [-1]), _c(p + "one", [1]), _c(p + "zero", [0]),
        helper.make_node("Gather", [p + "shape", p + "last"], [p + "t"]),
        helper.make_node("Equal", [p + "t", p + "one"], [p + "single"]),
        helper.make_node("If", [p + "single"], [p + "seq"], name=p + "squeeze_if", then_branch=helper.make_graph(
            [helper.make_node("Squeeze", [p + "frames", p + "last"], [p + "sq"])], p + "then", [], [_vi(p + "sq", None)]),
            else_branch=helper.make_graph(
            [helper.make_node("Identity", [p + "frames"], [p + "id"])], p + "else", [], [_vi(p + "id", None)])),
        # The LSTM runs when the state's batch is 1 (silero's decoder/If_1).
        helper.make_node("Shape", ["state"], [p + "sshape"]),
        helper.make_node("Gather", [p + "sshape", p + "one"], [p + "batch"]),
        helper.make_node("Equal", [p + "batch", p + "one"], [p + "b1"]),
        helper.make_node("Gather", ["state", p + "zero"], [p + "h0"]),  # [1, 1, H]
        helper.make_node("Gather", ["state", p + "one"], [p + "c0"]),
    ]
    w = numpy_helper.from_array(RNG.standard_normal((1, 4 * H, features)).astype(np.float32) * 0.5, p + "W")
    r = numpy_helper.from_array(RNG.standard_normal((1, 4 * H, H)).astype(np.float32) * 0.5, p + "R")
    b = numpy_helper.from_array(RNG.standard_normal((1, 8 * H)).astype(np.float32) * 0.1, p + "B")
    lstm = helper.make_graph([
        helper.make_node("Unsqueeze", [p + "seq", p + "zero"], [p + "X"]),  # [1, 1, features] with one frame
        helper.make_node("LSTM", [p + "X", p + "W", p + "R", p + "B", "", p + "h0", p + "c0"],
                         [p + "Y", p + "Yh", p + "Yc"], name=p + "LSTM", hidden_size=H),
        helper.make_node("Concat", [p + "Yh", p + "Yc"], [p + "out"], axis=0),
    ], p + "rnn", [], [_vi(p + "out", None)], initializer=[w, r, b])
    passthrough = helper.make_graph([helper.make_node("Identity", ["state"], [p + "same"])], p + "norm", [],
                                    [_vi(p + "same", None)])
    nodes.append(helper.make_node("If", [p + "b1"], [p + "state_n"], name=p + "rnn_if", then_branch=lstm,
                                  else_branch=passthrough))
    return helper.make_graph(nodes, tag, [], [_vi(p + "state_n", None)])


def _silero_like() -> object:
    # 16 kHz: all N samples are one frame of N features. 8 kHz: frames of N // 4 features, so a
    # chunk of N samples is 4 frames and the LSTM would get a 4-D X.
    nodes = [
        _c("sr16k", 16000),
        helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["state_n"], name="If_0", then_branch=_branch("16k", [1, N, -1], N),
                         else_branch=_branch("8k", [1, N // 4, -1], N // 4)),
        helper.make_node("ReduceSum", ["state_n"], ["score"], keepdims=0),
    ]
    inputs = [_vi("x", [1, None]), _vi("state", [2, 1, H]), _vi("sr", [], I64)]
    return make_model(nodes, inputs, [_vi("score", None), _vi("state_n", None)], opset=16)


def test_input_fixed_at_load_picks_the_branch_and_matches_onnx_runtime(device: CpuDevice, tmp_path: object) -> None:
    model = _silero_like()
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
    path = save(_silero_like(), tmp_path)
    with pytest.raises(UnsupportedModelError) as info:
        nnrt.load(path, input_shapes={"x": [1, N]})
    (rej,) = info.value.rejections
    assert (rej.node, rej.op_type) == ("If_0", "If")
    assert "else_branch" in rej.reason and "8k/LSTM (LSTM): X must be 3-D, got shape [1, 1, 2, 4]" in rej.reason
    assert "known only at run time" in rej.reason and "input_values={'sr': ...}" in rej.reason
    # ONNX Runtime agrees that branch cannot run on this chunk: it fails when the branch is taken.
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    with pytest.raises(InvalidArgument, match="LSTM"):
        run_ort(_silero_like(), {"x": np.zeros((1, N), np.float32), "state": np.zeros((2, 1, H), np.float32),
                                 "sr": np.asarray(8000, np.int64)})


def test_the_other_value_picks_the_other_branch(tmp_path: object) -> None:
    path = save(_silero_like(), tmp_path)
    with pytest.raises(UnsupportedModelError, match=r"8k/LSTM \(LSTM\): X must be 3-D") as info:
        nnrt.load(path, input_shapes={"x": [1, N]}, input_values={"sr": 8000})
    assert "known only at run time" not in str(info.value)  # decided at load: no run-time hint


def test_fixed_array_value_leaves_the_inputs(device: CpuDevice, tmp_path: object) -> None:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    model = make_model(nodes, [_vi("a", [2, 3]), _vi("b", [2, 3])], [_vi("y", None)])
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
    path = save(_silero_like(), tmp_path)
    with pytest.raises(nnrt.InvalidArgumentError, match=message):
        nnrt.load(path, input_shapes=shapes, input_values=values)  # type: ignore[arg-type]


def test_input_values_on_a_tflite_file_is_invalid_argument() -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "data" / "models" / "microwakeword_okay_nabu.tflite"
    with pytest.raises(nnrt.InvalidArgumentError, match="input_values is supported for ONNX files only"):
        nnrt.load(path, input_values={"x": 1})
