"""Buffer planning for CONCATENATION: producers write straight into their slice of its output.

A CONCATENATION copies every input into its output: pure memory traffic, and each input was
written (a fresh array) and read back once more. YOLO-style and FPN networks concatenate large
tensors: ddddocr's detector 18 times ([1,52,52,96] x 2 ...), PP-OCR det's head four
[1,80,80,24] resizes. Here, once at preparation (``compile_plan`` calls ``concat_in_place``
after the fusions), an input of a float32 CONCATENATION is written by its producing step into
its slice of the output when:

* the CONCATENATION's axis is a constant and every input's and the output's dimensions are
  known (a static plan: the slices are fixed here);
* the input is a temporary of this plan that the CONCATENATION alone reads, once, and not a
  model output;
* its producer is a kernel step of one output whose kernel declared an ``into``
  (``nnrt.ops._into``: a SiLU that makes a fresh array, float ADD/SUB/MUL/DIV, the NHWC nearest
  resize, STRIDED_SLICE with constant parameters), which writes exactly the values the kernel
  returns.

The first such producer in plan order allocates the output and writes its slice; later ones
read the output's slot as one more input and write theirs; the CONCATENATION step itself then
copies only the other inputs (model inputs, constants, tensors with other readers...) into
their slices. Each rewritten step keeps its operation's label, with "into operation N" added.

What it saves is the re-read of the inputs, not the writing of the output: writing memory that
is not in cache costs the same wherever it happens ([1,13,13,192] SiLU: 13 us into its own
input in cache, 30 us into a fresh array, 66 us into a slice of an output not in cache). So a
producer that writes into memory in cache anyway (a SiLU or an ADD written into its own
operand, ``_fuse``) declares no ``into``: measured in place, ddddocr det's SiLU and ADD steps
took 0.8 and 0.26 ms more and its CONCATENATIONs 0.7 ms less. As it stands, per execution,
medians of the steps' profiles in one run: PP-OCRv3 det's head (three resizes, an ADD) 2.95 ->
2.80 ms with the CONCATENATION, ddddocr det 5.85 -> 5.76 ms (its two resizes); with its
space-to-depth's four slices as well, its CONCATENATIONs 1.16 -> 0.87 ms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.model import Model, Operand
from nnrt.ops._into import Into, into_of, write
from nnrt.types import OperandLifeTime, OperandType, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["concat_in_place"]

Index = tuple[slice, ...]
NewStep = Callable[..., "Step"]


def concat_in_place(model: Model, steps: list[Step], operands: Callable[[tuple[int, ...]], tuple[Operand, ...]],
                    new: NewStep) -> list[Step]:
    """``steps`` with the CONCATENATION inputs above written in place (a new list when any);
    ``new(base, label, ins, outs, fn)`` makes a step like ``base``."""
    readers: Counter[int] = Counter(i for s in steps for i in s.ins)
    order = {id(s): k for k, s in enumerate(steps)}
    producer = {s.outs[0]: s for s in steps if s.fn is not None and len(s.outs) == 1}
    outputs = set(model.output_indexes)
    replaced: dict[int, Step] = {}
    for s in steps:
        if s.type is not OperationType.CONCATENATION or s.fn is None or len(s.ins) < 3:
            continue
        plan = _slices(s, operands)
        if plan is None:
            continue
        shape, where = plan
        srcs = s.ins[:-1]
        chosen: list[tuple[Step, int, Into]] = []
        for k, i in enumerate(srcs):
            p = producer.get(i)
            into = into_of(p.fn) if p is not None else None
            op = model.operands[i]
            if (p is None or into is None or id(p) in replaced or readers[i] != 1 or srcs.count(i) != 1
                    or i in outputs or op.lifetime is not OperandLifeTime.TEMPORARY_VARIABLE):
                continue
            chosen.append((p, k, into))
        if not chosen:
            continue
        chosen.sort(key=lambda c: order[id(c[0])])
        out = s.outs[0]
        label = f" (into operation {s.index})"
        for n, (p, k, into) in enumerate(chosen):
            ins = p.ins if n == 0 else (*p.ins, out)
            replaced[id(p)] = new(p, p.label + label, ins, (out,), _writer(into, where[k], shape, n == 0))
        taken = {k for _, k, _ in chosen}
        rest = [k for k in range(len(srcs)) if k not in taken]
        replaced[id(s)] = new(s, s.label, (out, *(srcs[k] for k in rest)), (out,),
                              _filler([where[k] for k in rest], s.label))
    if not replaced:
        return steps
    return [replaced.get(id(s), s) for s in steps]


def _slices(s: Step, operands: Callable[[tuple[int, ...]], tuple[Operand, ...]]
            ) -> tuple[tuple[int, ...], list[Index]] | None:
    """The output's shape and each input's slice of it, when all are fixed (module doc)."""
    ops = operands(s.ins)
    axis_op, srcs, dst = ops[-1], ops[:-1], operands(s.outs)[0]
    if not axis_op.is_constant or not isinstance(axis_op.value, int):
        return None
    if dst.type is not OperandType.TENSOR_FLOAT32 or not dst.fully_specified:
        return None
    shape = tuple(dst.dimensions)
    rank = len(shape)
    axis = axis_op.value + rank if axis_op.value < 0 else axis_op.value
    if not 0 <= axis < rank:
        return None
    where: list[Index] = []
    start = 0
    for op in srcs:
        dims = tuple(op.dimensions)
        if (op.type is not OperandType.TENSOR_FLOAT32 or not op.fully_specified or len(dims) != rank
                or dims[:axis] + dims[axis + 1:] != shape[:axis] + shape[axis + 1:]):
            return None
        where.append((slice(None),) * axis + (slice(start, start + dims[axis]),))
        start += dims[axis]
    return (shape, where) if start == shape[axis] else None


def _writer(into: Into, where: Index, shape: tuple[int, ...], first: bool) -> Callable[..., np.ndarray]:
    """A producer's kernel writing into its slice: the first allocates the output."""
    if first:
        def run_first(*args: Any) -> np.ndarray:
            buf = np.empty(shape, np.float32)
            into(buf[where], *args)
            return buf

        return run_first

    def run(*args: Any) -> np.ndarray:
        buf = args[-1]
        into(buf[where], *args[:-1])
        return buf  # type: ignore[no-any-return]

    return run


def _filler(where: Sequence[Index], label: str) -> Callable[..., np.ndarray]:
    """The CONCATENATION's step: the inputs not written in place copied into their slices."""

    def run(buf: np.ndarray, *xs: np.ndarray) -> np.ndarray:
        for x, w in zip(xs, where):
            write(buf[w], x, label)
        return buf

    return run
