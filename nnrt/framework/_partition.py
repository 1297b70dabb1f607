"""Partitioning a model across devices: the best device for each operation, then steps.

This is NNAPI's ``ExecutionPlan`` partitioning (``reference/partitioning.md`` sections 3-7),
minus its control-flow interpreter (IF and WHILE stay whole, on one device):

* **Support.** Each device other than the reference CPU is asked ``operation_support(model)``
  (feature level, operation and operand types). The reference CPU device is taken to run
  every operation, as NNAPI's CpuDevice does (its kernels check the signatures when the step
  is prepared), so a large model is not compiled once per operation to be partitioned.
* **Best device per operation.** Among the devices that support it, the one reporting the
  smallest performance figure for it wins: ``power_usage`` under LOW_POWER, ``exec_time``
  otherwise (NNAPI uses ``execTime`` for both FAST_SINGLE_ANSWER and SUSTAINED_SPEED), taken
  for the operand type of the operation's first input (the relaxed figures for float32 in a
  relaxed model); IF costs its ``if_performance`` plus half of each branch, WHILE its
  ``while_performance`` plus condition and body. Ties go to the reference CPU (1.0 for
  everything), then to the earlier device. An IF or WHILE with an operand of unknown size may
  run only on the CPU (NNAPI: drivers cannot schedule such control flow).
* **Steps.** NNAPI's drain: one ready queue per device; an operation is ready once every
  operation producing its inputs is in a step. Repeatedly the non-empty queue of the last
  device (the CPU is last) is drained into one new step; operations that become ready on the
  same device while it drains join that step. So a step is a run of same-device operations,
  and every step's inputs come from the model's inputs or from earlier steps.
* **Boundaries.** A step's inputs are the non-constant operands its operations read and do not
  write (in order of first use); its outputs are the operands it writes that the model
  returns or another step reads.

Everything is linear in the model's operations and operands (``benchmarks/partition.py``:
5,000 operations).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from nnrt.devices import CpuDevice, Device, capabilities_from
from nnrt.errors import InvalidArgumentError
from nnrt.model import Model, Operation
from nnrt.types import Capabilities, ExecutionPreference, OperandLifeTime, OperandType, OperationType, PerformanceInfo

__all__ = ["PlannedStep", "choose_devices", "form_steps", "is_reference", "operation_performance", "partition"]

_L = OperandLifeTime
_FIXED = (_L.CONSTANT_COPY, _L.CONSTANT_POOL, _L.NO_VALUE, _L.SUBGRAPH)
_FLOAT32 = (OperandType.FLOAT32, OperandType.TENSOR_FLOAT32)
_CONTROL = (OperationType.IF, OperationType.WHILE)
_CPU_CAPS = capabilities_from(1.0)


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """One step of a partitioning: a device, the model's operations it runs (in run order),
    and the model operands it reads from outside (``inputs``) and hands on (``outputs``)."""

    device: Device
    operations: tuple[int, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def is_reference(device: Device) -> bool:
    """True for a reference CPU device: it runs every operation nnrt has a kernel for."""
    return isinstance(device, CpuDevice) and device.restrictions is None


def operation_performance(caps: Capabilities, model: Model, operation: Operation, preference: ExecutionPreference) -> float:
    """The figure (lower is better) a device with ``caps`` reports for ``operation``."""
    ops = model.operands
    if operation.type in _CONTROL:
        subs = [ops[i].subgraph for i in operation.inputs if ops[i].subgraph is not None]
        inner = [sum(operation_performance(caps, m, o, preference) for o in m.operations) for m in subs if m is not None]
        if operation.type is OperationType.IF:
            return _figure(caps.if_performance, preference) + 0.5 * sum(inner)
        return _figure(caps.while_performance, preference) + sum(inner)
    if not operation.inputs:
        return 1.0
    first = ops[operation.inputs[0]].type
    if first in _FLOAT32 and model.relaxed:
        info = caps.relaxed_float32_tensor if first is OperandType.TENSOR_FLOAT32 else caps.relaxed_float32_scalar
    else:
        found = caps.operand_performance.get(first)
        if found is None:
            return float("inf")  # NNAPI: a type the device gives no figure for costs FLT_MAX
        info = found
    return _figure(info, preference)


def _figure(info: PerformanceInfo, preference: ExecutionPreference) -> float:
    return info.power_usage if preference is ExecutionPreference.LOW_POWER else info.exec_time


def _control_unsized(model: Model, operation: Operation) -> bool:
    """An IF/WHILE with an operand of unknown size, outside or in its subgraphs' inputs/outputs."""
    ops = model.operands
    for i in (*operation.inputs, *operation.outputs):
        sub = ops[i].subgraph
        if sub is not None:
            if any(not sub.operands[j].fully_specified for j in (*sub.input_indexes, *sub.output_indexes)):
                return True
        elif not ops[i].fully_specified:
            return True
    return False


