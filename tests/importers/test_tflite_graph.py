"""TFLite subgraphs (IF/WHILE), state (resource variables, variable tensors), input_shapes,
names, and the rejection path, through nnrt.load against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from nnrt import OperandType as T
from nnrt.importers import UnsupportedModelError, state_variables
from tests.importers.tflite_builder import BO, OPT, S, TflModel, compare, load_bytes, opts, run_litert, run_nnrt

RNG = np.random.default_rng(21)
RESOURCE = S.TensorType.RESOURCE


def _if_model() -> bytes:
    m = TflModel()
    g = m.main
    c, x = g.tensor([1], np.bool_, name="cond"), g.tensor([2, 3], name="x")
    y = g.tensor([2, 3], name="y")
    g.op(BO.IF, [c, x], [y], OPT.IfOptions, opts(S.IfOptionsT, thenSubgraphIndex=1, elseSubgraphIndex=2))
    g.io([c, x], [y])
    for code, k in ((BO.ADD, 1.0), (BO.MUL, 2.0)):
        sub = m.subgraph()
        xi = sub.tensor([2, 3], name="bx")
        yi = sub.tensor([2, 3], name="by")
        sub.op(code, [xi, sub.const(np.full([1], k, np.float32))], [yi])
        sub.io([xi], [yi])
    return m.build()


@pytest.mark.parametrize("cond", [True, False])
def test_if(device: nnrt.CpuDevice, cond: bool) -> None:
    compare(device, _if_model(), [np.array([cond]), RNG.standard_normal((2, 3)).astype(np.float32)])


def test_while(device: nnrt.CpuDevice) -> None:
    """while i < 5: i += 1; x = x * 1.5 (cond and body subgraphs)."""
    m = TflModel()
    g = m.main
    i, x = g.tensor([1], np.int32, name="i"), g.tensor([3], name="x")
    io, xo = g.tensor([1], np.int32, name="i_out"), g.tensor([3], name="x_out")
    g.op(BO.WHILE, [i, x], [io, xo], OPT.WhileOptions, opts(S.WhileOptionsT, condSubgraphIndex=1, bodySubgraphIndex=2))
    g.io([i, x], [io, xo])
    cond = m.subgraph()
    ci, cx = cond.tensor([1], np.int32, name="ci"), cond.tensor([3], name="cx")
    cb = cond.tensor([1], np.bool_, name="cb")
    cond.op(BO.LESS, [ci, cond.const([5], np.int32)], [cb])
    cond.io([ci, cx], [cb])
    body = m.subgraph()
    bi, bx = body.tensor([1], np.int32, name="bi"), body.tensor([3], name="bx")
    bi2, bx2 = body.tensor([1], np.int32, name="bi2"), body.tensor([3], name="bx2")
    body.op(BO.ADD, [bi, body.const([1], np.int32)], [bi2], OPT.AddOptions, opts(S.AddOptionsT))
    body.op(BO.MUL, [bx, body.const([1.5], np.float32)], [bx2], OPT.MulOptions, opts(S.MulOptionsT))
    body.io([bi, bx], [bi2, bx2])
    out = compare(device, m.build(), [np.array([1], np.int32), RNG.standard_normal(3).astype(np.float32)])
    assert out[0].tolist() == [5]


def _accumulator() -> bytes:
    """acc (a resource variable, initialized to [1, 2, 3] by CALL_ONCE) += x; outputs acc * 2."""
    m = TflModel()
    g = m.main
    x = g.tensor([1, 3], name="x")
    g.op(BO.CALL_ONCE, [], [], OPT.CallOnceOptions, opts(S.CallOnceOptionsT, initSubgraphIndex=1))
    res = g.tensor([], ttype=RESOURCE, name="handle")
    g.op(BO.VAR_HANDLE, [], [res], OPT.VarHandleOptions, opts(S.VarHandleOptionsT, sharedName="acc"))
    v = g.tensor([1, 3], name="read")
    g.op(BO.READ_VARIABLE, [res], [v])
    s = g.tensor([1, 3], name="sum")
    g.op(BO.ADD, [v, x], [s], OPT.AddOptions, opts(S.AddOptionsT))
    g.op(BO.ASSIGN_VARIABLE, [res, s], [])
    y = g.tensor([1, 3], name="y")
    g.op(BO.MUL, [s, g.const([2.0], np.float32)], [y], OPT.MulOptions, opts(S.MulOptionsT))
    g.io([x], [y])
    init = m.subgraph()
    r = init.tensor([], ttype=RESOURCE, name="init_handle")
    init.op(BO.VAR_HANDLE, [], [r], OPT.VarHandleOptions, opts(S.VarHandleOptionsT, sharedName="acc"))
    init.op(BO.ASSIGN_VARIABLE, [r, init.const([[1.0, 2.0, 3.0]], np.float32)], [])
    init.io([], [])
    return m.build()


def test_resource_variables_become_state_io(device: nnrt.CpuDevice) -> None:
    from ai_edge_litert.interpreter import Interpreter

    data = _accumulator()
    model = load_bytes(data)
    (var,) = state_variables(model)
    assert (var.key, var.input, var.output) == ("acc", 1, 1)
    np.testing.assert_array_equal(var.initial, [[1, 2, 3]])
    names_in = [model.operands[i].name for i in model.input_indexes]
    names_out = [model.operands[i].name for i in model.output_indexes]
    assert names_in == ["x", "state_in/acc"] and names_out == ["y", "state_out/acc"]
    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    prepared = device.prepare_model_sync(model)
    state = var.initial
    for _ in range(3):  # the state carried by the caller follows LiteRT's internal variable
        x = RNG.standard_normal((1, 3)).astype(np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        y, state = prepared.execute_sync([x, state]).outputs
        np.testing.assert_allclose(y, want, atol=1e-5, rtol=1e-5)


def test_variable_tensor_state_of_a_sequence_rnn(device: nnrt.CpuDevice) -> None:
    from ai_edge_litert.interpreter import Interpreter

    m = TflModel()
    g = m.main
    x = g.tensor([2, 3, 4], name="x")  # batch-major [batch, time, input]
    w = g.const(RNG.standard_normal((5, 4)) * 0.5, name="w")
    rw = g.const(RNG.standard_normal((5, 5)) * 0.3, name="rw")
    b = g.const(RNG.standard_normal(5) * 0.1, name="b")
    h = g.tensor([2, 5], name="hidden", variable=True)
    y = g.tensor([2, 3, 5], name="y")
    g.op(BO.UNIDIRECTIONAL_SEQUENCE_RNN, [x, w, rw, b, h], [y], OPT.SequenceRNNOptions,
         opts(S.SequenceRNNOptionsT, timeMajor=False, fusedActivationFunction=S.ActivationFunctionType.RELU))
    g.io([x], [y])
    data = m.build()
    model = load_bytes(data)
    (var,) = state_variables(model)
    assert var.key == "hidden" and var.input == 1 and var.output == 1
    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    prepared = device.prepare_model_sync(model)
    state = var.initial
    for _ in range(2):
        xs = RNG.standard_normal((2, 3, 4)).astype(np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], xs)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        out, state = prepared.execute_sync([xs, state]).outputs
        np.testing.assert_allclose(out, want, atol=1e-4, rtol=1e-3)


def _dynamic_fc() -> bytes:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 4], name="features", signature=[-1, 4])
    w = g.const(RNG.standard_normal((2, 4)), name="w")
    y = g.tensor([1, 2], name="scores", signature=[-1, 2])
    g.op(BO.FULLY_CONNECTED, [x, w, g.const(np.zeros(2), name="b")], [y], OPT.FullyConnectedOptions,
         opts(S.FullyConnectedOptionsT))
    g.io([x], [y])
    return m.build()


def test_input_shapes_and_names(device: nnrt.CpuDevice) -> None:
    data = _dynamic_fc()
    model = load_bytes(data)
    x_op = model.operands[model.input_indexes[0]]
    assert x_op.name == "features" and x_op.dimensions == (0, 4) and x_op.type is T.TENSOR_FLOAT32
    assert model.operands[model.output_indexes[0]].name == "scores"
    fixed = load_bytes(data, input_shapes={"features": [3, 4]})
    assert fixed.operands[fixed.input_indexes[0]].dimensions == (3, 4)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    got = run_nnrt(device, fixed, [x])
    np.testing.assert_allclose(got[0], run_litert(data, [x])[0], atol=1e-4, rtol=1e-3)
    got = run_nnrt(device, model, [x])  # the unknown batch is given at execution
    assert got[0].shape == (3, 2)
    with pytest.raises(nnrt.InvalidArgumentError, match=r"'feature'.*not an input.*'features'"):
        load_bytes(data, input_shapes={"feature": [3, 4]})
    with pytest.raises(nnrt.InvalidArgumentError, match="rank 3"):
        load_bytes(data, input_shapes={"features": [3, 4, 1]})


def test_every_unsupported_node_is_listed() -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 4, 4, 2], name="x")
    a = g.tensor([1, 4, 4, 2], name="gelu_out")
    g.op(BO.GELU, [x], [a])
    b = g.tensor([1, 4, 4, 2], name="custom_out")
    g.op(BO.CUSTOM, [a], [b], custom="MyFancyOp")
    c = g.tensor([1, 4, 4, 2], name="conv_out")
    conv = opts(S.Conv2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1,
                fusedActivationFunction=S.ActivationFunctionType.TANH)
    g.op(BO.CONV_2D, [b, g.const(np.ones((2, 1, 1, 2))), g.const(np.zeros(2))], [c], OPT.Conv2DOptions, conv)
    d = g.tensor([1, 4, 4, 2], name="ok_out")
    g.op(BO.RELU, [c], [d])
    g.io([x], [d])
    with pytest.raises(UnsupportedModelError) as info:
        load_bytes(m.build())
    err = info.value
    assert err.status is nnrt.ErrorStatus.INVALID_ARGUMENT
    got = [(r.node, r.op_type) for r in err.rejections]
    assert got == [("op 0 (gelu_out)", "GELU"), ("op 1 (custom_out)", "CUSTOM(MyFancyOp)"),
                   ("op 2 (conv_out)", "CONV_2D")]
    assert "custom op 'MyFancyOp'" in str(err) and "TANH" in str(err)


def test_rejection_inside_a_subgraph_is_listed() -> None:
    m = TflModel()
    g = m.main
    c, x = g.tensor([1], np.bool_, name="cond"), g.tensor([2], name="x")
    y = g.tensor([2], name="y")
    g.op(BO.IF, [c, x], [y], OPT.IfOptions, opts(S.IfOptionsT, thenSubgraphIndex=1, elseSubgraphIndex=1))
    g.io([c, x], [y])
    sub = m.subgraph()
    xi, yi = sub.tensor([2], name="bx"), sub.tensor([2], name="by")
    sub.op(BO.CUMSUM, [xi, sub.const([0], np.int32)], [yi])
    sub.io([xi], [yi])
    with pytest.raises(UnsupportedModelError) as info:
        load_bytes(m.build())
    kinds = [r.op_type for r in info.value.rejections]
    assert kinds == ["CUMSUM", "IF"], info.value


def test_sequence_lstm_state_is_carried(device: nnrt.CpuDevice) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM: its two variable tensors become two state inputs/outputs."""
    from ai_edge_litert.interpreter import Interpreter

    m = TflModel()
    g = m.main
    n_in, units, batch, steps = 3, 4, 2, 5
    x = g.tensor([batch, steps, n_in], name="x")
    ws = [g.const(RNG.standard_normal((units, n_in)) * 0.5, name=f"wi{k}") for k in range(4)]
    rs = [g.const(RNG.standard_normal((units, units)) * 0.3, name=f"wr{k}") for k in range(4)]
    bs = [g.const(RNG.standard_normal(units) * 0.1, name=f"b{k}") for k in range(4)]
    h = g.tensor([batch, units], name="h", variable=True)
    c = g.tensor([batch, units], name="c", variable=True)
    y = g.tensor([batch, steps, units], name="y")
    ins = [x, *ws, *rs, -1, -1, -1, *bs, -1, -1, h, c, -1, -1, -1, -1]
    g.op(BO.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [y], OPT.UnidirectionalSequenceLSTMOptions,
         opts(S.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=S.ActivationFunctionType.TANH,
              timeMajor=False))
    g.io([x], [y])
    data = m.build()
    model = load_bytes(data)
    assert [v.key for v in state_variables(model)] == ["h", "c"]
    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    prepared = device.prepare_model_sync(model)
    state = [v.initial for v in state_variables(model)]
    for _ in range(3):
        xs = RNG.standard_normal((batch, steps, n_in)).astype(np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], xs)
        it.invoke()
        out, *state = prepared.execute_sync([xs, *state]).outputs
        np.testing.assert_allclose(out, it.get_tensor(it.get_output_details()[0]["index"]), atol=1e-4, rtol=1e-3)


