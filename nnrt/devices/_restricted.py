"""``RestrictedDevice``: a CPU device standing for a vendor driver with limits.

NNAPI's partitioning tests run against configurable test drivers: each has a name, a feature
level, the operations and operand types it accepts and the performance it reports, and
computes with the reference kernels. ``RestrictedDevice`` is that driver for nnrt, so an app
can ask "what happens to my model on a phone whose NPU supports only these operations at
feature level 4?" and the framework (``nnrt.framework``) has more than one device to choose
from. It is a ``CpuDevice`` (same kernels, scheduler, workers, bursts): only what it reports
and accepts differs.

* Its ``restrictions`` (``nnrt.devices._device.Restrictions``, which a simulated device can
  carry too) answer ``operation_support`` from the configuration alone (feature level,
  operation and operand types; IF and WHILE only when every operation of their subgraphs is
  supported), as a driver declaring its support; it does not compile each operation.
* ``prepare_model`` refuses a model holding an operation it does not support
  (INVALID_ARGUMENT naming the operation and the reason), as a driver does.
* ``fail_prepare=ErrorStatus.X`` makes every preparation fail with that status, and
  ``fail_execute=ErrorStatus.X`` every execution (the first kernel of each plan it prepares
  raises it, so every execution path fails alike): the device that fails on purpose, for
  CPU-fallback tests and examples.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nnrt.devices._cpu import CpuDevice
from nnrt.devices._device import DeviceType, Restrictions
from nnrt.errors import InvalidArgumentError, error_for
from nnrt.execution import Plan
from nnrt.model import Model
from nnrt.types import Capabilities, ErrorStatus, OperandType, OperationType, PerformanceInfo

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
        fail_execute: ErrorStatus | None = None,
        **cpu_options: Any,
    ) -> None:
        """``operations``/``operand_types``: what the device accepts (None: all at its feature
        level); ``performance``: what it reports, relative to the CPU (lower is better; the
        default, 0.5, says twice as fast, since the framework gives ties to the CPU)."""
        restrictions = Restrictions.of(feature_level, operations, operand_types)
        for what, status in (("fail_prepare", fail_prepare), ("fail_execute", fail_execute)):
            if status is not None and (not isinstance(status, ErrorStatus) or status is ErrorStatus.NONE):
                raise InvalidArgumentError(f"{what}: must be a failing ErrorStatus or None, got {status!r}")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"name: a device needs a non-empty name, got {name!r}")
        if not isinstance(device_type, DeviceType):
            raise InvalidArgumentError(f"device_type: expected a DeviceType, got {device_type!r}")
        super().__init__(name, **cpu_options)
        self.type = device_type
        self.version = version
        self.feature_level = feature_level
        self.restrictions = restrictions
        self.fail_prepare = fail_prepare
        self.fail_execute = fail_execute
        self._capabilities = capabilities_from(performance)

    def _check_model(self, model: object) -> None:
        if self.fail_prepare is not None:
            raise error_for(self.fail_prepare, f"{self.name}: preparation fails on purpose ({self.fail_prepare.name})")
        super()._check_model(model)

    def _compile(self, model: Model) -> Plan:
        """The CPU device's plan; with ``fail_execute``, its first kernel fails with that
        status, so every way of running it fails as a driver failing mid-execution would."""
        plan = super()._compile(model)
        status = self.fail_execute
        if status is not None:
            step = next((st for st in plan.steps if st.fn is not None), None)
            if step is not None:
                message = f"{self.name}: execution fails on purpose ({status.name})"

                def fail(*_args: Any) -> Any:
                    raise error_for(status, message)

                step.fn = fail
        return plan
