"""Regenerate the seed corpus in ``corpus/`` (small files, committed): ``python -m tests.adversarial.make_corpus``.

Seeds are valid inputs of each target, small enough for the fuzzer to mutate quickly; the
fuzzer's own finds are not committed (they live in a temporary directory per run).
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt import zoo
from nnrt.burst._packet import Location, RequestPacket, encode_request
from tests.adversarial._targets import cache_seed, ring_seeds, service_seeds
from tests.adversarial.fuzz import CORPUS


def _if_model() -> nnrt.Model:
    branch = zoo.one_add()
    m = nnrt.Model(name="if")
    c = m.add_operand(T.TENSOR_BOOL8, [1])
    a = m.add_operand(T.TENSOR_FLOAT32, [1, 2])
    b = m.add_operand(T.TENSOR_FLOAT32, [1, 2])
    y = m.add_operand(T.TENSOR_FLOAT32, [1, 2])
    then, other = m.add_operand(T.SUBGRAPH), m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(then, branch)
    m.set_operand_value_from_model(other, branch)
    m.add_operation(Op.IF, [c, then, other, a, b], [y])
    m.identify_inputs_and_outputs([c, a, b], [y])
    m.finish()
    return m


def _quant_model() -> nnrt.Model:
    m = nnrt.Model(name="quant")
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 4], 0.5, 3)
    w = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [2, 4])
    m.set_operand_symm_per_channel_quant_params(w, 0, [0.25, 0.5])
    m.set_operand_value(w, np.arange(8, dtype=np.int8).reshape(2, 4))
    axes = m.add_operand(T.TENSOR_INT32, [1])
    m.set_operand_value(axes, np.array([1], np.int32))
    keep = m.add_operand(T.BOOL)
    m.set_operand_value(keep, True)
    y = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 1], 0.5, 3)
    m.add_operation(Op.REDUCE_MAX, [x, axes, keep], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def _windows_model() -> nnrt.Model:
    """The compiled float32 window loops in one chain (depthwise at column stride 1 and 2, both
    pools, PAD of the last axis, RESIZE_BILINEAR, PRELU, MEAN), for mutated paddings, strides,
    dilations, sizes and shapes to reach."""
    m = nnrt.Model(name="windows")
    f32 = T.TENSOR_FLOAT32

    def const(t: T, value: object, dims: list[int] | None = None) -> int:
        i = m.add_operand(t, dims) if dims is not None else m.add_operand(t)
        m.set_operand_value(i, value)
        return i

    def op(kind: Op, ins: list[int], dims: list[int]) -> int:
        y = m.add_operand(f32, [0] * len(dims))  # sizes decided at run time, whatever the mutated parameters
        m.add_operation(kind, ins, [y])
        return y

    def ints(*values: int) -> list[int]:
        return [const(T.INT32, v) for v in values]

    x = m.add_operand(f32, [1, 6, 6, 4])
    w = const(f32, np.linspace(-1, 1, 36, dtype=np.float32).reshape(1, 3, 3, 4), [1, 3, 3, 4])
    b = const(f32, np.full(4, 0.5, np.float32), [4])
    dw1 = op(Op.DEPTHWISE_CONV_2D, [x, w, b, *ints(1, 1, 1, 1, 1, 1, 1, 0)], [1, 6, 6, 4])
    dw2 = op(Op.DEPTHWISE_CONV_2D, [x, w, b, *ints(1, 1, 1, 1, 2, 2, 1, 3)], [1, 3, 3, 4])
    mp = op(Op.MAX_POOL_2D, [dw1, *ints(0, 0, 0, 0, 2, 2, 2, 2, 0)], [1, 3, 3, 4])
    ap = op(Op.AVERAGE_POOL_2D, [mp, *ints(1, 1, 1, 1, 1, 1, 3, 3, 1)], [1, 3, 3, 4])
    pad = op(Op.PAD, [ap, const(T.TENSOR_INT32, np.array([[0, 0], [0, 0], [0, 0], [1, 2]], np.int32), [4, 2])],
             [1, 3, 3, 7])
    rs = op(Op.RESIZE_BILINEAR, [pad, *ints(5, 5), const(T.BOOL, False), const(T.BOOL, False), const(T.BOOL, True)],
            [1, 5, 5, 7])
    pr = op(Op.PRELU, [rs, const(f32, np.full(7, 0.25, np.float32), [7])], [1, 5, 5, 7])
    mean = op(Op.MEAN, [pr, const(T.TENSOR_INT32, np.array([1, 2], np.int32), [2]), *ints(0)], [1, 7])
    m.identify_inputs_and_outputs([x], [mean, dw2])
    m.finish()
    return m


def _onnx_add() -> bytes:
    import onnx
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 2])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                              "g", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return bytes(onnx._serialize(model)) if hasattr(onnx, "_serialize") else model.SerializeToString()


def _tflite_seeds() -> dict[str, bytes]:
    """Two small TFLite files (ADD+RELU with a constant; IF over two subgraphs), written with the
    importer tests' flatbuffers writer."""
    from tests.importers.tflite_builder import BO, OPT, S, TflModel, opts

    m = TflModel()
    g = m.main
    x, y = g.tensor([1, 4], name="x"), g.tensor([1, 4], name="y")
    s = g.tensor([1, 4], name="s")
    g.op(BO.ADD, [x, g.const(np.arange(4, dtype=np.float32).reshape(1, 4))], [s])
    g.op(BO.RELU, [s], [y])
    g.io([x], [y])
    seeds = {"add_relu.tflite": m.build()}
    m = TflModel()
    g = m.main
    c, x, y = g.tensor([1], np.bool_, name="cond"), g.tensor([2, 3], name="x"), g.tensor([2, 3], name="y")
    g.op(BO.IF, [c, x], [y], OPT.IfOptions, opts(S.IfOptionsT, thenSubgraphIndex=1, elseSubgraphIndex=2))
    g.io([c, x], [y])
    for code, k in ((BO.ADD, 1.0), (BO.MUL, 2.0)):
        sub = m.subgraph()
        xi, yi = sub.tensor([2, 3], name="bx"), sub.tensor([2, 3], name="by")
        sub.op(code, [xi, sub.const(np.full([1], k, np.float32))], [yi])
        sub.io([xi], [yi])
    seeds["if.tflite"] = m.build()
    return seeds


