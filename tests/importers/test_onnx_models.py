"""Hand-built ONNX models (onnx.helper) loaded by ``nnrt.load`` and compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from nnrt import CpuDevice
from tests.importers.onnx_build import compare_with_ort, make_model

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def vi(name: str, shape: list[int | str | None], elem: int = F) -> object:
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, arr: np.ndarray) -> object:
    return numpy_helper.from_array(arr, name)


@pytest.mark.parametrize(
    ("cin", "cout", "group", "attrs"),
    [
        (3, 8, 1, {"pads": [1, 1, 1, 1]}),
        (3, 8, 1, {"strides": [2, 2], "pads": [0, 1, 2, 1]}),
        (4, 4, 4, {"pads": [1, 1, 1, 1]}),  # depthwise
        (4, 8, 4, {"strides": [2, 1], "pads": [1, 1, 1, 1]}),  # depthwise, multiplier 2
        (6, 4, 2, {}),  # grouped
        (6, 4, 2, {"dilations": [2, 2]}),  # grouped + dilated: split / conv / concat
        (3, 5, 1, {"dilations": [2, 1], "pads": [2, 1, 2, 1]}),
        (3, 5, 1, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        (3, 5, 1, {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
        (3, 5, 1, {"auto_pad": "VALID"}),
    ],
)
def test_conv_forms(device: CpuDevice, tmp_path: object, cin: int, cout: int, group: int, attrs: dict[str, object]) -> None:
    w = rand(cout, cin // group, 3, 3)
    b = rand(cout)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, kernel_shape=[3, 3], **attrs)
    model = make_model([node], [vi("x", [1, cin, 9, 8])], [vi("y", None)], [init("w", w), init("b", b)])
    compare_with_ort(device, model, tmp_path, {"x": rand(1, cin, 9, 8)})


def test_conv1d_and_no_bias(device: CpuDevice, tmp_path: object) -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1], strides=[2])
    model = make_model([node], [vi("x", [2, 3, 16])], [vi("y", None)], [init("w", rand(4, 3, 3))])
    compare_with_ort(device, model, tmp_path, {"x": rand(2, 3, 16)})


def test_batchnorm_folds_into_conv_and_relu_fuses(device: CpuDevice, tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    c = 6
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    inits = [init("w", rand(c, 3, 3, 3)), init("g", rand(c)), init("be", rand(c)), init("m", rand(c)),
             init("v", np.abs(rand(c)) + 0.1)]
    model = make_model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", None)], inits)
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 3, 8, 8)})
    loaded = nnrt.load(save(model, tmp_path, "bn.onnx"))
    # NHWC inside: one transpose in, the conv (BN folded, Relu fused), one transpose out.
    assert [op.type.name for op in loaded.operations] == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]


def test_batchnorm_alone_is_mul_add(device: CpuDevice, tmp_path: object) -> None:
    c = 4
    node = helper.make_node("BatchNormalization", ["x", "g", "be", "m", "v"], ["y"])
    inits = [init("g", rand(c)), init("be", rand(c)), init("m", rand(c)), init("v", np.abs(rand(c)) + 0.1)]
    model = make_model([node], [vi("x", [2, c, 5, 5])], [vi("y", None)], inits)
    compare_with_ort(device, model, tmp_path, {"x": rand(2, c, 5, 5)})


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("alpha_beta", [(1.0, 1.0), (0.5, 2.0)])
def test_gemm(device: CpuDevice, tmp_path: object, trans_b: int, alpha_beta: tuple[float, float]) -> None:
    w = rand(5, 7) if trans_b else rand(7, 5)
    node = helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=trans_b, alpha=alpha_beta[0], beta=alpha_beta[1])
    model = make_model([node], [vi("a", [3, 7])], [vi("y", None)], [init("w", w), init("c", rand(5))])
    compare_with_ort(device, model, tmp_path, {"a": rand(3, 7)})


def test_matmul_constant_and_batched(device: CpuDevice, tmp_path: object) -> None:
    nodes = [helper.make_node("MatMul", ["a", "w"], ["t"]), helper.make_node("MatMul", ["t", "b"], ["y"])]
    model = make_model(nodes, [vi("a", [2, 3, 4]), vi("b", [2, 5, 6])], [vi("y", None)], [init("w", rand(4, 5))])
    compare_with_ort(device, model, tmp_path, {"a": rand(2, 3, 4), "b": rand(2, 5, 6)})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("ceil", [0, 1])
@pytest.mark.parametrize("include_pad", [0, 1])
def test_pools(device: CpuDevice, tmp_path: object, op: str, ceil: int, include_pad: int) -> None:
    kw: dict[str, object] = {"count_include_pad": include_pad} if op == "AveragePool" else {}
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=ceil, **kw)
    model = make_model([node], [vi("x", [1, 2, 10, 9])], [vi("y", None)])
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 2, 10, 9)})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(device: CpuDevice, tmp_path: object, op: str) -> None:
    model = make_model([helper.make_node(op, ["x"], ["y"])], [vi("x", [2, 3, 5, 4])], [vi("y", None)])
    compare_with_ort(device, model, tmp_path, {"x": rand(2, 3, 5, 4)})


@pytest.mark.parametrize(
    ("mode", "coord", "nearest", "scale"),
    [
        ("linear", "half_pixel", "", 2.0),
        ("linear", "align_corners", "", 2.0),
        ("linear", "asymmetric", "", 2.0),
        ("linear", "pytorch_half_pixel", "", 0.5),
        ("nearest", "asymmetric", "floor", 2.0),
        ("nearest", "half_pixel", "round_prefer_floor", 2.0),
        ("nearest", "half_pixel", "round_prefer_ceil", 0.5),
        ("nearest", "align_corners", "round_prefer_ceil", 2.0),
        ("nearest", "tf_half_pixel_for_nn", "floor", 0.5),
    ],
)
def test_resize_modes(device: CpuDevice, tmp_path: object, mode: str, coord: str, nearest: str, scale: float) -> None:
    kw = {"nearest_mode": nearest} if nearest else {}
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, coordinate_transformation_mode=coord, **kw)
    scales = np.asarray([1, 1, scale, scale], np.float32)
    model = make_model([node], [vi("x", [1, 2, 6, 8])], [vi("y", None)], [init("s", scales)], opset=13)
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 2, 6, 8)})


def test_resize_inexact_mode_is_rejected(tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="cubic")
    model = make_model([node], [vi("x", [1, 2, 6, 8])], [vi("y", None)],
                       [init("s", np.asarray([1, 1, 2, 2], np.float32))], opset=13)
    with pytest.raises(nnrt.UnsupportedModelError, match=r"Resize.*cubic"):
        nnrt.load(save(model, tmp_path))


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_axis_semantics(device: CpuDevice, tmp_path: object, opset: int, op: str) -> None:
    # axis=1 on a 3-D input: opset 11 flattens [2, 3*4] and normalises over 12 values, opset 13 over 3.
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=1)], [vi("x", [2, 3, 4])], [vi("y", None)], opset=opset)
    compare_with_ort(device, model, tmp_path, {"x": rand(2, 3, 4)})


def test_nchw_io_is_kept(device: CpuDevice, tmp_path: object) -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    model = make_model(nodes, [vi("x", [1, 3, 8, 6])], [vi("y", None)], [init("w", rand(5, 3, 3, 3))])
    out = compare_with_ort(device, model, tmp_path, {"x": rand(1, 3, 8, 6)})
    assert out[0].shape == (1, 5, 4, 3)


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_reads_its_input_nhwc(device: CpuDevice, tmp_path: object, group: int) -> None:
    """A ConvTranspose after a Conv reads the NHWC tensor: no TRANSPOSE to NCHW that nothing reads
    (PP-OCR det's head had two, 0.98 ms of 20 per execution)."""
    import nnrt
    from tests.importers.onnx_build import save

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c", "wt", "b"], ["y"], group=group, strides=[2, 2])]
    inits = [init("w", rand(4, 3, 3, 3)), init("wt", rand(4, 3, 2, 2)), init("b", rand(3 * group))]
    model = make_model(nodes, [vi("x", [1, 3, 6, 5])], [vi("y", None)], inits)
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 3, 6, 5)})
    loaded = nnrt.load(save(model, tmp_path, "ct.onnx"))
    read = {i for op in loaded.operations for i in op.inputs} | set(loaded.output_indexes)
    assert all(set(op.outputs) & read for op in loaded.operations), "an operation nothing reads"
    assert [op.type.name for op in loaded.operations].count("TRANSPOSE") == 2  # x in, y out


