"""Chains of elementwise float32 operations run as one step, block by block, done once by the
plan compiler (``fuse_steps`` calls ``fuse_chains``).

Exported networks spell activations as chains of small operations: PaddleOCR's hardswish is
``x * relu6(x + 3) / 6`` in ADD, RELU6, MUL, DIV; its hard-sigmoid ``min(max(x * a + b, 0), 1)``
in MUL, ADD, MAXIMUM, MINIMUM; PP-LCNetV3 adds a learnable affine ``x * s + b`` (MUL, ADD)
around each; a HARD_SWISH follows most convolutions of MobileNetV3. Each operation is one pass
over memory into a fresh array (page faults on every execution for a large activation), and
one interpreter step.

A chain is a run of links, each ADD/SUB/MUL/DIV (with its fused activation), MAXIMUM/MINIMUM,
RELU/RELU1/RELU6 or HARD_SWISH on float32, whose operands are the chain's running value, a
constant (one value, or one per channel of the last axis) or an earlier value of the chain
(``x`` in ``x * relu6(x + 3)``); every value but the last is a temporary read by the chain's
links only; the input has ``MIN_ELEMENTS`` or more (known at preparation); a chain of one link
(a HARD_SWISH after a convolution) only where it can work in place, from
``SINGLE_MIN_ELEMENTS``. The chain runs as one step over the input in blocks of ``BLOCK``
elements (whole rows of the last axis): each link is the numpy call its kernel makes, with the
same operands in the same order, into the block's slice of the result, so every value is bit
for bit the unfused plan's (tested); the earlier values a later link reads are kept per block.
The result is the input's own buffer when the input is a fresh temporary the chain alone
reads (as ``_fuse``'s in-place rules), else one new array.
Measured (CPU time, malloc tuned as ``nnrt bench`` runs) on PaddleOCR's conv -> affine ->
hardswish -> affine chain: [1,160,160,16] separate fresh arrays 1.46 ms, ``_fuse``'s in-place
rules 0.60 ms, this chain 0.50 ms; [1,80,80,48] 0.74 / 0.39 / 0.30 ms.

A decomposed hardswish inside a chain (ADD 3, RELU6, MUL by the ADD's input, DIV 6) runs as
one HARD_SWISH entry: the compiled one-pass loop of ``_jit_float`` when numba is in use (its
float32 operations are the same, in the same order), else the kernel's numpy calls. With the
compiled loops of main's depthwise and convolutions, PaddleOCR's chains had become 30-40% of
PP-OCRv4 rec. Likewise, with numba in use, a MUL by a scalar constant then an ADD of one
(PP-LCNetV3's affine) is one compiled pass ``x * s + b`` (``affine_f32``: rounded after the
product and after the sum, as numpy; tested bit for bit). Fused/unfused CPU time
(``benchmarks/fusions.py``): PP-OCRv4 det 0.80, ppocr cls 0.81, PP-OCRv4 rec 0.83, PP-OCRv3
rec 0.84 (0.91-1.01 with the numpy links only).

At run time, an input that does not fit what preparation saw (not C-contiguous, another last
axis than the per-channel constants, fewer axes than a constant) runs the links' own kernels
one after the other, as the unfused plan would. The step keeps the first link's operation type
(HARD_SWISH when it holds one) and its label names every operation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.model import Model, Operand
from nnrt.ops._common import ACT_NONE, apply_activation
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import UNARY_F32, hard_swish_f32
from nnrt.types import OperandLifeTime, OperandType, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["BLOCK", "MIN_ELEMENTS", "SINGLE_MIN_ELEMENTS", "Affines", "fuse_chains"]

Op = OperationType
Operands = Callable[[tuple[int, ...]], tuple[Operand, ...]]
NewStep = Callable[..., "Step"]

#: Elements per block: a block and its few scratch rows stay in the L2 cache (measured on the
#: [1,160,160,16] chain in the module doc: 64 Ki elements 0.50 ms, 16 Ki 0.58, one block 0.51).
BLOCK = 65536
#: Chains on tensors of known size from this many elements: on smaller ones the steps cost
#: about what the chain's own bookkeeping does (and a chain removes the interpreter's
#: checkpoints between its operations, which small plans such as ``zoo.add_chain`` measure).
MIN_ELEMENTS = 4096
#: A chain of one link (a HARD_SWISH into its convolution's buffer) from this many elements:
#: below, the kernel's own fresh array costs no more (measured with malloc tuned: [1,112,112,16]
#: kernel 0.12 ms, in place 0.14; [1,112,112,64] 0.84 vs 0.58).
SINGLE_MIN_ELEMENTS = 1 << 19

#: Links at most per chain: real chains are 2-8 links; a cap keeps the walk linear in the plan's
#: size (a 1,000-ADD chain took 40 s to prepare when every step started a walk to the end).
MAX_LINKS = 32

_BINARY: dict[OperationType, Callable[..., np.ndarray]] = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide,
    Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum,
}  # fmt: skip
_UNARY = frozenset({Op.RELU, Op.RELU1, Op.RELU6, Op.HARD_SWISH})
_F32 = np.float32

#: An operand of a link: ("t",) the running value, ("c", array) a constant, ("r", j) value j of the chain.
Arg = tuple[Any, ...]
#: (s1, b1, s2, b2): a chain ``x * s1 + b1``, hardswish, ``* s2 + b2`` (``_epilogue_form``).
Affines = tuple[np.float32, np.float32, np.float32, np.float32]


@dataclass(slots=True)
class _Link:
    step: Step
    type: OperationType
    args: tuple[Arg, ...]
    act: int = ACT_NONE


def fuse_chains(model: Model, steps: list[Step], operands: Operands, new: NewStep,
                fresh: Callable[[Step], bool]) -> tuple[list[Step], dict[int, Affines | None]]:
    """``steps`` with each chain (module doc) made one step, and by the id of each such step
    ``_epilogue_form``: the affines around the hardswish it computes, if that is all it
    computes (it may then become a convolution's epilogue, ``_fuse_epilogue``).
    ``fresh(step)``: the step's result is a fresh array of its own (``_fuse._FRESH``)."""
    ops = model.operands
    outputs = set(model.output_indexes)
    readers: dict[int, list[Step]] = {}
    for s in steps:
        for i in s.ins:
            readers.setdefault(i, []).append(s)
    reads: Counter[int] = Counter(i for s in steps for i in s.ins)
    producer = {s.outs[0]: s for s in steps if len(s.outs) == 1}
    consumed: set[int] = set()
    replaced: dict[int, Step] = {}
    forms: dict[int, Affines | None] = {}

    def temp(i: int) -> bool:
        return (i not in outputs and ops[i].lifetime is OperandLifeTime.TEMPORARY_VARIABLE
                and ops[i].type is OperandType.TENSOR_FLOAT32)

    for s in steps:
        if id(s) in consumed:
            continue
        first = _link(s, None, [], operands)
        if first is None:
            continue
        x0 = first[1]
        size = _dims_size(ops[x0].dimensions)
        if size < MIN_ELEMENTS:
            continue  # too small to pay: decided before walking the chain
        values, links = [x0], [first[0]]
        while len(links) < MAX_LINKS:
            v = links[-1].step.outs[0]
            values.append(v)  # value k of the chain is link k-1's result (value 0: its input)
            nxt = next((r for r in readers.get(v, ()) if id(r) not in consumed), None) if temp(v) else None
            found = _link(nxt, v, values, operands) if nxt is not None else None
            if found is None:
                break
            links.append(found[0])
        links = _valid_prefix(links, reads)
        inside = Counter(i for link in links for i in link.step.ins)
        p = producer.get(x0)
        in_place = p is not None and fresh(p) and temp(x0) and inside[x0] == reads[x0]
        if len(links) < 2 and not (in_place and size >= SINGLE_MIN_ELEMENTS):
            continue
        fn = _chain_fn(links, x0, in_place, operands)
        if fn is None:
            continue
        last = links[-1].step
        kind = Op.HARD_SWISH if any(link.type is Op.HARD_SWISH for link in links) else s.type
        label = " + ".join(link.step.label for link in links)
        step = new(s, label, (x0,), last.outs, fn, sum(link.step.cost_ns for link in links))
        step.type = kind
        for link in links:
            consumed.add(id(link.step))
        replaced[id(last)] = step
        forms[id(step)] = _epilogue_form(links)
    if not replaced:
        return steps, {}
    out = [replaced.get(id(s), s) for s in steps if id(s) not in consumed or id(s) in replaced]
    return out, forms


#: An affine ``x * 1 + -0.0`` that changes no value (-0.0 and NaN included): a missing one.
_IDENTITY = (np.float32(1), np.float32(-0.0))


def _epilogue_form(links: list[_Link]) -> Affines | None:
    """``(s1, b1, s2, b2)`` when the chain of ``links`` is ``x * s1 + b1``, then a hardswish,
    then ``* s2 + b2`` (scalar affines, each optional: ``_IDENTITY``; no activations; as
    PP-LCNetV3 exports it), else None (``_hard_swish_spans``, ``_affine_spans``)."""
    program = _affine_spans(_hard_swish_spans([(_BINARY.get(link.type), link.type, link.args, link.act, k + 1)
                                               for k, link in enumerate(links)]))
    kinds = [entry[1] for entry in program]
    if Op.HARD_SWISH not in kinds or any(entry[3] != ACT_NONE for entry in program):
        return None
    h = kinds.index(Op.HARD_SWISH)
    if kinds[:h] not in ([], [_AFFINE]) or kinds[h + 1:] not in ([], [_AFFINE]):
        return None
    pre, post = program[:h], program[h + 1:]
    s1, b1 = (pre[0][2][0][1], pre[0][2][1][1]) if pre else _IDENTITY
    s2, b2 = (post[0][2][0][1], post[0][2][1][1]) if post else _IDENTITY
    return np.float32(s1), np.float32(b1), np.float32(s2), np.float32(b2)


def _dims_size(dims: Sequence[int]) -> int:
    return int(np.prod(dims)) if dims and all(dims) else 0


def _link(s: Step, running: int | None, values: list[int], operands: Operands) -> tuple[_Link, int] | None:
    """``s`` as a link whose running operand is ``running`` (the chain's last value; None to
    start a chain: the one non-constant operand), with ``values`` the chain's values so far;
    and the running operand's index. None when ``s`` cannot be a link."""
    if s.fn is None or len(s.outs) != 1 or (s.type not in _BINARY and s.type not in _UNARY):
        return None
    in_ops = operands(s.ins)
    out_op = operands(s.outs)[0]
    if out_op.type is not OperandType.TENSOR_FLOAT32:
        return None
    if s.type in _UNARY:
        x = s.ins[0]
        if running is not None and x != running:
            return None
        return _Link(s, s.type, (("t",),)), x
    act = ACT_NONE
    if s.type not in (Op.MAXIMUM, Op.MINIMUM):
        if len(in_ops) != 3 or not in_ops[2].is_constant or in_ops[2].value not in (0, 1, 2, 3):
            return None
        act = int(in_ops[2].value)
    elif len(in_ops) != 2:
        return None
    if running is None:
        tensors = [i for i, op in zip(s.ins[:2], in_ops[:2], strict=True) if not op.is_constant]
        if len(tensors) != 1:
            return None
        running = tensors[0]
    if running not in s.ins[:2]:
        return None
    args: list[Arg] = []
    for i, op in zip(s.ins[:2], in_ops[:2], strict=True):
        if i == running:
            args.append(("t",))
        elif op.is_constant:
            c = _channel_constant(op, operands((running,))[0])
            if c is None:
                return None
            args.append(("c", c))
        elif i in values:
            args.append(("r", values.index(i)))
        else:
            return None
    return _Link(s, s.type, tuple(args), act), running


def _channel_constant(op: Operand, running: Operand) -> np.ndarray | None:
    """A float32 constant that broadcasts over the running value without changing its shape:
    one value, or one per channel of the last axis (other axes 1, rank at most the value's)."""
    v = op.value
    if not isinstance(v, np.ndarray) or v.dtype != _F32 or v.size == 0:
        return None
    rank = len(running.dimensions)
    if rank and v.ndim > rank:
        return None
    if v.size == 1:
        return v.reshape(())
    last = running.dimensions[-1] if rank else 0
    if v.shape[-1] != v.size or not last or v.shape[-1] != last:
        return None
    return v.reshape(-1)


def _valid_prefix(links: list[_Link], reads: Counter[int]) -> list[_Link]:
    """The longest prefix of ``links`` in which every value but the last is read only by its links."""
    best = 1
    inside: Counter[int] = Counter()
    for k, link in enumerate(links):
        inside.update(link.step.ins)
        outs = [lk.step.outs[0] for lk in links[:k]]
        if all(inside[v] == reads[v] for v in outs):
            best = k + 1
    return links[:best]


def _chain_fn(links: list[_Link], x0: int, in_place: bool, operands: Operands) -> Callable[[np.ndarray], np.ndarray] | None:
    """The step's kernel: the links over blocks, or the links' kernels on an unfitting input."""
    channels = {c.shape[0] for link in links for a in link.args if a[0] == "c" and (c := a[1]).ndim == 1}
    if len(channels) > 1:
        return None
    width = channels.pop() if channels else 0
    min_rank = max((len(operands((i,))[0].dimensions) for link in links for i, a in zip(link.step.ins, link.args)
                    if a[0] == "c"), default=0)
    # (ufunc or None, operation type, operands, fused activation, index of the value it makes)
    program = _hard_swish_spans([(_BINARY.get(link.type), link.type, link.args, link.act, k + 1)
                                 for k, link in enumerate(links)])
    affine = compiled(affine_f32, AFFINE_F32) if _available_affine(program) else None
    if affine is not None:
        program = _affine_spans(program)
    saved = sorted({a[1] for entry in program for a in entry[2] if a[0] == "r"})
    keep_input = 0 in saved
    tiled: dict[int, list[Any]] = {1: program}  # per-channel constants repeated k times, by k
    fallback = _unfused(links, x0, operands)
    hard_swish = compiled(hard_swish_f32, UNARY_F32) if any(e[1] is Op.HARD_SWISH for e in program) else None
    has_unary = any(e[1] in (Op.HARD_SWISH, _AFFINE) for e in program)

    def rows_of(x: np.ndarray) -> tuple[int, list[Any]]:
        """Row length and program: rows of k whole channel vectors, about 4 Ki values (a row of
        C values makes numpy's inner loop C long: [1,160,160,16] 0.20 ms, tiled 0.13), the
        per-channel constants tiled k times to match."""
        n = x.size // width
        k = next(k for k in (64, 32, 16, 8, 4, 2, 1) if (n % k == 0 and k * width <= 4096) or k == 1)
        prog = tiled.get(k)
        if prog is None:
            prog = tiled[k] = [(u, kind, tuple(("c", np.tile(a[1], k)) if a[0] == "c" and a[1].ndim == 1 else a
                                               for a in args), act, v) for u, kind, args, act, v in program]
        return k * width, prog

    def run(x: np.ndarray) -> np.ndarray:
        if (x.dtype != _F32 or x.ndim < max(min_rank, 1) or x.size == 0 or not x.flags.c_contiguous
                or (width and x.shape[-1] != width) or (in_place and not x.flags.writeable)):
            return fallback(x)
        # In place, a later link reading the input needs a copy of each block; within one block
        # a new array costs less than that copy ([1,24,96,8] 15.2 vs 16.5 us), beyond it more.
        here = in_place and not (keep_input and x.size <= BLOCK)
        out = x if here else np.empty_like(x)
        # Blocks of whole rows of channels when a constant is per channel, else of the flat array.
        xs_all: np.ndarray
        ws_all: np.ndarray
        if width:
            cols, prog = rows_of(x)
            xs_all, ws_all, rows = x.reshape(-1, cols), out.reshape(-1, cols), max(1, BLOCK // cols)
        else:
            prog, xs_all, ws_all, rows = program, x.reshape(-1), out.reshape(-1), BLOCK
        shape = (min(rows, xs_all.shape[0]), *xs_all.shape[1:])
        scratch = {j: np.empty(shape, _F32) for j in saved if j or here}
        spare = np.empty(shape, _F32) if has_unary else None
        for r0 in range(0, xs_all.shape[0], rows):
            xs, w = xs_all[r0:r0 + rows], ws_all[r0:r0 + rows]
            m = xs.shape[0]
            regs: dict[int, np.ndarray] = {}
            if keep_input:
                regs[0] = xs
                if here:  # the first link overwrites the input: keep it for later links
                    regs[0] = scratch[0][:m]
                    np.copyto(regs[0], xs)
            t, sp = xs, (spare[:m] if spare is not None else w)
            for ufunc, kind, args, act, v in prog:
                if ufunc is not None:
                    a, b = (t if s[0] == "t" else s[1] if s[0] == "c" else regs[s[1]] for s in args)
                    ufunc(a, b, out=w)
                    if act != ACT_NONE:
                        apply_activation(w, act)
                    t = w
                elif kind is _AFFINE and affine is not None:
                    dst = w if t is sp else sp  # never onto its own input (as below)
                    affine(t.reshape(-1), dst.reshape(-1), args[0][1], args[1][1])
                    if act != ACT_NONE:
                        apply_activation(dst, act)
                    t = dst
                elif kind is Op.HARD_SWISH and hard_swish is not None:
                    # One compiled pass, the same operations; never onto its own input (a loop
                    # over aliased arrays does not vectorize: 117 vs 16 us per 64 Ki values).
                    dst = w if t is sp else sp
                    hard_swish(t.reshape(-1), dst.reshape(-1))
                    t = dst
                else:
                    _unary(kind, t, w, sp)
                    t = w
                if v in scratch:
                    regs[v] = scratch[v][:m]
                    np.copyto(regs[v], t)
            if t is not w:
                np.copyto(w, t)
        return out

    return run


def _scalar(arg: Arg, value: float) -> bool:
    return arg[0] == "c" and arg[1].ndim == 0 and float(arg[1]) == value


def _hard_swish_spans(program: list[Any]) -> list[Any]:
    """``program`` with each decomposed hardswish, ADD 3 (with RELU6 fused or as the next link),
    MUL by the ADD's input, DIV 6, made one HARD_SWISH entry: ``x * clip(x + 3, 0, 6) / 6``,
    the same float32 operations in the same order (the MUL's operands swapped: IEEE products
    commute), so the compiled one-pass kernel of ``_jit_float`` may run it. Not where a value
    inside the span is read elsewhere."""
    out: list[Any] = []
    k = 0
    while k < len(program):
        u, _, args, act, _ = program[k]
        vin = program[k - 1][4] if k else 0
        span = 0
        if u is np.add and act in (ACT_NONE, 3) and {args[0][0], args[1][0]} == {"t", "c"} \
                and any(_scalar(a, 3.0) for a in args):
            q = k + 1
            if act == ACT_NONE and q < len(program) and program[q][1] is Op.RELU6:
                q += 1
            elif act == ACT_NONE:
                q = -1
            if 0 <= q < len(program) - 1:
                mul, div = program[q], program[q + 1]
                inner = {e[4] for e in program[k:q + 1]}
                used = [a[1] for e in program for a in e[2] if a[0] == "r"]
                if (mul[0] is np.multiply and mul[3] == ACT_NONE and sorted(a[0] for a in mul[2]) == ["r", "t"]
                        and ("r", vin) in mul[2] and div[0] is np.divide and div[3] == ACT_NONE
                        and div[2][0] == ("t",) and _scalar(div[2][1], 6.0) and not inner & set(used)):
                    span = q + 2 - k
        if span:
            out.append((None, Op.HARD_SWISH, (("t",),), ACT_NONE, program[k + span - 1][4]))
            k += span
        else:
            out.append(program[k])
            k += 1
    return out


#: A program entry computing ``x * s + b`` (scalars s, b: a MUL then an ADD of constants).
_AFFINE = "affine"
#: The signature ``affine_f32`` is compiled for.
AFFINE_F32 = "void(Array(float32, 1, 'C', readonly=True), float32[::1], float32, float32)"


def affine_f32(x: np.ndarray, out: np.ndarray, s: np.float32, b: np.float32) -> None:
    """``out = x * s + b`` over flat float32 arrays: a float32 product rounded, then a float32
    sum rounded, as numpy's MUL then ADD (numba contracts nothing into a fused multiply-add
    without fastmath: tested bit for bit against the two numpy calls)."""
    for i in range(x.shape[0]):
        out[i] = x[i] * s + b


def _available_affine(program: list[Any]) -> bool:
    return any(e[0] is np.multiply for e in program)


def _scalar_other(args: tuple[Arg, ...]) -> np.float32 | None:
    """The scalar constant of a (running value, scalar constant) operand pair, else None."""
    kinds = sorted(a[0] for a in args)
    if kinds != ["c", "t"]:
        return None
    c = next(a[1] for a in args if a[0] == "c")
    return np.float32(c) if c.ndim == 0 else None


def _affine_spans(program: list[Any]) -> list[Any]:
    """``program`` with each MUL by a scalar constant (no activation) followed by an ADD of a
    scalar constant made one entry ``x * s + b`` (PP-LCNetV3's learnable affine), unless the
    product is read elsewhere. Products and sums of two operands commute exactly in IEEE."""
    used = {a[1] for e in program for a in e[2] if a[0] == "r"}
    out: list[Any] = []
    k = 0
    while k < len(program):
        mul = program[k]
        add = program[k + 1] if k + 1 < len(program) else None
        if (add is not None and mul[0] is np.multiply and mul[3] == ACT_NONE and add[0] is np.add
                and mul[4] not in used and (s := _scalar_other(mul[2])) is not None
                and (b := _scalar_other(add[2])) is not None):
            out.append((None, _AFFINE, (("c", s), ("c", b)), add[3], add[4]))
            k += 2
        else:
            out.append(mul)
            k += 1
    return out


def _unary(kind: OperationType, t: np.ndarray, w: np.ndarray, spare: np.ndarray) -> None:
    """RELU/RELU1/RELU6/HARD_SWISH of ``t`` into ``w``: the kernels' own numpy calls
    (``nnrt.ops.activations``)."""
    if kind is Op.RELU:
        np.maximum(t, _F32(0), out=w)
    elif kind is Op.RELU1:
        np.clip(t, _F32(-1), _F32(1), out=w)
    elif kind is Op.RELU6:
        np.clip(t, _F32(0), _F32(6), out=w)
    else:  # x * clip(x + 3, 0, 6) / 6
        np.add(t, _F32(3), out=spare)
        np.clip(spare, _F32(0), _F32(6), out=spare)
        np.multiply(spare, t, out=w)
        np.divide(w, _F32(6), out=w)


def _unfused(links: list[_Link], x0: int, operands: Operands) -> Callable[[np.ndarray], np.ndarray]:
    """The links' own kernels one after the other (what the unfused plan runs)."""
    plan = []
    for link in links:
        assert link.step.fn is not None
        ins = link.step.ins
        consts = {i: op.value for i, op in zip(ins, operands(ins), strict=True) if op.is_constant}
        plan.append((link.step.fn, ins, consts, link.step.outs[0]))

    def run(x: np.ndarray) -> np.ndarray:
        env: dict[int, Any] = {x0: x}
        result: Any = x
        for fn, ins, consts, out in plan:
            result = env[out] = fn(*(consts[i] if i in consts else env[i] for i in ins))
        return result  # type: ignore[no-any-return]

    return run
