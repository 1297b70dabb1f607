"""Preparation-time fusions of a plan's kernel steps: exact rewrites that save passes over memory
and fresh allocations, done once by the plan compiler (``compile_plan`` calls ``fuse_steps``).

Each rewrite computes exactly what the unfused steps compute (the same numpy operations in the
same order, only into an existing buffer), and applies only where the tensor it removes or
overwrites is a temporary of this plan with a single reader, is not a model output, and was made
by a kernel known to return a fresh array of its own (``_FRESH``): such an array is referenced by
nothing else, so writing into it is invisible.

* SiLU: ``LOGISTIC(x) -> s; MUL(x, s)`` (either order, constant activation) becomes one step
  computing ``x * sigmoid(x)`` in one array (``nnrt.ops._epilogue.silu``): with numba one pass
  of the LOGISTIC kernel's compiled ``logistic_f32`` with MUL's product, without it numpy's
  operations, five passes instead of six, two allocations fewer; on large
  tensors in cache-sized blocks, into ``x`` when only these two read it. When ``x`` has other
  readers the step's result is fresh, and it can write it into a CONCATENATION's slice instead
  (its ``into``, ``nnrt.execution._concat_in_place``).
* Activation folding: ``RELU``/``RELU1``/``RELU6`` after a fresh producer clips the producer's
  result in place (no new array; the step disappears).
* In-place binary arithmetic: ``ADD``/``SUB``/``MUL``/``DIV`` on float32 whose operand is a
  fresh single-reader temporary of the other operand's shape writes into that operand (on
  outputs of 4096 elements or more: below that an allocation is cheaper than the checks).

First, ``fold_pads`` (``_fuse_pad``) merges a zero PAD into the convolution reading it,
``fuse_global_pools`` (``_fuse_pool``) has the global average pool reading a 1x1 convolution
compute both (the convolution's step hands its input on), and
``fuse_chains`` (``_fuse_chain``) runs chains of elementwise float32 operations (decomposed
hardswish / hard-sigmoid, affine, HARD_SWISH after a convolution) as one blocked step; the
rewrites below apply to what remains; then ``view_steps`` (``_views``) makes RESHAPE, SQUEEZE
and EXPAND_DIMS with constant parameters views of their input (no copy, checks once per shape).

Last, ``fold_epilogues`` (``_fuse_epilogue``) makes a HARD_SWISH (or a chain computing one) or
a residual ADD that is a CONV_2D's only reader part of the convolution's compiled bias pass.

Fused steps keep the consumer's operation type and output; their label names both operations.
Only float32 tensors are rewritten: other types keep their kernels' own conversions.

Before those, ``ConstantFolder`` runs, while the plan is compiled, every operation whose inputs
are all constants (DENSIFY and DEQUANTIZE of stored weights, shape arithmetic...) and makes its
outputs constants of the plan: later operations are then prepared with constant inputs (so
their kernels re-lay them once: convolution matrices, PRELU slopes) and executions skip them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.execution._fuse_chain import BLOCK, fuse_chains
from nnrt.execution._fuse_epilogue import fold_epilogues
from nnrt.execution._fuse_pad import fold_pads
from nnrt.execution._fuse_pool import fuse_global_pools
from nnrt.execution._views import view_steps
from nnrt.model import Model, Operand, dims_product
from nnrt.ops._common import ACT_NONE, apply_activation
from nnrt.ops._epilogue import silu
from nnrt.ops._into import row_span, rows, set_into, write
from nnrt.ops._jit_logistic import compiled_logistic
from nnrt.types import OperandLifeTime, OperandType, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["ConstantFolder", "fuse_steps"]

Op = OperationType

#: Kernels whose float32 result is always a fresh array owned by the step (never a view of an
#: input, a constant or a cached array).
_FRESH = frozenset({
    Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D, Op.TRANSPOSE_CONV_2D, Op.FULLY_CONNECTED,
    Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.LOGISTIC, Op.TANH, Op.HARD_SWISH,
    Op.PRELU, Op.PAD, Op.PAD_V2,
})  # fmt: skip
_ACTIVATIONS = {Op.RELU: 1, Op.RELU1: 2, Op.RELU6: 3}
#: Output elements from which binary arithmetic writes into its temporary (known dimensions only).
_IN_PLACE_MIN_ELEMENTS = 4096
#: Elements from which SiLU runs in blocks (``_silu``).
_SILU_BLOCKED_MIN = 1 << 18
_UFUNCS: dict[OperationType, Callable[..., np.ndarray]] = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide,
}  # fmt: skip


Fetcher = Callable[[tuple[int, ...]], Callable[[list[Any]], tuple[Any, ...]]]


#: Operations never folded: their results differ from run to run.
_NOT_FOLDED = frozenset({Op.RANDOM_MULTINOMIAL})


class ConstantFolder:
    """Runs kernel steps whose inputs are all constants at compile time (``fold``) and stands in
    constant operands for their outputs (``operands``), the values going into the plan's template.

    Not folded: steps with an output that is a model output (callers get fresh arrays) or not a
    temporary, and steps whose kernel fails on the constants (the execution reports it as before).
    """

    def __init__(self, model: Model, template: list[Any]) -> None:
        self._ops = model.operands
        self._outputs = set(model.output_indexes)
        self._template = template
        self._folded: dict[int, Operand] = {}

    def operands(self, indexes: tuple[int, ...]) -> tuple[Operand, ...]:
        """The operands at ``indexes``, folded ones as constants."""
        return tuple(self._folded.get(i) or self._ops[i] for i in indexes)

    def fold(self, step: Step, in_ops: tuple[Operand, ...]) -> bool:
        """Run ``step`` now if its inputs are constants; True when its outputs became constants."""
        if step.fn is None or step.type in _NOT_FOLDED or not step.outs:
            return False
        if not all(op.is_constant or op.lifetime is OperandLifeTime.NO_VALUE for op in in_ops):
            return False
        if any(i in self._outputs or self._ops[i].lifetime is not OperandLifeTime.TEMPORARY_VARIABLE for i in step.outs):
            return False
        args = [op.value if op.is_constant else None for op in in_ops]
        try:
            with np.errstate(all="ignore"):
                result = step.fn(*args)
        except Exception:
            return False
        values = (result,) if len(step.outs) == 1 else tuple(result)
        for i, value in zip(step.outs, values, strict=True):
            value = np.asarray(value)
            value.flags.writeable = False  # shared by every execution
            self._template[i] = value
            self._folded[i] = dataclasses.replace(self._ops[i], lifetime=OperandLifeTime.CONSTANT_COPY, value=value,
                                                  dimensions=tuple(value.shape))
        return True


def fuse_steps(model: Model, steps: list[Step], fetcher: Fetcher,
               operands: Callable[[tuple[int, ...]], tuple[Operand, ...]]) -> list[Step]:
    """``steps`` with the exact fusions above applied (a new list; fused steps are new objects,
    their argument getters made by ``fetcher``, their cost estimates the sum of the merged ones);
    ``operands`` gives operands as the steps were prepared with (``ConstantFolder.operands``)."""

    def new(base: Step, label: str, ins: tuple[int, ...], outs: tuple[int, ...], fn: Callable[..., Any],
            cost_ns: float) -> Step:
        from nnrt.execution._plan import Step  # the plan compiler imports this module

        step = Step(base.index, base.type, label, base.kind, ins, outs, fn=fn)
        step.fetch, step.out, step.cost_ns = fetcher(ins), outs[0], cost_ns
        return step

    steps = fold_pads(model, steps, operands, new)
    steps = fuse_global_pools(model, steps, operands, new)
    steps, forms = fuse_chains(model, steps, operands, new, lambda p: p.type in _FRESH)
    chains = set(forms)
    steps = view_steps(model, steps, operands, new)
    ops = model.operands
    readers: Counter[int] = Counter(i for s in steps for i in s.ins)
    outputs = set(model.output_indexes)
    producer: dict[int, Step] = {s.outs[0]: s for s in steps if len(s.outs) == 1 and s.fn is not None}

    def f32(i: int) -> bool:
        return ops[i].type is OperandType.TENSOR_FLOAT32

    def fresh_temp(i: int, reads: int = 1) -> Step | None:
        """The producing step of ``i`` when ``i`` is a fresh float32 temporary read ``reads`` times."""
        p = producer.get(i)
        ok = (p is not None and p.type in _FRESH and readers[i] == reads and i not in outputs and f32(i)
              and ops[i].lifetime is OperandLifeTime.TEMPORARY_VARIABLE)
        return p if ok else None

    def const_act(i: int) -> int | None:
        v = ops[i].value if ops[i].is_constant else None
        return v if isinstance(v, int) and v in (0, 1, 2, 3) else None

    dropped: set[int] = set()  # ids of steps merged into a later one
    replaced: dict[int, Step] = {}
    plain = {id(s) for s in steps if id(s) not in chains}  # steps computing just their operation
    acts: dict[int, tuple[int, ...]] = {}  # activations folded into a plain or chain step
    for s in steps:
        if s.fn is None or len(s.outs) != 1 or not f32(s.outs[0]) or id(s) in chains:
            continue
        if s.type in _ACTIVATIONS and (p := fresh_temp(s.ins[0])) is not None and id(p) not in dropped:
            first = replaced.get(id(p), p)
            assert first.fn is not None
            wrapped = replaced[id(p)] = new(first, f"{first.label} + {s.label}", first.ins, s.outs,
                                            _then_activation(first.fn, _ACTIVATIONS[s.type]),
                                            first.cost_ns + s.cost_ns)
            dropped.add(id(s))
            if id(first) in plain or id(first) in forms:
                if id(first) in plain:
                    plain.add(id(wrapped))
                else:
                    forms[id(wrapped)] = forms[id(first)]
                acts[id(wrapped)] = (*acts.get(id(first), ()), _ACTIVATIONS[s.type])
        elif s.type is Op.MUL and len(s.ins) == 3 and (act := const_act(s.ins[2])) is not None:
            a, b = s.ins[0], s.ins[1]
            for x, g in ((a, b), (b, a)):
                p = fresh_temp(g)
                if p is not None and p.type is Op.LOGISTIC and p.ins[0] == x and f32(x) and id(p) not in replaced:
                    own = fresh_temp(x, 2) is not None  # x read by these two alone: the result may go into it
                    replaced[id(s)] = new(s, f"{p.label} + {s.label}", (x,), s.outs, _silu(act, own),
                                          p.cost_ns + s.cost_ns)
                    dropped.add(id(p))
                    break
            else:
                _in_place_binary(s, fresh_temp, replaced, act, new, ops[s.outs[0]].dimensions)
        elif s.type in _UFUNCS and len(s.ins) == 3 and (act := const_act(s.ins[2])) is not None:
            _in_place_binary(s, fresh_temp, replaced, act, new, ops[s.outs[0]].dimensions)
        if s.type in _UFUNCS and id(s) in replaced and len(replaced[id(s)].ins) == 3:
            plain.add(id(replaced[id(s)]))  # the same operation, written in place
    if replaced or dropped:
        steps = [replaced.get(id(s), s) for s in steps if id(s) not in dropped]
    return fold_epilogues(model, steps, operands, new, forms, plain, acts)


def _in_place_binary(s: Step, fresh_temp: Callable[[int], Step | None], replaced: dict[int, Step], act: int,
                     new: Callable[..., Step], out_dims: tuple[int, ...]) -> None:
    """Let float32 ADD/SUB/MUL/DIV ``s`` write into an operand that is a fresh single-reader temporary."""
    a, b = s.ins[0], s.ins[1]
    k = 0 if fresh_temp(a) is not None and a != b else 1 if fresh_temp(b) is not None and a != b else -1
    if k < 0 or s.fn is None or dims_product(out_dims) < _IN_PLACE_MIN_ELEMENTS:
        return  # on small tensors an allocation costs less than the wrapper's checks
    ufunc, plain = _UFUNCS[s.type], s.fn

    def run_in_place(x: np.ndarray, y: np.ndarray, act_arg: Any) -> np.ndarray:
        target = y if k else x
        if act_arg != act or x.shape != y.shape or target.dtype != np.float32:
            return plain(x, y, act_arg)  # type: ignore[return-value]
        return apply_activation(ufunc(x, y, out=target), act)

    replaced[id(s)] = new(s, s.label, s.ins, s.outs, run_in_place, s.cost_ns)


def _then_activation(fn: Callable[..., Any], act: int) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        return apply_activation(fn(*args), act)

    return run


def _silu(act: int, in_place: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """x * (1 / (1 + exp(-x))), the very operations LOGISTIC then MUL perform
    (``nnrt.ops._epilogue.silu``, with the compiled logistic when the LOGISTIC kernel has it), in
    one array; from ``_SILU_BLOCKED_MIN`` elements in cache-sized blocks (``_fuse_chain.BLOCK``)
    with one block of scratch, into ``x`` itself when ``in_place`` (x is a fresh temporary read
    by the LOGISTIC and the MUL alone). Measured, CPU time, malloc tuned, on ddddocr det's first
    SiLU [1,208,208,24] with numpy's five passes: one array 1.5 ms, blocks into x 1.0 (blocks
    into a new array 1.1-1.2); on [1,52,52,128] 0.40 -> 0.34 ms; [1,26,26,256] 0.157 vs 0.170
    (hence the threshold). numpy's exp and a compiled tail: [1,52,52,96] 0.30 -> 0.21 ms; the
    compiled logistic (``_jit_logistic``): 0.73 -> 0.41 ns per value on that shape. With it, an
    ``in_place`` SiLU is one pass into ``x`` at any size (memory in cache, where a fresh array is
    not): ddddocr det's 74 SiLU steps 4.28 -> 3.81 ms, [1,208,208,24] 0.58 -> 0.43 ms."""
    logistic = compiled_logistic()

    def run(x: np.ndarray) -> np.ndarray:
        mine = in_place and x.flags.c_contiguous and x.flags.writeable and x.dtype == np.float32
        if logistic is not None and mine:  # one pass into x, at any size: its memory is in cache
            flat = x.reshape(1, -1)
            logistic(flat, flat, 0, True)
            return apply_activation(x, act)
        if x.size >= _SILU_BLOCKED_MIN and x.flags.c_contiguous and (x.flags.writeable or not in_place):
            return _silu_blocked(x, act, in_place, logistic)
        t = np.empty(x.shape, np.float32)
        silu(np.ascontiguousarray(x, dtype=np.float32), t, None, logistic)
        return apply_activation(t, act) if act != ACT_NONE else t

    def into(out: np.ndarray, x: np.ndarray) -> None:
        """The result into ``out`` (``nnrt.ops._into``): with numba the compiled logistic writes
        the rows of the wider array ``out`` is a slice of; without, per block of its rows
        through one block of scratch, then copied to the rows."""
        r = rows(out)
        if r is None or x.shape != out.shape or x.dtype != np.float32 or not r.size:
            write(out, run(x), "SiLU")
            return
        span = row_span(out) if logistic is not None else None
        if span is not None and logistic is not None:
            full, off = span
            logistic(np.ascontiguousarray(x).reshape(r.shape), full, off, True)
            apply_activation(out, act)
            return
        xr = np.ascontiguousarray(x).reshape(r.shape)
        step = max(1, BLOCK // r.shape[1])
        scratch = np.empty((min(step, r.shape[0]), r.shape[1]), np.float32)
        for s in range(0, r.shape[0], step):
            xs = xr[s:s + step]
            w = scratch[:xs.shape[0]]
            silu(xs, w, None, logistic)
            r[s:s + step] = apply_activation(w, act)

    if not in_place:  # into x itself it writes memory in cache; a slice of a fresh output is not (module doc)
        set_into(run, into)
    return run


def _silu_blocked(x: np.ndarray, act: int, in_place: bool,
                  logistic: Callable[[np.ndarray, np.ndarray, int, bool], None] | None) -> np.ndarray:
    flat = x.reshape(-1)
    out = flat if in_place else np.empty_like(flat)
    n = flat.size
    scratch = np.empty(min(BLOCK, n), np.float32)
    for s in range(0, n, BLOCK):
        xs, w = flat[s:s + BLOCK], out[s:s + BLOCK]
        silu(xs, w, scratch[:xs.size], logistic)
        if act != ACT_NONE:
            apply_activation(w, act)
    return out.reshape(x.shape)
