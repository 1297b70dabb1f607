"""A small ONNX model with silero_vad.onnx's structure, built with ``onnx.helper``.

``If(sr == 16000)`` picks one of two branches; each frames the chunk (the frame count depends
on its length), squeezes the frame axis away when there is one frame (an If on a shape), and
runs an LSTM inside a further If (on the state's batch size). With a chunk of ``N`` samples only
the 16 kHz branch yields the 3-D LSTM input, as with silero's 512-sample chunks. Import it
only where onnx is installed (the tests that use it skip otherwise).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.importers.onnx_build import make_model

__all__ = ["H", "N", "silero_like_model"]

F, I64 = TensorProto.FLOAT, TensorProto.INT64
H, N = 3, 8  # LSTM hidden size; samples per chunk
_RNG = np.random.default_rng(5)


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
    w = numpy_helper.from_array(_RNG.standard_normal((1, 4 * H, features)).astype(np.float32) * 0.5, p + "W")
    r = numpy_helper.from_array(_RNG.standard_normal((1, 4 * H, H)).astype(np.float32) * 0.5, p + "R")
    b = numpy_helper.from_array(_RNG.standard_normal((1, 8 * H)).astype(np.float32) * 0.1, p + "B")
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


def silero_like_model() -> object:
    """If(sr == 16000) over two branches; the 8 kHz one cannot run on a chunk of N samples."""
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
