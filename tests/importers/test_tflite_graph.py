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


def _run_stateful(device: nnrt.CpuDevice, data: bytes, shape: tuple[int, ...], keys: list[str], steps: int = 3,
                  tol: float = 1e-4) -> None:
    """Run ``data`` ``steps`` times in LiteRT and in nnrt (carrying its state), compare outputs
    (atol ``tol``, rtol 10 ``tol``)."""
    from ai_edge_litert.interpreter import Interpreter

    model = load_bytes(data)
    variables = state_variables(model)
    assert [v.key for v in variables] == keys
    it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    prepared = device.prepare_model_sync(model)
    state = [v.initial for v in variables]
    for _ in range(steps):
        xs = RNG.standard_normal(shape).astype(np.float32)
        it.set_tensor(it.get_input_details()[0]["index"], xs)
        it.invoke()
        out, *state = prepared.execute_sync([xs, *state]).outputs
        np.testing.assert_allclose(out, it.get_tensor(it.get_output_details()[0]["index"]), atol=tol, rtol=10 * tol)


def test_variable_tensor_state_of_a_sequence_rnn(device: nnrt.CpuDevice) -> None:
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
    _run_stateful(device, m.build(), (2, 3, 4), ["hidden"], steps=2)


def _dynamic_fc(signature: bool = True) -> bytes:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 4], name="features", signature=[-1, 4] if signature else None)
    w = g.const(RNG.standard_normal((2, 4)), name="w")
    y = g.tensor([1, 2], name="scores", signature=[-1, 2] if signature else None)
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
    static = _dynamic_fc(signature=False)  # a batch of 1 fixed in the file, resized by the caller
    resized = load_bytes(static, input_shapes={"features": [3, 4]})
    assert resized.operands[resized.output_indexes[0]].dimensions == (0, 0)
    np.testing.assert_allclose(run_nnrt(device, resized, [x])[0], run_litert(static, [x])[0], atol=1e-4, rtol=1e-3)
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