@pytest.mark.parametrize("conv", ["Conv", "ConvTranspose"])
def test_bias_add_batchnorm_and_relu_fold_into_the_convolution(device: CpuDevice, tmp_path: object, conv: str) -> None:
    """Paddle's export: a convolution without bias, then Add of the bias reshaped to [1, C, 1, 1]
    by a Reshape that comes after the convolution in the file, BatchNormalization and Relu: one
    operation between the layout transposes."""
    import nnrt
    from tests.importers.onnx_build import save

    c = 4
    w = rand(c, 3, 2, 2) if conv == "Conv" else rand(3, c, 2, 2)
    nodes = [
        helper.make_node(conv, ["x", "w"], ["y"], strides=[2, 2]),
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([1, c, 1, 1], np.int64))),
        helper.make_node("Reshape", ["b", "shape"], ["b4"]),
        helper.make_node("Add", ["y", "b4"], ["yb"]),
        helper.make_node("BatchNormalization", ["yb", "g", "be", "m", "v"], ["n"], epsilon=1e-5),
        helper.make_node("Relu", ["n"], ["out"]),
    ]
    inits = [init("w", w), init("b", rand(c)), init("g", rand(c)), init("be", rand(c)), init("m", rand(c)),
             init("v", np.abs(rand(c)) + 0.1)]
    model = make_model(nodes, [vi("x", [1, 3, 6, 8])], [vi("out", None)], inits)
    out = compare_with_ort(device, model, tmp_path, {"x": rand(1, 3, 6, 8)})
    assert out[0].min() >= 0
    loaded = nnrt.load(save(model, tmp_path, "fold.onnx"))
    op = "CONV_2D" if conv == "Conv" else "TRANSPOSE_CONV_2D"
    assert [o.type.name for o in loaded.operations] == ["TRANSPOSE", op, "TRANSPOSE"]


