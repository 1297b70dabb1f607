"""Simulated partitioned models: one scenario model across several simulated devices.

A workload with ``devices = [...]`` has each of its models partitioned with the framework's
own rules (``nnrt.framework.partition``: support from each device's declared limits, the best
device per operation by its performance figure, 1 / speed for every device, the CPU's
included, steps by NNAPI's drain). Each
step's model is compiled on its own (its fusions and folds can differ from the whole plan's);
its steps get the costs of the operations they run, each operation's share of the whole
plan's step that ran it, and stub outputs recorded on the values the steps before it computed
(a step runs at its own device's speed), is prepared on its simulated device, and the steps
are assembled by ``nnrt.framework.partitioned_model``: the executions then run through the
same partitioned driver as real ones, each step under its device's scheduler. Models with
IF or WHILE are not partitioned here (their step costs are per nested step, not per
operation): such a workload is a ``ScenarioError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from nnrt.devices import capabilities_from
from nnrt.errors import InvalidArgumentError
from nnrt.execution import Plan, PreparedModel, compile_plan
from nnrt.execution._plan import estimate_ns
from nnrt.framework import partition, partitioned_model
from nnrt.model import Model
from nnrt.sim._device import SimDevice
from nnrt.sim._models import SimModel, record
from nnrt.sim._scenario import ScenarioError
from nnrt.types import OperationType, Priority

__all__ = ["prepare_partitioned"]


def prepare_partitioned(sim: SimModel, devices: Sequence[SimDevice], app: str, priority: Priority) -> PreparedModel:
    """``sim`` prepared across ``devices`` for ``app`` at ``priority`` (see the module doc)."""
    if any(op.type in (OperationType.IF, OperationType.WHILE) for op in sim.model.operations):
        raise ScenarioError(f"models.{sim.name}: a model with IF or WHILE cannot be partitioned in a simulation")
    # Every device's figure is 1 / speed, the reference CPU's too (the framework takes it as
    # 1.0 otherwise, right only for a CPU at speed 1).
    ref = next((d for d in devices if d.restrictions is None), None)
    try:
        planned = partition(sim.model, devices, reference=capabilities_from(1.0 / ref.speed if ref else 1.0))
    except InvalidArgumentError as err:  # an operation none of the workload's devices runs
        raise ScenarioError(f"models.{sim.name}: {err.args[0]}") from None
    if len(planned) == 1:
        device = planned[0].device
        assert isinstance(device, SimDevice)
        return device.prepare(sim, app, priority)
    op_costs = _operation_costs(sim.model, sim.compile(), sim.base_costs_ns)
    values = dict(zip(sim.model.input_indexes, sim.inputs, strict=True))
    steps = []
    for k, st in enumerate(planned):
        name = f"{sim.name}#step{k}"
        model = sim.model.operations_as_model(st.operations, st.outputs, inputs=st.inputs, name=name)
        # The step's own plan (its fusions and folds are its own): its stub outputs recorded on
        # the values the steps before it computed, its costs those of the operations it runs.
        plan = compile_plan(model)
        stubs, results = record(plan, [values[i] for i in st.inputs], plan.steps, f"models.{sim.name} step {k}")
        values.update(zip(st.outputs, results, strict=True))
        costs = [0.0] * len(plan.steps)
        for j, at in enumerate(_steps_of_operations(model, plan)):
            if at is not None:
                costs[at] += op_costs[st.operations[j]]
        part = replace(sim, name=name, model=model, base_costs_ns=costs, outputs=stubs, host=None, cache_key=None)
        device = st.device
        assert isinstance(device, SimDevice)
        steps.append((device.prepare(part, app, priority), st, ""))
    return partitioned_model(sim.model, steps, priority=priority, app=app)


def _steps_of_operations(model: Model, plan: Plan) -> list[int | None]:
    """Per operation of ``model``: the index of the step of ``plan`` (no control flow) that runs
    it, or None for one folded into a constant at compilation. A plan has fewer steps than its
    model has operations (fusions: PAD into a convolution, elementwise chains, 8-bit programs):
    a fused step writes its last operation's outputs, and an operation whose outputs no step
    writes runs inside the step that runs its reader."""
    writer = {i: k for k, step in enumerate(plan.steps) for i in step.outs}
    readers: dict[int, list[int]] = {}
    for operation in model.operations:
        for i in operation.inputs:
            readers.setdefault(i, []).append(operation.index)
    found: list[int | None] = [None] * len(model.operations)
    for operation in reversed(model.operations):
        at = next((writer[i] for i in operation.outputs if i in writer), None)
        if at is None and any(plan.template[i] is None for i in operation.outputs):  # (else folded)
            at = next((found[r] for i in operation.outputs for r in readers.get(i, ()) if found[r] is not None), None)
        found[operation.index] = at
    return found


def _operation_costs(model: Model, plan: Plan, step_costs: Sequence[float]) -> list[float]:
    """Per operation of ``model``: its share of the cost of the step of ``plan`` that runs it
    (``step_costs``, one per step), split among a fused step's operations in proportion to the
    compiler's first estimates (``estimate_ns``); 0 for a folded one."""
    at = _steps_of_operations(model, plan)
    weights = [estimate_ns([model.operands[i] for i in operation.outputs]) for operation in model.operations]
    totals = [0.0] * len(plan.steps)
    for k, w in zip(at, weights, strict=True):
        if k is not None:
            totals[k] += w
    return [0.0 if k is None else step_costs[k] * w / totals[k] for k, w in zip(at, weights, strict=True)]
