"""ONNX control flow → NNAPI: If as IF, Loop as WHILE.

A body graph becomes an nnrt ``Model`` built by a child ``Builder``. NNAPI bodies see no outer
scope, so every outer tensor a body reads becomes an explicit input of the body and of the
IF/WHILE (``Builder.lookup`` records them); outer constants are copied in as constants.

If: both branches take the union of what either reads (a branch gets unused inputs for the
other's), and must produce outputs of the same types. A constant condition picks its branch at
import and inlines it.

Loop(M, cond, carried...) → WHILE whose state is (iteration, condition, carried...) and whose
input-only values are M and the captured tensors. The condition model computes
``cond and iteration < M`` (either part when the other is omitted); the body runs the ONNX
body and adds 1 to the iteration. Scan outputs (per-iteration values stacked by ONNX) have no
NNAPI counterpart and are refused, as are sequence and optional values.
"""

from __future__ import annotations

import numpy as np

from nnrt.importers._common import Rejections
from nnrt.importers._onnx import Arg, Builder, NodeCtx, Reject, Value, mapper
from nnrt.importers._onnx_graph import convert_nodes, finish_outputs
from nnrt.importers._onnx_proto import ONNX_DTYPES, Graph
from nnrt.model import Model
from nnrt.types import OperandType
from nnrt.types import OperationType as Op

__all__: list[str] = []

_BOOL = np.dtype(bool)
_RUN_TIME_HINT = "The condition is known only at run time"
_I64 = np.dtype(np.int64)


def _body(ctx: NodeCtx, graph: Graph, what: str, inputs: list[tuple[str, Value]]) -> tuple[Builder, Model, list[int]]:
    """Build ``graph`` as a child model; ``inputs`` are the body's own formal inputs (name, like)."""
    model = Model(name=f"{ctx.b.model.name}/{ctx.node.label}/{what}")
    child = Builder(model, ctx.b.opset, parent=ctx.b)
    formal = []
    for name, like in inputs:
        v = Value(like.dtype, like.shape, quant=like.quant)
        v.index = child.add(like.dtype, like.shape, like.quant, name)
        child.values[name] = v
        formal.append(v)
    for t in graph.initializers:
        from nnrt.importers._onnx_proto import tensor_array

        arr = tensor_array(t, "initializer")
        child.values[t.name] = Value(arr.dtype, arr.shape, const=arr)
    rejections = Rejections("onnx")
    convert_nodes(child, graph, rejections)
    taken = formal + [child.values[n] for n in child.captured]  # an output may not be one of these as it is
    outs = finish_outputs(child, [vi.name for vi in graph.outputs], rejections, taken)
    if rejections:
        raise Reject(f"{what}: " + "; ".join(str(r) for r in rejections.items))
    return child, model, outs


def inputs_behind(b: Builder, name: str) -> list[str]:
    """The model inputs the tensor ``name`` is computed from (through this graph and the ones enclosing it)."""
    found: list[str] = []
    todo: list[tuple[Builder, str]] = [(b, name)]
    seen: set[tuple[int, str]] = set()
    while todo:
        g, n = todo.pop()
        if not n or (id(g), n) in seen:
            continue
        seen.add((id(g), n))
        node = g.producers.get(n)
        if node is not None:
            todo += [(g, i) for i in node.inputs]
        elif g.parent is not None:
            todo.append((g.parent, n))
        elif (v := g.values.get(n)) is not None and v.const is None and not v.missing and n not in found:
            found.append(n)
    return sorted(found)


def _ref(ctx: NodeCtx, model: Model) -> int:
    idx = ctx.b.model.add_operand(OperandType.SUBGRAPH)
    ctx.b.model.set_operand_value_from_model(idx, model)
    return idx


def _out_values(child: Builder, outs: list[int]) -> list[Value]:
    vals = []
    for i in outs:
        op = child.model.operands[i]
        dtype = np.dtype(np.int64) if op.type is OperandType.TENSOR_INT32 else op.type.dtype
        vals.append(Value(dtype, op.dimensions if op.dimensions else None,
                          quant=(op.scale, op.zero_point) if op.type.is_quantized else None))
    return vals