def test_a_bias_add_that_is_not_per_channel_stays(device: CpuDevice, tmp_path: object) -> None:
    """An Add of a [W] constant (it broadcasts along W, not C) or of a run-time tensor is no bias."""
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2]),
             helper.make_node("Add", ["y", "along_w"], ["z"]),
             helper.make_node("Add", ["z", "x2"], ["out"])]
    model = make_model(nodes, [vi("x", [1, 3, 4, 4]), vi("x2", [1, 4, 8, 8])], [vi("out", None)],
                       [init("w", rand(3, 4, 2, 2)), init("along_w", rand(8))])
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 3, 4, 4), "x2": rand(1, 4, 8, 8)})


def test_spatial_runs_stay_nhwc_between_two_transposes(device: CpuDevice, tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Mul", ["a", "s"], ["silu"]),  # SiLU as exported: Sigmoid x Mul
        helper.make_node("Conv", ["silu", "w2"], ["b"], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Add", ["b", "silu"], ["c"]),
        helper.make_node("Mul", ["c", "per_channel"], ["d"]),
        helper.make_node("MaxPool", ["d"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Resize", ["p", "", "sc"], ["r"], mode="nearest", coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor"),
        helper.make_node("Concat", ["r", "x4"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"]),
    ]
    inits = [init("w1", rand(4, 3, 3, 3)), init("w2", rand(4, 1, 3, 3)), init("per_channel", rand(4, 1, 1)),
             init("sc", np.asarray([1, 1, 2, 2], np.float32))]
    model = make_model(nodes, [vi("x", [1, 3, 8, 8]), vi("x4", [1, 2, 8, 8])], [vi("y", None), vi("d", None)], inits,
                       opset=13)
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 3, 8, 8), "x4": rand(1, 2, 8, 8)})
    ops = [op.type.name for op in nnrt.load(save(model, tmp_path, "l.onnx")).operations]
    # In: x and x4. Out: d (a graph output) and g (Flatten reads NCHW).
    assert ops.count("TRANSPOSE") == 4, ops


def test_shape_arithmetic_folds_into_a_constant_reshape(device: CpuDevice, tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "m1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [init("i0", np.asarray(0, np.int64)), init("ax", np.asarray([0], np.int64)),
             init("m1", np.asarray([-1], np.int64))]
    model = make_model(nodes, [vi("x", [2, 3, 4])], [vi("y", None)], inits, opset=13)
    compare_with_ort(device, model, tmp_path, {"x": rand(2, 3, 4)})
    loaded = nnrt.load(save(model, tmp_path, "fold.onnx"))
    assert [op.type.name for op in loaded.operations] == ["RESHAPE"]


def test_input_shapes_fix_dynamic_dims(device: CpuDevice, tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s2"], ["y"]),
             helper.make_node("Identity", ["s"], ["shape_out"])]
    model = make_model(nodes, [vi("x", ["N", 3, 4])], [vi("y", None), vi("shape_out", None, TensorProto.INT64)],
                       [init("s2", np.asarray([0, 12], np.int64))], opset=13)
    path = save(model, tmp_path)
    with pytest.raises(nnrt.UnsupportedModelError, match=r"Shape.*input_shapes"):
        nnrt.load(path)
    m = nnrt.load(path, input_shapes={"x": [5, 3, 4]})
    assert m.operands[m.input_indexes[0]].dimensions == (5, 3, 4)
    out = device.prepare_model_sync(m).execute_sync([rand(5, 3, 4)]).outputs
    assert out[0].shape == (5, 12)
    assert list(out[1]) == [5, 3, 4]
    with pytest.raises(nnrt.InvalidArgumentError, match="not graph inputs"):
        nnrt.load(path, input_shapes={"nope": [1]})


def test_dynamic_dims_stay_unknown(device: CpuDevice, tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 3])], [vi("y", ["N", 3])])
    m = nnrt.load(save(model, tmp_path))
    assert m.operands[m.input_indexes[0]].dimensions == (0, 3)
    out = device.prepare_model_sync(m).execute_sync([rand(7, 3)]).outputs
    assert out[0].shape == (7, 3)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent(device: CpuDevice, tmp_path: object, op: str, direction: str) -> None:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs, hidden, seq, batch, size = (2 if direction == "bidirectional" else 1), 5, 6, 2, 3
    inits = [init("W", rand(dirs, gates * hidden, size) * 0.5), init("R", rand(dirs, gates * hidden, hidden) * 0.5),
             init("B", rand(dirs, 2 * gates * hidden) * 0.5)]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["X", "W", "R", "B"], outs, hidden_size=hidden, direction=direction)
    model = make_model([node], [vi("X", [seq, batch, size])], [vi(o, None) for o in outs], inits, opset=14)
    compare_with_ort(device, model, tmp_path, {"X": rand(seq, batch, size)})


