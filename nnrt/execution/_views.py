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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.model import Model, Operand
from nnrt.ops._common import same_quant
from nnrt.types import OperandLifeTime, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["VIEW_TYPES", "view_steps"]

Op = OperationType

#: Operations whose output is their input's values under another shape.
VIEW_TYPES = frozenset({Op.RESHAPE, Op.SQUEEZE, Op.EXPAND_DIMS})
#: Input shapes remembered per step (a dynamic plan sees a few; more run the kernel).
_MAX_SHAPES = 16


def view_steps(model: Model, steps: list[Step], operands: Callable[[tuple[int, ...]], tuple[Operand, ...]],
               new: Callable[..., Step]) -> list[Step]:
    """``steps`` with every RESHAPE / SQUEEZE / EXPAND_DIMS that may be a view replaced by a
    step running ``view_kernel`` (same inputs, output, label and cost)."""
    out: list[Step] = []
    for s in steps:
        if s.type in VIEW_TYPES and s.fn is not None and len(s.outs) == 1 and _viewable(model, s, operands(s.ins)):
            s = new(s, s.label, s.ins, s.outs, view_kernel(s.fn, np.dtype(model.operands[s.outs[0]].type.dtype)),
                    s.cost_ns)
        out.append(s)
    return out


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
