"""Scenario files: what a simulation replays, read from TOML and validated field by field.

A scenario names devices (compute units, speed relative to the measured CPU device, memory
budget), apps (fair-share weight), models (a built-in model or a model saved by nnrt, and
optionally its cost) and workloads (per app: model, priority, execution mode, arrival
process, relative deadline, count or duration). Every mistake raises ``ScenarioError``
(INVALID_ARGUMENT) whose message starts with the field's path, e.g.
``workloads[1].period_ms: must be a number > 0, not -3``. The schema, with defaults::

    name = "camera vs assistant"    # free text
    duration_s = 10.0                # arrivals stop after this (per workload: duration_s)
    seed = 0                         # --seed overrides it
    max_time_s = ...                 # guard on virtual time (default 10 * duration_s + 60)

    [devices.npu]                    # default: one device "cpu" with one unit
    compute_units = 1
    speed = 1.0                      # step costs are divided by it
    memory_mb = 64                   # the device's memory budget, charged at preparation (default: none)
    app_memory_mb = 16               # and each app's limit on it (default: none)
    fairness = "weighted"            # or "round_robin" (default: weighted, by device time)
    aging_s = 0.25
    max_queued_per_app = 256
    feature_level = 4                # a driver with limits (1-8; default: the reference CPU, all)
    operations = ["CONV_2D", "ADD"]  # what it accepts (default: everything at its feature level)
    operand_types = ["TENSOR_FLOAT32", "INT32"]   # (default: every type at its feature level)

    [apps.camera]
    weight = 1.0

    [models.detector]
    builtin = "small_cnn"            # or path = "model.nnrt" (relative to the scenario file)
    cost_ms = 4.0                    # optional: total time at speed 1 (else measured once)
    step_costs_us = [...]            # optional: one cost per step instead
    jitter = 0.0                     # relative spread of a step's actual time around its cost

    [[workloads]]
    app = "camera"
    model = "detector"               # mode = "fenced": models = ["a", "b"], a chain
    device = "npu"                   # default: the first device
    devices = ["npu", "cpu"]         # or: partition each model across these (nnrt.prepare's
                                     # rules; a device's performance figure is 1 / speed)
    priority = "high"                # low, medium, high
    mode = "execute"                 # execute, fenced, burst
    deadline_ms = 33.0               # relative to the intended arrival (default: none)
    arrival = "periodic"             # periodic, poisson, onoff, closed, trace
    period_ms = 33.3                 # periodic; jitter_ms = 0 (uniform in [0, jitter))
    rate_hz = 30                     # poisson; onoff (rate while on, on_ms, off_ms)
    think_ms = 0                     # closed (clients = 1)
    file = "trace.txt"               # trace: seconds since the start, one per line
    count = 100                      # stop after this many (and/or duration_s)
    start_s = 0.0
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnrt import zoo
from nnrt.errors import InvalidArgumentError
from nnrt.types import OperandType, OperationType, Priority

__all__ = [
    "ARRIVALS",
    "AppSpec",
    "DeviceSpec",
    "MODES",
    "ModelSpec",
    "Scenario",
    "ScenarioError",
    "WorkloadSpec",
    "load_scenario",
    "parse_scenario",
]

ARRIVALS = ("periodic", "poisson", "onoff", "closed", "trace")
MODES = ("execute", "fenced", "burst")


class ScenarioError(InvalidArgumentError):
    """A scenario that cannot be run; the message names the field and why."""


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    compute_units: int = 1
    speed: float = 1.0
    memory_mb: float | None = None
    app_memory_mb: float | None = None
    fairness: str | None = None
    aging_s: float = 0.25
    max_queued_per_app: int | None = 256
    #: A device with limits (``nnrt.devices.Restrictions``) when any of these is given.
    feature_level: int | None = None
    operations: tuple[str, ...] | None = None
    operand_types: tuple[str, ...] | None = None

    @property
    def restricted(self) -> bool:
        return self.feature_level is not None or self.operations is not None or self.operand_types is not None


@dataclass(frozen=True)
class AppSpec:
    name: str
    weight: float = 1.0


@dataclass(frozen=True)
class ModelSpec:
    name: str
    builtin: str | None = None
    path: str | None = None
    cost_ms: float | None = None
    step_costs_us: tuple[float, ...] | None = None
    jitter: float = 0.0


@dataclass(frozen=True)
class WorkloadSpec:
    index: int
    app: str
    models: tuple[str, ...]
    device: str
    priority: Priority
    mode: str
    arrival: str
    deadline_s: float | None = None
    count: int | None = None
    duration_s: float | None = None
    start_s: float = 0.0
    period_s: float = 0.0
    jitter_s: float = 0.0
    rate_hz: float = 0.0
    on_s: float = 0.0
    off_s: float = 0.0
    think_s: float = 0.0
    clients: int = 1
    trace: tuple[float, ...] = ()
    #: The devices each model is partitioned across (empty: all of it on ``device``).
    devices: tuple[str, ...] = ()

    @property
    def model(self) -> str:
        """The (first) model this workload runs."""
        return self.models[0]


@dataclass(frozen=True)
class Scenario:
    name: str
    duration_s: float
    seed: int
    max_time_s: float
    devices: tuple[DeviceSpec, ...]
    apps: tuple[AppSpec, ...]
    models: tuple[ModelSpec, ...]
    workloads: tuple[WorkloadSpec, ...]
    source: str = "<string>"
    base_dir: str = field(default=".", compare=False)

    def device(self, name: str) -> DeviceSpec:
        return next(d for d in self.devices if d.name == name)

    def app(self, name: str) -> AppSpec:
        return next(a for a in self.apps if a.name == name)

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)


# -------------------------------------------------------------------------------- field readers


class _Table:
    """One TOML table being read: every key must be consumed, unknown ones are errors."""

    def __init__(self, where: str, data: object) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(f"{where}: must be a table, not {type(data).__name__}")
        self.where, self.data, self.used = where, data, set[str]()

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def raw(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

    def has(self, key: str) -> bool:
        return key in self.data

    def number(self, key: str, default: float | None = None, *, positive: bool = False, minimum: float = 0.0) -> float | None:
        v = self.raw(key)
        if v is None:
            return default
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if ok and positive:
            ok = v > 0
        elif ok:
            ok = v >= minimum
        if not ok:
            rule = "> 0" if positive else f">= {minimum:g}"
            raise ScenarioError(f"{self.path(key)}: must be a finite number {rule}, not {v!r}")
        return float(v)

    def need_number(self, key: str, *, positive: bool = True) -> float:
        if not self.has(key):
            raise ScenarioError(f"{self.path(key)}: missing (required here)")
        v = self.number(key, positive=positive)
        assert v is not None
        return v

    def integer(self, key: str, default: int | None, *, minimum: int = 1) -> int | None:
        v = self.raw(key)
        if v is None:
            return default
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise ScenarioError(f"{self.path(key)}: must be an integer >= {minimum}, not {v!r}")
        return v

    def string(self, key: str, default: str | None = None, choices: tuple[str, ...] = ()) -> str | None:
        v = self.raw(key)
        if v is None:
            return default
        if not isinstance(v, str) or not v:
            raise ScenarioError(f"{self.path(key)}: must be a non-empty string, not {v!r}")
        if choices and v.lower() not in choices:
            raise ScenarioError(f"{self.path(key)}: {v!r} is not one of {', '.join(choices)}")
        return v.lower() if choices else v

    def names(self, key: str, known: Collection[str], what: str) -> tuple[str, ...] | None:
        """A non-empty list of distinct names from ``known`` (None when absent)."""
        v = self.raw(key)
        if v is None:
            return None
        if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
            raise ScenarioError(f"{self.path(key)}: must be a non-empty list of {what} names, not {v!r}")
        for j, x in enumerate(v):
            if x not in known:
                raise ScenarioError(f"{self.path(key)}[{j}]: {x!r} is not a known {what}")
            if x in v[:j]:
                raise ScenarioError(f"{self.path(key)}[{j}]: {x!r} is listed twice")
        return tuple(v)

    def done(self) -> None:
        extra = sorted(set(self.data) - self.used)
        if extra:
            raise ScenarioError(f"{self.path(extra[0])}: unknown field (known: {', '.join(sorted(self.used))})")


def _named_tables(root: _Table, key: str) -> list[tuple[str, _Table]]:
    data = root.raw(key)
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ScenarioError(f"{key}: must be a table of named {key} ([{key}.NAME])")
    return [(name, _Table(f"{key}.{name}", body)) for name, body in data.items()]


# -------------------------------------------------------------------------------- parsing


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate a scenario file (TOML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read the scenario: {exc.strerror or exc}") from None
    return parse_scenario(text, source=str(p), base_dir=str(p.parent))


def parse_scenario(text: str, *, source: str = "<string>", base_dir: str = ".") -> Scenario:
    """Parse and validate scenario text (TOML); raises ``ScenarioError`` naming the field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML: {exc}") from None
    root = _Table("", data)
    name = root.string("name", Path(source).stem if source != "<string>" else "scenario")
    assert name is not None
    duration = root.number("duration_s", 10.0, positive=True)
    assert duration is not None
    seed = root.integer("seed", 0, minimum=0)
    assert seed is not None

    devices = tuple(_device(n, t) for n, t in _named_tables(root, "devices")) or (DeviceSpec("cpu"),)
    apps = [_app(n, t) for n, t in _named_tables(root, "apps")]
    models = tuple(_model(n, t, base_dir) for n, t in _named_tables(root, "models"))
    raw = root.raw("workloads")
    if not isinstance(raw, list) or not raw:
        raise ScenarioError("workloads: at least one [[workloads]] table is needed")
    workloads = []
    for k, body in enumerate(raw):
        workloads.append(_workload(k, _Table(f"workloads[{k}]", body), devices, models, duration, base_dir))
    known = {a.name for a in apps}
    for w in workloads:  # apps named only by workloads get the default weight
        if w.app not in known:
            known.add(w.app)
            apps.append(AppSpec(w.app))
    horizon = max(_horizon(w, duration) for w in workloads)
    max_time = root.number("max_time_s", 10 * horizon + 60, positive=True)
    assert max_time is not None
    root.done()
    return Scenario(name, duration, seed, max_time, devices, tuple(apps), models, tuple(workloads), source, base_dir)


