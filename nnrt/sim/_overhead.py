"""The host model: what a real execution costs beyond its calibrated kernels, measured on this machine.

Step costs are calibrated warm, alone and back to back (``CpuDevice``'s calibration keeps the
best of a few runs). ``benchmarks/fidelity.py`` traced where a real run's latency goes on
the reference machine (2 cores, one event loop thread and two device workers), and found
three host effects, each much larger when another compute unit is busy with kernels:

* **wake-up lateness**: the loop wakes late for an arrival's timer (the OS scheduling a
  sleeping thread; the GIL held by a worker running Python-level kernel code). Camera
  arrivals were late by 0.15 ms (median) while the device was otherwise idle, but by
  1.2 ms (median) and 3.7 ms (p90) while a background execution ran on the other unit;
* **hand-offs**: validation, admission and the hops loop -> worker -> loop cost 0.2-0.3 ms
  alone, with a tail of several ms when a neighbour holds the GIL or a core;
* **kernel time variance and interference**: a step takes longer than its calibrated best
  (cold caches after the thread slept) and much longer while another unit runs kernels
  (the MobileNet-style block's median went from 4.7 to 6.1 ms when it overlapped the camera).

So the host model keeps, per model and per *condition* (``alone``: no other unit busy;
``busy``: beside a neighbour execution on another unit), empirical samples of the three
quantities, measured together on real executions and drawn with the simulation's seeded
generators (so a scenario and seed still give a byte-identical report):

* ``wake_s``: from a timer's due time to the moment the execution is issued;
* ``handoff_s``: the execution's time minus the time spent inside its kernels;
* ``handback_s``: the part of it after the last kernel (the hop back to the loop and the
  result), paired with ``handoff_s`` sample by sample: a preempted execution pays one when it
  stops at a checkpoint (its unit is given back only once the loop hears of it) and the
  rest of its hand-off when it resumes;
* ``ratios``: per step (``walk_steps`` order), samples of the kernel's actual time over its
  calibrated cost.

``measure_host`` takes them on a real two-unit ``CpuDevice`` with the real drive path:
executions triggered by timers at random gaps (``gap_s``, like an app's arrivals; a thread
that slept long wakes later) while a *neighbour* model (the costliest other model on the
same scenario device; see ``nnrt.sim._engine``) runs closed-loop on the other unit with the
idle gap its workload has in the scenario (an intermittent neighbour matters: the trace
showed the loop often cannot wake until the neighbour's execution ends, which a neighbour
running back to back does not show). A probe's wake-up and hand-off count for the
condition when its timer was due, each kernel's time for the condition when it started;
if the neighbour is rarely busy, the missing busy samples are taken with it back to back.
The simulated device (``SimDevice``) then picks the condition from its own state: at an
arrival, whether any unit is busy; when an execution gets its unit, and all along each
step, whether another unit is busy. Samples are cached with the step costs
(``nnrt.sim._models``), so reports stay reproducible on one machine. Wake and hand-off
times are the host's and are not scaled by a device's ``speed``; ratios scale the
(speed-scaled) step costs.

The model is opt-in (``simulate(..., overheads=True)``, ``nnrt simulate --overheads``): it
makes a simulation describe *this* host as it was when measured, which is what a fidelity
check against a real run needs (``benchmarks/fidelity.py`` uses it), whereas a scenario
about an accelerator's QoS usually wants the device's kernel costs alone.
``overheads="scenario"`` (``nnrt.sim._calibrate``) fills the same ``HostModel`` from a short
real run of the scenario itself instead of these probes, which miss what the scenario's own
mix does to the host.

Limits. The condition is binary (the model does not tell one busy neighbour from two, nor
which model it runs, beyond the one measured beside). The loop thread is not a resource of
its own: two requests' host work never queue behind each other. Samples are a few hundred
draws, so tails beyond the largest measured one never happen, and that matters to the
admission estimate (``Plan.admission_cost_ns``), which one rare outlier can push over a
tight deadline. And the host is measured once: a real run on a machine loaded differently
(other processes on the two cores) has different tails.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnrt.clock import perf_ns
from nnrt.errors import InvalidArgumentError
from nnrt.model import Model

__all__ = ["CONDITIONS", "HostModel", "HostSamples", "measure_host", "real_loop"]

#: The two conditions of the host model, in the order ``HostModel.pick`` indexes them.
CONDITIONS = ("alone", "busy")


def real_loop() -> asyncio.AbstractEventLoop:
    """The event loop of real-clock runs: select() takes its timeout in µs, whereas epoll rounds
    it up to whole ms, which would make every timer fire up to 1 ms late (0.5 ms on average)."""
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


@dataclass(frozen=True, slots=True)
class HostSamples:
    """Host samples of one model under one condition (module docstring); all non-empty."""

    wake_s: tuple[float, ...]
    handoff_s: tuple[float, ...]
    #: Per step, samples of its actual kernel time / calibrated cost (each non-empty). Empty:
    #: no per-step samples (plans with control flow), kernels take their calibrated cost.
    ratios: tuple[tuple[float, ...], ...] = ()
    #: Per ``handoff_s`` sample, its part after the last kernel (empty: none measured, 0).
    handback_s: tuple[float, ...] = ()
    #: Per ``wake_s`` sample, the hand-off the same request then took (``nnrt.sim._calibrate``;
    #: -1: none, drawn from ``handoff_s``); empty: wake-ups and hand-offs are drawn apart.
    paired_s: tuple[float, ...] = ()

    def split(self, k: int) -> tuple[float, float]:
        """Hand-off sample ``k`` (modulo their number) as (hop back, the rest)."""
        total = self.handoff_s[k % len(self.handoff_s)]
        back = min(total, self.handback_s[k % len(self.handback_s)]) if self.handback_s else 0.0
        return back, total - back

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (rounded: the cache file stays small and stable)."""
        return {"wake_s": [round(w, 7) for w in self.wake_s], "handoff_s": [round(h, 7) for h in self.handoff_s],
                "ratios": [[round(x, 4) for x in row] for row in self.ratios],
                "handback_s": [round(h, 7) for h in self.handback_s], "paired_s": [round(h, 7) for h in self.paired_s]}

    @classmethod
    def from_json(cls, data: Any, n_steps: int) -> HostSamples | None:
        """Samples from ``to_json``'s form; None when malformed (then they are measured again)."""
        try:
            wake = tuple(float(w) for w in data["wake_s"])
            handoff = tuple(float(h) for h in data["handoff_s"])
            ratios = tuple(tuple(float(x) for x in row) for row in data["ratios"])
            back = tuple(float(h) for h in data["handback_s"])
            paired = tuple(float(h) for h in data.get("paired_s", ()))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        if (paired and len(paired) != len(wake)) or any(not (h >= 0.0 or h == -1.0) for h in paired):
            return None
        if not wake or not handoff or (ratios and len(ratios) != n_steps) or any(not row for row in ratios):
            return None
        if back and len(back) != len(handoff):
            return None
        if any(not (v >= 0.0) for v in (*wake, *handoff, *back)) or any(not (x > 0.0) for row in ratios for x in row):
            return None
        return cls(wake, handoff, ratios, back, paired)