def test_gru_linear_before_reset_and_initial_state(device: CpuDevice, tmp_path: object) -> None:
    hidden, seq, batch, size = 4, 3, 2, 3
    inits = [init("W", rand(1, 3 * hidden, size)), init("R", rand(1, 3 * hidden, hidden)),
             init("B", rand(1, 6 * hidden))]
    node = helper.make_node("GRU", ["X", "W", "R", "B", "", "h0"], ["Y", "Y_h"], hidden_size=hidden,
                            linear_before_reset=1)
    model = make_model([node], [vi("X", [seq, batch, size]), vi("h0", [1, batch, hidden])],
                       [vi("Y", None), vi("Y_h", None)], inits, opset=14)
    compare_with_ort(device, model, tmp_path, {"X": rand(seq, batch, size), "h0": rand(1, batch, hidden)})


@pytest.mark.parametrize("layout", [0, 1])
def test_lstm_peepholes_initial_state_and_layout(device: CpuDevice, tmp_path: object, layout: int) -> None:
    hidden, seq, batch, size = 4, 5, 2, 3
    inits = [init("W", rand(1, 4 * hidden, size) * 0.5), init("R", rand(1, 4 * hidden, hidden) * 0.5),
             init("B", rand(1, 8 * hidden) * 0.5), init("P", rand(1, 3 * hidden) * 0.5)]
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "h0", "c0", "P"], ["Y", "Y_h", "Y_c"],
                            hidden_size=hidden, layout=layout)
    xs, hs = ([seq, batch, size], [1, batch, hidden]) if layout == 0 else ([batch, seq, size], [batch, 1, hidden])
    model = make_model([node], [vi("X", xs), vi("h0", hs), vi("c0", hs)],
                       [vi("Y", None), vi("Y_h", None), vi("Y_c", None)], inits, opset=14)
    # onnxruntime runs no batch-major (layout=1) recurrent ops: ONNX's reference evaluator checks those.
    compare_with_ort(device, model, tmp_path, {"X": rand(*xs), "h0": rand(*hs), "c0": rand(*hs)},
                     reference="ort" if layout == 0 else "onnx")


