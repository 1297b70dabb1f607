"""``RestrictedDevice``: a CPU device standing for a vendor driver with limits.

NNAPI's partitioning tests run against configurable test drivers: each has a name, a feature
level, the operations and operand types it accepts and the performance it reports, and
computes with the reference kernels. ``RestrictedDevice`` is that driver for nnrt, so an app
can ask "what happens to my model on a phone whose NPU supports only these operations at
feature level 4?" and the framework (``nnrt.framework``) has more than one device to choose
from. It is a ``CpuDevice`` (same kernels, scheduler, workers, bursts): only what it reports
and accepts differs.

* ``operation_support`` answers from the configuration alone (feature level, operation and
  operand types; IF and WHILE only when every operation of their subgraphs is supported), as
  a driver declaring its support; it does not compile each operation.
* ``prepare_model`` refuses a model holding an operation it does not support
  (INVALID_ARGUMENT naming the operation and the reason), as a driver does.
* ``fail_prepare=ErrorStatus.X`` makes every preparation fail with that status: the device
  that fails on purpose, for CPU-fallback tests and examples.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from nnrt.devices._cpu import CpuDevice
from nnrt.devices._device import (
    MAX_FEATURE_LEVEL,
    MIN_FEATURE_LEVEL,
    DeviceType,
    OperationSupport,
    feature_level_reason,
)
from nnrt.errors import InvalidArgumentError, error_for
from nnrt.execution import PreparedModel
from nnrt.model import Model, Operation
from nnrt.types import Capabilities, ErrorStatus, ExecutionPreference, OperandType, OperationType, PerformanceInfo, Priority

__all__ = ["RestrictedDevice", "capabilities_from"]


def capabilities_from(performance: float | PerformanceInfo | Capabilities, what: str = "performance") -> Capabilities:
    """``Capabilities`` from a figure for everything (a ratio to the CPU: time and power), a
    ``PerformanceInfo`` for every type, or ``Capabilities`` as they are."""
    if isinstance(performance, Capabilities):
        return performance
    if isinstance(performance, PerformanceInfo):
        info = performance
    elif isinstance(performance, (int, float)) and not isinstance(performance, bool):
        info = PerformanceInfo(float(performance), float(performance))
    else:
        raise InvalidArgumentError(f"{what}: expected a number, a PerformanceInfo or Capabilities, got {performance!r}")
    for figure in (info.exec_time, info.power_usage):
        if not figure > 0 or figure == float("inf"):
            raise InvalidArgumentError(f"{what}: figures must be positive and finite, got {info}")
    return Capabilities(info, info, {t: info for t in OperandType if t is not OperandType.SUBGRAPH}, info, info)


def _enum_set(values: Iterable[Any] | None, cls: type[OperationType] | type[OperandType], what: str) -> frozenset[Any] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes)):
        raise InvalidArgumentError(f"{what}: expected a collection of {cls.__name__}, got {values!r}")
    out = set()
    for v in values:
        try:
            out.add(cls[v] if isinstance(v, str) else cls(v))
        except (KeyError, ValueError):
            raise InvalidArgumentError(f"{what}: {v!r} is not an {cls.__name__}") from None
    return frozenset(out)


class RestrictedDevice(CpuDevice):
    """A device that accepts only some operations and operand types, up to a feature level."""

    def __init__(
        self,
        name: str,
        *,
        feature_level: int = 7,
        operations: Iterable[OperationType | int | str] | None = None,
        operand_types: Iterable[OperandType | int | str] | None = None,
        performance: float | PerformanceInfo | Capabilities = 0.5,
        device_type: DeviceType = DeviceType.ACCELERATOR,
        version: str = "1.0",
        fail_prepare: ErrorStatus | None = None,
        **cpu_options: Any,
    ) -> None:
        """``operations``/``operand_types``: what the device accepts (None: all at its feature
        level); ``performance``: what it reports, relative to the CPU (lower is better; the
        default, 0.5, says twice as fast, since the framework gives ties to the CPU)."""
        if isinstance(feature_level, bool) or not isinstance(feature_level, int) or not (
            MIN_FEATURE_LEVEL <= feature_level <= MAX_FEATURE_LEVEL
        ):
            raise InvalidArgumentError(f"feature_level: must be an int from 1 to 8, got {feature_level!r}")
        if fail_prepare is not None and (not isinstance(fail_prepare, ErrorStatus) or fail_prepare is ErrorStatus.NONE):
            raise InvalidArgumentError(f"fail_prepare: must be a failing ErrorStatus or None, got {fail_prepare!r}")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"name: a device needs a non-empty name, got {name!r}")
        if not isinstance(device_type, DeviceType):
            raise InvalidArgumentError(f"device_type: expected a DeviceType, got {device_type!r}")
        super().__init__(name, **cpu_options)
        self.type = device_type
        self.version = version
        self.feature_level = feature_level
        self.operations = _enum_set(operations, OperationType, "operations")
        self.operand_types = _enum_set(operand_types, OperandType, "operand_types")
        self.fail_prepare = fail_prepare
        self._capabilities = capabilities_from(performance)

    def operation_support(self, model: Model) -> list[OperationSupport]:
        if not isinstance(model, Model) or not model.finished:
            raise InvalidArgumentError("supported_operations: the model must be a finished Model")
        return [self._support(model, op) for op in model.operations]

    def _support(self, model: Model, operation: Operation) -> OperationSupport:
        reason = self._reason(model, operation)
        return OperationSupport(operation.index, operation.type, not reason, reason)

    def _reason(self, model: Model, operation: Operation) -> str:
        reason = feature_level_reason(model, operation, self.feature_level)
        if reason:
            return reason
        if self.operations is not None and operation.type not in self.operations:
            return f"{self.name} does not support {operation.type.name}"
        ops = model.operands
        for i in (*operation.inputs, *operation.outputs):
            sub = ops[i].subgraph
            if sub is not None:
                for inner in sub.operations:
                    why = self._reason(sub, inner)
                    if why:
                        return f"its subgraph's {inner.label}: {why}"
            elif self.operand_types is not None and ops[i].type not in self.operand_types:
                return f"{self.name} does not support {ops[i].type.name} ({ops[i].label})"
        return ""

    def _check_model(self, model: Model) -> None:
        if self.fail_prepare is not None:
            raise error_for(self.fail_prepare, f"{self.name}: preparation fails on purpose ({self.fail_prepare.name})")
        if isinstance(model, Model) and model.finished:
            for op in model.operations:
                reason = self._reason(model, op)
                if reason:
                    raise InvalidArgumentError(f"{self.name} cannot prepare the model: {op.label}: {reason}")

    async def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: float | None = None,
        app: str = "default",
        cache_dir: str | os.PathLike[str] | None = None,
        token: bytes | None = None,
    ) -> PreparedModel:
        self._check_model(model)
        return await super().prepare_model(
            model, preference=preference, priority=priority, deadline=deadline, app=app, cache_dir=cache_dir, token=token
        )

    def prepare_model_sync(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        app: str = "default",
    ) -> PreparedModel:
        self._check_model(model)
        return super().prepare_model_sync(model, preference=preference, priority=priority, app=app)