@dataclass(frozen=True, slots=True)
class HostModel:
    """A model's host samples alone and beside a busy neighbour (module docstring)."""

    alone: HostSamples
    busy: HostSamples
    #: The model that ran on the other unit while ``busy`` was measured ("" if none did).
    neighbour: str = ""

    def pick(self, busy: bool) -> HostSamples:
        """The samples of the condition: another unit busy or not."""
        return self.busy if busy else self.alone


def measure_host(model: Model, inputs: Sequence[Any], neighbour: tuple[Model, Sequence[Any], float] | None = None, *,
                 samples: int = 160, gap_s: tuple[float, float] = (0.005, 0.035), seed: int = 0,
                 costs_ns: Sequence[float] | None = None) -> HostModel:
    """Measure ``model``'s host samples (module docstring). ``neighbour``: (model, inputs, idle
    gap in seconds) of the workload that shares the device, run closed-loop on the other unit
    with that gap between its executions, as the scenario runs it. Each probe execution
    counts for the condition of the moment its timer was due (neighbour executing or not).
    If the neighbour is rarely busy, the missing busy samples are taken with it back to back.
    Without a neighbour, the busy condition gets the alone samples. ``costs_ns``: the step
    costs the ratios are relative to (``walk_steps`` order; the simulation's own, so a
    noisy calibration here does not compound with another there); default: the ones the
    measuring device calibrated."""
    from nnrt.devices import CpuDevice
    from nnrt.sim._models import walk_steps

    loop = real_loop()
    rng = np.random.default_rng(seed)
    _Acc = tuple[list[float], list[float], list[list[float]], list[float]]

    async def run() -> HostModel:
        device = CpuDevice(name="nnrt-sim-host", compute_units=2, tune_process=True)
        try:
            prepared = await device.prepare_model(model)
            steps = list(walk_steps(prepared.plan))
            spent = [0] * len(steps)
            costs = [max(c, 1.0) for c in (costs_ns if costs_ns is not None else [s.cost_ns for s in steps])]
            if len(costs) != len(steps):
                raise InvalidArgumentError(f"costs_ns: has {len(costs)} costs; the model has {len(steps)} steps")
            timed = not prepared.plan.has_control_flow
            busy = [False]  # the neighbour is executing (set on the loop, read by the kernels' timer)
            began = [False] * len(steps)  # per step: the condition when it started
            last = [0]  # when the last kernel ended (perf_ns)
            if timed:  # time each kernel (the probe's executions never overlap one another)
                for k, step in enumerate(steps):
                    if step.fn is not None:
                        step.fn = _timing(step.fn, spent, began, busy, k, last)
            acc: dict[bool, _Acc] = {c: ([], [], [[] for _ in steps], []) for c in (False, True)}

            async def probe() -> None:
                when = loop.time() + float(rng.uniform(*gap_s))
                arrived: asyncio.Future[None] = loop.create_future()
                loop.call_at(when, arrived.set_result, None)
                state: list[bool] = []
                loop.call_at(when - 1e-6, lambda: state.append(busy[0]))  # the condition when it was due
                await arrived
                for k in range(len(spent)):
                    spent[k] = 0
                start = loop.time()
                await prepared.execute(inputs)
                end_ns = perf_ns()
                end = loop.time()
                wake, handoff, _, back = acc[state[0] if state else busy[0]]
                wake.append(max(0.0, start - when))
                handoff.append(max(0.0, end - start - sum(spent) / 1e9))
                if timed:
                    back.append(min(handoff[-1], max(0.0, (end_ns - last[0]) / 1e9)))
                if timed:
                    for k, (ns, c) in enumerate(zip(spent, costs)):
                        if steps[k].fn is not None:
                            acc[began[k]][2][k].append(max(ns, 1) / c)

            for _ in range(3):
                await prepared.execute(inputs)
            if neighbour is None:
                for _ in range(samples):
                    await probe()
                alone = HostSamples(*_tuples(acc[False], acc[False]))
                return HostModel(alone, alone)
            other = await device.prepare_model(neighbour[0])

            async def hog(gap: float, halt: asyncio.Event) -> None:
                while not halt.is_set():
                    busy[0] = True
                    try:
                        await other.execute(neighbour[1])
                    finally:
                        busy[0] = False
                    with contextlib.suppress(TimeoutError):  # gap 0 still lets the loop run (inline models)
                        await asyncio.wait_for(halt.wait(), gap)

            async def beside(gap: float, until: Any) -> None:
                halt = asyncio.Event()
                task = loop.create_task(hog(gap, halt))
                try:
                    while not until():
                        await probe()
                finally:
                    halt.set()
                    await task

            # As in the scenario: probes count for the condition they met; then, if the busy
            # condition is still short after twice the samples, the rest back to back.
            probes = [0]

            def enough() -> bool:  # (at most 3x the samples: a neighbour that is hardly ever idle)
                probes[0] += 1
                return probes[0] > 3 * samples or (
                    len(acc[False][0]) >= samples and (len(acc[True][0]) >= samples or probes[0] > 2 * samples))

            await beside(neighbour[2], enough)
            if len(acc[True][0]) < samples:  # a rarely busy neighbour: the rest back to back
                probes[0] = 0

                def busy_enough() -> bool:
                    probes[0] += 1
                    return len(acc[True][0]) >= samples or probes[0] > 4 * samples

                await beside(0.0, busy_enough)
            while len(acc[False][0]) < samples:  # a neighbour hardly ever idle: the rest without it
                await probe()
            alone = HostSamples(*_tuples(acc[False], acc[True]))
            if not acc[True][0]:  # never seen busy (an inline neighbour runs while the loop waits)
                return HostModel(alone, alone, neighbour[0].name)
            return HostModel(alone, HostSamples(*_tuples(acc[True], acc[False])), neighbour[0].name)
        finally:
            device.close()

    try:
        return loop.run_until_complete(run())
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


def _timing(fn: Any, spent: list[int], began: list[bool], busy: list[bool], k: int, last: list[int]) -> Any:
    def timed(*args: Any) -> Any:
        began[k] = busy[0]
        t = perf_ns()
        try:
            return fn(*args)
        finally:
            last[0] = perf_ns()
            spent[k] += last[0] - t

    return timed


def _tuples(parts: tuple[list[float], list[float], list[list[float]], list[float]],
            other: tuple[list[float], list[float], list[list[float]], list[float]]) -> tuple[Any, ...]:
    """A ``HostSamples``' fields; a step without samples in this condition borrows ``other``'s."""
    wake, handoff, ratios, back = parts
    rows = tuple(tuple(r if r else o) for r, o in zip(ratios, other[2]))
    if any(not r for r in rows):  # steps without a kernel (none is ever timed): calibrated cost
        rows = tuple(r or (1.0,) for r in rows)
    return tuple(wake), tuple(handoff), rows, tuple(back)
