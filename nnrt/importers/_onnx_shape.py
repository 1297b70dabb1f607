"""ONNX shape and data-movement ops → NNAPI: reshaping, slicing, gathering, padding, resizing.

Reshape/Flatten/Unsqueeze → RESHAPE (target known at import: constants, folded or computed
from known dims; at most one unknown dim becomes -1), Squeeze → SQUEEZE, Transpose →
TRANSPOSE, Concat → CONCATENATION, Split → SPLIT (equal parts) or one SLICE per part, Slice →
STRIDED_SLICE (bounds clamped as ONNX does; needs the sliced dims known unless the bounds are
plain non-negative ones), Gather → GATHER (+ SQUEEZE-by-RESHAPE for scalar indices), Pad →
PAD_V2 (constant) or MIRROR_PAD (reflect; edge is refused), Tile → TILE, Expand → broadcast
by ADD of zeros, ConstantOfShape of a run-time shape → FILL, DepthToSpace (DCR) /
SpaceToDepth with NNAPI's NCHW flag, Identity/Dropout → pass-through.

Resize → RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR on NCHW 4-D tensors resizing H and W only,
with the coordinate modes NNAPI reproduces exactly: linear with align_corners, half_pixel,
pytorch_half_pixel (output > 1) or asymmetric; nearest with asymmetric+floor,
align_corners+round_prefer_ceil, half_pixel/tf_half_pixel_for_nn with the rounding that
equals floor((x+0.5)/s) (always for round_prefer_ceil and tf+floor; for round_prefer_floor
when upscaling by an integer factor). A ``scales`` input must equal out/in exactly, since
ONNX maps coordinates with the given scale and NNAPI with the size ratio. Cubic, antialias,
tf_crop_and_resize and the rest are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from nnrt.importers._onnx import Arg, NodeCtx, Reject, Value, mapper
from nnrt.importers._onnx_elem import broadcast_to, bshape, normalize_axes
from nnrt.importers._onnx_proto import Node
from nnrt.types import OperationType as Op

__all__ = ["reshape_to"]

_I32_MAX = 2**31 - 1


def reshape_to(ctx: NodeCtx, x: Value, target: list[int], out: int | None = 0) -> Value:
    """RESHAPE ``x`` to ``target`` (dims > 0 known, 0 unknown: at most one unknown)."""
    if target.count(0) > 1:
        raise Reject(f"target shape {target} has more than one dimension unknown at load (input_shapes can fix them)")
    spec = [d if d > 0 else -1 for d in target]
    ins: list[Arg] = [x, ctx.b.ints(spec)]
    shape = tuple(target)
    if out is None:
        return ctx.b.op1(Op.RESHAPE, ins, x.dtype, shape, x.quant)
    return ctx.emit(Op.RESHAPE, ins, x.dtype, shape, x.quant, i=out)


def _resolve(x: Value, spec: list[int], allowzero: bool) -> list[int]:
    """An ONNX Reshape target with 0 (copy) and -1 (infer) resolved as far as dims are known."""
    shape = x.shape
    out = []
    for k, d in enumerate(spec):
        if d == 0 and not allowzero:
            if shape is None or k >= len(shape):
                raise Reject("reshape target copies a dimension of unknown rank")
            out.append(shape[k])
        elif d < -1:
            raise Reject(f"reshape target {spec} has a negative dimension")
        else:
            out.append(d)
    if -1 in out:
        if out.count(-1) > 1:
            raise Reject(f"reshape target {spec} has more than one -1")
        if x.known and all(d > 0 for d in out if d != -1):
            total = math.prod(x.shape or ())
            rest = math.prod(d for d in out if d != -1)
            if rest == 0 or total % rest:
                raise Reject(f"cannot reshape {list(x.shape or ())} to {spec}")
            out[out.index(-1)] = total // rest
        else:
            out[out.index(-1)] = 0
    if x.known and all(d > 0 for d in out) and math.prod(out) != math.prod(x.shape or ()):
        raise Reject(f"cannot reshape {list(x.shape or ())} to {spec}")
    if any(d == 0 for d in out) and allowzero and 0 in spec:
        raise Reject("allowzero=1 with a zero-sized dimension is not supported")
    return out


@mapper("Reshape")
def _reshape(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    spec = ctx.const(1, "shape")
    assert spec is not None
    target = _resolve(x, [int(d) for d in spec.reshape(-1)], bool(ctx.i("allowzero", 0)))
    if not target:
        raise Reject("reshaping to a scalar is not supported (nnrt tensors have rank >= 1)")
    reshape_to(ctx, x, target)


@mapper("Flatten")
def _flatten(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    r = x.need_rank("Flatten")
    axis = ctx.i("axis", 1)
    axis = axis + r if axis < 0 else axis
    assert x.shape is not None
    head, tail = x.shape[:axis], x.shape[axis:]
    target = [math.prod(head) if all(head) else 0, math.prod(tail) if all(tail) else 0]
    reshape_to(ctx, x, target)


def _axes_input(ctx: NodeCtx, since: int) -> list[int] | None:
    if ctx.opset >= since:
        c = ctx.const(1, "axes")
        return None if c is None else [int(v) for v in c.reshape(-1)]
    return ctx.ints("axes")


@mapper("Squeeze")
def _squeeze(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    r = x.need_rank("Squeeze")
    axes = _axes_input(ctx, 13)
    assert x.shape is not None
    if axes is None:
        if not x.known:
            raise Reject("Squeeze without axes needs a known input shape")
        axes = [k for k, d in enumerate(x.shape) if d == 1]
    axes = normalize_axes(axes, r)
    shape = tuple(d for k, d in enumerate(x.shape) if k not in axes)
    if not shape:
        raise Reject("squeezing to a scalar is not supported (nnrt tensors have rank >= 1)")
    if shape.count(0) <= 1:
        reshape_to(ctx, x, list(shape))
    elif r > 4:
        raise Reject(f"rank {r} with more than one unknown dim is not supported (SQUEEZE takes rank <= 4)")
    else:
        ctx.emit(Op.SQUEEZE, [x, ctx.b.ints(axes)], x.dtype, shape, x.quant)


@mapper("Unsqueeze")
def _unsqueeze(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    r = x.need_rank("Unsqueeze")
    axes = _axes_input(ctx, 13)
    if not axes:
        raise Reject("axes are required")
    axes = sorted(normalize_axes(axes, r + len(axes)))
    shape = list(x.shape or ())
    for ax in axes:
        shape.insert(ax, 1)
    if shape.count(0) <= 1:
        reshape_to(ctx, x, shape)
        return
    y = x
    for k, ax in enumerate(axes):
        cur = list(y.shape or ())
        cur.insert(ax, 1)
        y = ctx.b.op1(Op.EXPAND_DIMS, [y, ctx.b.i32(ax)], x.dtype, tuple(cur), x.quant) if k < len(axes) - 1 else \
            ctx.emit(Op.EXPAND_DIMS, [y, ctx.b.i32(ax)], x.dtype, tuple(cur), x.quant)


@mapper("Transpose")
def _transpose(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    r = x.need_rank("Transpose")
    perm = ctx.ints("perm") or list(range(r - 1, -1, -1))
    if sorted(perm) != list(range(r)):
        raise Reject(f"perm {perm} is not a permutation of {r} axes")
    assert x.shape is not None
    out_shape = tuple(x.shape[p] for p in perm)
    if r <= 4:
        ctx.emit(Op.TRANSPOSE, [x, ctx.b.ints(perm)], x.dtype, out_shape, x.quant)
        return
    if not x.known:
        raise Reject(f"a rank-{r} transpose needs known dims (NNAPI TRANSPOSE takes rank <= 4; input_shapes can fix them)")
    in_shape, small_perm = _fewer_axes(x.shape, perm)
    if len(small_perm) > 4:
        raise Reject(f"rank-{r} transpose {perm} of {list(x.shape)} does not reduce to rank <= 4")
    y = reshape_to(ctx, x, in_shape, out=None)
    t_shape = tuple(in_shape[p] for p in small_perm)
    y = ctx.b.op1(Op.TRANSPOSE, [y, ctx.b.ints(small_perm)], x.dtype, t_shape, x.quant)
    reshape_to(ctx, y, list(out_shape))


def _fewer_axes(shape: tuple[int, ...], perm: list[int]) -> tuple[list[int], list[int]]:
    """The same transpose on fewer axes: size-1 axes dropped, axes that stay neighbours merged."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    rel = {a: i for i, a in enumerate(keep)}
    order = [rel[p] for p in perm if shape[p] != 1]
    dims = [shape[a] for a in keep]
    groups: list[list[int]] = []  # runs of input axes, in output order
    for p in order:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    in_shape = [math.prod(dims[a] for a in groups[g]) for g in by_input] or [1]
    return in_shape, [by_input.index(g) for g in range(len(groups))] or [0]


