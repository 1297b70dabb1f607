"""Simulated partitioned models: one scenario model across several simulated devices.

A workload with ``devices = [...]`` has each of its models partitioned with the framework's
own rules (``nnrt.framework.partition``: support from each device's declared limits, the best
device per operation by its performance figure, 1 / speed for every device, the CPU's
included, steps by NNAPI's drain). Each
step's model gets the costs and stub outputs of its operations from the whole model's
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
from nnrt.execution import PreparedModel
from nnrt.framework import partition, partitioned_model
from nnrt.sim._device import SimDevice
from nnrt.sim._models import SimModel
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
    steps = []
    for k, st in enumerate(planned):
        name = f"{sim.name}#step{k}"
        part = replace(
            sim,
            name=name,
            model=sim.model.operations_as_model(st.operations, st.outputs, inputs=st.inputs, name=name),
            base_costs_ns=[sim.base_costs_ns[n] for n in st.operations],
            outputs=[sim.outputs[n] for n in st.operations],
            host=None,
            cache_key=None,
        )
        device = st.device
        assert isinstance(device, SimDevice)
        steps.append((device.prepare(part, app, priority), st, ""))
    return partitioned_model(sim.model, steps, priority=priority, app=app)
