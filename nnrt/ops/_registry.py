"""The kernel contract: how an operation is validated, specialised and run.

Each NNAPI operation has one *prepare* function, registered with ``@kernel(OperationType.X)``.
Preparation calls it once per operation of a model with an ``OpCall``: the operation's input
and output operands (type, dimensions, quantization, constant values) and helpers that raise
INVALID_ARGUMENT with a message naming the operation. The prepare function validates the
signature (argument counts, types, ranks where known, constant parameters), does whatever
work can be done once (re-laying constant weights, decoding parameters), and returns the
*kernel*: a plain function called with one value per operation input, in order, and
returning the output array, or a tuple of arrays for several outputs.

Values seen by a kernel: tensors are numpy arrays of ``OperandType.dtype`` (uint8 for
QUANT8_ASYMM, int8 for the signed and symmetric 8-bit types, float16, bool, ...); scalars are
Python ``int``/``float``/``bool``; an omitted optional input (NO_VALUE) is ``None``. A kernel
never mutates its inputs (they may be constants shared by concurrent executions) and returns
fresh arrays of the output operand's dtype, shaped by the data (outputs may have unknown
dimensions in the model). Kernels run under ``np.errstate(all="ignore")`` (set once per
execution by the executor): float overflow and division by zero give IEEE results, as NNAPI
wants, and no warnings. Data-dependent failures raise ``call.fail(...)``'s error at run time;
any other exception escaping a kernel is reported as GENERAL_FAILURE naming the operation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import numpy as np

from nnrt.errors import InvalidArgumentError
from nnrt.model import Operand
from nnrt.types import OperandLifeTime, OperandType, OperationType

__all__ = ["Kernel", "KernelResult", "OpCall", "Prepare", "kernel", "prepare_function", "registered_operations"]

KernelResult = np.ndarray | tuple[np.ndarray, ...]
Kernel = Callable[..., KernelResult]


class OpCall:
    """One operation of a model, as its prepare function sees it."""

    __slots__ = ("index", "inputs", "label", "outputs", "relaxed", "type")

    def __init__(
        self,
        type: OperationType,  # noqa: A002
        index: int,
        inputs: tuple[Operand, ...],
        outputs: tuple[Operand, ...],
        relaxed: bool = False,
        where: str = "",
    ) -> None:
        self.type = type
        self.index = index
        self.inputs = inputs
        self.outputs = outputs
        self.relaxed = relaxed
        self.label = f"{where}operation {index} ({type.name})"

    # -- failing ----------------------------------------------------------------------------

    def error(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.label}: {message}")

    def fail(self, message: str) -> NoReturn:
        """Raise INVALID_ARGUMENT naming this operation (at preparation or at run time)."""
        raise self.error(message)

    # -- signature checks -------------------------------------------------------------------

    def expect_counts(self, inputs: int | Iterable[int], outputs: int | Iterable[int]) -> None:
        """Check the number of inputs and outputs (an int or the allowed values)."""
        for kind, have, allowed in (("inputs", len(self.inputs), inputs), ("outputs", len(self.outputs), outputs)):
            ok = {allowed} if isinstance(allowed, int) else set(allowed)
            if have not in ok:
                want = " or ".join(str(n) for n in sorted(ok))
                self.fail(f"takes {want} {kind}, got {have}")

    def expect_type(self, i: int, *allowed: OperandType) -> OperandType:
        """Check input ``i``'s type is one of ``allowed`` and return it."""
        t = self.inputs[i].type
        if t not in allowed:
            self.fail(f"input {i} ({self.inputs[i].label}) has type {t.name}; expected {_names(allowed)}")
        return t

    def expect_output_type(self, j: int, *allowed: OperandType) -> OperandType:
        t = self.outputs[j].type
        if t not in allowed:
            self.fail(f"output {j} ({self.outputs[j].label}) has type {t.name}; expected {_names(allowed)}")
        return t

    def expect_same_type(self, i: int, *others: int, outputs: Iterable[int] = ()) -> None:
        """Inputs ``others`` and the given outputs have input ``i``'s type (and quantization kind)."""
        t = self.inputs[i].type
        for k in others:
            if self.inputs[k].type is not t:
                self.fail(f"input {k} has type {self.inputs[k].type.name}, input {i} has {t.name}")
        for j in outputs:
            if self.outputs[j].type is not t:
                self.fail(f"output {j} has type {self.outputs[j].type.name}, input {i} has {t.name}")

    def expect_rank(self, i: int, *ranks: int) -> None:
        """Input ``i`` has one of ``ranks`` (skipped while its rank is unknown)."""
        op = self.inputs[i]
        if op.dimensions and len(op.dimensions) not in ranks:
            self.fail(f"input {i} ({op.label}) has rank {len(op.dimensions)}; expected {' or '.join(map(str, ranks))}")

    def expect_fixed_output_quant(self, scale: float, zero_point: int, j: int = 0) -> None:
        """Output ``j`` has the scale and zero point NNAPI fixes for this operation (scales compared in float32)."""
        out = self.outputs[j]
        if np.float32(out.scale) != np.float32(scale) or out.zero_point != zero_point:
            inverse = 1.0 / scale if scale else 0.0
            shown = f"1/{int(inverse)}" if inverse and inverse.is_integer() else str(scale)
            self.fail(
                f"output {j} ({out.label}) of type {out.type.name} must have scale {shown} and zero point "
                f"{zero_point}, got scale {out.scale} and zero point {out.zero_point}"
            )

    def require_inputs(self, *optional: int) -> None:
        """Every input but the ``optional`` ones must be present (not omitted)."""
        for i in range(len(self.inputs)):
            if i not in optional and not self.has_input(i):
                self.fail(f"input {i} ({self.inputs[i].label}) is required but omitted")

    # -- values -----------------------------------------------------------------------------

    def has_input(self, i: int) -> bool:
        """True when optional input ``i`` exists and is not omitted (NO_VALUE)."""
        return i < len(self.inputs) and self.inputs[i].lifetime is not OperandLifeTime.NO_VALUE

    def const(self, i: int) -> Any:
        """Input ``i``'s constant value, or None when it is not a constant."""
        op = self.inputs[i]
        return op.value if op.is_constant else None

    def scalar(self, i: int, default: Any = None) -> Any:
        """A constant scalar parameter; ``default`` when the input is absent or omitted.

        Fails when the parameter is present but not constant: use this only for parameters
        the kernel must know at preparation, and read the rest from the kernel's arguments.
        """
        if not self.has_input(i):
            if default is None:
                self.fail(f"input {i} is required")
            return default
        op = self.inputs[i]
        if not op.is_constant:
            self.fail(f"input {i} ({op.label}) must be a constant for this device")
        return op.value


Prepare = Callable[[OpCall], Kernel]
_REGISTRY: dict[OperationType, Prepare] = {}


def kernel(*types: OperationType) -> Callable[[Prepare], Prepare]:
    """Register ``prepare`` as the implementation of ``types``."""

    def register(prepare: Prepare) -> Prepare:
        for t in types:
            if t in _REGISTRY:
                raise RuntimeError(f"{t.name} is registered twice")  # an import-time bug in nnrt
            _REGISTRY[t] = prepare
        return prepare

    return register


def prepare_function(t: OperationType) -> Prepare | None:
    return _REGISTRY.get(t)


def registered_operations() -> frozenset[OperationType]:
    return frozenset(_REGISTRY)


def _names(types: Iterable[OperandType]) -> str:
    return " or ".join(t.name for t in types)
