"""QoS on the real clock, in one run. Each figure is printed next to its bound.

(a) Preemption: a LOW model (the MobileNet-style block) runs continuously; HIGH requests of the
    same app arrive at random moments. From a HIGH request's arrival to its first kernel
    starting (the LOW execution has yielded by then): p99 <= longest LOW step + 0.2 ms.
(b) Isolation: HIGH p99 latency with LOW saturating the device <= HIGH-alone p99 + longest LOW
    step + 0.5 ms.
(c) Prompt expiry: a queued execution (another app's job holds the unit) whose deadline passes
    fails within 1 ms of it (p99).
(d) Overload: requests arrive at 2x the device's capacity with deadlines: on-time completions
    >= 90% of capacity, and fewer than 1% of admitted executions miss.
(e) Across apps, with LOW executions on niced worker threads (``low_priority_nice=10``)
    against the default (one set of threads): a HIGH app's requests at random moments (a
    small CNN, run on a worker, and the MLP, run on the loop thread) beside another app's LOW
    background on a two-unit device. "Beside": one LOW client thinking 10 ms between
    executions (as in the simulator's fidelity scenario), so a unit is usually free; "behind":
    two LOW clients without think time, so HIGH requests wait for a LOW execution to end.
    Rounds of the two devices alternate so the machine's load hits both alike. Printed: HIGH
    p50/p99 from arrival (timer due) to result, the ratios, and the LOW executions completed.
    Observed, no bound: the option is a trade-off (``nnrt.devices._cpu``).

The longest LOW step is measured (calibration at preparation, best of several runs) on this
machine in the same run. Run: python benchmarks/qos.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _common import quick_flag

import nnrt
from nnrt import Priority, zoo


def p99(values: list[float]) -> float:
    return float(np.percentile(values, 99)) if values else float("nan")


def show(name: str, value: float, bound: float, unit: str = "ms") -> None:
    verdict = "met" if value <= bound else "NOT met"
    sys.stdout.write(f"  {name:58} {value:8.3f} {unit}  (bound {bound:.3f} {unit}: {verdict})\n")


def stamp_first_kernel(prepared: nnrt.PreparedModel, starts: list[float]) -> None:
    step = prepared.plan.steps[0]
    fn = step.fn
    assert fn is not None

    def stamped(*args: object) -> object:
        starts.append(time.perf_counter())
        return fn(*args)

    step.fn = stamped


async def preemption_and_isolation(n: int) -> None:
    device = nnrt.CpuDevice(tune_process=True)
    low = await device.prepare_model(zoo.mobilenet_block(), priority=Priority.LOW, app="camera")
    high = await device.prepare_model(zoo.small_cnn(), priority=Priority.HIGH, app="camera")
    longest_ms = max(s.cost_ns for s in low.plan.steps) / 1e6
    x_low, x_high = zoo.example_inputs(low.model), zoo.example_inputs(high.model)
    starts: list[float] = []
    stamp_first_kernel(high, starts)
    rng = random.Random(0)

    async def high_requests() -> tuple[list[float], list[float]]:
        to_start, latency = [], []
        for _ in range(n):
            await asyncio.sleep(rng.uniform(0.001, 0.004))
            t = time.perf_counter()
            await high.execute(x_high)
            latency.append((time.perf_counter() - t) * 1e3)
            to_start.append((starts[-1] - t) * 1e3)
        return to_start, latency

    _, alone = await high_requests()
    stop = False

    async def saturate() -> None:
        while not stop:
            await low.execute(x_low)

    background = asyncio.create_task(saturate())
    await asyncio.sleep(0.01)
    to_start, loaded = await high_requests()
    stop = True
    await background
    pre = device.statistics().get("camera", Priority.LOW).preemptions
    sys.stdout.write(f"(a) preemption: {n} HIGH requests over a saturating LOW model; LOW preempted {pre} times; "
                     f"longest LOW step {longest_ms:.3f} ms\n")
    show("HIGH arrival -> its first kernel (LOW yielded), p99", p99(to_start), longest_ms + 0.2)
    sys.stdout.write("(b) isolation\n")
    sys.stdout.write(f"  {'HIGH alone, p99':58} {p99(alone):8.3f} ms\n")
    show("HIGH with LOW saturating, p99", p99(loaded), p99(alone) + longest_ms + 0.5)
    device.close()


async def prompt_expiry(n: int) -> None:
    device = nnrt.CpuDevice(tune_process=True)
    background = await device.prepare_model(zoo.mobilenet_block(), app="gallery")
    short = await device.prepare_model(zoo.one_add(), app="camera")
    x_bg = zoo.example_inputs(background.model)
    x = zoo.example_inputs(short.model)
    lateness: list[float] = []
    stop = False

    async def saturate() -> None:
        while not stop:
            await background.execute(x_bg)

    task = asyncio.create_task(saturate())
    await asyncio.sleep(0.005)
    for _ in range(n):
        deadline = nnrt.deadline_after(0.001)
        try:
            await short.execute(x, deadline=deadline)
        except nnrt.MissedDeadlineError:
            lateness.append((time.monotonic() - deadline) * 1e3)
        await asyncio.sleep(0.0005)
    stop = True
    await task
    sys.stdout.write(f"(c) prompt expiry: {len(lateness)} of {n} queued executions expired behind another app's job\n")
    show("failure time - deadline, p99", p99(lateness) if lateness else float("inf"), 1.0)
    device.close()


async def overload(seconds: float) -> None:
    device = nnrt.CpuDevice(tune_process=True)
    prepared = await device.prepare_model(zoo.small_cnn())
    x = zoo.example_inputs(prepared.model)
    t = time.perf_counter()
    k = 200
    for _ in range(k):
        await prepared.execute(x)
    service = (time.perf_counter() - t) / k
    capacity = 1.0 / service
    rate = 2.0 * capacity
    deadline_s = 10 * service
    counts = {"on_time": 0, "refused": 0, "missed_after_admission": 0}
    base = device.statistics().get("default", Priority.MEDIUM).completed

    async def one() -> None:
        try:
            await prepared.execute(x, deadline=nnrt.deadline_after(deadline_s))
        except nnrt.MissedDeadlineError:
            pass
        except nnrt.ResourceExhaustedError:
            counts["refused"] += 1
        else:
            counts["on_time"] += 1

    rng = np.random.default_rng(0)
    tasks = []
    start = time.perf_counter()
    next_at = start
    while next_at - start < seconds:
        next_at += rng.exponential(1.0 / rate)
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    stats = device.statistics().get("default", Priority.MEDIUM)
    refused = sum(stats.rejected.values())
    admitted = len(tasks) - refused
    missed = sum(stats.failures.values())
    on_time = stats.completed - base
    sys.stdout.write(f"(d) overload: service {service * 1e6:.0f} us -> capacity {capacity:.0f}/s; {len(tasks)} arrivals at "
                     f"{rate:.0f}/s over {elapsed:.2f} s, deadline {deadline_s * 1e3:.2f} ms\n")
    sys.stdout.write(f"  admitted {admitted}, refused at admission {refused}, completed on time {on_time}\n")
    ratio = on_time / (capacity * elapsed)
    verdict = "met" if ratio >= 0.9 else "NOT met"
    sys.stdout.write(f"  {'on-time completions / capacity':58} {ratio:8.3f}   (bound >= 0.900: {verdict})\n")
    miss = missed / admitted if admitted else 0.0
    show("admitted executions that missed", 100 * miss, 1.0, "%")
    device.close()


async def _across_apps_round(high: dict[str, nnrt.PreparedModel], low: nnrt.PreparedModel, clients: int,
                             seconds: float, rng: random.Random, latency: dict[str, list[float]]) -> int:
    """One round of (e): HIGH requests (each model in turn) from their due time to the
    result, beside ``clients`` LOW clients (thinking 10 ms when there is one); returns the
    LOW executions done."""
    loop = asyncio.get_running_loop()
    x_low = zoo.example_inputs(low.model)
    xs = {name: zoo.example_inputs(p.model) for name, p in high.items()}
    think = 0.010 if clients == 1 else 0.0
    stop, done = False, 0

    async def background() -> None:
        nonlocal done
        while not stop:
            await low.execute(x_low)
            done += 1
            await asyncio.sleep(think)

    tasks = [asyncio.create_task(background()) for _ in range(clients)]
    end = loop.time() + seconds
    while loop.time() < end:
        for name, prepared in high.items():
            due = loop.time() + rng.uniform(0.005, 0.030)
            await asyncio.sleep(due - loop.time())
            await prepared.execute(xs[name])
            latency[name].append((loop.time() - due) * 1e3)
    stop = True
    await asyncio.gather(*tasks)
    return done


async def across_apps(rounds: int, seconds: float) -> None:
    devices = {"niced": nnrt.CpuDevice(compute_units=2, low_priority_nice=10, tune_process=True),
               "default": nnrt.CpuDevice(compute_units=2, tune_process=True)}
    highs, lows = {}, {}
    for label, device in devices.items():
        highs[label] = {name: await device.prepare_model(zoo.build(name), priority=Priority.HIGH, app="camera")
                        for name in ("small_cnn", "mlp")}
        lows[label] = await device.prepare_model(zoo.mobilenet_block(), priority=Priority.LOW, app="background")
    sys.stdout.write(f"(e) across apps: HIGH requests and another app's LOW background, {rounds} rounds of {seconds:g} s "
                     "per device and case, alternated; LOW threads niced (+10) or not (default)\n")
    rng = random.Random(0)
    for case, clients in (("beside", 1), ("behind", 2)):
        latency: dict[str, dict[str, list[float]]] = {label: {name: [] for name in highs[label]} for label in devices}
        low_done = dict.fromkeys(devices, 0)
        for _ in range(rounds):
            for label in devices:
                low_done[label] += await _across_apps_round(highs[label], lows[label], clients, seconds, rng,
                                                            latency[label])
        for name in highs["niced"]:
            where = "loop thread" if highs["niced"][name].plan.inline else "worker"
            for label in devices:
                lat = latency[label][name]
                sys.stdout.write(f"  {case} LOW ({clients} client{'s' if clients > 1 else ''}), HIGH {name} ({where}), "
                                 f"{label:7} n={len(lat):4d}  p50 {float(np.percentile(lat, 50)):6.3f} ms  "
                                 f"p99 {p99(lat):6.3f} ms\n")
            p50s = [float(np.percentile(latency[label][name], 50)) for label in ("niced", "default")]
            p99s = [p99(latency[label][name]) for label in ("niced", "default")]
            sys.stdout.write(f"    niced / default: p50 {p50s[0] / p50s[1]:.2f}x, p99 {p99s[0] / p99s[1]:.2f}x\n")
        sys.stdout.write(f"  {case}: LOW executions completed: niced {low_done['niced']}, default {low_done['default']}\n")
    for device in devices.values():
        device.close()


async def main(quick: bool) -> None:
    await preemption_and_isolation(60 if quick else 300)
    await prompt_expiry(40 if quick else 200)
    await overload(0.5 if quick else 2.0)
    await across_apps(2 if quick else 6, 1.0 if quick else 2.0)


if __name__ == "__main__":
    asyncio.run(main(quick_flag()))