@pytest.mark.parametrize("hybrid", [False, True])
def test_sequence_lstm_state_is_carried(device: nnrt.CpuDevice, hybrid: bool) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM: its two variable tensors become two state inputs/outputs.
    Hybrid (int8 weights): DEQUANTIZE in front of the weights; LiteRT quantizes the input on
    the fly instead, so the comparison allows that rounding (atol 2e-2)."""
    m = TflModel()
    g = m.main
    n_in, units, batch, steps = 3, 4, 2, 5
    x = g.tensor([batch, steps, n_in], name="x")

    def weight(shape: tuple[int, int], scale: float, name: str) -> int:
        if hybrid:
            return g.const(RNG.integers(-127, 128, shape), np.int8, name=name, scale=scale / 64, zp=0)
        return g.const(RNG.standard_normal(shape) * scale, name=name)

    ws = [weight((units, n_in), 0.5, f"wi{k}") for k in range(4)]
    rs = [weight((units, units), 0.3, f"wr{k}") for k in range(4)]
    bs = [g.const(RNG.standard_normal(units) * 0.1, name=f"b{k}") for k in range(4)]
    h = g.tensor([batch, units], name="h", variable=True)
    c = g.tensor([batch, units], name="c", variable=True)
    y = g.tensor([batch, steps, units], name="y")
    ins = [x, *ws, *rs, -1, -1, -1, *bs, -1, -1, h, c, -1, -1, -1, -1]
    g.op(BO.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [y], OPT.UnidirectionalSequenceLSTMOptions,
         opts(S.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=S.ActivationFunctionType.TANH,
              timeMajor=False))
    g.io([x], [y])
    _run_stateful(device, m.build(), (batch, steps, n_in), ["h", "c"], tol=2e-2 if hybrid else 1e-4)


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
    _run_stateful(device, m.build(), (batch, n_in), ["svdf_state"], steps=4)


def test_lstm_and_rnn_cells_carry_state(device: nnrt.CpuDevice) -> None:
    n_in, units, batch = 3, 4, 2
    m = TflModel()
    g = m.main
    x = g.tensor([batch, n_in], name="x")
    ws = [g.const(RNG.standard_normal((units, n_in)) * 0.5, name=f"wi{k}") for k in range(4)]
    rs = [g.const(RNG.standard_normal((units, units)) * 0.3, name=f"wr{k}") for k in range(4)]
    bs = [g.const(RNG.standard_normal(units) * 0.1, name=f"b{k}") for k in range(4)]
    h = g.tensor([batch, units], name="h", variable=True)
    c = g.tensor([batch, units], name="c", variable=True)
    y = g.tensor([batch, units], name="y")
    g.op(BO.LSTM, [x, *ws, *rs, -1, -1, -1, *bs, -1, -1, h, c, -1, -1, -1, -1], [y], OPT.LSTMOptions,
         opts(S.LSTMOptionsT, fusedActivationFunction=S.ActivationFunctionType.TANH, cellClip=3.0))
    g.io([x], [y])
    _run_stateful(device, m.build(), (batch, n_in), ["h", "c"])
    m = TflModel()
    g = m.main
    x = g.tensor([batch, n_in], name="x")
    hs = g.tensor([batch, units], name="hidden", variable=True)
    y = g.tensor([batch, units], name="y")
    g.op(BO.RNN, [x, g.const(RNG.standard_normal((units, n_in))), g.const(RNG.standard_normal((units, units)) * 0.3),
                  g.const(RNG.standard_normal(units)), hs], [y], OPT.RNNOptions,
         opts(S.RNNOptionsT, fusedActivationFunction=S.ActivationFunctionType.RELU))
    g.io([x], [y])
    _run_stateful(device, m.build(), (batch, n_in), ["hidden"])


@pytest.mark.parametrize(("merge", "time_major"), [(False, False), (True, True)])
def test_bidirectional_lstm(device: nnrt.CpuDevice, merge: bool, time_major: bool) -> None:
    """BIDIRECTIONAL_SEQUENCE_LSTM: four variable tensors become four state inputs/outputs.
    (LiteRT's merged output in batch-major layout changes from run to run on the same input,
    uninitialized memory in LiteRT, so that combination has no reference to compare with.)"""
    m = TflModel()
    g = m.main
    n_in, units, batch, steps = 3, 4, 2, 5
    lead = [steps, batch] if time_major else [batch, steps]
    x = g.tensor([*lead, n_in], name="x")

    def cell(prefix: str) -> list[int]:
        ws = [g.const(RNG.standard_normal((units, n_in)) * 0.5, name=f"{prefix}wi{k}") for k in range(4)]
        rs = [g.const(RNG.standard_normal((units, units)) * 0.3, name=f"{prefix}wr{k}") for k in range(4)]
        bs = [g.const(RNG.standard_normal(units) * 0.1, name=f"{prefix}b{k}") for k in range(4)]
        return [*ws, *rs, -1, -1, -1, *bs, -1, -1]

    fw, bw = cell("fw_"), cell("bw_")
    states = [g.tensor([batch, units], name=n, variable=True) for n in ("fw_h", "fw_c", "bw_h", "bw_c")]
    outs = [g.tensor([*lead, 2 * units], name="y")] if merge else \
        [g.tensor([*lead, units], name="y_fw"), g.tensor([*lead, units], name="y_bw")]
    g.op(BO.BIDIRECTIONAL_SEQUENCE_LSTM, [x, *fw, *bw, *states, *([-1] * 9)], outs,
         OPT.BidirectionalSequenceLSTMOptions,
         opts(S.BidirectionalSequenceLSTMOptionsT, fusedActivationFunction=S.ActivationFunctionType.TANH,
              mergeOutputs=merge, timeMajor=time_major))
    g.io([x], outs)
    data = m.build()
    model = load_bytes(data)
    assert [v.key for v in state_variables(model)] == ["fw_h", "fw_c", "bw_h", "bw_c"]
    xs = RNG.standard_normal((*lead, n_in)).astype(np.float32)
    got = run_nnrt(device, model, [xs, *(v.initial for v in state_variables(model))])
    for a, b in zip(got, run_litert(data, [xs])):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("merge", [False, True])
def test_bidirectional_rnn(device: nnrt.CpuDevice, merge: bool) -> None:
    m = TflModel()
    g = m.main
    n_in, units, batch, steps = 3, 4, 2, 5
    x = g.tensor([batch, steps, n_in], name="x")

    def cell(prefix: str) -> list[int]:
        return [g.const(RNG.standard_normal((units, n_in)) * 0.5, name=f"{prefix}w"),
                g.const(RNG.standard_normal((units, units)) * 0.3, name=f"{prefix}r"),
                g.const(RNG.standard_normal(units) * 0.1, name=f"{prefix}b"),
                g.tensor([batch, units], name=f"{prefix}h", variable=True)]

    fw, bw = cell("fw_"), cell("bw_")
    outs = [g.tensor([batch, steps, 2 * units], name="y")] if merge else \
        [g.tensor([batch, steps, units], name="y_fw"), g.tensor([batch, steps, units], name="y_bw")]
    g.op(BO.BIDIRECTIONAL_SEQUENCE_RNN, [x, *fw, *bw, -1, -1, -1], outs, OPT.BidirectionalSequenceRNNOptions,
         opts(S.BidirectionalSequenceRNNOptionsT, timeMajor=False, mergeOutputs=merge,
              fusedActivationFunction=S.ActivationFunctionType.RELU))
    g.io([x], outs)
    data = m.build()
    model = load_bytes(data)
    assert [v.key for v in state_variables(model)] == ["fw_h", "bw_h"]
    xs = RNG.standard_normal((batch, steps, n_in)).astype(np.float32)
    got = run_nnrt(device, model, [xs, *(v.initial for v in state_variables(model))])
    for a, b in zip(got, run_litert(data, [xs])):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-3)


def test_dead_nodes_and_computed_reshape_shapes_are_not_imported(device: nnrt.CpuDevice) -> None:
    """A SHAPE -> STRIDED_SLICE -> PACK chain feeding only a RESHAPE's shape (as converters emit
    for a dynamic batch) and an unexpressible op whose result nobody reads are left out, not refused."""
    m = TflModel()
    g = m.main
    x = g.tensor([1, 2, 3], name="x", signature=[-1, 2, 3])
    shape = g.tensor([3], np.int32, name="shape")
    g.op(BO.SHAPE, [x], [shape], OPT.ShapeOptions, opts(S.ShapeOptionsT, outType=S.TensorType.INT32))
    batch = g.tensor([], np.int32, name="batch")
    g.op(BO.STRIDED_SLICE, [shape, g.const([0], np.int32), g.const([1], np.int32), g.const([1], np.int32)], [batch],
         OPT.StridedSliceOptions, opts(S.StridedSliceOptionsT, shrinkAxisMask=1))
    target = g.tensor([2], np.int32, name="target")
    g.op(BO.PACK, [batch, g.const(np.array(6), np.int32)], [target], OPT.PackOptions,
         opts(S.PackOptionsT, valuesCount=2, axis=0))
    y = g.tensor([1, 6], name="y", signature=[-1, 6])
    g.op(BO.RESHAPE, [x, target], [y])
    unused = g.tensor([1, 6], name="unused")
    g.op(BO.GELU, [y], [unused])  # exact GELU: refused if it were imported
    g.io([x], [y])
    data = m.build()
    model = load_bytes(data)
    assert [op.type for op in model.operations] == [nnrt.OperationType.RESHAPE]
    xs = RNG.standard_normal((4, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_nnrt(device, model, [xs])[0], run_litert(data, [xs])[0])


def test_sequence_lstm_with_peepholes_projection_and_layer_norm(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    n_in, units, n_out, batch, steps = 3, 5, 4, 2, 4
    x = g.tensor([batch, steps, n_in], name="x")
    ws = [g.const(RNG.standard_normal((units, n_in)) * 0.5, name=f"wi{k}") for k in range(4)]
    rs = [g.const(RNG.standard_normal((units, n_out)) * 0.3, name=f"wr{k}") for k in range(4)]
    peep = [g.const(RNG.standard_normal(units) * 0.2, name=f"p{k}") for k in range(3)]
    bs = [g.const(RNG.standard_normal(units) * 0.1, name=f"b{k}") for k in range(4)]
    proj_w, proj_b = g.const(RNG.standard_normal((n_out, units)) * 0.4, name="pw"), g.const(RNG.standard_normal(n_out) * 0.1)
    h = g.tensor([batch, n_out], name="h", variable=True)
    c = g.tensor([batch, units], name="c", variable=True)
    norms = [g.const(1.0 + RNG.standard_normal(units) * 0.1, name=f"ln{k}") for k in range(4)]
    y = g.tensor([batch, steps, n_out], name="y")
    g.op(BO.UNIDIRECTIONAL_SEQUENCE_LSTM, [x, *ws, *rs, *peep, *bs, proj_w, proj_b, h, c, *norms], [y],
         OPT.UnidirectionalSequenceLSTMOptions,
         opts(S.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=S.ActivationFunctionType.TANH,
              cellClip=5.0, projClip=3.0, timeMajor=False))
    g.io([x], [y])
    _run_stateful(device, m.build(), (batch, steps, n_in), ["h", "c"])


def _composite(inner_code: int) -> bytes:
    """A STABLEHLO_COMPOSITE whose decomposition computes x * 2 then ``inner_code`` with 1."""
    import flatbuffers.flexbuffers as fx

    m = TflModel()
    g = m.main
    x, y = g.tensor([2, 3], name="x"), g.tensor([2, 3], name="y")
    g.op(BO.STABLEHLO_COMPOSITE, [x], [y])
    op = g.t.operators[-1]
    op.builtinOptions2Type = S.BuiltinOptions2.StableHLOCompositeOptions
    op.builtinOptions2 = opts(S.StableHLOCompositeOptionsT, name="odml.scale_shift", decompositionSubgraphIndex=1,
                              compositeAttributes=list(fx.Dumps({})), compositeAttributesFormat=1, version=1)
    g.io([x], [y])
    sub = m.subgraph()
    a, t, b = sub.tensor([2, 3], name="a"), sub.tensor([2, 3], name="t"), sub.tensor([2, 3], name="b")
    sub.op(BO.MUL, [a, sub.const([2.0])], [t], OPT.MulOptions, opts(S.MulOptionsT))
    sub.op(inner_code, [t, sub.const([1.0])], [b])
    sub.io([a], [b])
    return m.build()


def test_stablehlo_composite_is_its_decomposition(device: nnrt.CpuDevice) -> None:
    data = _composite(BO.MAXIMUM)
    model = load_bytes(data)
    assert [op.type for op in model.operations] == [nnrt.OperationType.MUL, nnrt.OperationType.MAXIMUM]
    xs = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(run_nnrt(device, model, [xs])[0], run_litert(data, [xs])[0], atol=1e-6)
    with pytest.raises(UnsupportedModelError) as info:
        load_bytes(_composite(BO.FLOOR_MOD))
    assert [(r.node, r.op_type) for r in info.value.rejections] == [
        ("subgraph 1 op 1 (b)", "FLOOR_MOD"), ("op 0 (y)", "STABLEHLO_COMPOSITE")]


def test_call_maps_its_subgraph_in_place(device: nnrt.CpuDevice) -> None:
    """CALL (which LiteRT no longer registers, so checked against numpy): RELU of x, then + 1."""
    m = TflModel()
    g = m.main
    x, y = g.tensor([2, 3], name="x"), g.tensor([2, 3], name="y")
    g.op(BO.CALL, [x, g.const([1.0])], [y], OPT.CallOptions, opts(S.CallOptionsT, subgraph=1))
    g.io([x], [y])
    sub = m.subgraph()
    a, one, r, b = sub.tensor([2, 3], name="a"), sub.tensor([1], name="one"), sub.tensor([2, 3], name="r"), \
        sub.tensor([2, 3], name="b")
    sub.op(BO.RELU, [a], [r])
    sub.op(BO.ADD, [r, one], [b], OPT.AddOptions, opts(S.AddOptionsT))
    sub.io([a, one], [b])
    xs = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_nnrt(device, load_bytes(m.build()), [xs])[0], np.maximum(xs, 0) + 1)


def test_resized_input_reaches_if_branches(device: nnrt.CpuDevice) -> None:
    """input_shapes changing a fixed dimension also frees the dimensions inside IF branches."""
    data = _if_model()
    model = load_bytes(data, input_shapes={"x": [4, 3]})
    xs = RNG.standard_normal((4, 3)).astype(np.float32)
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data, num_threads=1)
    details = it.get_input_details()
    it.resize_tensor_input(details[1]["index"], [4, 3])
    it.allocate_tensors()
    for cond in (True, False):
        it.set_tensor(details[0]["index"], np.array([cond]))
        it.set_tensor(details[1]["index"], xs)
        it.invoke()
        got = run_nnrt(device, model, [np.array([cond]), xs])[0]
        np.testing.assert_allclose(got, it.get_tensor(it.get_output_details()[0]["index"]), atol=1e-6)


def test_an_import_logs_one_event_under_the_model_tag() -> None:
    from structlog.testing import capture_logs

    from nnrt._log import reload_vlog

    reload_vlog("model")
    try:
        with capture_logs() as logs:
            load_bytes(_accumulator())
    finally:
        reload_vlog()
    (event,) = [e for e in logs if e["event"] == "model.imported"]
    assert event["format"] == "tflite" and event["state"] == 1 and event["subgraphs"] == 2
