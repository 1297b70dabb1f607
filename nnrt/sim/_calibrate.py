"""The host model calibrated on the scenario itself (``simulate(..., overheads="scenario")``).

The synthetic probes of ``nnrt.sim._overhead`` measure one model beside one neighbour model,
and miss what the scenario's own mix does to the host (traces of real runs showed camera
arrivals during a background execution waking several times later than the probes measured).
So this host model is taken from the scenario: real-clock runs (``simulate(real=True)``'s
path, ``nnrt.sim._real``) of its first seconds (each workload's duration capped to them, a
count cut in proportion) with other seeds than the scenario's (``calibration_seed``: a
separate calibration window, so a comparison of the simulation with a real run stays
honest). There are ``CALIBRATION_RUNS`` of them (2), each with its own seed, their samples
pooled: one real run carries its own luck (how arrivals fell against the background, the
machine's state at that moment), and real runs of the built-in scenario differ by up to 20%
on a class's p50, so a model built on one run could sit at either end of that range.

The window (``calibration_window``) is ``calibration_s`` seconds (default 5), or longer, up
to 30 s and the scenario's length, until every open-loop class is expected to offer 400
requests: a p99 from 100 samples rests on one or two of them. Each run records, per request:

* ``wake_s``: an open-loop request's lateness, from its intended arrival to the moment its
  task runs, and a closed-loop client's, from the end of its think time to the moment it
  wakes; the condition is whether a unit of its device was held at the intended time
  (from the run's timeline, as ``SimDevice`` decides it at an arrival);
* ``handoff_s``: the service beyond the simulation's kernel costs: from the moment the
  request was issued to its end, minus the time it waited for a unit, minus the model's
  calibrated cost (``SimModel.cost_ns``; clipped at 0); the condition is whether another
  unit was held when it got its unit (as ``SimDevice`` draws a hand-off). It counts for
  executions that succeeded and were not preempted (a preempted one pays a hand-off again
  when it resumes, in the simulation as on the device).

An open-loop request's wake-up sample keeps the hand-off the same request took
(``HostSamples.paired_s``), and the simulation gives a request whose wake-up it draws that
hand-off too: in real runs of the built-in scenario, camera requests that woke late during
a background execution then had shorter hand-offs (correlation -0.25; the background was
done), and drawing the two apart overstated the camera's p99 by 20% on the same samples.

These become each model's ``HostModel`` (no per-step ratios: the kernel-time variance and
interference are inside the hand-off samples, so one execution's draws stay correlated as
they were), drawn by the simulation's seeded generators as with the probes, and cached with
the step costs under a key of the calibration scenario, seed, window and costs (read back as
cached, so the first run's report is the next runs' too). A condition with no sample borrows
the other's; a model with no sample at all gets zeros. Each recording's conditions come from
its own timeline; the samples of all recordings are then pooled.

Limits. Samples are per model, not per class (two workloads running one model share them). A
hand-off sample includes the kernels' slow-down beside a busy unit, and a preempted
execution pays a whole one again when it resumes: a class preempted often is overstated. The
window is short, so the tails are those of a few hundred requests, and of the machine's load
during that window; a closed-loop class sets no length (its rate is the run's). A scenario a
real run cannot honour (``check_real``) cannot be calibrated this way.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from nnrt._log import get_logger
from nnrt._progress import Progress
from nnrt.sim._arrivals import expected_rate
from nnrt.sim._models import SimModel, cost_cache
from nnrt.sim._overhead import HostModel, HostSamples
from nnrt.sim._real import Request
from nnrt.sim._scenario import Scenario, WorkloadSpec

__all__ = ["CALIBRATION_MAX_S", "CALIBRATION_RUNS", "CALIBRATION_S", "CALIBRATION_SAMPLES", "Recording", "build_hosts",
           "calibration_scenario", "calibration_seed", "calibration_window", "scenario_hosts"]

_log = get_logger("nnrt.sim.calibrate")

#: Default (shortest) length of the calibration window (seconds of the scenario run for real).
CALIBRATION_S = 5.0
#: Requests each open-loop class is expected to offer in the window (``calibration_window``).
CALIBRATION_SAMPLES = 400
#: The longest window the sizing may ask for (seconds).
CALIBRATION_MAX_S = 30.0
#: Real runs of the window, each with its own seed, their samples pooled.
CALIBRATION_RUNS = 2


@dataclass
class Recording:
    """What a recording real run saw (``_Run`` fills it in)."""

    #: Per request: (workload index, intended arrival, issued, ended, succeeded, device record).
    requests: list[tuple[int, float, float, float, bool, Request]] = field(default_factory=list)
    #: Per closed-loop wake-up: (workload index, when it was due, lateness).
    wakes: list[tuple[int, float, float]] = field(default_factory=list)
    #: Per device: the stretches units were held, (start, end), from the run's timeline.
    held: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def calibration_seed(scenario: Scenario, run: int = 0) -> int:
    """Calibration run ``run``'s seed: derived from the scenario's, never equal to it, one per run."""
    entropy = [scenario.seed, 0xCA1B] if run == 0 else [scenario.seed, 0xCA1B, run]
    seed = int(np.random.SeedSequence(entropy).generate_state(1)[0])
    return seed if seed != scenario.seed else seed + 1


def _check_seconds(seconds: float) -> None:
    if not (seconds > 0 and math.isfinite(seconds)):
        from nnrt.sim._scenario import ScenarioError

        raise ScenarioError(f"calibration_s: must be a positive number of seconds, not {seconds!r}")


def calibration_scenario(scenario: Scenario, seconds: float, run: int = 0) -> Scenario:
    """``scenario`` cut to its first ``seconds`` (durations capped, counts cut in proportion),
    with calibration run ``run``'s seed."""
    _check_seconds(seconds)
    horizon = max((w.start_s + (w.duration_s or 0.0) for w in scenario.workloads), default=0.0)
    share = min(1.0, seconds / horizon) if horizon > 0 else 1.0
    workloads = tuple(dataclasses.replace(
        w,
        duration_s=None if w.duration_s is None else min(w.duration_s, seconds),
        count=None if w.count is None else max(1, math.ceil(w.count * share)),
    ) for w in scenario.workloads)
    return dataclasses.replace(scenario, duration_s=min(scenario.duration_s, seconds), workloads=workloads,
                               seed=calibration_seed(scenario, run))


