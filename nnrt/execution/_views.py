"""Shape-only steps as views, done once by the plan compiler (``fuse_steps`` calls ``view_steps``).

RESHAPE, SQUEEZE and EXPAND_DIMS only give their input's values another shape, but their
kernels (``nnrt.ops.shape``) return fresh arrays and, for SQUEEZE and EXPAND_DIMS, check their
parameters again on every call: on silero VAD's 31 such steps that was 93 us of a 0.39 ms
execution (EXPAND_DIMS 4.3 us and SQUEEZE 4.9 us per step: a copy through ``requantize`` plus
``normalize_axis``/``int_list`` in Python; RESHAPE 1.1 us, its plan remembered but the copy not).

Here such a step, when its parameters are constants and its output keeps its input's type and
quantization, runs as ``x.reshape(shape)``: a view of the producer's buffer when that is
C-contiguous (a copy otherwise, as numpy reshapes). The shape comes from the step's own kernel,
run on the first execution that brings an input of a shape not seen yet: every NNAPI check
(at preparation where the shapes are static, as before; at run time, once per input shape,
where they are dynamic) is the kernel's, with its errors naming the operand; later executions
with that input shape only look it up. Values are the kernel's bit for bit (its copy was
C-ordered, and the view reads the same elements in the same order).

Converters also wrap a layout change around an operation and undo it right after: openWakeWord's
melspectrogram turns each convolution's [1,1,T,257] result by SQUEEZE, TRANSPOSE, EXPAND_DIMS and
TRANSPOSE back into [1,1,T,257] (5.5 us of transposes per chain). A chain of such steps holding a
TRANSPOSE, each value but the last read by the next link alone, becomes one step: on an input
shape where the chain keeps the element order (found once per shape by running the links on the
indexes 0..n-1) a reshape, a view; on others the links one after the other (their checks, their
errors, their results). A chain of views alone (no TRANSPOSE) keeps the order on every shape and
becomes one step the same way: ONNX audio models wrap each 1-D layer in SQUEEZE / EXPAND_DIMS /
RESHAPE pairs (silero VAD: 56 steps -> 45, 0.7-1 us of step overhead each).

Why aliasing is safe in this runtime:
* Nothing writes into a view or its base while either is read: the in-place rules of
  ``_fuse`` and ``_fuse_chain`` write only into a temporary produced by a kernel in
  ``_fuse._FRESH`` (these three are not, so never into the view) and read by one step alone
  (the shape step is a reader of its input, so a second reader of the base stops the rewrite).
* Model outputs stay owned by the caller: ``PreparedModel._finish`` copies any result that
  does not own its data (a view, a constant, the caller's own input) or copies it into the
  caller's buffer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.model import Model, Operand
from nnrt.ops._common import same_quant
from nnrt.types import OperandLifeTime, OperandType, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["LAYOUT_TYPES", "VIEW_TYPES", "view_steps"]

Op = OperationType

#: Operations whose output is their input's values under another shape.
VIEW_TYPES = frozenset({Op.RESHAPE, Op.SQUEEZE, Op.EXPAND_DIMS})
#: Operations a layout chain is made of (``_order_keeping_chains``).
LAYOUT_TYPES = VIEW_TYPES | {Op.TRANSPOSE}
#: Input shapes remembered per step (a dynamic plan sees a few; more run the kernel).
_MAX_SHAPES = 16


def view_steps(model: Model, steps: list[Step], operands: Callable[[tuple[int, ...]], tuple[Operand, ...]],
               new: Callable[..., Step]) -> list[Step]:
    """``steps`` with layout chains that keep the element order merged into one view step
    (``_order_keeping_chains``), then every RESHAPE / SQUEEZE / EXPAND_DIMS that may be a view
    replaced by a step running ``view_kernel`` (same inputs, output, label and cost)."""
    steps, merged = _order_keeping_chains(model, steps, operands, new)
    out: list[Step] = []
    for s in steps:
        if (s.type in VIEW_TYPES and s.fn is not None and len(s.outs) == 1 and id(s) not in merged
                and _viewable(model, s, operands(s.ins))):
            s = new(s, s.label, s.ins, s.outs, view_kernel(s.fn, np.dtype(model.operands[s.outs[0]].type.dtype)),
                    s.cost_ns)
        out.append(s)
    return out


def _order_keeping_chains(model: Model, steps: list[Step], operands: Callable[[tuple[int, ...]], tuple[Operand, ...]],
                          new: Callable[..., Step]) -> tuple[list[Step], set[int]]:
    """Merge each chain of layout steps (``LAYOUT_TYPES``, constant parameters, float32, every
    value but the last a temporary its next link alone reads) of two or more into one step
    (``_merged``): a reshape (a view) for input shapes on which the chain keeps the element
    order, the links one after the other on others (shapes are often known only at run time:
    converters leave them open). Returns the steps and the merged ones' ids."""
    ops = model.operands
    readers = Counter(i for s in steps for i in s.ins)
    outputs = set(model.output_indexes)
    linkable = [s for s in steps if s.type in LAYOUT_TYPES and s.fn is not None and len(s.outs) == 1
                and _viewable(model, s, operands(s.ins)) and ops[s.outs[0]].type is OperandType.TENSOR_FLOAT32]
    after = {s.ins[0]: s for s in linkable}
    seen: set[int] = set()
    replaced: dict[int, Step] = {}
    dropped: set[int] = set()
    for first in linkable:
        if id(first) in seen:
            continue
        chain = [first]
        while (o := chain[-1].outs[0]) in after and readers[o] == 1 and o not in outputs and \
                ops[o].lifetime is OperandLifeTime.TEMPORARY_VARIABLE:
            chain.append(after[o])
        seen.update(id(c) for c in chain)
        if len(chain) < 2:  # (a chain of views alone keeps the order on every shape: one reshape)
            continue
        links = [(c.fn, tuple(op.value if op.is_constant else None for op in operands(c.ins)[1:])) for c in chain]
        fn = _merged(links)
        last = chain[-1]
        label = " + ".join(c.label for c in chain)
        replaced[id(last)] = new(last, label, first.ins[:1], last.outs, fn, sum(c.cost_ns for c in chain))
        dropped.update(id(c) for c in chain[:-1])
    if not replaced:
        return steps, set()
    return [replaced.get(id(s), s) for s in steps if id(s) not in dropped], {id(s) for s in replaced.values()}


