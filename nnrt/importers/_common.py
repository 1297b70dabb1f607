"""What the importers share: collecting the nodes that cannot be expressed.

An importer walks the whole graph and records a ``Rejection`` for every node it cannot map
(name, op type, reason), then raises once with all of them, so a user sees the full list of
what stands between their model and nnrt, as TFLite's NNAPI delegate reports its validation
failures.
"""

from __future__ import annotations

import dataclasses

from nnrt.errors import InvalidArgumentError
from nnrt.model import Model, Operand
from nnrt.types import OperandLifeTime

__all__ = ["Rejection", "Rejections", "UnsupportedModelError", "check_operations"]


class UnsupportedModelError(InvalidArgumentError):
    """INVALID_ARGUMENT from ``nnrt.load``: the file has nodes nnrt cannot express.

    ``rejections`` lists every one of them (``Rejection``: node name, op type, reason).
    """

    def __init__(self, message: str, rejections: tuple[Rejection, ...]) -> None:
        super().__init__(message)
        self.rejections = rejections


@dataclasses.dataclass(frozen=True)
class Rejection:
    """One node that cannot be expressed: its name, its op type, and why."""

    node: str
    op_type: str
    reason: str

    def __str__(self) -> str:
        return f"{self.node or '<unnamed>'} ({self.op_type}): {self.reason}"


class Rejections:
    """Collects rejections while an importer walks a graph; ``raise_if_any`` fails once."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.items: list[Rejection] = []

    def add(self, node: str, op_type: str, reason: str) -> None:
        self.items.append(Rejection(node, op_type, reason))

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self, model_name: str) -> None:
        if not self.items:
            return
        shown = "\n".join(f"  - {r}" for r in self.items[:50])
        more = f"\n  ... and {len(self.items) - 50} more" if len(self.items) > 50 else ""
        raise UnsupportedModelError(
            f"load: {model_name}: {len(self.items)} {self.fmt} node(s) cannot be expressed in nnrt:\n{shown}{more}",
            tuple(self.items),
        )


def check_operations(model: Model, start: int = 0) -> None:
    """Run each kernel's preparation-time signature checks on ``model.operations[start:]``.

    An importer calls this right after mapping one node, so an operation NNAPI cannot run
    (say, a RESHAPE of booleans) is rejected at load and named after the file's node, not
    found later by ``prepare_model``. IF and WHILE are checked when their subgraphs are built.
    Raises the kernel's ``InvalidArgumentError``.

    The kernels prepared here are thrown away, so none waits for numba to compile its loop
    (``deferring``: the numpy twin, which accepts the same operations, is checked instead).
    """
    from nnrt.ops import _jit
    from nnrt.ops._registry import OpCall, prepare_function

    with _jit.deferring():
        for operation in model.operations[start:]:
            prepare = prepare_function(operation.type)
            if prepare is None:
                continue
            ins = tuple(_as_computed(model.operands[i]) for i in operation.inputs)
            outs = tuple(model.operands[i] for i in operation.outputs)
            prepare(OpCall(operation.type, operation.index, ins, outs, model.relaxed))


#: Constant tensors larger than this are checked as if computed: the kernels' preparation would
#: otherwise re-lay or widen them (a float64 copy of int8 weights is 8x their bytes) only to be
#: thrown away, which made loading a 10 MB int8 file take 5x its size and 0.28 s.
_CHECK_AS_COMPUTED_BYTES = 4096


def _as_computed(operand: Operand) -> Operand:
    if operand.is_constant and operand.type.is_tensor and operand.byte_size > _CHECK_AS_COMPUTED_BYTES:
        return dataclasses.replace(operand, lifetime=OperandLifeTime.TEMPORARY_VARIABLE, value=None)
    return operand
