"""The run engine: a scenario, a seed and a policy in, a ``Report`` out, in virtual time.

``simulate`` builds the scenario's models once (``_models``), then for each policy makes a
fresh ``VirtualTimeLoop``, one ``SimDevice`` per scenario device with that policy, and one
driver per workload, and runs the loop until every workload has sent its last request and
every request has ended. The apps' code is what an app would write: ``prepared.execute``,
a chain of ``execute_fenced`` calls, or ``burst.execute``, with a deadline relative to the
intended arrival time. Open-loop arrivals are armed as timers at their exact times (one
task per execution); closed-loop clients send, wait for the outcome, think, and send again.
With the host model (``overheads``), each model's samples are measured beside the costliest
model another workload runs on its device, run with that workload's idle gap
(``_neighbours``), and each request first waits its wake-up lateness (``nnrt.sim._overhead``);
with ``overheads="scenario"`` the samples come from a real run of the scenario's calibration
window instead (``nnrt.sim._calibrate``), which this engine runs with a ``Recording``: each
request's issue and end times and what the device saw of it (``nnrt.sim._real.Request``).

With ``real=True`` the same run happens on an ordinary asyncio loop on the real clock, with a
real ``CpuDevice`` per scenario device (``nnrt.sim._real``): every model is prepared first,
then the run's time starts, so arrival times and latencies count from the run's start
exactly as in virtual time, and the report has the same structure.

Each request's outcome is what its caller sees: success (latency from the intended arrival
to the end) or the ``NnrtError``'s status. For a fenced chain that is the status of the
first stage that failed (later stages only report that a wait-for fence failed).
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections import Counter
from collections.abc import Callable, Coroutine, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from nnrt._progress import Progress
from nnrt.clock import perf_ns
from nnrt.errors import NnrtError, error_for
from nnrt.execution import FencedExecutionCallback, PreparedModel
from nnrt.fences import SyncFence
from nnrt.sim._arrivals import arrival_times
from nnrt.sim._baselines import POLICIES, make_policy
from nnrt.sim._calibrate import CALIBRATION_S, Recording
from nnrt.sim._device import PAIRED, AccountingDevice, Segment, SimDevice
from nnrt.sim._loop import LoopClock, SimulationError, VirtualTimeLoop
from nnrt.sim._models import SimModel, load_models
from nnrt.sim._overhead import real_loop
from nnrt.sim._report import FAILURE_KEYS, ClassReport, DeviceReport, Report, RunStats, latency_summary, r
from nnrt.sim._scenario import ModelSpec, Scenario, ScenarioError, WorkloadSpec
from nnrt.types import ErrorStatus, Priority

__all__ = ["RunData", "SimulationResult", "simulate"]


@dataclass
class _Outcomes:
    offered: int = 0
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)

    def record(self, status: ErrorStatus, latency: float) -> None:
        if status is ErrorStatus.NONE:
            self.latencies.append(latency)
        else:
            self.statuses[status.name if status.name in FAILURE_KEYS else "other"] += 1


@dataclass
class RunData:
    """Raw figures of one run, for plots: latencies per class, segments per device."""

    policy: str
    latencies_s: dict[str, np.ndarray]
    timelines: dict[str, list[Segment]]
    simulated_s: float


@dataclass
class SimulationResult:
    """What ``simulate`` returns: one report per policy, the wall-clock stats, the raw data."""

    reports: list[Report]
    stats: list[RunStats]
    data: list[RunData]


class _Progress:
    """A one-line progress bar on stderr, redrawn at most five times a wall second."""

    def __init__(self, stream: TextIO, label: str, horizon: float) -> None:
        self.stream, self.label, self.horizon = stream, label, max(horizon, 1e-9)
        self.last = perf_ns()

    def tick(self, now: float) -> None:
        t = perf_ns()
        if t - self.last < 200_000_000:
            return
        self.last = t
        frac = min(1.0, now / self.horizon)
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{self.label}: [{bar:<30}] {frac * 100:5.1f}%  t={now:,.1f} s")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r" + " " * 79 + "\r")
        self.stream.flush()


def simulate(
    scenario: Scenario,
    *,
    seed: int | None = None,
    policies: Iterable[str] = ("nnrt",),
    compute: bool = False,
    timeline: bool = False,
    progress: TextIO | bool | None = None,
    real: bool = False,
    overheads: bool | str = False,
    calibration_s: float = CALIBRATION_S,
) -> SimulationResult:
    """Run ``scenario`` once per policy (see ``POLICIES``) and report.

    ``seed`` overrides the scenario's; ``compute`` runs the kernels too; ``timeline`` keeps
    every run segment (for plots); ``progress``: a stream for the progress bar, True for
    stderr when it is a terminal (None, the default), False for none. ``real``: run on the
    real clock with real devices and kernels instead (``nnrt.sim._real``; no progress bar),
    taking the scenario's duration in wall time; the scenario must not ask for what a real
    run cannot do (a device speed other than 1, model costs or jitter: ``ScenarioError``).
    ``overheads``: model the host too (``nnrt.sim._overhead``: wake-up lateness, hand-offs and
    kernel-time variance, alone and beside a busy unit; measured once per model and neighbour
    on this machine, then cached with the step costs). ``overheads="scenario"``: the host model
    is calibrated on the scenario itself instead (``nnrt.sim._calibrate``): a real-clock run of
    its first ``calibration_s`` seconds or more (``calibration_window``) with another seed,
    once, then cached; True or "probe": synthetic probes beside a neighbour model.
    """
    policies = list(policies)
    for p in policies:
        if p not in POLICIES:
            raise ScenarioError(f"--policy: unknown policy {p!r} (choose from {', '.join(POLICIES)})")
    if real:
        from nnrt.sim._real import check_real

        check_real(scenario)
    if overheads not in (False, True, "probe", "scenario"):
        raise ScenarioError(f"--overheads: unknown host model {overheads!r} (choose from probe, scenario)")
    seed = scenario.seed if seed is None else seed
    mode = "" if real or not overheads else ("scenario" if overheads == "scenario" else "probe")
    stream: TextIO | None
    if progress is None or progress is True:
        stream = sys.stderr if (progress is True or sys.stderr.isatty()) else None
    else:
        stream = progress or None
    models = _models(scenario, overheads=mode == "probe", progress=stream)
    if mode == "scenario":
        from nnrt.sim._calibrate import scenario_hosts

        for name, host in scenario_hosts(scenario, models, calibration_s, progress=stream).items():
            models[name].host = host
    if real:
        Progress("nnrt simulate", 0, stream).note(f"running on the real clock for {scenario.duration_s:g} s...")
        stream = None
    result = SimulationResult([], [], [])
    for policy in policies:
        run = _Run(scenario, seed, policy, models, compute, timeline, real)
        report, stats, data = run.execute(stream)
        result.reports.append(report)
        result.stats.append(stats)
        result.data.append(data)
    return result


def _models(scenario: Scenario, *, overheads: bool = False, progress: TextIO | None = None) -> dict[str, SimModel]:
    specs = {m.name: m for m in scenario.models}
    for w in scenario.workloads:
        for name in w.models:
            specs.setdefault(name, ModelSpec(name, builtin=name))
    return load_models(specs, overheads=overheads, neighbours=_neighbours(scenario) if overheads else None,
                       progress=progress)


def _neighbours(scenario: Scenario) -> dict[str, dict[str, float]]:
    """For each model, the models other workloads (and the other clients of its own closed loop)
    run on a device it runs on, with the idle gap between their executions (a closed loop's
    think time, an open loop's mean interval; the smallest if several workloads run it): the
    candidates for the neighbour its host model is measured beside (``load_models`` takes
    the costliest)."""
    from nnrt.sim._arrivals import expected_rate

    def gap(v: WorkloadSpec) -> float:
        if v.arrival == "closed":
            return v.think_s
        rate = expected_rate(v)
        if rate is None:  # a trace: its mean interval
            span = (max(v.trace) - min(v.trace)) if len(v.trace) > 1 else 1.0
            rate = max(len(v.trace) - 1, 1) / max(span, 1e-9)
        return 1.0 / rate if rate > 0 else 1.0

    out: dict[str, dict[str, float]] = {}
    for w in scenario.workloads:
        for m in w.models:
            mine = out.setdefault(m, {})
            for v in scenario.workloads:
                if v.device != w.device or (v is w and not (v.arrival == "closed" and v.clients > 1)):
                    continue
                for o in v.models:
                    mine[o] = min(mine.get(o, math.inf), gap(v))
    return out


class _Run:
    """One scenario under one policy."""

    def __init__(self, scenario: Scenario, seed: int, policy: str, models: dict[str, SimModel], compute: bool,
                 timeline: bool, real: bool = False, recording: Recording | None = None) -> None:
        self.scenario, self.seed, self.policy, self.models = scenario, seed, policy, models
        self.compute, self.timeline, self.real = compute, timeline, real
        self.recording = recording  # a real run recording what each request met (``_calibrate``)
        self.outcomes: dict[tuple[str, Priority], _Outcomes] = {}
        self.devices: dict[str, AccountingDevice] = {}
        self.clock: LoopClock | None = None
        self.model_costs: dict[str, tuple[float, str]] = {}  # real runs: the cost each model was prepared with
        self.end = 0.0  # the run's time when its last request ended

    # -- the run --------------------------------------------------------------------------------

    def execute(self, stream: TextIO | None) -> tuple[Report, RunStats, RunData]:
        sc = self.scenario
        horizon = max(w.start_s + (w.duration_s or 0.0) for w in sc.workloads)
        bar = _Progress(stream, f"simulating ({self.policy})", horizon) if stream is not None else None
        loop: asyncio.AbstractEventLoop
        if self.real:
            loop = real_loop()
        else:
            loop = VirtualTimeLoop(limit_s=sc.max_time_s, on_tick=bar.tick if bar else None)
        t0 = perf_ns()
        try:
            loop.run_until_complete(self._main())
        finally:
            _shut_down(loop)
            for d in self.devices.values():
                d.close()
            if bar is not None:
                bar.close()
        wall = (perf_ns() - t0) / 1e9
        assert self.clock is not None
        span = self.end
        report = self._report(span)
        stats = RunStats(self.policy, wall, span, report.executions, getattr(loop, "iterations", 0))
        data = RunData(
            self.policy,
            {f"{a}/{p.name}": np.asarray(o.latencies) for (a, p), o in self.outcomes.items()},
            {n: d.timeline or [] for n, d in self.devices.items()},
            span,
        )
        return report, stats, data

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        clock = self.clock = LoopClock(loop)
        sc = self.scenario
        weights: dict[Hashable, float] = {a.name: a.weight for a in sc.apps}
        for k, spec in enumerate(sc.devices):
            policy = make_policy(self.policy, spec.compute_units, app_weights=weights, fairness=spec.fairness,
                                 aging_s=spec.aging_s, max_queued_per_app=spec.max_queued_per_app)
            if self.real:
                from nnrt.sim._real import RealDevice

                self.devices[spec.name] = RealDevice(spec, clock, policy, timeline=self.timeline)
            else:
                self.devices[spec.name] = SimDevice(spec, clock, policy, seed=_seed(self.seed, 1_000 + k),
                                                    compute=self.compute, timeline=self.timeline)
        for w in sc.workloads:  # classes appear in the report in workload order
            self.outcomes.setdefault((w.app, w.priority), _Outcomes())
        prepared = [await self._prepare(w) for w in sc.workloads]
        if self.real:  # the run's time starts once everything is prepared
            clock.set_origin(loop.time())
            run = asyncio.gather(*(self._workload(w, p) for w, p in zip(sc.workloads, prepared)))
            try:
                await asyncio.wait_for(run, sc.max_time_s)
            except TimeoutError:
                raise SimulationError(f"the real-clock run passed its time limit max_time_s = {sc.max_time_s:g} s") from None
        else:
            await asyncio.gather(*(self._workload(w, p) for w, p in zip(sc.workloads, prepared)))
        self.end = clock.now()

    async def _prepare(self, w: WorkloadSpec) -> list[PreparedModel] | NnrtError:
        """The workload's prepared models, or why they could not be prepared."""
        device = self.devices[w.device]
        stages = []
        try:
            for m in w.models:
                sim = self.models[m]
                if w.devices and self.real:
                    raise ScenarioError(f"workloads[{w.index}].devices: a partitioned workload runs in virtual time only")
                if w.devices:  # partitioned across simulated devices
                    from nnrt.sim._partitioned import prepare_partitioned

                    across = [self.devices[n] for n in w.devices]
                    stages.append(prepare_partitioned(sim, across, w.app, w.priority))  # type: ignore[arg-type]
                elif isinstance(device, SimDevice):
                    stages.append(device.prepare(sim, w.app, w.priority))
                else:
                    from nnrt.sim._real import RealDevice

                    assert isinstance(device, RealDevice)
                    stage = await device.prepare(sim, w.app, w.priority)
                    self.model_costs.setdefault(m, (stage.plan.cost_ns, "calibrated in this run"))
                    stages.append(stage)
        except ScenarioError:
            raise
        except NnrtError as err:  # e.g. over the memory budget: every request fails the same way
            return err
        return stages

    async def _workload(self, w: WorkloadSpec, prepared: list[PreparedModel] | NnrtError) -> None:
        if isinstance(prepared, NnrtError):
            failure = prepared

            async def refused(t0: float) -> None:
                raise failure

            await self._drive(w, refused)
            return
        stages = prepared
        inputs = [self.models[m].inputs for m in w.models]
        deadline_s = w.deadline_s
        if w.mode == "burst":
            async with stages[0].burst(polling_window=0.0) as burst:

                async def one(t0: float) -> None:
                    await burst.execute(inputs[0], deadline=None if deadline_s is None else t0 + deadline_s)

                await self._drive(w, one)
            return
        if w.mode == "fenced":

            async def one(t0: float) -> None:
                await _fenced_chain(stages, inputs, None if deadline_s is None else t0 + deadline_s)
        else:
            first = stages[0]

            async def one(t0: float) -> None:
                await first.execute(inputs[0], deadline=None if deadline_s is None else t0 + deadline_s)

        await self._drive(w, one)

    async def _drive(self, w: WorkloadSpec, one: Callable[[float], Coroutine[Any, Any, None]]) -> None:
        outcomes = self.outcomes[w.app, w.priority]
        assert self.clock is not None
        now = self.clock.now
        # Host model: the loop wakes up late for a timer (``nnrt.sim._overhead``), later when a
        # unit of the device is busy. An open-loop arrival's lateness counts in its latency; a
        # closed-loop client's only delays its next request (it takes its time after waking).
        host = self.models[w.model].host
        device = self.devices[w.device]
        rng = np.random.default_rng(_seed(self.seed, 2_000 + w.index))

        def draw() -> tuple[float, float]:
            """A wake-up lateness of the condition now, and the hand-off paired with it (-1: none)."""
            assert host is not None
            samples = host.pick(isinstance(device, SimDevice) and device.holding > 0)
            k = int(rng.integers(len(samples.wake_s)))
            return samples.wake_s[k], samples.paired_s[k] if samples.paired_s else -1.0

        def wake() -> float:
            return draw()[0]

        late = host is not None and w.arrival != "closed"

        async def timed(t0: float) -> None:
            outcomes.offered += 1
            if late:
                lateness, paired = draw()
                await asyncio.sleep(lateness)
                if paired >= 0.0:  # the request's hand-off is the one its wake-up came with
                    PAIRED.set(paired)
            if self.recording is not None:
                await self._recorded(w, t0, one)
                return
            try:
                await one(t0)
            except NnrtError as err:
                outcomes.record(err.status, 0.0)
            else:
                outcomes.record(ErrorStatus.NONE, now() - t0)

        if w.arrival == "closed":
            await self._closed(w, timed, wake if host is not None else None)
        else:
            await self._open(w, arrival_times(w, np.random.default_rng(_seed(self.seed, w.index))), timed)

    async def _open(self, w: WorkloadSpec, times: np.ndarray, timed: Callable[[float], Coroutine[Any, Any, None]]) -> None:
        """Arm each arrival as a timer at its exact time; each request runs as its own task."""
        loop = asyncio.get_running_loop()
        assert self.clock is not None
        origin = self.clock.origin  # arrival times count from the run's start
        pending: set[asyncio.Task[None]] = set()
        done: asyncio.Future[None] = loop.create_future()
        arrivals = times.tolist()

        def arrive(k: int) -> None:
            task = loop.create_task(timed(arrivals[k]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            if k + 1 < len(arrivals):
                loop.call_at(origin + arrivals[k + 1], arrive, k + 1)
            else:
                done.set_result(None)

        if not arrivals:
            return
        loop.call_at(origin + arrivals[0], arrive, 0)
        await done
        while pending:
            await asyncio.gather(*list(pending))

    async def _closed(self, w: WorkloadSpec, timed: Callable[[float], Coroutine[Any, Any, None]],
                      wake: Callable[[], float] | None = None) -> None:
        """``w.clients`` clients: send, wait for the outcome, think (and wake up ``wake()`` late)."""
        assert self.clock is not None
        now = self.clock.now
        end = math.inf if w.duration_s is None else w.start_s + w.duration_s
        left = [math.inf if w.count is None else w.count]

        async def client() -> None:
            if w.start_s > now():
                await asyncio.sleep(w.start_s - now())
            while left[0] > 0 and now() < end:
                left[0] -= 1
                await timed(now())
                if w.think_s > 0:
                    due = now() + w.think_s
                    await asyncio.sleep(w.think_s + (wake() if wake is not None else 0.0))
                    if self.recording is not None:
                        self.recording.wakes.append((w.index, due, max(0.0, now() - due)))

        await asyncio.gather(*(client() for _ in range(w.clients)))

    async def _recorded(self, w: WorkloadSpec, t0: float, one: Callable[[float], Coroutine[Any, Any, None]]) -> None:
        """``one(t0)`` in a recording real run: what the request met (``nnrt.sim._calibrate``)."""
        from nnrt.sim._real import CURRENT, Request

        assert self.clock is not None and self.recording is not None
        outcomes = self.outcomes[w.app, w.priority]
        rec = Request()
        token = CURRENT.set(rec)
        issued = self.clock.now()
        ok = False
        try:
            await one(t0)
            ok = True
        except NnrtError as err:
            outcomes.record(err.status, 0.0)
        finally:
            CURRENT.reset(token)
        end = self.clock.now()
        if ok:
            outcomes.record(ErrorStatus.NONE, end - t0)
        self.recording.requests.append((w.index, t0, issued, end, ok, rec))

    # -- the report -----------------------------------------------------------------------------

    def _report(self, simulated: float) -> Report:
        span = max(simulated, 1e-12)
        classes = []
        for (app, prio), o in self.outcomes.items():
            tallies = [d.tallies[app, prio] for d in self.devices.values() if (app, prio) in d.tallies]
            queued = [q for t in tallies for q in t.queued_s]
            ok = len(o.latencies)
            classes.append(ClassReport(
                app=app,
                priority=prio.name,
                offered=o.offered,
                succeeded=ok,
                failures={k: o.statuses.get(k, 0) for k in FAILURE_KEYS},
                latency_ms=latency_summary(o.latencies),
                throughput_per_s=r(ok / span),
                on_time_pct=r(100.0 * ok / o.offered if o.offered else 0.0),
                preemptions=sum(t.preemptions for t in tallies),
                queued_ms_mean=r(1e3 * float(np.mean(queued)) if queued else 0.0),
                queued_ms_p99=r(1e3 * float(np.percentile(queued, 99)) if queued else 0.0),
                device_s=r(sum(t.device_s for t in tallies), 6),
                wasted_s=r(sum(t.wasted_s for t in tallies), 6),
            ))
        devices = []
        for d in self.devices.values():
            busy = sum(d.busy_s)
            devices.append(DeviceReport(
                name=d.name,
                units=d.compute_units,
                speed=d.speed,
                utilisation_pct=r(100.0 * busy / (span * d.compute_units), 2),
                unit_utilisation_pct=[r(100.0 * b / span, 2) for b in d.busy_s],
                device_s=r(busy, 6),
                wasted_s=r(sum(t.wasted_s for t in d.tallies.values()), 6),
            ))
        used = {m for w in self.scenario.workloads for m in w.models}
        models: dict[str, dict[str, object]] = {}
        for n, m in self.models.items():
            if n in used:
                cost_ns, source = self.model_costs.get(n, (m.cost_ns, m.cost_source))
                models[n] = {"cost_ms": r(cost_ns / 1e6, 4), "source": source, "steps": len(m.base_costs_ns)}
        return Report(self.scenario.name, self.seed, self.policy, r(simulated, 6), sum(o.offered for o in self.outcomes.values()),
                      models, classes, devices)


async def _fenced_chain(stages: list[PreparedModel], inputs: list[list[np.ndarray]], deadline: float | None) -> None:
    """Run ``stages`` as a chain of fenced executions; raise the first failed stage's error."""
    fence: SyncFence | None = None
    callbacks: list[FencedExecutionCallback] = []
    try:
        for prepared, args in zip(stages, inputs):
            fence, cb = await prepared.execute_fenced(args, wait_for=() if fence is None else (fence,), deadline=deadline)
            callbacks.append(cb)
        assert fence is not None
        await fence
    except NnrtError as err:
        for cb in callbacks:
            try:
                info = cb.get_execution_info()
            except NnrtError:
                continue
            if info.status is not ErrorStatus.NONE:
                raise error_for(info.status, f"stage failed: {err}") from err
        raise


def _seed(seed: int, stream: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, stream])


def _shut_down(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left (after an error), let it unwind, close the loop."""
    try:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if tasks:
            if isinstance(loop, VirtualTimeLoop):
                loop.limit_s = math.inf
            for t in tasks:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        # As asyncio.run does: join the default executor's threads (preparation runs there),
        # so none outlives the run.
        loop.run_until_complete(loop.shutdown_default_executor())
    except Exception:
        pass
    finally:
        loop.close()
