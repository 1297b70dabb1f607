"""nnrt: an asyncio execution runtime for neural-network models, modelled on Android's NNAPI.

Build a ``Model`` with NNAPI's operands and operations, prepare it on a device from
``get_devices()``, and run executions as coroutines::

    prepared = await nnrt.get_devices()[0].prepare_model(model)
    result = await prepared.execute([x, y], deadline=nnrt.deadline_after(0.005))

This module only re-exports; the implementation lives in the subpackages.
"""

from nnrt.burst import Burst
from nnrt.clock import Clock, MonotonicClock, VirtualClock, deadline_after
from nnrt.devices import (
    CpuDevice,
    Device,
    DeviceType,
    OperationSupport,
    RestrictedDevice,
    get_devices,
    register_device,
    unregister_device,
)
from nnrt.errors import (
    DeadObjectError,
    DeviceUnavailableError,
    GeneralFailureError,
    InternalError,
    InvalidArgumentError,
    MissedDeadlineError,
    NnrtError,
    OutputInsufficientSizeError,
    ResourceExhaustedError,
)
from nnrt.execution import ExecutionResult, FencedExecutionCallback, FencedExecutionInfo, PreparedModel
from nnrt.fences import FenceState, SyncFence, all_of, any_of, from_awaitable, from_future
from nnrt.framework import prepare
from nnrt.importers import UnsupportedModelError, load
from nnrt.memory import BufferDesc, BufferRole, BufferToken, DeviceBuffer, Memory, MemoryLocation
from nnrt.model import Model, ModelBuilder, OperandRef
from nnrt.process import ProcessDevice
from nnrt.types import (
    TIMING_UNAVAILABLE,
    Capabilities,
    ErrorStatus,
    ExecutionPreference,
    FuseCode,
    OperandLifeTime,
    OperandType,
    OperationType,
    OutputShape,
    PaddingCode,
    Partition,
    PerformanceInfo,
    Priority,
    Timing,
)

__version__ = "0.1.0"

__all__ = [
    "TIMING_UNAVAILABLE",
    "BufferDesc",
    "BufferRole",
    "BufferToken",
    "Burst",
    "Capabilities",
    "Clock",
    "CpuDevice",
    "DeadObjectError",
    "Device",
    "DeviceBuffer",
    "DeviceType",
    "DeviceUnavailableError",
    "ErrorStatus",
    "ExecutionPreference",
    "ExecutionResult",
    "FenceState",
    "FencedExecutionCallback",
    "FencedExecutionInfo",
    "FuseCode",
    "GeneralFailureError",
    "InternalError",
    "InvalidArgumentError",
    "Memory",
    "MemoryLocation",
    "MissedDeadlineError",
    "Model",
    "ModelBuilder",
    "MonotonicClock",
    "NnrtError",
    "OperandLifeTime",
    "OperandRef",
    "OperandType",
    "OperationType",
    "OutputInsufficientSizeError",
    "OperationSupport",
    "OutputShape",
    "PaddingCode",
    "Partition",
    "PerformanceInfo",
    "PreparedModel",
    "ProcessDevice",
    "Priority",
    "ResourceExhaustedError",
    "RestrictedDevice",
    "SyncFence",
    "UnsupportedModelError",
    "Timing",
    "VirtualClock",
    "__version__",
    "all_of",
    "any_of",
    "deadline_after",
    "from_awaitable",
    "from_future",
    "get_devices",
    "load",
    "prepare",
    "register_device",
    "unregister_device",
]