def _single(code: int, in_shapes: list[list[int]], out_shape: list[int], consts: list[tuple[object, object]] = (),
            opt_type: int = 0, option: object = None, dtype: object = np.float32) -> bytes:  # type: ignore[assignment]
    m = TflModel()
    g = m.main
    xs = [g.tensor(s, dtype, name=f"in{i}") for i, s in enumerate(in_shapes)]
    cs = [g.const(v, t) for v, t in consts]
    y = g.tensor(out_shape, dtype, name="out")
    g.op(code, [*xs, *cs], [y], opt_type, option)
    g.io(xs, [y])
    return m.build()


@pytest.mark.parametrize(("data", "reason"), [
    (_single(BO.STRIDED_SLICE, [[4, 4]], [4, 4], [([0, 0], np.int32), ([4, 4], np.int32), ([1, 1], np.int32)],
             OPT.StridedSliceOptions, opts(S.StridedSliceOptionsT, ellipsisMask=1)), "ellipsis_mask"),
    (_single(BO.GATHER, [[2, 4]], [2, 1], [([[1], [2]], np.int32)], OPT.GatherOptions,
             opts(S.GatherOptionsT, axis=1, batchDims=1)), "batch_dims 1"),
    (_single(BO.SELECT_V2, [[2, 1], [2, 3], [1, 3]], [2, 3]), "broadcasting"),
    (_single(BO.MEAN, [[2, 3], [1]], [2], dtype=np.float32), "axes .* must be a constant"),
    (_single(BO.SQUARED_DIFFERENCE, [[2, 3], [2, 3]], [2, 3], dtype=np.int8), "quantized SQUARE"),
    (_single(BO.ADD, [[2], [2]], [2], dtype=np.int64), "INT64, which NNAPI has no operand type for"),
])
def test_unexpressible_variants_are_rejected(data: bytes, reason: str) -> None:
    with pytest.raises(UnsupportedModelError, match=reason):
        load_bytes(data)