def _q(name: str, value: float | int, dtype: type) -> object:
    return init(name, np.asarray(value, dtype))


@pytest.mark.parametrize(("w_dtype", "per_channel", "group"),
                         [(np.uint8, False, 1), (np.int8, False, 1), (np.int8, True, 1), (np.int8, True, 4),
                          (np.uint8, False, 2)])
def test_qlinearconv_between_quantize_and_dequantize(device: CpuDevice, tmp_path: object, w_dtype: type,
                                                     per_channel: bool, group: int) -> None:
    cin, cout = 4, 8
    lo, hi = (0, 255) if w_dtype == np.uint8 else (-127, 127)
    w = RNG.integers(lo, hi, size=(cout, cin // group, 3, 3)).astype(w_dtype)
    w_scale = (RNG.uniform(0.005, 0.02, cout) if per_channel else np.asarray(0.01)).astype(np.float32)
    w_zp = np.zeros(cout, w_dtype) if per_channel else np.asarray(128 if w_dtype == np.uint8 else 0, w_dtype)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"],
                         pads=[1, 1, 1, 1], group=group),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    inits = [_q("xs", 0.02, np.float32), _q("xz", 128, np.uint8), init("w", w), init("ws", w_scale), init("wz", w_zp),
             _q("ys", 0.05, np.float32), _q("yz", 120, np.uint8),
             init("b", RNG.integers(-500, 500, size=cout).astype(np.int32))]
    model = make_model(nodes, [vi("x", [1, cin, 6, 6])], [vi("y", None)], inits, opset=13)
    # Quantized: within one output unit (0.05) of onnxruntime, as MLTS allows per op.
    compare_with_ort(device, model, tmp_path, {"x": rand(1, cin, 6, 6)}, atol=0.05 + 1e-6, rtol=0)


def test_qlinearconv_uint8_graph_input_and_output(device: CpuDevice, tmp_path: object) -> None:
    w = RNG.integers(0, 255, size=(3, 2, 3, 3)).astype(np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    inits = [_q("xs", 0.02, np.float32), _q("xz", 100, np.uint8), init("w", w), _q("ws", 0.01, np.float32),
             _q("wz", 127, np.uint8), _q("ys", 0.1, np.float32), _q("yz", 128, np.uint8)]
    model = make_model([node], [vi("x", [1, 2, 5, 5], TensorProto.UINT8)], [vi("y", None, TensorProto.UINT8)], inits)
    x = RNG.integers(0, 255, size=(1, 2, 5, 5)).astype(np.uint8)
    compare_with_ort(device, model, tmp_path, {"x": x}, atol=1, rtol=0)


def test_qlinearmatmul(device: CpuDevice, tmp_path: object) -> None:
    b = RNG.integers(-100, 100, size=(6, 5)).astype(np.int8)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    inits = [_q("as", 0.03, np.float32), _q("az", 10, np.uint8), init("b", b), _q("bs", 0.02, np.float32),
             _q("bz", 0, np.int8), _q("ys", 0.2, np.float32), _q("yz", 130, np.uint8)]
    model = make_model([node], [vi("a", [2, 3, 6], TensorProto.UINT8)], [vi("y", None, TensorProto.UINT8)], inits)
    a = RNG.integers(0, 255, size=(2, 3, 6)).astype(np.uint8)
    compare_with_ort(device, model, tmp_path, {"a": a}, atol=1, rtol=0)


def test_qdq_weights_fold_to_float(device: CpuDevice, tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    w = RNG.integers(-127, 127, size=(4, 3, 3, 3)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             helper.make_node("Conv", ["x", "wf"], ["y"])]
    inits = [init("w", w), init("ws", RNG.uniform(0.01, 0.02, 4).astype(np.float32))]
    model = make_model(nodes, [vi("x", [1, 3, 5, 5])], [vi("y", None)], inits, opset=13)
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 3, 5, 5)})
    ops = [op.type.name for op in nnrt.load(save(model, tmp_path, "q.onnx")).operations]
    assert ops == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]