def _horizon(w: WorkloadSpec, duration: float) -> float:
    if w.arrival == "trace":
        return w.start_s + (w.trace[-1] if w.trace else 0.0)
    if w.duration_s is not None:
        return w.start_s + w.duration_s
    if w.arrival == "periodic" and w.count is not None:
        return w.start_s + w.count * w.period_s
    return w.start_s + duration


def _device(name: str, t: _Table) -> DeviceSpec:
    spec = DeviceSpec(
        name=name,
        compute_units=t.integer("compute_units", 1) or 1,
        speed=t.number("speed", 1.0, positive=True) or 1.0,
        memory_mb=t.number("memory_mb", None, positive=True),
        app_memory_mb=t.number("app_memory_mb", None, positive=True),
        fairness=t.string("fairness", None, ("round_robin", "weighted")),
        aging_s=t.number("aging_s", 0.25, positive=True) or 0.25,
        max_queued_per_app=t.integer("max_queued_per_app", 256),
        feature_level=t.integer("feature_level", None),
        operations=t.names("operations", OperationType.__members__, "operation"),
        operand_types=t.names("operand_types", OperandType.__members__, "operand type"),
    )
    if spec.feature_level is not None and spec.feature_level > 8:
        raise ScenarioError(f"{t.path('feature_level')}: must be an integer from 1 to 8, not {spec.feature_level}")
    t.done()
    return spec