def main() -> None:
    models = {"one_add": zoo.one_add(), "add_chain": zoo.add_chain(4), "small_cnn": zoo.small_cnn(), "if": _if_model(),
              "quant": _quant_model(), "windows": _windows_model()}
    out = CORPUS / "model_file"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models.items():
            path = Path(tmp) / name
            model.save(path)
            (out / name).write_bytes(path.read_bytes())
    out = CORPUS / "cache"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("one_add", "small_cnn"):
        (out / name).write_bytes(cache_seed(models[name]))
    out = CORPUS / "burst_packet"
    out.mkdir(parents=True, exist_ok=True)
    packets = {
        "plain": RequestPacket((Location(0, 0, 8, (1, 2)), Location(0, 8, 8, (1, 2))), (Location(1, 0, 8, (1, 2)),)),
        "timed": RequestPacket((Location(0, 0, 8), Location(1, 8, 8)), (Location(0, 16, 8),), True, 1e6, 0.5),
        "omitted": RequestPacket((None, Location(0, 8, 8, (1, 2))), (Location(1, 0, 8, ()),)),
    }
    for name, packet in packets.items():
        datums = encode_request(packet)
        (out / name).write_bytes(struct.pack(f"<{len(datums)}q", *datums))
    out = CORPUS / "service_request"
    out.mkdir(parents=True, exist_ok=True)
    for name, data in service_seeds().items():
        (out / name).write_bytes(data)
    out = CORPUS / "ring_request"
    out.mkdir(parents=True, exist_ok=True)
    for name, data in ring_seeds().items():
        (out / name).write_bytes(data)
    out = CORPUS / "load"
    out.mkdir(parents=True, exist_ok=True)
    (out / "add_relu.onnx").write_bytes(_onnx_add())
    (out / "tfl3_header").write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(24))
    for name, data in _tflite_seeds().items():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()