def calibration_window(scenario: Scenario, seconds: float, samples: int | None = None,
                       max_s: float | None = None) -> float:
    """The calibration window's length: at least ``seconds``, longer (up to ``max_s``) until
    every open-loop class is expected to have offered ``samples`` requests (from its rate or
    period; a class that ends sooner counts to its end), and never longer than the scenario.
    Closed-loop classes and traces set no length."""
    _check_seconds(seconds)
    samples = CALIBRATION_SAMPLES if samples is None else samples
    max_s = CALIBRATION_MAX_S if max_s is None else max_s
    need = seconds
    for w in scenario.workloads:
        rate = expected_rate(w)
        if rate:
            end = w.start_s + (scenario.duration_s if w.duration_s is None else w.duration_s)
            need = max(need, min(w.start_s + samples / rate, end))
    return min(max(seconds, min(need, max_s)), scenario.duration_s)


def _union(stretches: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The stretches merged into disjoint ones, in order."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(stretches):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _busy_at(union: list[tuple[float, float]], starts: list[float], t: float) -> bool:
    """Whether a stretch of ``union`` (``_union``'s; ``starts`` their starts) covers ``t``."""
    k = bisect.bisect_right(starts, t)
    return k > 0 and union[k - 1][1] > t


_Pairs = tuple[list[tuple[float, float]], list[tuple[float, float]]]


def build_hosts(scenario: Scenario, models: dict[str, SimModel], *recs: Recording) -> dict[str, HostModel]:
    """Each model's ``HostModel`` from recordings of ``scenario`` (module docstring)."""
    by_index = {w.index: w for w in scenario.workloads}
    wake: dict[str, _Pairs] = {}  # (lateness, the request's hand-off or -1), by condition
    handoff: dict[str, tuple[list[float], list[float]]] = {}
    for rec in recs:
        _collect(rec, by_index, models, wake, handoff)
    out = {}
    for name in sorted({m for w in scenario.workloads for m in w.models if m in models}):
        wk, ho = wake.get(name, ([], [])), handoff.get(name, ([], []))
        if not (wk[0] or wk[1] or ho[0] or ho[1]):
            _log.warning("sim.calibrate.no_samples", model=name)
        out[name] = HostModel(_samples(wk, ho, False), _samples(wk, ho, True), "scenario")
    return out


def _collect(rec: Recording, by_index: dict[int, WorkloadSpec], models: dict[str, SimModel], wake: dict[str, _Pairs],
             handoff: dict[str, tuple[list[float], list[float]]]) -> None:
    """Add one recording's samples to ``wake`` and ``handoff``, by model and condition (the
    conditions from this recording's own timeline)."""
    held = {d: _union(v) for d, v in rec.held.items()}
    starts = {d: [s for s, _ in v] for d, v in held.items()}

    def busy_at(device: str, t: float) -> bool:
        return _busy_at(held.get(device, []), starts.get(device, []), t)

    for index, t0, issued, end, ok, req in rec.requests:
        w = by_index[index]
        service = -1.0
        if ok and not req.preempted and req.granted is not None and len(w.models) == 1 and w.model in models:
            service = max(0.0, end - issued - req.waited_s - models[w.model].cost_ns / 1e9)
            handoff.setdefault(w.model, ([], []))[req.busy].append(service)
        if w.arrival != "closed":
            wake.setdefault(w.model, ([], []))[busy_at(w.device, t0)].append((max(0.0, issued - t0), service))
    for index, due, late in rec.wakes:
        w = by_index[index]
        wake.setdefault(w.model, ([], []))[busy_at(w.device, due)].append((late, -1.0))


def _samples(wake: tuple[list[tuple[float, float]], list[tuple[float, float]]],
             handoff: tuple[list[float], list[float]], busy: bool) -> HostSamples:
    pairs = wake[busy] or wake[not busy] or [(0.0, -1.0)]
    paired = tuple(h for _, h in pairs)
    return HostSamples(tuple(w for w, _ in pairs), tuple(handoff[busy] or handoff[not busy] or [0.0]),
                       paired_s=paired if any(h >= 0.0 for h in paired) else ())


def _key(sim: SimModel, digest: str) -> str:
    return f"{sim.cache_key}:host:scenario:{digest}"


def _digest(calibs: Sequence[Scenario], models: Iterable[SimModel]) -> str:
    what = repr(([dataclasses.replace(c, source="", base_dir=".") for c in calibs],
                 [(m.name, m.cache_key, [round(c, 1) for c in m.base_costs_ns]) for m in models]))
    return hashlib.sha256(what.encode()).hexdigest()[:16]


def scenario_hosts(scenario: Scenario, models: dict[str, SimModel], seconds: float = CALIBRATION_S, *,
                   progress: TextIO | None = None) -> dict[str, HostModel]:
    """Each model's host model calibrated on ``scenario`` (module docstring): cached, or
    measured by a real-clock run of its calibration window (``seconds`` long). ``progress``:
    a stream for a status line while the calibration runs."""
    from nnrt.sim._real import check_real

    check_real(scenario)
    window = calibration_window(scenario, seconds)
    calibs = [calibration_scenario(scenario, window, run) for run in range(CALIBRATION_RUNS)]
    used: Sequence[str] = sorted({m for w in scenario.workloads for m in w.models if m in models})
    digest = _digest(calibs, (models[n] for n in used))
    cache = cost_cache()
    try:
        hosts = {n: cache.cached_host(_key(models[n], digest), len(models[n].base_costs_ns)) for n in used}
        if all(h is not None for h in hosts.values()):
            return {n: h for n, h in hosts.items() if h is not None}
        bar = Progress("nnrt simulate", 0, progress)
        recordings = []
        for k, calib in enumerate(calibs):
            bar.note(f"calibrating on the scenario: real-clock run {k + 1}/{len(calibs)} of {calib.duration_s:g} s "
                     "(once, then cached)...")
            recordings.append(record(calib, models))
        bar.close()
        built = build_hosts(calibs[0], models, *recordings)
        return {n: cache.put_host(_key(models[n], digest), built[n], len(models[n].base_costs_ns)) for n in used}
    finally:
        cache.save()


def record(calib: Scenario, models: dict[str, SimModel]) -> Recording:
    """Run ``calib`` on the real clock, recording what each request met."""
    from nnrt.sim._engine import _Run

    rec = Recording()
    run = _Run(calib, calib.seed, "nnrt", models, False, True, real=True, recording=rec)
    run.execute(None)
    for name, device in run.devices.items():
        rec.held[name] = [(s.start, s.end) for s in device.timeline or []]
    return rec