@mapper("If")
def _if(ctx: NodeCtx) -> None:
    cond = ctx.inp(0)
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    if not isinstance(then_g, Graph) or not isinstance(else_g, Graph):
        raise Reject("then_branch and else_branch must be graphs")
    if cond.const is not None:  # decided at import: inline the branch taken
        graph = then_g if bool(cond.const.reshape(-1)[0]) else else_g
        for t in graph.initializers:
            from nnrt.importers._onnx_proto import tensor_array

            arr = tensor_array(t, "initializer")
            ctx.b.values[t.name] = Value(arr.dtype, arr.shape, const=arr)
        rejections = Rejections("onnx")
        convert_nodes(ctx.b, graph, rejections)
        if rejections:
            raise Reject("; ".join(str(r) for r in rejections.items))
        for k, vi in enumerate(graph.outputs):
            ctx.set(k, ctx.b.values[vi.name])
        return
    try:
        branches = [_body(ctx, g, what, []) for g, what in ((then_g, "then_branch"), (else_g, "else_branch"))]
    except Reject as r:
        if _RUN_TIME_HINT in str(r):  # a nested If said it already
            raise
        behind = inputs_behind(ctx.b, ctx.node.inputs[0])
        fix = f"input_values={{{', '.join(repr(n) + ': ...' for n in behind)}}}" if behind else "input_values"
        raise Reject(f"{r}. {_RUN_TIME_HINT}, so NNAPI's IF needs both branches expressible with the shapes "
                     f"fixed at load; fixing the inputs it depends on at load ({fix}) picks the branch "
                     "instead") from None
    # Both branches take the union of the outer tensors either reads, in one order.
    names: list[str] = []
    for child, _m, _o in branches:
        names += [n for n in child.captured if n not in names]
    for child, model, outs in branches:
        body_ins: list[int] = []
        for n in names:
            if n not in child.captured:
                child.lookup(n)  # adds the input the other branch needs; this one ignores it
            idx = child.values[n].index
            assert idx is not None
            body_ins.append(idx)
        model.identify_inputs_and_outputs(body_ins, outs)
        model.finish()
    t_vals, e_vals = (_out_values(c, o) for c, _m, o in branches)
    if [v.dtype for v in t_vals] != [v.dtype for v in e_vals]:
        raise Reject("the branches produce outputs of different types")
    for k, (tv, ev) in enumerate(zip(t_vals, e_vals)):
        if tv.shape is not None and ev.shape is not None and len(tv.shape) != len(ev.shape):
            raise Reject(f"output {k} has rank {len(tv.shape)} in then_branch and {len(ev.shape)} in else_branch "
                         "(NNAPI's IF needs one rank; a condition known at load would pick the branch)")
    outer = [ctx.b.logical(v) for v in (ctx.b.lookup(n) for n in names) if v is not None]
    if cond.known and cond.shape and any(d != 1 for d in cond.shape):
        raise Reject("the condition must have one element")
    specs = []
    for tv, ev in zip(t_vals, e_vals):
        same = tv.shape is not None and tv.shape == ev.shape
        shape = tv.shape if same else (tuple(0 for _ in tv.shape) if tv.shape and ev.shape and
                                       len(tv.shape) == len(ev.shape) else None)
        specs.append((tv.dtype, shape, tv.quant))
    ins: list[Arg] = [cond, _ref(ctx, branches[0][1]), _ref(ctx, branches[1][1]), *outer]
    for k, v in enumerate(ctx.b.op(Op.IF, ins, specs, list(ctx.node.outputs))):
        ctx.set(k, v)


