"""The models a scenario runs: loading, step costs, and what the simulated device needs of them.

For each model the simulator needs, once per process: the ``Model`` (built-in, or loaded
with ``Model.load``), example inputs, a base cost per step at speed 1, the outputs of one
real run (so stub kernels can return arrays of the right shapes and dtypes without
computing).

Step costs come, in order of preference, from the scenario (``step_costs_us``, or
``cost_ms`` spread over the steps in proportion to the compiler's static estimates), or
from calibration on this machine: the CPU device's preparation measures each step, and the
figures are kept in a small JSON file (``$NNRT_SIM_COSTS``, default
``~/.cache/nnrt/sim-costs.json``) so every later run, on any load, uses the same numbers and
reports stay reproducible. With ``overheads`` the same file keeps each model's host
overhead samples (``nnrt.sim._overhead``), measured once. Plans with control flow keep the compiler's estimates per step
(calibration skips them) and always run their kernels, since their loop counts depend on
the data.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnrt import zoo
from nnrt.errors import NnrtError
from nnrt.execution import ExecContext, Plan, Step, compile_plan, run_plan
from nnrt.execution._interpreter import fp_errors_ignored, fp_errors_restored
from nnrt.model import Model
from nnrt.sim._scenario import ModelSpec, ScenarioError

__all__ = ["SimModel", "cost_cache_path", "load_models", "walk_steps"]

_VERSION = "1"


@dataclass
class SimModel:
    """One model of a scenario, ready for any number of simulated devices."""

    name: str
    model: Model
    inputs: list[np.ndarray]
    base_costs_ns: list[float]  # per step of ``walk_steps``, at speed 1
    cost_source: str  # "scenario", "calibrated" or "estimated"
    outputs: list[Any]  # per step of ``walk_steps``: what its stub kernel returns
    jitter: float
    #: Host overhead samples in seconds (empty unless asked for): the loop's lateness for an
    #: arrival, and an execution's time beyond its kernels (``nnrt.sim._overhead``).
    wake_s: tuple[float, ...] = ()
    service_s: tuple[float, ...] = ()

    @property
    def cost_ns(self) -> float:
        return float(sum(self.base_costs_ns))

    def compile(self) -> Plan:
        """A fresh plan of this model (each simulated device owns its plans)."""
        return compile_plan(self.model)


def walk_steps(plan: Plan) -> Iterator[Step]:
    """Every step of ``plan`` and of its sub-plans, depth first, each once."""
    seen: set[int] = set()

    def walk(p: Plan) -> Iterator[Step]:
        if id(p) in seen:
            return
        seen.add(id(p))
        for step in p.steps:
            yield step
            for sub in step.branches:
                yield from walk(sub)

    return walk(plan)


def cost_cache_path() -> Path:
    """Where measured step costs are kept between runs."""
    env = os.environ.get("NNRT_SIM_COSTS")
    return Path(env) if env else Path.home() / ".cache" / "nnrt" / "sim-costs.json"


def load_models(specs: dict[str, ModelSpec], *, overheads: bool = False) -> dict[str, SimModel]:
    """Build every model in ``specs`` (name -> spec); built-in names need no spec. ``overheads``:
    with each model's host overhead samples (measured once, then cached)."""
    cache = _CostCache(cost_cache_path())
    out = {name: _load(name, spec, cache, overheads) for name, spec in specs.items()}
    cache.save()
    return out