def test_if_with_outer_scope_values(device: CpuDevice, tmp_path: object) -> None:
    # then reads x and w (outer), else reads x only: both become inputs of both branches.
    y = vi("y", None)
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "then", [], [y])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "else", [], [y])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    model = make_model([node], [vi("c", [], TensorProto.BOOL), vi("x", [2, 3]), vi("w", [2, 3])], [y], opset=13)
    for c in (True, False):
        compare_with_ort(device, model, tmp_path, {"c": np.asarray(c), "x": rand(2, 3), "w": rand(2, 3)})


def test_if_with_constant_condition_is_inlined(device: CpuDevice, tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    y = vi("y", None)
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "then", [], [y])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "else", [], [y])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    model = make_model([node], [vi("x", [4])], [y], [init("c", np.asarray(False))], opset=13)
    compare_with_ort(device, model, tmp_path, {"x": rand(4)})
    assert [op.type.name for op in nnrt.load(save(model, tmp_path, "c.onnx")).operations] == ["NEG"]


@pytest.mark.parametrize("with_cond", [False, True])
def test_loop_as_while(device: CpuDevice, tmp_path: object, with_cond: bool) -> None:
    # acc = acc * 0.5 + x, for M iterations (or until the sum of acc exceeds 3 when with_cond).
    body_nodes = [
        helper.make_node("Mul", ["acc_in", "half"], ["t"]),
        helper.make_node("Add", ["t", "x"], ["acc_out"]),
        helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
        helper.make_node("Less", ["s", "limit"], ["cond_out"]) if with_cond else helper.make_node(
            "Identity", ["cond_in"], ["cond_out"]),
    ]
    body = helper.make_graph(
        body_nodes, "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [3])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [3])],
        initializer=[init("half", np.asarray(0.5, np.float32)), init("limit", np.asarray(3.0, np.float32))])
    node = helper.make_node("Loop", ["M", "c", "acc0"], ["acc"], body=body)
    model = make_model([node], [vi("M", [], TensorProto.INT64), vi("c", [], TensorProto.BOOL), vi("acc0", [3]),
                                vi("x", [3])], [vi("acc", None)], opset=13)
    feeds = {"M": np.asarray(6, np.int64), "c": np.asarray(True), "acc0": np.zeros(3, np.float32),
             "x": np.abs(rand(3))}
    compare_with_ort(device, model, tmp_path, feeds)


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization(device: CpuDevice, tmp_path: object, axis: int) -> None:
    shape = [2, 3, 8]
    norm = shape[axis:] if axis != -1 else shape[-1:]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis, epsilon=1e-4)
    model = make_model([node], [vi("x", shape)], [vi("y", None)], [init("s", rand(*norm)), init("b", rand(*norm))])
    compare_with_ort(device, model, tmp_path, {"x": rand(*shape)})


