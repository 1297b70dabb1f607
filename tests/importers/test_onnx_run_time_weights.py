"""ONNX weights that arrive at run time (graph inputs, or computed), re-laid by operations in the
graph rather than at import, and LayerNormalization's Mean / InvStdDev outputs; compared with
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from nnrt import CpuDevice
from tests.importers.onnx_build import compare_with_ort, make_model, save

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from tests.importers.test_onnx_models import rand, vi  # noqa: E402


@pytest.mark.parametrize(
    ("cin", "cout", "group", "attrs", "with_bias"),
    [
        (3, 8, 1, {"pads": [1, 1, 1, 1]}, True),
        (3, 8, 1, {"strides": [2, 2], "pads": [0, 1, 2, 1], "dilations": [1, 2]}, False),
        (4, 4, 4, {"pads": [1, 1, 1, 1]}, True),  # depthwise
        (4, 8, 4, {"strides": [2, 1]}, False),  # depthwise, multiplier 2
        (6, 4, 2, {"auto_pad": "SAME_UPPER"}, True),  # grouped
    ],
)
def test_conv_weights_as_graph_inputs(device: CpuDevice, tmp_path: object, cin: int, cout: int, group: int,
                                      attrs: dict[str, object], with_bias: bool) -> None:
    ins = ["x", "w", "b"] if with_bias else ["x", "w"]
    node = helper.make_node("Conv", ins, ["y"], group=group, kernel_shape=[3, 3], **attrs)
    inputs = [vi("x", [1, cin, 9, 8]), vi("w", [cout, cin // group, 3, 3])] + ([vi("b", [cout])] if with_bias else [])
    feeds = {"x": rand(1, cin, 9, 8), "w": rand(cout, cin // group, 3, 3)} | ({"b": rand(cout)} if with_bias else {})
    compare_with_ort(device, make_model([node], inputs, [vi("y", None)]), tmp_path, feeds)


def test_conv1d_weights_computed_at_run_time_with_fused_relu(device: CpuDevice, tmp_path: object) -> None:
    # The weights are a product of a graph input and an initializer; the bias is a constant.
    nodes = [
        helper.make_node("Mul", ["w0", "k"], ["w"]),
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1], strides=[2]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    inits = [numpy_helper.from_array(rand(4, 3, 3), "k"), numpy_helper.from_array(rand(4), "b")]
    model = make_model(nodes, [vi("x", [2, 3, 16]), vi("w0", [4, 3, 3])], [vi("y", None)], inits)
    compare_with_ort(device, model, tmp_path, {"x": rand(2, 3, 16), "w0": rand(4, 3, 3)})
    ops = [op.type.name for op in nnrt.load(save(model, tmp_path, "r.onnx")).operations]
    assert "RELU" not in ops and ops.count("CONV_2D") == 1  # the Relu is fused into the conv


def test_conv_weights_shared_by_two_convs_are_relaid_once(device: CpuDevice, tmp_path: object) -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w"], ["y"])]
    model = make_model(nodes, [vi("x", [1, 4, 7, 7]), vi("w", [4, 4, 3, 3])], [vi("y", None)])
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 4, 7, 7), "w": rand(4, 4, 3, 3)})
    ops = [op.type.name for op in nnrt.load(save(model, tmp_path, "r.onnx")).operations]
    assert ops.count("TRANSPOSE") == 3  # x in, w to OHWI (shared), y out


@pytest.mark.parametrize(("attrs", "with_bias"), [({"strides": [2, 2], "pads": [1, 0, 1, 1]}, True),
                                                  ({"strides": [3, 2], "pads": [0, 0, 1, 2], "output_padding": [1, 1]}, False),
                                                  ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, True)])
def test_conv_transpose_weights_as_graph_inputs(device: CpuDevice, tmp_path: object, attrs: dict[str, object],
                                                with_bias: bool) -> None:
    ins = ["x", "w", "b"] if with_bias else ["x", "w"]
    group = 2 if with_bias else 1  # grouped: the weights and the bias are SPLIT per group in the graph
    node = helper.make_node("ConvTranspose", ins, ["y"], kernel_shape=[3, 3], group=group, **attrs)
    inputs = [vi("x", [1, 4, 5, 4]), vi("w", [4, 2, 3, 3])] + ([vi("b", [2 * group])] if with_bias else [])
    feeds = {"x": rand(1, 4, 5, 4), "w": rand(4, 2, 3, 3)} | ({"b": rand(2 * group)} if with_bias else {})
    compare_with_ort(device, make_model([node], inputs, [vi("y", None)]), tmp_path, feeds)


@pytest.mark.parametrize(
    ("node", "w_shape", "match"),
    [
        (helper.make_node("Conv", ["x", "w"], ["y"], group=2, dilations=[2, 2], name="gd"), [4, 2, 3, 3],
         r"gd \(Conv\).*dilated grouped convolution with run-time weights"),
        (helper.make_node("Conv", ["x", "w"], ["y"], name="unk"), None,
         r"unk \(Conv\).*run-time weights \(input 1\) need a known shape"),
    ],
)
def test_unsupported_run_time_weights_are_refused_naming_the_node(tmp_path: object, node: object,
                                                                  w_shape: list[int] | None, match: str) -> None:
    model = make_model([node], [vi("x", [1, 4, 9, 9]), vi("w", w_shape)], [vi("y", None)])
    with pytest.raises(nnrt.UnsupportedModelError, match=match) as err:
        nnrt.load(save(model, tmp_path))
    assert str(err.value).startswith("INVALID_ARGUMENT")


@pytest.mark.parametrize(("op", "direction", "extra"), [
    ("LSTM", "bidirectional", {}), ("LSTM", "forward", {"peepholes": True}), ("GRU", "reverse", {}),
    ("GRU", "bidirectional", {"linear_before_reset": 1}), ("RNN", "bidirectional", {}),
    ("RNN", "forward", {"activations": ["Relu"]}),
])
def test_recurrent_weights_as_graph_inputs(device: CpuDevice, tmp_path: object, op: str, direction: str,
                                           extra: dict[str, object]) -> None:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs, hidden, seq, batch, size = (2 if direction == "bidirectional" else 1), 5, 4, 2, 3
    attrs = {k: v for k, v in extra.items() if k != "peepholes"}
    ins = ["X", "W", "R", "B"] + (["", "", "", "P"] if extra.get("peepholes") else [])
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ins, outs, hidden_size=hidden, direction=direction, **attrs)
    shapes = {"X": [seq, batch, size], "W": [dirs, gates * hidden, size], "R": [dirs, gates * hidden, hidden],
              "B": [dirs, 2 * gates * hidden], "P": [dirs, 3 * hidden]}
    names = [n for n in ins if n]
    model = make_model([node], [vi(n, shapes[n]) for n in names], [vi(o, None) for o in outs], opset=14)
    compare_with_ort(device, model, tmp_path, {n: rand(*shapes[n]) * 0.5 for n in names})


def test_lstm_without_bias_and_computed_weights(device: CpuDevice, tmp_path: object) -> None:
    hidden, size = 4, 3
    nodes = [helper.make_node("Mul", ["W0", "k"], ["W"]),
             helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=hidden)]
    model = make_model(nodes, [vi("X", [3, 1, size]), vi("W0", [1, 4 * hidden, size]), vi("R", [1, 4 * hidden, hidden])],
                       [vi("Y", None)], [numpy_helper.from_array(rand(1, 4 * hidden, size), "k")], opset=14)
    compare_with_ort(device, model, tmp_path, {"X": rand(3, 1, size), "W0": rand(1, 4 * hidden, size) * 0.5,
                                               "R": rand(1, 4 * hidden, hidden) * 0.5})


@pytest.mark.parametrize("axis", [1, -1])
def test_layer_normalization_mean_and_inv_std_dev_outputs(device: CpuDevice, tmp_path: object, axis: int) -> None:
    # scale and bias are graph inputs too
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=axis, epsilon=1e-3)
    shape = [2, 3, 5]
    norm = shape[axis:]
    model = make_model([node], [vi("x", shape), vi("s", norm), vi("b", norm)],
                       [vi("y", None), vi("mean", None), vi("inv", None)])
    got = compare_with_ort(device, model, tmp_path, {"x": rand(*shape), "s": rand(*norm), "b": rand(*norm)})
    assert got[1].shape == ((2, 1, 1) if axis == 1 else (2, 3, 1))


def test_layer_normalization_float16_statistics_are_refused(tmp_path: object) -> None:
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], name="ln16")
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [2, 4])
    s = helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT16, [4])
    model = make_model([node], [x, s], [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, None),
                                         vi("mean", None)])
    with pytest.raises(nnrt.UnsupportedModelError, match=r"ln16 \(LayerNormalization\).*float32 LayerNormalization only"):
        nnrt.load(save(model, tmp_path))


@pytest.mark.parametrize(("elem", "ins"), [
    (onnx.TensorProto.FLOAT, ["x", "lo", "hi"]), (onnx.TensorProto.FLOAT, ["x", "lo"]),
    (onnx.TensorProto.FLOAT, ["x", "", "hi"]), (onnx.TensorProto.INT32, ["x", "lo", "c"]),
])
def test_clip_bounds_given_at_run_time(device: CpuDevice, tmp_path: object, elem: int, ins: list[str]) -> None:
    dtype = np.float32 if elem == onnx.TensorProto.FLOAT else np.int32
    node = helper.make_node("Clip", ins, ["y"])
    inputs = [helper.make_tensor_value_info(n, elem, [3, 4] if n == "x" else []) for n in ins if n and n != "c"]
    inits = [numpy_helper.from_array(np.asarray(2, dtype), "c")] if "c" in ins else []
    model = make_model([node], inputs, [helper.make_tensor_value_info("y", elem, None)], inits, opset=13)
    feeds = {"x": (rand(3, 4) * 5).astype(dtype), "lo": np.asarray(-1, dtype), "hi": np.asarray(1.5, dtype)}
    compare_with_ort(device, model, tmp_path, {n: feeds[n] for n in ins if n and n != "c"})


def test_clip_run_time_min_above_max_gives_max(device: CpuDevice, tmp_path: object) -> None:
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    model = make_model([node], [vi("x", [5]), vi("lo", []), vi("hi", [])], [vi("y", None)], opset=13)
    got = compare_with_ort(device, model, tmp_path, {"x": rand(5), "lo": np.asarray(2, np.float32),
                                                     "hi": np.asarray(1, np.float32)})
    np.testing.assert_array_equal(got[0], np.ones(5, np.float32))


@pytest.mark.parametrize("run_time", [("s", "b"), ("s",)])
def test_instance_norm_scale_and_bias_given_at_run_time(device: CpuDevice, tmp_path: object,
                                                        run_time: tuple[str, ...]) -> None:
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)
    values = {"s": rand(3), "b": rand(3)}
    inits = [numpy_helper.from_array(v, n) for n, v in values.items() if n not in run_time]
    model = make_model([node], [vi("x", [2, 3, 4, 5])] + [vi(n, [3]) for n in run_time], [vi("y", None)], inits)
    compare_with_ort(device, model, tmp_path, {"x": rand(2, 3, 4, 5)} | {n: values[n] for n in run_time})


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_constant_weights(device: CpuDevice, tmp_path: object, group: int) -> None:
    """The import-time path (weights re-laid with numpy), grouped and not, for comparison."""
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=group, strides=[2, 2], pads=[1, 1, 0, 1])
    inits = [numpy_helper.from_array(rand(4, 3, 3, 3), "w"), numpy_helper.from_array(rand(3 * group), "b")]
    model = make_model([node], [vi("x", [1, 4, 5, 4])], [vi("y", None)], inits)
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 4, 5, 4)})


@pytest.mark.parametrize(("a_shape", "b_shape"), [([2, 3, 4], [4, 5]), ([2, 3, 4, 5], [5]), ([4], [4, 3]), ([3, 4], [4])])
def test_matmul_run_time_b_under_another_rank(device: CpuDevice, tmp_path: object, a_shape: list[int],
                                              b_shape: list[int]) -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    model = make_model([node], [vi("a", a_shape), vi("b", b_shape)], [vi("y", None)])
    compare_with_ort(device, model, tmp_path, {"a": rand(*a_shape), "b": rand(*b_shape)})


def test_matmul_run_time_b_of_unknown_shape_is_refused(tmp_path: object) -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    model = make_model([node], [vi("a", [2, 3, 4]), helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [4, "n"])],
                       [vi("y", None)])
    with pytest.raises(nnrt.UnsupportedModelError, match=r"mm \(MatMul\).*needs B's shape known"):
        nnrt.load(save(model, tmp_path))