@mapper("Concat")
def _concat(ctx: NodeCtx) -> None:
    xs = ctx.all_inputs()
    r = xs[0].need_rank("Concat")
    if r > 4:
        raise Reject(f"rank {r} is not supported (NNAPI CONCATENATION takes rank <= 4)")
    axis = normalize_axes([ctx.i("axis", 0)], r)[0]
    shape = list(xs[0].shape or ())
    total = 0
    for k, v in enumerate(xs):
        if v.dtype != xs[0].dtype or v.rank != r:
            raise Reject(f"input {k} differs in type or rank from input 0")
        d = (v.shape or ())[axis]
        total = total + d if total >= 0 and d > 0 else -1
    shape[axis] = max(total, 0)
    if len(xs) == 1:
        ctx.set(0, xs[0])
        return
    ctx.emit(Op.CONCATENATION, [*xs, ctx.b.i32(axis)], xs[0].dtype, tuple(shape), xs[0].quant)


@mapper("Split")
def _split(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    r = x.need_rank("Split")
    axis = normalize_axes([ctx.i("axis", 0)], r)[0]
    n = len(ctx.node.outputs)
    if ctx.opset >= 13:
        c = ctx.const(1, "split")
        sizes = None if c is None else [int(v) for v in c.reshape(-1)]
    else:
        sizes = ctx.ints("split")
    assert x.shape is not None
    dim = x.shape[axis]
    if sizes is None and dim and dim % n:
        if not ctx.has("num_outputs"):
            raise Reject(f"dimension {dim} does not split evenly into {n}")
        part = -(-dim // n)
        sizes = [part] * (n - 1) + [dim - part * (n - 1)]
    if sizes is None or (len(set(sizes)) == 1 and (not dim or sum(sizes) == dim)):
        part = dim // n if dim else 0
        shape = tuple(part if k == axis else d for k, d in enumerate(x.shape))
        outs = ctx.b.op(Op.SPLIT, [x, ctx.b.i32(axis), ctx.b.i32(n)], [(x.dtype, shape, x.quant)] * n,
                        list(ctx.node.outputs))
        for k, v in enumerate(outs):
            ctx.set(k, v)
        return
    if len(sizes) != n or any(s < 0 for s in sizes) or (dim and sum(sizes) != dim):
        raise Reject(f"split sizes {sizes} do not match {n} outputs of dimension {dim}")
    start = 0
    for k, s in enumerate(sizes):
        begin = [0] * r
        begin[axis] = start
        size = [-1] * r
        size[axis] = s
        shape = tuple(s if j == axis else d for j, d in enumerate(x.shape))
        ctx.emit(Op.SLICE, [x, ctx.b.ints(begin), ctx.b.ints(size)], x.dtype, shape, x.quant, i=k)
        start += s


@mapper("Slice")
def _slice(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    r = x.need_rank("Slice")
    starts, ends = ctx.const(1, "starts"), ctx.const(2, "ends")
    assert starts is not None and ends is not None
    axes_c, steps_c = ctx.const(3, "axes"), ctx.const(4, "steps")
    axes = normalize_axes([int(a) for a in axes_c.reshape(-1)] if axes_c is not None else list(range(starts.size)), r)
    steps = [int(s) for s in steps_c.reshape(-1)] if steps_c is not None else [1] * starts.size
    assert x.shape is not None
    if r > 4:
        _slice_high_rank(ctx, x, starts, ends, axes, steps)
        return
    if x.known and all(x.shape):
        ranges = _ranges(x.shape, starts, ends, axes, steps)
        then = _then_slice(ctx, ranges)
        if then is not None:  # a Slice of this Slice: one STRIDED_SLICE for both
            node, ranges = then
            ctx.b.absorbed.add(id(node))
            out = _strided_from_ranges(ctx, x, ranges, node.outputs[0])
            ctx.b.values[node.outputs[0]] = out
            ctx.set(0, Value(x.dtype, out.shape, missing=True))  # never read: its only reader was merged
            return
    begin, end, stride = [0] * r, [0] * r, [1] * r
    begin_mask = end_mask = 0
    for k in range(r):
        if k not in axes:
            begin_mask |= 1 << k
            end_mask |= 1 << k
    shape = list(x.shape)
    for s, e, ax, st in zip(starts.reshape(-1), ends.reshape(-1), axes, steps):
        if st == 0:
            raise Reject("a step of 0 is invalid")
        dim = x.shape[ax]
        if dim > 0:
            b0, e0, _ = slice(int(s), int(e), st).indices(dim)
            n = len(range(b0, e0, st))
            shape[ax] = n
            begin[ax], stride[ax] = b0, st
            if e0 < 0:  # runs to the front (negative step past index 0)
                end_mask |= 1 << ax
            else:
                end[ax] = e0
            if n == 0:
                raise Reject("an empty slice is not supported (nnrt tensors have no zero-sized dims)")
        elif int(s) >= 0 and st > 0 and (int(e) >= 0 or int(e) <= -(2**31)):
            shape[ax] = 0
            begin[ax], stride[ax] = int(s), st
            if int(e) >= _I32_MAX:
                end_mask |= 1 << ax
            else:
                end[ax] = int(e)
        else:
            raise Reject(f"slicing axis {ax} of unknown size with negative bounds or steps needs input_shapes")
    ctx.emit(Op.STRIDED_SLICE, [x, ctx.b.ints(begin), ctx.b.ints(end), ctx.b.ints(stride), ctx.b.i32(begin_mask),
                                ctx.b.i32(end_mask), ctx.b.i32(0)], x.dtype, tuple(shape), x.quant)


def _ranges(shape: Sequence[int], starts: np.ndarray, ends: np.ndarray, axes: list[int], steps: list[int]
            ) -> list[range]:
    """The indexes a Slice keeps along each axis of a tensor of known ``shape`` (numpy's slicing)."""
    ranges = [range(d) for d in shape]
    for s, e, ax, st in zip(starts.reshape(-1), ends.reshape(-1), axes, steps):
        if st == 0:
            raise Reject("a step of 0 is invalid")
        ranges[ax] = ranges[ax][slice(int(s), int(e), st)]
    if not all(ranges):
        raise Reject("an empty slice is not supported (nnrt tensors have no zero-sized dims)")
    return ranges


def _then_slice(ctx: NodeCtx, ranges: list[range]) -> tuple[Node, list[range]] | None:
    """The Slice that alone reads this Slice's output, with constant parameters, and the indexes
    of the input both keep (YOLOv5's space-to-depth slices rows, then columns); else None."""
    name = ctx.out()
    users = ctx.b.consumers.get(name, [])
    if len(users) != 1 or users[0].op_type != "Slice" or name in ctx.b.graph_outputs or users[0].inputs[0] != name:
        return None
    node = users[0]
    params = [ctx.b.lookup(n) if n else None for n in node.inputs[1:5]] + [None] * (5 - len(node.inputs))
    if any(p is not None and p.const is None for p in params) or params[0] is None or params[1] is None:
        return None
    starts, ends = (p.const for p in params[:2] if p is not None and p.const is not None)
    axes = [int(a) for a in params[2].const.reshape(-1)] if params[2] is not None and params[2].const is not None \
        else list(range(starts.size))
    steps = [int(v) for v in params[3].const.reshape(-1)] if params[3] is not None and params[3].const is not None \
        else [1] * starts.size
    if len(axes) != starts.size or len(steps) != starts.size or ends.size != starts.size:
        return None
    try:
        inner = _ranges([len(rg) for rg in ranges], starts, ends, normalize_axes(axes, len(ranges)), steps)
    except Reject:
        return None
    return node, [range(rg[i[0]], rg[i[0]] + len(i) * rg.step * i.step, rg.step * i.step) for rg, i in zip(ranges, inner)]


def _strided_from_ranges(ctx: NodeCtx, x: Value, ranges: list[range], name: str) -> Value:
    """One STRIDED_SLICE of ``x`` keeping ``ranges`` (one per axis), its output named ``name``."""
    begin, end, stride = [rg.start for rg in ranges], [max(rg.stop, 0) for rg in ranges], [rg.step for rg in ranges]
    end_mask = sum(1 << k for k, rg in enumerate(ranges) if rg.stop < 0)  # runs to the front
    shape = tuple(len(rg) for rg in ranges)
    return ctx.b.op(Op.STRIDED_SLICE, [x, ctx.b.ints(begin), ctx.b.ints(end), ctx.b.ints(stride), ctx.b.i32(0),
                                       ctx.b.i32(end_mask), ctx.b.i32(0)], [(x.dtype, shape, x.quant)], [name])[0]


def _slice_high_rank(ctx: NodeCtx, x: Value, starts: np.ndarray, ends: np.ndarray, axes: list[int],
                     steps: list[int]) -> None:
    """A Slice of a rank > 4 tensor: neighbouring unsliced axes merged, so STRIDED_SLICE sees rank <= 4."""
    if not x.known or x.shape is None:
        raise Reject(f"slicing a rank-{x.rank} tensor needs known dims (STRIDED_SLICE takes rank <= 4)")
    bounds = {ax: slice(int(s), int(e), st) for s, e, ax, st in zip(starts.reshape(-1), ends.reshape(-1), axes, steps)}
    groups: list[list[int]] = []
    for a in range(len(x.shape)):
        if a in bounds or not groups or groups[-1][-1] in bounds:
            groups.append([a])
        else:
            groups[-1].append(a)
    if len(groups) > 4:
        raise Reject(f"slicing axes {axes} of a rank-{x.rank} tensor does not reduce to rank <= 4")
    merged = [math.prod(x.shape[a] for a in g) for g in groups]
    begin, end, stride = [], [], []
    out = list(x.shape)
    end_mask = 0
    for k, g in enumerate(groups):
        if g[0] in bounds:
            b0, e0, st = bounds[g[0]].indices(x.shape[g[0]])
            out[g[0]] = len(range(b0, e0, st))
            if out[g[0]] == 0:
                raise Reject("an empty slice is not supported (nnrt tensors have no zero-sized dims)")
            begin.append(b0)
            stride.append(st)
            end.append(max(e0, 0))
            if e0 < 0:
                end_mask |= 1 << k
        else:
            begin.append(0)
            end.append(merged[k])
            stride.append(1)
    y = reshape_to(ctx, x, merged, out=None)
    small = tuple(out[g[0]] if g[0] in bounds else merged[k] for k, g in enumerate(groups))
    y = ctx.b.op1(Op.STRIDED_SLICE, [y, ctx.b.ints(begin), ctx.b.ints(end), ctx.b.ints(stride), ctx.b.i32(0),
                                     ctx.b.i32(end_mask), ctx.b.i32(0)], x.dtype, small, x.quant)
    reshape_to(ctx, y, out)


@mapper("Gather")
def _gather(ctx: NodeCtx) -> None:
    x, idx = ctx.inp(0), ctx.inp(1)
    r = x.need_rank("Gather")
    axis = normalize_axes([ctx.i("axis", 0)], r)[0]
    assert x.shape is not None
    if idx.const is not None:
        c = idx.const.astype(np.int64)
        dim = x.shape[axis]
        if (c < 0).any():
            if not dim:
                raise Reject("negative indices into a dimension of unknown size")
            c = np.where(c < 0, c + dim, c)
        if dim and ((c < 0) | (c >= dim)).any():
            raise Reject(f"indices out of range for dimension {dim}")
        idx = Value(np.dtype(np.int32), c.shape, const=c.astype(np.int32))
    ir = idx.need_rank("Gather indices")
    if ir == 0:  # a scalar index drops the axis: gather one, then squeeze it (rank 0 stays [1] in nnrt)
        one = Value(idx.dtype, (1,), const=idx.const.reshape(1)) if idx.const is not None else idx
        rest = x.shape[:axis] + x.shape[axis + 1:]
        if r == 1:
            ctx.emit(Op.GATHER, [x, ctx.b.i32(axis), one], x.dtype, (), x.quant)
            return
        g = ctx.b.op1(Op.GATHER, [x, ctx.b.i32(axis), one], x.dtype, (*x.shape[:axis], 1, *x.shape[axis + 1:]), x.quant)
        ctx.emit(Op.SQUEEZE, [g, ctx.b.ints([axis])], x.dtype, rest, x.quant)
        return
    if idx.dtype not in (np.int32, np.int64):
        raise Reject(f"indices of type {idx.dtype} are not supported")
    if idx.const is None and x.shape[axis]:
        # ONNX counts negative indices from the end; NNAPI's GATHER refuses them: idx < 0 ? idx + dim : idx.
        known = idx.shape is not None and all(d > 0 for d in idx.shape)
        if known:
            assert idx.shape is not None
            zero = Value(np.dtype(np.int32), idx.shape, const=np.zeros(idx.shape, np.int32))
            size = Value(np.dtype(np.int32), idx.shape, const=np.full(idx.shape, x.shape[axis], np.int32))
            neg = ctx.b.op1(Op.LESS, [idx, zero], np.dtype(bool), idx.shape)
            wrapped = ctx.b.op1(Op.ADD, [idx, size, ctx.b.i32(0)], idx.dtype, idx.shape)
            idx = ctx.b.op1(Op.SELECT, [neg, wrapped, idx], idx.dtype, idx.shape)
    shape = x.shape[:axis] + tuple(idx.shape or ()) + x.shape[axis + 1:]
    ctx.emit(Op.GATHER, [x, ctx.b.i32(axis), idx], x.dtype, shape, x.quant)


@mapper("Pad")
def _pad(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    r = x.need_rank("Pad")
    pads_c = ctx.const(1, "pads")
    assert pads_c is not None
    pads = [int(p) for p in pads_c.reshape(-1)]
    axes_c = ctx.const(3, "axes")
    axes = normalize_axes([int(a) for a in axes_c.reshape(-1)], r) if axes_c is not None else list(range(r))
    if len(pads) != 2 * len(axes):
        raise Reject(f"pads {pads} do not match {len(axes)} axes")
    if any(p < 0 for p in pads):
        raise Reject("negative pads (cropping) are not supported")
    table = [[0, 0] for _ in range(r)]
    for k, ax in enumerate(axes):
        table[ax] = [pads[k], pads[k + len(axes)]]
    assert x.shape is not None
    shape = tuple(d + a + b if d else 0 for d, (a, b) in zip(x.shape, table))
    mode = ctx.s("mode", "constant")
    paddings = Value(np.dtype(np.int32), (r, 2), const=np.asarray(table, dtype=np.int32))
    if mode == "constant":
        v = ctx.const(2, "constant_value")
        value = 0.0 if v is None or v.size == 0 else float(v.reshape(-1)[0])
        if x.dtype.kind != "f":
            if value != 0:
                raise Reject("a non-zero pad value for a non-float tensor is not supported")
            ctx.emit(Op.PAD, [x, paddings], x.dtype, shape, x.quant)
            return
        ctx.emit(Op.PAD_V2, [x, paddings, ctx.b.f32(value, x)], x.dtype, shape, x.quant)
    elif mode == "reflect":
        ctx.emit(Op.MIRROR_PAD, [x, paddings, ctx.b.i32(0)], x.dtype, shape, x.quant)
    else:
        raise Reject(f"mode {mode!r} is not supported (constant and reflect are)")


@mapper("Tile")
def _tile(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    reps = ctx.const(1, "repeats")
    assert reps is not None and x.shape is not None
    shape = tuple(d * int(m) for d, m in zip(x.shape, reps.reshape(-1)))
    ctx.emit(Op.TILE, [x, ctx.b.ints(int(m) for m in reps.reshape(-1))], x.dtype, shape, x.quant)


@mapper("Expand")
def _expand(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    target = ctx.const(1, "shape")
    assert target is not None
    shape = bshape(x.shape, tuple(int(d) for d in target.reshape(-1)))
    y = broadcast_to(ctx, x, shape)
    ctx.set(0, y if y is not x else x)


@mapper("ConstantOfShape")
def _constant_of_shape(ctx: NodeCtx) -> None:
    dims = ctx.inp(0)
    attr = ctx.node.attrs.get("value")
    from nnrt.importers._onnx_proto import tensor_array

    fill = tensor_array(attr.t, "ConstantOfShape") if attr is not None and attr.t is not None else np.zeros(1, np.float32)
    n = dims.shape[0] if dims.shape else 0
    value: int = ctx.b.f32(float(fill.reshape(-1)[0])) if fill.dtype == np.float32 else \
        ctx.b.i32(int(fill.reshape(-1)[0]))
    if fill.dtype not in (np.float32, np.int32, np.int64):
        raise Reject(f"fill value of type {fill.dtype} is not supported")
    ctx.emit(Op.FILL, [dims, value], fill.dtype, (0,) * n if n else None)


@mapper("Identity", "Dropout")
def _identity(ctx: NodeCtx) -> None:
    if len(ctx.node.outputs) > 1 and ctx.node.outputs[1]:
        raise Reject("the dropout mask output is not supported")
    training = ctx.const(2, "training_mode")
    if training is not None and bool(training.reshape(-1)[0]):
        raise Reject("training_mode=true is not supported (inference only)")
    ctx.set(0, ctx.inp(0))


@mapper("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: NodeCtx) -> None:
    x = ctx.inp(0)
    if x.need_rank(ctx.node.op_type) != 4:
        raise Reject("needs a 4-D input")
    bs = ctx.i("blocksize", 0)
    assert x.shape is not None
    n, c, h, w = x.shape
    if ctx.node.op_type == "DepthToSpace":
        if ctx.s("mode", "DCR") != "DCR":
            raise Reject("mode CRD is not supported (NNAPI's DEPTH_TO_SPACE is DCR)")
        shape = (n, c // (bs * bs) if c else 0, h * bs, w * bs)
        ctx.emit(Op.DEPTH_TO_SPACE, [x, ctx.b.i32(bs), ctx.b.bool(True)], x.dtype, shape, x.quant)
    else:
        if ctx.s("mode", "DCR") != "DCR":
            raise Reject("mode CRD is not supported (NNAPI's SPACE_TO_DEPTH is DCR)")
        shape = (n, c * bs * bs, h // bs if h else 0, w // bs if w else 0)
        ctx.emit(Op.SPACE_TO_DEPTH, [x, ctx.b.i32(bs), ctx.b.bool(True)], x.dtype, shape, x.quant)


def _resize_flags(mode: str, coord: str, nearest: str, up_int: bool, out_hw: tuple[int, int]) -> tuple[bool, bool]:
    """(align_corners, half_pixel_centers) for NNAPI that reproduce ONNX's coordinates exactly."""
    if mode == "linear":
        if coord == "align_corners":
            return True, False
        if coord == "half_pixel" or (coord == "pytorch_half_pixel" and min(out_hw) > 1):
            return False, True
        if coord == "asymmetric":
            return False, False
    elif mode == "nearest":
        if coord == "asymmetric" and nearest == "floor":
            return False, False
        if coord == "align_corners" and nearest == "round_prefer_ceil":
            return True, False
        if ((coord == "half_pixel" and (nearest == "round_prefer_ceil" or (nearest == "round_prefer_floor" and up_int)))
                or (coord == "tf_half_pixel_for_nn" and nearest == "floor")):
            return False, True
    raise Reject(f"mode {mode!r} with coordinate_transformation_mode {coord!r}"
                 + (f" and nearest_mode {nearest!r}" if mode == "nearest" else "")
                 + " has no exact NNAPI equivalent")


@mapper("Resize")
def _resize(ctx: NodeCtx) -> None:
    x = ctx.raw(0)  # resized NHWC
    if x.need_rank("Resize") != 4:
        raise Reject("only 4-D (NCHW) inputs are supported")
    for attr in ("antialias", "keep_aspect_ratio_policy", "axes"):
        harmless = (attr == "antialias" and not ctx.i(attr, 0)) or (
            attr == "keep_aspect_ratio_policy" and ctx.s(attr, "stretch") == "stretch")
        if ctx.has(attr) and not harmless:
            raise Reject(f"attribute {attr} is not supported")
    assert x.shape is not None
    scales = ctx.const(2, "scales")
    sizes = ctx.const(3, "sizes")
    if sizes is not None and sizes.size:
        out = [int(v) for v in sizes.reshape(-1)]
        if len(out) != 4:
            raise Reject("sizes must have 4 values")
    elif scales is not None and scales.size == 4:
        sc = [float(v) for v in scales.reshape(-1)]
        if not all(x.shape[k] for k in (2, 3)):
            raise Reject("resizing by scales needs the input's H and W known")
        out = [x.shape[k] if sc[k] == 1 else math.floor(x.shape[k] * sc[k]) for k in range(4)]
        for k in (2, 3):
            if np.float32(out[k]) / np.float32(x.shape[k]) != np.float32(sc[k]):
                raise Reject(f"scale {sc[k]} on axis {k} is not out/in of whole sizes, so ONNX's "
                             "coordinates differ from NNAPI's")
        if sc[0] != 1 or sc[1] != 1:
            raise Reject("only H and W (axes 2, 3) may be resized")
    else:
        raise Reject("needs constant scales or sizes")
    if (x.shape[0] and out[0] != x.shape[0]) or (x.shape[1] and out[1] != x.shape[1]):
        raise Reject("only H and W (axes 2, 3) may be resized")
    mode = ctx.s("mode", "nearest")
    up_int = all(x.shape[k] and out[k] % x.shape[k] == 0 for k in (2, 3))
    align, half = _resize_flags(mode, ctx.s("coordinate_transformation_mode", "half_pixel"),
                                ctx.s("nearest_mode", "round_prefer_floor"), up_int, (out[2], out[3]))
    if x.dtype.kind != "f" and x.quant is None:
        raise Reject(f"input of type {x.dtype} is not supported")
    op = Op.RESIZE_BILINEAR if mode == "linear" else Op.RESIZE_NEAREST_NEIGHBOR
    shape = (x.shape[0], x.shape[1], out[2], out[3])
    ins: list[Arg] = [ctx.b.nhwc(x), ctx.b.i32(out[3]), ctx.b.i32(out[2]), ctx.b.bool(False), ctx.b.bool(align),
                      ctx.b.bool(half)]
    ctx.set(0, ctx.b.op_nhwc(op, ins, x.dtype, shape, x.quant, ctx.out()))
