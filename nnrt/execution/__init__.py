"""The execution layer: compiled plans, the step interpreter, prepared models.

This layer is device-independent: a device compiles a model with ``compile_plan`` and
drives the interpreter (inline, on a worker thread, under a scheduler) through the
``Driver`` protocol.
"""

from nnrt.execution._fenced import FencedExecutionCallback, FencedExecutionInfo
from nnrt.execution._interpreter import DELEGATE, INTERRUPTED, OFFLOAD, SLICE, ExecContext, run_plan
from nnrt.execution._plan import DELEGATED, Plan, Step, compile_plan
from nnrt.execution._prepared import Driver, ExecutionResult, PreparedModel, resolve_loop_timeout, set_burst_factory

__all__ = [
    "DELEGATE",
    "DELEGATED",
    "INTERRUPTED",
    "OFFLOAD",
    "SLICE",
    "Driver",
    "ExecContext",
    "ExecutionResult",
    "FencedExecutionCallback",
    "FencedExecutionInfo",
    "Plan",
    "PreparedModel",
    "Step",
    "compile_plan",
    "resolve_loop_timeout",
    "run_plan",
    "set_burst_factory",
]
