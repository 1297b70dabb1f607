"""The ``Device`` contract. Every device (the reference CPU device, a future accelerator or an
out-of-process driver) implements these few methods; the rest of nnrt talks only to them.

Contract, following NNAPI's ``IDevice``:

* ``supported_operations(model)`` returns one bool per operation of the main model, True
  exactly for operations the device runs correctly. A model that is not finished is
  INVALID_ARGUMENT. ``operation_support(model)`` is the richer answer: per operation, whether
  it is supported and, when not, why (an operation or operand type newer than the device's
  feature level, a type of operation or operand the device does not take, a kernel that
  rejects its signature). The default derives it from ``supported_operations``.
* ``feature_level`` is NNAPI's (1-8): an operation or operand type introduced after it is
  unsupported on the device (``feature_level_reason``). ``Restrictions`` (here, so that any
  device can carry them) describe a driver that takes only some operations and operand types
  up to a feature level, and answer support queries from that description alone.
* ``prepare_model(model, preference=, priority=, deadline=)`` validates the model (every
  operation's signature; a bad model, preference or priority is INVALID_ARGUMENT), refuses a
  deadline already passed (MISSED_DEADLINE_PERSISTENT), and returns a ``PreparedModel``.
  A preparation once started is never aborted.
* ``prepare_model(..., cache_dir=, token=)`` and ``prepare_model_from_cache(cache_dir, token)``
  (compilation caching, digest section 6, ``nnrt.cache``): a 32-byte token, else
  INVALID_ARGUMENT; loading a missing, damaged or foreign entry is GENERAL_FAILURE, while
  ``prepare_model`` falls back to a full preparation and rewrites the entry (a cache that
  cannot be written never changes the preparation's result).
* ``allocate(desc, prepared_models, input_roles, output_roles)`` (memory domains) returns a
  ``DeviceBuffer`` and its positive ``BufferToken``; the allocation and use rules and their
  statuses are digest section 5, implemented for host-memory devices by
  ``nnrt.memory.allocate_buffer``. A device without memory domains keeps the default, which
  fails with GENERAL_FAILURE, as NNAPI drivers do for unsupported allocations.
* Executions of one prepared model may run concurrently from any number of tasks; a device
  is used from one event loop at a time, and ``execute_sync`` may be called from any thread.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nnrt.errors import GeneralFailureError, InvalidArgumentError
from nnrt.execution import PreparedModel
from nnrt.memory import BufferDesc, BufferRole, BufferToken, DeviceBuffer
from nnrt.model import Model, Operation
from nnrt.types import EXPERIMENTAL_FEATURE_LEVEL, Capabilities, ExecutionPreference, OperandType, OperationType, Priority

__all__ = [
    "Device",
    "DeviceType",
    "OperationSupport",
    "Restrictions",
    "check_preference_priority",
    "check_preparation_args",
    "feature_level_reason",
]

#: NNAPI's feature levels (FL1, Android 8.1, to FL8, Android 14).
MIN_FEATURE_LEVEL, MAX_FEATURE_LEVEL = 1, 8


class DeviceType(enum.IntEnum):
    """NNAPI device types (``ANEURALNETWORKS_DEVICE_*``)."""

    UNKNOWN = 0
    OTHER = 1
    CPU = 2
    GPU = 3
    ACCELERATOR = 4


@dataclass(frozen=True, slots=True)
class OperationSupport:
    """One operation of a model as a device sees it: supported, or why not (``reason``)."""

    operation: int
    type: OperationType
    supported: bool
    reason: str = ""


def _enum_set(values: Iterable[Any] | None, cls: type[OperationType] | type[OperandType], what: str) -> frozenset[Any] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidArgumentError(f"{what}: expected a collection of {cls.__name__}, got {values!r}")
    out = set()
    for v in values:
        try:
            out.add(cls[v] if isinstance(v, str) else cls(v))
        except (KeyError, ValueError):
            raise InvalidArgumentError(f"{what}: {v!r} is not an {cls.__name__}") from None
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Restrictions:
    """What a driver accepts: operations and operand types (None: all) up to a feature level.
    Its answers come from this configuration alone (see the module docstring)."""

    feature_level: int = 7
    operations: frozenset[OperationType] | None = None
    operand_types: frozenset[OperandType] | None = None

    @classmethod
    def of(cls, feature_level: int = 7, operations: Iterable[OperationType | int | str] | None = None,
           operand_types: Iterable[OperandType | int | str] | None = None) -> Restrictions:
        """Checked restrictions (INVALID_ARGUMENT naming the argument)."""
        if isinstance(feature_level, bool) or not isinstance(feature_level, int) or not (
            MIN_FEATURE_LEVEL <= feature_level <= MAX_FEATURE_LEVEL
        ):
            raise InvalidArgumentError(f"feature_level: must be an int from 1 to 8, got {feature_level!r}")
        return cls(feature_level, _enum_set(operations, OperationType, "operations"),
                   _enum_set(operand_types, OperandType, "operand_types"))

    def support(self, model: Model, device: str) -> list[OperationSupport]:
        out = []
        for operation in model.operations:
            reason = self.reason(model, operation, device)
            out.append(OperationSupport(operation.index, operation.type, not reason, reason))
        return out

    def reason(self, model: Model, operation: Operation, device: str) -> str:
        """Why ``device`` does not take ``operation`` ("" if it does)."""
        reason = feature_level_reason(model, operation, self.feature_level)
        if reason:
            return reason
        if self.operations is not None and operation.type not in self.operations:
            return f"{device} does not support {operation.type.name}"
        ops = model.operands
        for i in (*operation.inputs, *operation.outputs):
            sub = ops[i].subgraph
            if sub is not None:
                for inner in sub.operations:
                    why = self.reason(sub, inner, device)
                    if why:
                        return f"its subgraph's {inner.label}: {why}"
            elif self.operand_types is not None and ops[i].type not in self.operand_types:
                return f"{device} does not support {ops[i].type.name} ({ops[i].label})"
        return ""

    def check(self, model: object, device: str) -> None:
        """INVALID_ARGUMENT naming the first operation of ``model`` that ``device`` does not take."""
        if isinstance(model, Model) and model.finished:
            for op in model.operations:
                reason = self.reason(model, op, device)
                if reason:
                    raise InvalidArgumentError(f"{device} cannot prepare the model: {op.label}: {reason}")


class Device(ABC):
    """A device that prepares models and runs their executions."""

    name: str
    type: DeviceType
    version: str
    feature_level: int

    @property
    @abstractmethod
    def capabilities(self) -> Capabilities:
        """Measured performance figures (measured once, then cached)."""

    @abstractmethod
    def supported_operations(self, model: Model) -> list[bool]:
        """One bool per operation of ``model`` (which must be finished)."""

    def operation_support(self, model: Model) -> list[OperationSupport]:
        """Per operation of ``model`` (finished): supported, or the reason it is not."""
        flags = self.supported_operations(model)
        return [
            OperationSupport(op.index, op.type, ok, "" if ok else f"{self.name} does not support it")
            for op, ok in zip(model.operations, flags)
        ]

    @abstractmethod
    async def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: float | None = None,
        app: str = "default",
    ) -> PreparedModel:
        """Prepare ``model`` for execution on this device and return its ``PreparedModel``.

        Preparation validates the model for this device (signatures, shapes, parameter
        values), compiles its plan and measures its cost; the model must be finished and
        must not change afterwards. ``priority`` orders executions within ``app``;
        ``deadline`` (absolute, device clock) bounds the preparation itself.

        Raises ``InvalidArgumentError`` (INVALID_ARGUMENT) for a model that is not finished
        or that the device cannot run (the message names the operation and what is wrong),
        or a bad ``preference``/``priority``; ``MissedDeadlineError``
        (MISSED_DEADLINE_PERSISTENT) when ``deadline`` had already passed;
        ``ResourceExhaustedError`` when the device's memory budget cannot hold the model
        (PERSISTENT if it never could, TRANSIENT while other prepared models hold it).
        """

    async def ready(self) -> None:
        """Make the device able to answer its device calls (``capabilities``,
        ``supported_operations``, ...) without a long wait: nothing to do for an in-process
        device; a ``ProcessDevice`` starts (or restarts) its service here, off the event loop."""
        return None

    def allocate(
        self,
        desc: BufferDesc | Sequence[int],
        prepared_models: Sequence[PreparedModel],
        input_roles: Sequence[BufferRole] = (),
        output_roles: Sequence[BufferRole] = (),
    ) -> tuple[DeviceBuffer, BufferToken]:
        """Allocate a device buffer for the given roles (memory domains; see the module doc)."""
        raise GeneralFailureError(f"allocate: {self.name} does not support memory domains")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.version} FL{self.feature_level}>"


def check_preparation_args(model: object, preference: object, priority: object) -> tuple[ExecutionPreference, Priority]:
    """Shared checks of ``prepare_model``'s arguments (INVALID_ARGUMENT on failure)."""
    if not isinstance(model, Model):
        raise InvalidArgumentError(f"prepare_model: {model!r} is not a Model")
    if not model.finished:
        raise InvalidArgumentError("prepare_model: the model is not finished (call model.finish())")
    return check_preference_priority(preference, priority)