@mapper("Loop")
def _loop(ctx: NodeCtx) -> None:
    body = ctx.attr("body")
    if not isinstance(body, Graph):
        raise Reject("body must be a graph")
    trip, cond = ctx.opt(0), ctx.opt(1)
    if trip is None and cond is None:
        raise Reject("a loop with neither a trip count nor a condition never ends")
    carried = [ctx.opt(i) for i in range(2, len(ctx.inputs))]
    if any(v is None for v in carried):
        raise Reject("omitted loop-carried values are not supported")
    n_carried = len(carried)
    if len(body.outputs) != 1 + n_carried:
        raise Reject("scan outputs (values stacked over iterations) are not supported")
    if len(body.inputs) != 2 + n_carried:
        raise Reject(f"the body takes {len(body.inputs)} inputs; expected {2 + n_carried}")
    for vi in body.inputs[2:]:
        if not vi.is_tensor or vi.elem_type not in ONNX_DTYPES:
            raise Reject(f"loop-carried value {vi.name!r} is not a tensor nnrt can hold")
    one = (1,)
    it_like, cond_like = Value(_I64, one), Value(_BOOL, one)
    state = [(body.inputs[0].name, it_like), (body.inputs[1].name, cond_like)]
    state += [(vi.name, v) for vi, v in zip(body.inputs[2:], carried) if v is not None]
    trip_name = "__nnrt_trip_count"
    child, body_model, outs = _body(ctx, body, "body", state)
    # The body's outputs: iteration + 1, its condition, its carried values.
    it_in = child.values[body.inputs[0].name]
    one_c = Value(np.dtype(np.int32), one, const=np.ones(1, np.int32))
    it_next = child.op1(Op.ADD, [it_in, one_c, child.i32(0)], _I64, one)
    assert it_next.index is not None
    body_outs = [it_next.index, *outs]
    # Input-only values: the trip count (if any), then what the body captured.
    trip_v = Value(_I64, one)
    trip_v.index = child.add(_I64, one, None, trip_name)
    captured = list(child.captured)
    body_ins = [child.values[n].index for n, _v in state] + [trip_v.index] + [child.values[n].index for n in captured]
    body_model.identify_inputs_and_outputs([i for i in body_ins if i is not None], body_outs)
    body_model.finish()
    cond_model = _condition_model(ctx, state, captured, child, trip is not None, cond is not None)
    b = ctx.b
    it0 = Value(np.dtype(np.int32), one, const=np.zeros(1, np.int32))
    # Rank-0 condition and trip count pass as they are: NNAPI wants one element, not a shape.
    c0 = cond if cond is not None else Value(_BOOL, one, const=np.ones(1, bool))
    m0 = trip if trip is not None else Value(np.dtype(np.int32), one, const=np.zeros(1, np.int32))
    outer_captured = [b.logical(v) for v in (b.lookup(n) for n in captured) if v is not None]
    loop_ins: list[Arg] = [_ref(ctx, cond_model), _ref(ctx, body_model), it0, c0, *carried, m0, *outer_captured]
    specs = [(_I64, one), (_BOOL, one)] + [(v.dtype, v.shape, v.quant) for v in _out_values(child, outs[1:])]
    names = ["", "", *ctx.node.outputs]
    results = b.op(Op.WHILE, loop_ins, specs, names)
    for k in range(n_carried):
        ctx.set(k, results[2 + k])


def _condition_model(ctx: NodeCtx, state: list[tuple[str, Value]], captured: list[str], child: Builder,
                     has_trip: bool, has_cond: bool) -> Model:
    """cond(iteration, condition, carried..., trip count, captured...) = condition and iteration < M."""
    model = Model(name=f"{ctx.b.model.name}/{ctx.node.label}/condition")
    cb = Builder(model, ctx.b.opset)
    ins = []
    for name, like in state:
        v = Value(like.dtype, like.shape, quant=like.quant)
        v.index = cb.add(like.dtype, like.shape, like.quant, name)
        ins.append(v)
    trip = Value(_I64, (1,))
    trip.index = cb.add(_I64, (1,), None, "trip_count")
    extra = []
    for n in captured:
        like = child.values[n]
        v = Value(like.dtype, like.shape, quant=like.quant)
        v.index = cb.add(like.dtype, like.shape, like.quant, n)
        extra.append(v)
    it, cond = ins[0], ins[1]
    below = cb.op1(Op.LESS, [it, trip], _BOOL, (1,)) if has_trip else None
    if below is not None and has_cond:
        out = cb.op1(Op.LOGICAL_AND, [cond, below], _BOOL, (1,))
    elif below is not None:
        out = below
    else:
        out = cb.op1(Op.LOGICAL_AND, [cond, cond], _BOOL, (1,))
    model.identify_inputs_and_outputs([v.index for v in [*ins, trip, *extra] if v.index is not None],
                                      [out.index] if out.index is not None else [])
    model.finish()
    return model