def _load(name: str, spec: ModelSpec, cache: _CostCache, overheads: bool = False) -> SimModel:
    where = f"models.{name}"
    if spec.path is not None:
        try:
            model = Model.load(spec.path)
        except NnrtError as err:
            raise ScenarioError(f"{where}.path: cannot load {spec.path!r}: {err}") from None
        key = "file:" + hashlib.sha256(Path(spec.path).read_bytes()).hexdigest()
    else:
        model = zoo.build(spec.builtin or name)
        key = f"builtin:{spec.builtin or name}"
    for i in model.input_indexes:
        if not model.operands[i].fully_specified:
            raise ScenarioError(f"{where}: input operand {i} has unspecified dimensions; the simulator needs fixed shapes")
    inputs = zoo.example_inputs(model)
    plan = compile_plan(model)
    steps = list(walk_steps(plan))
    outputs = _record(plan, inputs, steps, where)
    estimates = [s.cost_ns for s in steps]
    if spec.step_costs_us is not None:
        if len(spec.step_costs_us) != len(steps):
            raise ScenarioError(f"{where}.step_costs_us: has {len(spec.step_costs_us)} costs; the model has {len(steps)} steps")
        costs, source = [c * 1e3 for c in spec.step_costs_us], "scenario"
    elif spec.cost_ms is not None:
        total = sum(estimates)
        costs, source = [spec.cost_ms * 1e6 * e / total for e in estimates], "scenario"
    elif plan.has_control_flow:
        costs, source = estimates, "estimated"
    else:
        costs, source = cache.get(f"{key}:{_VERSION}", model, len(steps)), "calibrated"
    sim = SimModel(name, model, inputs, costs, source, outputs, spec.jitter)
    if overheads:
        sim.wake_s, sim.service_s = cache.overheads(f"{key}:{_VERSION}", model, inputs)
    return sim


def _record(plan: Plan, inputs: list[np.ndarray], steps: list[Step], where: str) -> list[Any]:
    """Run ``plan`` once for real; each step's output, as read-only zeros of its shape and dtype."""
    seen: dict[int, Any] = {}
    originals = [(s, s.fn) for s in steps if s.fn is not None]
    for step, fn in originals:
        def recording(*args: Any, _id: int = id(step), _fn: Any = fn) -> Any:
            out = _fn(*args)
            seen[_id] = out
            return out

        step.fn = recording
    token = fp_errors_ignored()
    try:
        for _ in run_plan(plan, list(inputs), ExecContext()):
            pass
    except NnrtError as err:
        raise ScenarioError(f"{where}: the model fails on example inputs: {err}") from None
    finally:
        fp_errors_restored(token)
        for step, fn in originals:
            step.fn = fn
    return [_zeros(seen.get(id(s))) for s in steps]


def _zeros(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        z = np.zeros_like(value)
        z.setflags(write=False)
        return z
    if isinstance(value, (list, tuple)):
        return type(value)(_zeros(v) for v in value)
    return value


class _CostCache:
    """Measured step costs by model key, in a JSON file (written atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dirty = False
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            self.data: dict[str, list[float]] = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.data = {}

    def get(self, key: str, model: Model, n_steps: int) -> list[float]:
        costs = self.data.get(key)
        if isinstance(costs, list) and len(costs) == n_steps and all(isinstance(c, (int, float)) for c in costs):
            return [float(c) for c in costs]
        from nnrt.devices import CpuDevice

        device = CpuDevice(name="nnrt-sim-calibration", compute_units=1)  # BLAS pinned, as in real runs
        try:
            plan = device._compile(model)
        finally:
            device.close()
        costs = [round(s.cost_ns, 1) for s in walk_steps(plan)]
        self.data[key] = costs
        self.dirty = True
        return costs

    def overheads(self, key: str, model: Model, inputs: list[np.ndarray]) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The model's (wake, service) host overhead samples in seconds, measured if not cached."""
        wake, service = self.data.get(f"{key}:wake"), self.data.get(f"{key}:service")
        if not (isinstance(wake, list) and wake and isinstance(service, list) and service):
            from nnrt.sim._overhead import measure_overheads

            wake, service = measure_overheads(model, inputs)
            self.data[f"{key}:wake"] = wake = [round(w, 7) for w in wake]
            self.data[f"{key}:service"] = service = [round(s, 7) for s in service]
            self.dirty = True
        return tuple(float(w) for w in wake), tuple(float(s) for s in service)

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass  # an unwritable cache only costs a calibration next time