def check_preference_priority(preference: object, priority: object) -> tuple[ExecutionPreference, Priority]:
    """INVALID_ARGUMENT unless ``preference`` and ``priority`` are valid enum values."""
    try:
        pref = ExecutionPreference(preference)  # type: ignore[arg-type]
    except ValueError:
        raise InvalidArgumentError(f"prepare_model: preference {preference!r} is not an ExecutionPreference") from None
    try:
        prio = Priority(priority)  # type: ignore[arg-type]
    except ValueError:
        raise InvalidArgumentError(f"prepare_model: priority {priority!r} is not a Priority") from None
    return pref, prio


# The feature level of every operation and operand type, looked up once (a model of thousands
# of operations asks for each of its operands).
_OPERATION_LEVEL = {t: t.feature_level for t in OperationType}
_OPERAND_LEVEL = {t: t.feature_level for t in OperandType}


def feature_level_reason(model: Model, operation: Operation, level: int) -> str:
    """Why ``operation`` of ``model`` cannot run on a device of feature ``level`` ("" if it can):
    the operation, or one of its operand types, appeared in a later feature level; before FL3
    (dynamic output shapes) its outputs must be fully specified. IF and WHILE are checked
    through the operations of the models they reference."""
    needed = _OPERATION_LEVEL[operation.type]
    if needed != EXPERIMENTAL_FEATURE_LEVEL and needed > level:
        return f"{operation.type.name} needs feature level {needed}, the device has {level}"
    ops = model.operands
    for i in (*operation.inputs, *operation.outputs):
        t = ops[i].type
        if _OPERAND_LEVEL[t] > level:
            return f"{ops[i].label} is {t.name}, which needs feature level {t.feature_level}; the device has {level}"
    if level < 3:
        for i in operation.outputs:
            if not ops[i].fully_specified:
                return f"output {ops[i].label} has unknown dimensions, which need feature level 3; the device has {level}"
    for i in operation.inputs:
        sub = ops[i].subgraph
        if sub is not None:
            for inner in sub.operations:
                why = feature_level_reason(sub, inner, level)
                if why:
                    return f"its subgraph's {inner.label}: {why}"
    return ""