def _app(name: str, t: _Table) -> AppSpec:
    spec = AppSpec(name, t.number("weight", 1.0, positive=True) or 1.0)
    t.done()
    return spec


def _model(name: str, t: _Table, base_dir: str) -> ModelSpec:
    builtin, path = t.string("builtin"), t.string("path")
    if (builtin is None) == (path is None):
        raise ScenarioError(f"{t.where}: give exactly one of builtin = NAME or path = FILE")
    if builtin is not None and builtin not in zoo.NAMES:
        choices = ", ".join(sorted(zoo.NAMES))
        raise ScenarioError(f"{t.path('builtin')}: unknown built-in model {builtin!r} (choose from {choices})")
    if path is not None:
        full = Path(base_dir) / path
        if not full.is_file():
            raise ScenarioError(f"{t.path('path')}: no saved model at {str(full)!r}")
        path = str(full)
    costs = t.raw("step_costs_us")
    steps: tuple[float, ...] | None = None
    if costs is not None:
        if not isinstance(costs, list) or not costs or not all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c >= 0 for c in costs
        ):
            raise ScenarioError(f"{t.path('step_costs_us')}: must be a non-empty list of numbers >= 0")
        steps = tuple(float(c) for c in costs)
    cost = t.number("cost_ms", None, positive=True)
    if cost is not None and steps is not None:
        raise ScenarioError(f"{t.path('cost_ms')}: give cost_ms or step_costs_us, not both")
    spec = ModelSpec(name, builtin, path, cost, steps, t.number("jitter", 0.0) or 0.0)
    t.done()
    return spec


_ARRIVAL_FIELDS: Mapping[str, tuple[str, ...]] = {
    "periodic": ("period_ms", "jitter_ms"),
    "poisson": ("rate_hz",),
    "onoff": ("rate_hz", "on_ms", "off_ms"),
    "closed": ("think_ms", "clients"),
    "trace": ("file",),
}