#: Elements up to which float32 holds every index exactly (``_order_kept``'s probe).
_PROBE_MAX = 1 << 24
Links = list[tuple[Any, tuple[Any, ...]]]


def _merged(links: Links) -> Callable[[np.ndarray], np.ndarray]:
    """One function for a chain of layout kernels and their constant parameters: the first call
    per float32 input shape runs the links (their checks, their errors) and decides whether
    the chain keeps the element order on that shape (``_order_kept``); later calls reshape
    when it does, and run the links one after the other when it does not."""
    shapes: dict[tuple[int, ...], tuple[int, ...] | None] = {}

    def run(x: np.ndarray) -> np.ndarray:
        shape = shapes.get(x.shape, _UNSEEN)
        if shape is not None and shape is not _UNSEEN and x.dtype is _F32:
            return x.reshape(shape)
        y = x
        for fn, params in links:
            y = fn(y, *params)
        if shape is _UNSEEN and len(shapes) < _MAX_SHAPES and type(x) is np.ndarray and x.dtype is _F32:
            shapes[x.shape] = _order_kept(links, x.shape)
        return y

    return run


_UNSEEN: tuple[int, ...] = (-1,)
_F32 = np.dtype(np.float32)


def _order_kept(links: Links, dims: tuple[int, ...]) -> tuple[int, ...] | None:
    """The chain's output shape on an input of ``dims`` when it keeps the element order (the
    links run on the indexes 0..n-1 give them back in order), else None."""
    n = int(np.prod(dims))
    if not 0 < n <= _PROBE_MAX:
        return None
    probe = np.arange(n, dtype=np.float32).reshape(dims)
    value = probe
    for fn, params in links:
        value = fn(value, *params)
    return tuple(value.shape) if np.array_equal(value.reshape(-1), probe.reshape(-1)) else None


def _viewable(model: Model, s: Step, in_ops: tuple[Operand, ...]) -> bool:
    src, dst = in_ops[0], model.operands[s.outs[0]]
    params_const = all(op.is_constant or op.lifetime is OperandLifeTime.NO_VALUE for op in in_ops[1:])
    return params_const and src.type is dst.type and same_quant(src, dst)


def view_kernel(kernel: Callable[..., Any], dtype: np.dtype[Any]) -> Callable[..., np.ndarray]:
    """``kernel`` (a shape step's, parameters constant) as a view: the first call per input
    shape runs ``kernel`` (its checks, its errors) and remembers the result's shape; later ones
    reshape. An input of another dtype than the output's always runs ``kernel``."""
    shapes: dict[tuple[int, ...], tuple[int, ...]] = {}

    def run(x: np.ndarray, *params: Any) -> np.ndarray:
        shape = shapes.get(x.shape)
        if shape is not None and x.dtype is dtype:
            return x.reshape(shape)
        y: np.ndarray = kernel(x, *params)
        if len(shapes) < _MAX_SHAPES and type(x) is np.ndarray and x.dtype == dtype:
            shapes[x.shape] = y.shape
        return y

    return run