def test_hybrid_conv(device: nnrt.CpuDevice) -> None:
    """A float CONV_2D reading per-channel int8 weights directly gets a DEQUANTIZE. LiteRT's
    hybrid kernel quantizes the float input to int8 on the fly, so the two differ by that
    rounding (compared at 2e-2); nnrt computes with the exact input."""
    m = TflModel()
    g = m.main
    x = g.tensor([1, 4, 4, 2], name="x")
    w = g.const(RNG.integers(-127, 128, (3, 1, 1, 2)), np.int8, name="w", scale=[0.01, 0.02, 0.03], qdim=0)
    y = g.tensor([1, 4, 4, 3], name="y")
    g.op(BO.CONV_2D, [x, w, g.const(np.zeros(3), name="b")], [y], OPT.Conv2DOptions,
         opts(S.Conv2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    g.io([x], [y])
    data = m.build()
    model = load_bytes(data)
    assert nnrt.OperationType.DEQUANTIZE in [op.type for op in model.operations]
    x_in = RNG.standard_normal((1, 4, 4, 2)).astype(np.float32)
    np.testing.assert_allclose(run_nnrt(device, model, [x_in])[0], run_litert(data, [x_in])[0], atol=2e-2, rtol=2e-2)


def test_svdf_state_is_carried(device: nnrt.CpuDevice) -> None:
    from ai_edge_litert.interpreter import Interpreter

    m = TflModel()
    g = m.main
    batch, n_in, units, rank, memory = 2, 3, 2, 2, 4
    x = g.tensor([batch, n_in], name="x")
    wf = g.const(RNG.standard_normal((units * rank, n_in)) * 0.5, name="wf")
    wt = g.const(RNG.standard_normal((units * rank, memory)) * 0.5, name="wt")
    b = g.const(RNG.standard_normal(units) * 0.1, name="b")
    s = g.tensor([batch, memory * units * rank], name="svdf_state", variable=True)
    y = g.tensor([batch, units], name="y")
    g.op(BO.SVDF, [x, wf, wt, b, s], [y], OPT.SVDFOptions,
         opts(S.SVDFOptionsT, rank=rank, fusedActivationFunction=S.ActivationFunctionType.RELU))
    g.io([x], [y])
    data = m.build()
    model = load_bytes(data)
    (var,) = state_variables(model)
    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    prepared = device.prepare_model_sync(model)
    state = var.initial
    for _ in range(4):
        xs = RNG.standard_normal((batch, n_in)).astype(np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], xs)
        it.invoke()
        out, state = prepared.execute_sync([xs, state]).outputs
        np.testing.assert_allclose(out, it.get_tensor(it.get_output_details()[0]["index"]), atol=1e-4, rtol=1e-3)
