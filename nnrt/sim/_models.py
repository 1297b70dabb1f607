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
reports stay reproducible. With ``overheads`` the same file keeps each model's host model
(``nnrt.sim._overhead``: wake-up, hand-off and kernel-time samples, alone and beside its
scenario's neighbour model; or, with ``overheads="scenario"``, calibrated on a short real run of
the scenario itself, ``nnrt.sim._calibrate``), measured once. Plans with control flow keep the compiler's estimates per step
(calibration skips them) and always run their kernels, since their loop counts depend on
the data.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from nnrt import zoo
from nnrt._progress import Progress
from nnrt.errors import NnrtError
from nnrt.execution import ExecContext, Plan, Step, compile_plan, run_plan
from nnrt.execution._interpreter import fp_errors_ignored, fp_errors_restored
from nnrt.model import Model
from nnrt.sim._overhead import CONDITIONS, HostModel, HostSamples
from nnrt.sim._scenario import ModelSpec, ScenarioError

__all__ = ["SimModel", "cost_cache", "cost_cache_path", "load_models", "walk_steps"]

_VERSION = "2"  # bumped when calibration changes (2: kernels after the malloc tuning)


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
    #: The host model (None unless asked for): wake-up, hand-off and kernel-time samples,
    #: alone and beside a busy neighbour (``nnrt.sim._overhead``).
    host: HostModel | None = None
    #: The key measured costs are cached under (None: the costs do not come from calibration).
    cache_key: str | None = None

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


def cost_cache() -> _CostCache:
    """The cache of measured step costs and host models (``save()`` writes it back)."""
    return _CostCache(cost_cache_path())


def load_models(specs: dict[str, ModelSpec], *, overheads: bool = False,
                neighbours: Mapping[str, Mapping[str, float]] | None = None,
                progress: TextIO | None = None) -> dict[str, SimModel]:
    """Build every model in ``specs`` (name -> spec); built-in names need no spec. ``overheads``:
    with each model's host model (measured once, then cached), measured beside the costliest
    of the models ``neighbours`` gives for it (name -> idle gap in seconds between its
    executions; none: alone only). ``progress``: a stream for a status line while measuring."""
    cache = _CostCache(cost_cache_path())
    bar = Progress("nnrt simulate", 0, progress)
    try:
        out = {name: _load(name, spec, cache) for name, spec in specs.items()}
        if overheads:
            for k, (name, sim) in enumerate(out.items()):
                gaps = (neighbours or {}).get(name, {})
                others = [out[o] for o in gaps if o in out]
                other = max(others, key=lambda o: (o.cost_ns, o.name), default=None)
                beside = f" beside {other.name}" if other is not None else ""
                note = (f"model {k + 1}/{len(out)}: measuring this host's overheads for {name}{beside} "
                        "(once, then cached; can take tens of seconds)...")
                sim.host = cache.host(sim, None if other is None else (other, gaps[other.name]), note=bar.note, text=note)
    finally:
        bar.close()
        cache.save()
    return out


def _load(name: str, spec: ModelSpec, cache: _CostCache) -> SimModel:
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
    outputs, _ = record(plan, inputs, steps, where)
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
    return SimModel(name, model, inputs, costs, source, outputs, spec.jitter, cache_key=f"{key}:{_VERSION}")


def record(plan: Plan, inputs: list[np.ndarray], steps: list[Step], where: str) -> tuple[list[Any], list[Any]]:
    """Run ``plan`` once for real: each step's output, as read-only zeros of its shape and
    dtype, and the plan's outputs."""
    seen: dict[int, Any] = {}
    originals = [(s, s.fn) for s in steps if s.fn is not None]
    for step, fn in originals:
        def recording(*args: Any, _id: int = id(step), _fn: Any = fn) -> Any:
            out = _fn(*args)
            seen[_id] = out
            return out

        step.fn = recording
    token = fp_errors_ignored()
    gen = run_plan(plan, list(inputs), ExecContext())
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        results: list[Any] = stop.value
    except NnrtError as err:
        raise ScenarioError(f"{where}: the model fails on example inputs: {err}") from None
    finally:
        fp_errors_restored(token)
        for step, fn in originals:
            step.fn = fn
    return [_zeros(seen.get(id(s))) for s in steps], results


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
            self.data: dict[str, Any] = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.data = {}

    def get(self, key: str, model: Model, n_steps: int) -> list[float]:
        costs = self.data.get(key)
        if isinstance(costs, list) and len(costs) == n_steps and all(isinstance(c, (int, float)) for c in costs):
            return [float(c) for c in costs]
        from nnrt.devices import CpuDevice

        device = CpuDevice(name="nnrt-sim-calibration", compute_units=1, tune_process=True)  # as in real runs
        try:
            plan = device._compile(model)
        finally:
            device.close()
        costs = [round(s.cost_ns, 1) for s in walk_steps(plan)]
        self.data[key] = costs
        self.dirty = True
        return costs

    def host(self, sim: SimModel, neighbour: tuple[SimModel, float] | None, *,
             note: Callable[[str], None] | None = None, text: str = "") -> HostModel:
        """``sim``'s host model beside ``neighbour`` (the model, its idle gap in seconds;
        ``nnrt.sim._overhead``), measured if not cached (``note(text)`` first, to say so)."""
        n_steps = len(sim.base_costs_ns)
        key = f"{sim.cache_key}:host:-"
        if neighbour is not None:
            key = f"{sim.cache_key}:host:{neighbour[0].cache_key}:gap={neighbour[1]:.6g}"
        cached = self.cached_host(key, n_steps)
        if cached is not None:
            return cached
        from nnrt.sim._overhead import measure_host

        if note is not None:
            note(text)

        other = None if neighbour is None else (neighbour[0].model, neighbour[0].inputs, neighbour[1])
        host = measure_host(sim.model, sim.inputs, other, costs_ns=sim.base_costs_ns)
        if host.alone.ratios and len(host.alone.ratios) != n_steps:  # pragma: no cover - walk_steps changed
            raise AssertionError("host samples do not match the model's steps")
        return self.put_host(key, HostModel(host.alone, host.busy, neighbour[0].name if neighbour is not None else ""),
                             n_steps)

    def cached_host(self, key: str, n_steps: int) -> HostModel | None:
        """The host model cached under ``key`` (None: none, or malformed)."""
        entry = self.data.get(key)
        if isinstance(entry, dict):
            parts = [HostSamples.from_json(entry.get(c), n_steps) for c in CONDITIONS]
            if parts[0] is not None and parts[1] is not None:
                return HostModel(parts[0], parts[1], str(entry.get("neighbour", "")))
        return None

    def put_host(self, key: str, host: HostModel, n_steps: int) -> HostModel:
        """Cache ``host`` under ``key``; returns it as later runs will read it back (rounded), so
        the first run's report is the same as theirs."""
        self.data[key] = {"alone": host.alone.to_json(), "busy": host.busy.to_json(), "neighbour": host.neighbour}
        self.dirty = True
        back = self.cached_host(key, n_steps)
        assert back is not None
        return back

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
