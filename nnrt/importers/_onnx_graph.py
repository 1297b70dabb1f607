"""Walking one ONNX graph into a finished nnrt ``Model``: inputs, nodes in order, outputs.

``load_onnx`` decodes the file (``_onnx_proto``) and ``build_model`` walks the main graph's
nodes in file order (ONNX requires them topologically sorted); ``_onnx_flow`` walks If/Loop
bodies with the same ``convert_nodes``. Each node goes to its mapper (``_onnx`` holds the
vocabulary every mapper shares: ``Value``, ``Builder``, ``NodeCtx``). A mapper that raises
``Reject`` is recorded (``Rejections``), the node's outputs are marked unavailable and the walk
carries on, so one ``UnsupportedModelError`` lists every offending node; nodes fed only by
unavailable values are skipped without a second, derived complaint.

Graph inputs keep their names; ``input_shapes`` fixes dynamic dimensions and ``input_values``
fixes an input's value, making it a constant the rest of the graph folds over (an If whose
condition depends only on it is decided at load).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from nnrt.errors import InvalidArgumentError
from nnrt.importers._common import Rejections
from nnrt.importers._onnx import MAPPERS, MIN_OPSET, Builder, NodeCtx, Reject, Shape, Value, _load_mappers
from nnrt.importers._onnx_fold import try_fold
from nnrt.importers._onnx_layout import run_in_nhwc
from nnrt.importers._onnx_proto import ONNX_DTYPES, ONNX_TYPE_NAMES, Graph, ModelProto, Node, parse_model, tensor_array
from nnrt.model import Model

__all__ = ["build_model", "convert_nodes", "count_reads", "finish_outputs", "load_onnx"]

_F32 = np.dtype(np.float32)


def convert_nodes(b: Builder, g: Graph, rejections: Rejections) -> None:
    """Convert every node of ``g`` into ``b``; record the ones that cannot be expressed."""
    b.graph_outputs = {vi.name for vi in g.outputs}
    for node in g.nodes:
        for name in node.inputs:
            b.consumers.setdefault(name, []).append(node)
        for name in node.outputs:
            b.producers[name] = node
    for node in _constants_first(b, g.nodes):
        if id(node) in b.absorbed:
            continue
        ins: list[Value | None] = []
        for name in node.inputs:
            ins.append(None if name == "" else b.lookup(name))
        ctx = NodeCtx(b, node, ins)
        unknown = [name for name, v in zip(node.inputs, ins) if name and v is None]
        fn = MAPPERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        try:
            if unknown:
                raise Reject(f"input {unknown[0]!r} is not produced by any earlier node, initializer or graph input")
            if fn is None:
                where = f" of domain {node.domain!r}" if node.domain not in ("", "ai.onnx") else ""
                raise Reject(f"operator {node.op_type}{where} is not supported")
            if any(v is not None and v.missing for v in ins):
                ctx.outputs = [Value(_F32, None, missing=True) for _ in node.outputs]
            elif not try_fold(ctx) and not run_in_nhwc(ctx, fn):
                fn(ctx)
                if any(v is None for v, name in zip(ctx.outputs, node.outputs) if name):
                    raise Reject("an output this node would produce is not supported")
        except Reject as r:
            rejections.add(node.label, node.op_type, str(r))
            ctx.outputs = [Value(_F32, None, missing=True) for _ in node.outputs]
        except InvalidArgumentError as err:
            # A Model call refused what the mapper built: report it against this node.
            rejections.add(node.label, node.op_type, f"nnrt refused the mapping: {err}")
            ctx.outputs = [Value(_F32, None, missing=True) for _ in node.outputs]
        for name, v in zip(node.outputs, ctx.outputs):
            if name:
                b.values[name] = v if v is not None else Value(_F32, None, missing=True)


def _constants_first(b: Builder, nodes: list[Node]) -> list[Node]:
    """``nodes`` with those computing from constants alone (initializers, Constant nodes, and
    such nodes' outputs) first, each part in file order. They fold to constants
    (``_onnx_fold``), so a mapper that looks ahead at a node reading its output (a bias Add
    after ConvTranspose, whose bias a Reshape after the ConvTranspose makes) sees the constant.
    Nodes with subgraphs stay in place: their bodies may read earlier tensors."""
    known = {name for name, v in b.values.items() if v.const is not None}
    first: list[Node] = []
    rest: list[Node] = []
    for node in nodes:
        if (all(not name or name in known for name in node.inputs)
                and not any(a.g is not None or a.graphs for a in node.attrs.values())):
            first.append(node)
            known.update(name for name in node.outputs if name)
        else:
            rest.append(node)
    return first + rest


#: Where quantized ops read a tensor and its scale / zero point: op type -> ((tensor, scale, zp), ...).
_QUANT_READERS = {"DequantizeLinear": ((0, 1, 2),), "QLinearConv": ((0, 1, 2),), "QLinearMatMul": ((0, 1, 2), (3, 4, 5))}


def input_quant(g: Graph, values: Mapping[str, Value]) -> dict[str, tuple[float, int]]:
    """Scale and zero point of uint8/int8 graph inputs, from the quantized ops that read them."""
    out: dict[str, tuple[float, int]] = {}
    for node in g.nodes:
        for t, s, z in _QUANT_READERS.get(node.op_type, ()):
            if len(node.inputs) <= s:
                continue
            scale = values.get(node.inputs[s])
            zp = values.get(node.inputs[z]) if len(node.inputs) > z and node.inputs[z] else None
            if scale is None or scale.const is None or scale.const.size != 1:
                continue
            if zp is not None and (zp.const is None or zp.const.size != 1):
                continue
            out.setdefault(node.inputs[t], (float(scale.const.reshape(-1)[0]),
                                            0 if zp is None or zp.const is None else int(zp.const.reshape(-1)[0])))
    return out


def graph_input_value(b: Builder, vi_name: str, elem_type: int, dims: tuple[int, ...] | None,
                      fixed: tuple[int, ...] | None, quant: tuple[float, int] | None = None) -> Value:
    dtype = ONNX_DTYPES.get(elem_type)
    if dtype is None:
        raise Reject(f"graph input {vi_name!r} has element type {ONNX_TYPE_NAMES.get(elem_type, elem_type)}, "
                     "which nnrt cannot hold")
    if dims is not None and 0 in dims:
        raise Reject(f"graph input {vi_name!r} has a zero-sized dimension {list(dims)} (nnrt's 0 means unknown)")
    shape: Shape = None if dims is None else tuple(max(d, 0) for d in dims)
    if fixed is not None:
        if shape is not None and (len(fixed) != len(shape) or any(s and s != f for s, f in zip(shape, fixed))):
            raise Reject(f"input_shapes[{vi_name!r}] = {list(fixed)} does not match the file's {list(dims or ())}")
        shape = fixed
    if dtype not in (np.uint8, np.int8):
        quant = None
    v = Value(dtype, shape, quant=quant)
    v.index = b.add(dtype, shape, quant, vi_name)
    return v


def fixed_input_value(model_name: str, vi_name: str, elem_type: int, dims: tuple[int, ...] | None,
                      fixed: tuple[int, ...] | None, value: np.ndarray) -> Value:
    """A graph input whose value the caller fixed at load (``input_values``): a constant."""
    where = f"load: {model_name}: input_values[{vi_name!r}]"
    dtype = ONNX_DTYPES.get(elem_type)
    if dtype is None:
        raise InvalidArgumentError(f"{where}: the input has element type {ONNX_TYPE_NAMES.get(elem_type, elem_type)}, "
                                   "which nnrt cannot hold")
    shape = fixed if fixed is not None else dims
    if value.ndim > 0 or shape is None:
        if shape is not None and (len(shape) != value.ndim or any(d >= 0 and d != v for d, v in zip(shape, value.shape))):
            raise InvalidArgumentError(f"{where} has shape {list(value.shape)}; the input's is {list(shape)}")
        arr = value
    elif any(d < 0 for d in shape):
        raise InvalidArgumentError(f"{where}: the input's shape {list(shape)} has unknown dimensions "
                                   "(give them with input_shapes, or give an array)")
    else:
        arr = np.full(shape, value)
    cast = arr.astype(dtype)
    if dtype.kind in "biu" and not np.array_equal(cast, arr):
        raise InvalidArgumentError(f"{where}: {value.tolist()!r} does not fit the input's element type {dtype}")
    return Value(dtype, tuple(cast.shape), const=cast)


def load_onnx(data: memoryview, *, name: str, input_shapes: Mapping[str, tuple[int, ...]],
              input_values: Mapping[str, np.ndarray] | None = None, base_dir: str | None = None) -> Model:
    """Decode ``data`` as an ONNX ModelProto and build the nnrt ``Model`` (see the module doc)."""
    _load_mappers()
    proto = parse_model(data, base_dir)
    return build_model(proto, name=name, input_shapes=input_shapes, input_values=input_values)


def build_model(proto: ModelProto, *, name: str, input_shapes: Mapping[str, tuple[int, ...]],
                input_values: Mapping[str, np.ndarray] | None = None) -> Model:
    input_values = input_values or {}
    g = proto.graph
    assert g is not None
    rejections = Rejections("onnx")
    opset = proto.opsets.get("", proto.opsets.get("ai.onnx", 0))
    if opset < MIN_OPSET:
        rejections.add("<model>", "opset_import", f"ai.onnx opset {opset} is older than {MIN_OPSET}")
        for node in g.nodes:  # name the op types that would not map under any opset too
            if node.op_type not in MAPPERS or node.domain not in ("", "ai.onnx"):
                rejections.add(node.label, node.op_type, f"operator {node.op_type} is not supported")
        rejections.raise_if_any(name)
    model = Model(name=name)
    b = Builder(model, opset)
    count_reads(g, b.reads, b.stored)
    for t in g.initializers:
        try:
            b.values[t.name] = Value(np.dtype(ONNX_DTYPES.get(t.data_type, _F32)), t.dims,
                                     const=tensor_array(t, "initializer"))
        except InvalidArgumentError as err:
            if t.data_type in ONNX_DTYPES or t.external:
                raise
            rejections.add(t.name, "initializer", str(err).removeprefix("load: "))
            b.values[t.name] = Value(_F32, t.dims, missing=True)
    if g.has_sparse_initializers:
        rejections.add("<graph>", "sparse_initializer", "sparse initializers are not supported")
    for what, given in (("input_shapes", input_shapes), ("input_values", input_values)):
        unknown = set(given) - {vi.name for vi in g.inputs}
        if unknown:
            raise InvalidArgumentError(f"load: {name}: {what} names {sorted(unknown)}, which are not graph inputs")
    inputs: list[Value] = []
    quant = input_quant(g, b.values)
    for vi in g.inputs:
        if vi.name in input_values:  # fixed at load: a constant, no longer an input
            b.values[vi.name] = fixed_input_value(name, vi.name, vi.elem_type, vi.dims, input_shapes.get(vi.name),
                                                  input_values[vi.name])
            continue
        if vi.name in b.values and vi.name not in input_shapes:
            continue  # an initializer listed as an input (IR < 4, or an overridable default): constant
        if not vi.is_tensor:
            rejections.add(vi.name, "graph input", "only tensor inputs are supported (not sequences, maps, optionals)")
            b.values[vi.name] = Value(_F32, None, missing=True)
            continue
        try:
            v = graph_input_value(b, vi.name, vi.elem_type, vi.dims, input_shapes.get(vi.name), quant.get(vi.name))
        except Reject as r:
            rejections.add(vi.name, "graph input", str(r))
            b.values[vi.name] = Value(_F32, None, missing=True)
            continue
        b.values[vi.name] = v
        inputs.append(v)
    convert_nodes(b, g, rejections)
    outputs = finish_outputs(b, [vi.name for vi in g.outputs], rejections, inputs)
    rejections.raise_if_any(name)
    model.identify_inputs_and_outputs([v.index for v in inputs if v.index is not None], outputs)
    model.finish()
    return model


def count_reads(g: Graph, reads: Counter[str], stored: set[str]) -> None:
    """Add the readers of each tensor name in ``g`` and its nested graphs (graph outputs count),
    and the names of the tensors stored in the file (initializers, Constant nodes' values)."""
    reads.update(vi.name for vi in g.outputs)
    stored.update(t.name for t in g.initializers)
    for node in g.nodes:
        reads.update(n for n in node.inputs if n)
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.outputs:
            stored.add(node.outputs[0])
        for a in node.attrs.values():
            if a.g is not None:
                count_reads(a.g, reads, stored)
            for sub in a.graphs or ():
                count_reads(sub, reads, stored)


def finish_outputs(b: Builder, names: Sequence[str], rejections: Rejections, inputs: Sequence[Value]) -> list[int]:
    """Operand indexes of the graph outputs: each written by an operation, each distinct."""
    taken = {v.index for v in inputs}
    out: list[int] = []
    for name in names:
        v = b.values.get(name)
        if v is None:
            rejections.add(name, "graph output", "is not produced by any node")
            continue
        if v.missing:
            continue
        try:
            v = b.logical(v)
            if v.index is None or v.index in taken or v.const is not None:
                v = b.copy(v)
            assert v.index is not None
        except (Reject, InvalidArgumentError) as r:
            rejections.add(name, "graph output", str(r))
            continue
        if v.dtype == np.float64:
            rejections.add(name, "graph output", "double outputs are not supported")
        b.model.operands[v.index].name = name  # the graph output's name, even when an inlined If named it
        taken.add(v.index)
        out.append(v.index)
    return out