def test_if_branch_returning_an_outer_value(device: CpuDevice, tmp_path: object) -> None:
    y = vi("y", None)
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "then", [], [y])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "else", [], [y])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    model = make_model([node], [vi("c", [], TensorProto.BOOL), vi("x", [2, 3])], [y], opset=13)
    for c in (True, False):
        compare_with_ort(device, model, tmp_path, {"c": np.asarray(c), "x": rand(2, 3)})


def _slice(name: str, src: str, out: str, starts: list[int], ends: list[int], axes: list[int], steps: list[int]
           ) -> tuple[object, list[object]]:
    arrays = {"s": starts, "e": ends, "a": axes, "t": steps}
    inits = [init(f"{name}_{k}", np.array(v, np.int64)) for k, v in arrays.items()]
    return helper.make_node("Slice", [src, *(f"{name}_{k}" for k in arrays)], [out]), inits


@pytest.mark.parametrize(("first", "second"), [
    (([0], [2**31 - 1], [2], [2]), ([0], [2**31 - 1], [3], [2])),  # YOLOv5's space-to-depth: rows, then columns
    (([1], [9], [2], [2]), ([1], [4], [2], [1])),  # the same axis twice
    (([-1], [-10], [3], [-1]), ([1], [8], [3], [3])),  # a reversal, then a step
    (([2, 1], [7, 6], [3, 2], [2, 1]), ([-3, 10], [-1, -10], [2, 3], [1, -2])),  # two axes each, negative bounds
])
def test_a_slice_of_a_slice_is_one_strided_slice(device: CpuDevice, tmp_path: object,
                                                 first: tuple[list[int], ...], second: tuple[list[int], ...]) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    a, ia = _slice("a", "x", "m", *first)
    b, ib = _slice("b", "m", "y", *second)
    model = make_model([a, b], [vi("x", [2, 3, 9, 10])], [vi("y", None)], [*ia, *ib])
    compare_with_ort(device, model, tmp_path, {"x": rand(2, 3, 9, 10)})
    ops = [op.type.name for op in nnrt.load(save(model, tmp_path, "ss.onnx")).operations]
    assert ops == ["STRIDED_SLICE"]


def test_a_slice_read_elsewhere_too_stays(device: CpuDevice, tmp_path: object) -> None:
    import nnrt
    from tests.importers.onnx_build import save

    a, ia = _slice("a", "x", "m", [0], [2**31 - 1], [2], [2])
    b, ib = _slice("b", "m", "y", [1], [2**31 - 1], [3], [2])
    model = make_model([a, b], [vi("x", [1, 3, 8, 8])], [vi("y", None), vi("m", None)], [*ia, *ib])
    compare_with_ort(device, model, tmp_path, {"x": rand(1, 3, 8, 8)})
    assert [op.type.name for op in nnrt.load(save(model, tmp_path, "s2.onnx")).operations] == ["STRIDED_SLICE"] * 2