def _workload(k: int, t: _Table, devices: tuple[DeviceSpec, ...], models: tuple[ModelSpec, ...],
              duration: float, base_dir: str) -> WorkloadSpec:
    app = t.string("app")
    if app is None:
        raise ScenarioError(f"{t.path('app')}: missing (required)")
    mode = t.string("mode", "execute", MODES)
    assert mode is not None
    names = _model_names(t, mode, {m.name for m in models})
    across = t.names("devices", [d.name for d in devices], "device")
    if across is not None and t.has("device"):
        raise ScenarioError(f"{t.path('devices')}: give device = NAME or devices = [...], not both")
    device = t.string("device", devices[0].name) if across is None else across[0]
    if device not in {d.name for d in devices}:
        raise ScenarioError(f"{t.path('device')}: no device named {device!r} (devices: {', '.join(d.name for d in devices)})")
    prio = t.string("priority", "medium", ("low", "medium", "high"))
    arrival = t.string("arrival", None, ARRIVALS)
    if arrival is None:
        raise ScenarioError(f"{t.path('arrival')}: missing (one of {', '.join(ARRIVALS)})")
    for other, fields in _ARRIVAL_FIELDS.items():
        for f in fields:
            if other != arrival and f not in _ARRIVAL_FIELDS[arrival] and t.has(f):
                raise ScenarioError(f"{t.path(f)}: not a field of arrival = {arrival!r}")
    ms: Callable[[str], float] = lambda key: t.need_number(key) / 1e3  # noqa: E731
    deadline = t.number("deadline_ms", None)
    spec = WorkloadSpec(
        index=k,
        app=app,
        models=names,
        device=device,
        priority=Priority[(prio or "medium").upper()],
        mode=mode,
        arrival=arrival,
        deadline_s=None if deadline is None else deadline / 1e3,
        count=t.integer("count", None),
        duration_s=t.number("duration_s", None, positive=True),
        start_s=t.number("start_s", 0.0) or 0.0,
        period_s=ms("period_ms") if arrival == "periodic" else 0.0,
        jitter_s=(t.number("jitter_ms", 0.0) or 0.0) / 1e3 if arrival == "periodic" else 0.0,
        rate_hz=t.need_number("rate_hz") if arrival in ("poisson", "onoff") else 0.0,
        on_s=ms("on_ms") if arrival == "onoff" else 0.0,
        off_s=ms("off_ms") if arrival == "onoff" else 0.0,
        think_s=(t.number("think_ms", 0.0) or 0.0) / 1e3 if arrival == "closed" else 0.0,
        clients=(t.integer("clients", 1) or 1) if arrival == "closed" else 1,
        trace=_trace(t, base_dir) if arrival == "trace" else (),
        devices=across or (),
    )
    if spec.count is None and spec.duration_s is None and arrival != "trace":
        spec = _with_duration(spec, duration)
    t.done()
    return spec


def _with_duration(spec: WorkloadSpec, duration: float) -> WorkloadSpec:
    from dataclasses import replace

    return replace(spec, duration_s=max(0.0, duration - spec.start_s) or duration)


def _model_names(t: _Table, mode: str, known: set[str]) -> tuple[str, ...]:
    if mode == "fenced" and t.has("models"):
        raw = t.raw("models")
        if not isinstance(raw, list) or not raw or not all(isinstance(x, str) for x in raw):
            raise ScenarioError(f"{t.path('models')}: must be a non-empty list of model names")
        names = tuple(raw)
        key = "models"
    else:
        one = t.string("model")
        if one is None:
            hint = "; or models = [...] for a fenced chain" if mode == "fenced" else ""
            raise ScenarioError(f"{t.path('model')}: missing (required{hint})")
        names, key = (one,), "model"
    for n in names:
        if n not in known and n not in zoo.NAMES:
            raise ScenarioError(f"{t.path(key)}: no model named {n!r} (declare [models.{n}] or use a built-in name)")
    return names


def _trace(t: _Table, base_dir: str) -> tuple[float, ...]:
    name = t.string("file")
    if name is None:
        raise ScenarioError(f"{t.path('file')}: missing (a file of arrival times in seconds)")
    full = Path(base_dir) / name
    try:
        lines = full.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ScenarioError(f"{t.path('file')}: cannot read {str(full)!r}: {exc.strerror or exc}") from None
    times: list[float] = []
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            v = float(text)
        except ValueError:
            raise ScenarioError(f"{t.path('file')}: {name} line {n}: {text!r} is not a number of seconds") from None
        if not math.isfinite(v) or v < 0 or (times and v < times[-1]):
            raise ScenarioError(f"{t.path('file')}: {name} line {n}: times must be finite, >= 0 and non-decreasing")
        times.append(v)
    if not times:
        raise ScenarioError(f"{t.path('file')}: {name} holds no arrival times")
    return tuple(times)