def choose_devices(model: Model, devices: Sequence[Device], preference: ExecutionPreference,
                   reference: Capabilities = _CPU_CAPS) -> list[int]:
    """Per operation of ``model``, the index in ``devices`` of the device that runs it.
    INVALID_ARGUMENT naming the operation (and each device's reason) when none supports it.
    ``reference``: what the reference CPU reports (1.0 for everything, as NNAPI's; a
    simulation whose CPU has another speed says so)."""
    ref = next((k for k, d in enumerate(devices) if is_reference(d)), -1)
    answers: list[tuple[int, list[bool] | None, list[str], Capabilities]] = []
    for k, device in enumerate(devices):
        if k == ref:
            continue
        support = device.operation_support(model)
        if len(support) != len(model.operations):  # NNAPI: a wrong-length answer means "none"
            support = []
        answers.append((k, [s.supported for s in support] or None, [s.reason for s in support], device.capabilities))
    choice: list[int] = []
    for operation in model.operations:
        n = operation.index
        # The reference CPU reports 1.0 for everything (so an IF or WHILE costs it more than 1).
        best = ref
        best_perf = operation_performance(reference, model, operation, preference)
        if operation.type in _CONTROL and _control_unsized(model, operation):
            candidates: list[tuple[int, list[bool] | None, list[str], Capabilities]] = []
        else:
            candidates = answers
        for k, flags, _reasons, caps in candidates:
            if flags is None or not flags[n]:
                continue
            perf = operation_performance(caps, model, operation, preference)
            if best < 0 or perf < best_perf:
                best, best_perf = k, perf
        if best < 0:
            raise InvalidArgumentError(_no_device(model, operation, devices, answers))
        choice.append(best)
    return choice


def _no_device(model: Model, operation: Operation, devices: Sequence[Device],
               answers: list[tuple[int, list[bool] | None, list[str], Capabilities]]) -> str:
    why = []
    for k, flags, reasons, _caps in answers:
        if flags is None:
            why.append(f"{devices[k].name}: it answered no support query")
        elif flags[operation.index]:
            why.append(f"{devices[k].name}: an IF/WHILE with operands of unknown size runs only on the CPU")
        else:
            why.append(f"{devices[k].name}: {reasons[operation.index]}")
    return f"no device can run {operation.label}: " + "; ".join(why)


def form_steps(model: Model, choice: Sequence[int], devices: Sequence[Device]) -> list[PlannedStep]:
    """Group operations into steps, device by device, in dependency order (see the module doc)."""
    operations = model.operations
    n_operands = len(model.operands)
    producer = [-1] * n_operands
    for operation in operations:
        for i in operation.outputs:
            producer[i] = operation.index
    consumers: list[list[int]] = [[] for _ in range(n_operands)]
    pending = [0] * len(operations)
    for operation in operations:
        for i in operation.inputs:
            if producer[i] >= 0:
                consumers[i].append(operation.index)
                pending[operation.index] += 1
    queues: list[deque[int]] = [deque() for _ in devices]
    for operation in operations:
        if pending[operation.index] == 0:
            queues[choice[operation.index]].append(operation.index)
    # Drain order: the reference CPU is served as the last device (NNAPI lists it last and
    # serves the last device first), then the others from the end of the list.
    order = [k for k in range(len(devices)) if not is_reference(devices[k])]
    order += [k for k in range(len(devices)) if is_reference(devices[k])]
    groups: list[tuple[int, list[int]]] = []
    step_of = [-1] * len(operations)
    while True:
        k = next((k for k in reversed(order) if queues[k]), -1)
        if k < 0:
            break
        queue, members, s = queues[k], [], len(groups)
        while queue:
            n = queue.popleft()
            members.append(n)
            step_of[n] = s
            for i in operations[n].outputs:
                for c in consumers[i]:
                    pending[c] -= 1
                    if pending[c] == 0:
                        queues[choice[c]].append(c)
        groups.append((k, members))
    if any(s < 0 for s in step_of):  # the model was validated acyclic: our bug if it happens
        raise InvalidArgumentError("partitioning: some operations never became ready (a cycle in the graph)")
    return [_boundaries(model, devices[k], members, s, step_of, consumers) for s, (k, members) in enumerate(groups)]


def _boundaries(model: Model, device: Device, members: list[int], s: int, step_of: list[int],
                consumers: list[list[int]]) -> PlannedStep:
    operands = model.operands
    model_outputs = set(model.output_indexes)
    written: set[int] = set()
    inputs: dict[int, None] = {}
    outputs: list[int] = []
    for n in members:
        operation = model.operations[n]
        for i in operation.inputs:
            if i not in written and operands[i].lifetime not in _FIXED:
                inputs.setdefault(i)
        for i in operation.outputs:
            written.add(i)
            if i in model_outputs or any(step_of[c] != s for c in consumers[i]):
                outputs.append(i)
    if not outputs:  # nothing read downstream: still return something, as a model must
        outputs = list(model.operations[members[-1]].outputs)
    return PlannedStep(device, tuple(members), tuple(inputs), tuple(outputs))


def partition(model: Model, devices: Sequence[Device],
              preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
              reference: Capabilities = _CPU_CAPS) -> list[PlannedStep]:
    """The steps ``model`` runs as on ``devices`` (best device per operation, then steps)."""
    return form_steps(model, choose_devices(model, devices, preference, reference), devices)
