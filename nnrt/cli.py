"""The ``nnrt`` command: ``nnrt demo``, ``nnrt devices``, ``nnrt conformance``, ``nnrt simulate``, ``nnrt bench``.

nnrt's own commands run on uvloop where it is installed (``--loop asyncio`` to opt out);
library users keep whatever event loop they run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np

from nnrt import zoo
from nnrt.clock import deadline_after
from nnrt.devices import CpuDevice, Device, devices_from_config, get_devices
from nnrt.errors import NnrtError, error_for
from nnrt.model import Model
from nnrt.sched import ClassStatistics
from nnrt.types import ErrorStatus, Priority

__all__ = ["main"]

R = TypeVar("R")


def _write(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def run_async(main: Callable[[], Coroutine[Any, Any, R]], loop: str = "auto") -> R:
    """Run ``main`` on uvloop when available (``loop="auto"``/``"uvloop"``), else asyncio."""
    if loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise SystemExit("uvloop is not installed") from None
        else:
            result: R = uvloop.run(main())
            return result
    return asyncio.run(main())


def _percentiles(values_ms: Sequence[float]) -> str:
    if not values_ms:
        return "n/a"
    arr = np.asarray(values_ms)
    p = np.percentile(arr, [50, 90, 99])
    return f"p50 {p[0]:.3f} ms   p90 {p[1]:.3f} ms   p99 {p[2]:.3f} ms   max {arr.max():.3f} ms"


#: Executions run one by one before the concurrent ones (the first is cold: allocator, caches).
WARM_UP = 10
#: How the demo names a successful execution (NNAPI's status NONE).
SUCCEEDED = "succeeded"


def _outcome_text(outcomes: Counter[str]) -> str:
    """``succeeded 280, MISSED_DEADLINE_TRANSIENT 20``: successes first, then failures by status."""
    parts = [f"{SUCCEEDED} {outcomes[SUCCEEDED]}"]
    parts += [f"{k} {v}" for k, v in sorted(outcomes.items()) if k != SUCCEEDED]
    return ", ".join(parts)


def _refusal_text(cls: ClassStatistics) -> str:
    """Where the failures came from, each cause under its own name."""
    missed = sum(n for s, n in cls.rejected.items() if s in (ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                                                                ErrorStatus.MISSED_DEADLINE_PERSISTENT))
    full = sum(n for s, n in cls.rejected.items() if s in (ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                                                            ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT))
    other = sum(cls.rejected.values()) - missed - full
    text = (f"  of the failures: refused at admission as predicted to miss the deadline {missed}, refused because the "
            f"app's queue was full (RESOURCE_EXHAUSTED_TRANSIENT) {full}, ")
    if other:
        text += f"refused for another reason {other}, "
    return text + f"expired while queued {cls.expired}, aborted while running {cls.aborted}"


async def _demo(args: argparse.Namespace) -> int:
    device = CpuDevice(tune_process=True)  # nnrt's own process: the latency settings are ours to choose
    try:
        model = zoo.build(args.model)
        _write(f"nnrt demo: model {model.name} ({len(model.operations)} operations), device {device.name}, "
               f"{args.executions} executions, deadline {args.deadline_ms} ms")
        t = time.perf_counter()
        prepared = await device.prepare_model(model)
        _write(f"prepared in {(time.perf_counter() - t) * 1e3:.1f} ms; estimated cost {prepared.plan.cost_ns / 1e3:.1f} us")
        await _until_compiled(prepared)
        inputs = zoo.example_inputs(model)
        warm = await prepared.execute(inputs, measure_timing=True)
        _write(f"warm-up ({WARM_UP} executions), the first: output shape {list(warm.output_shapes[0].dimensions)}, "
               f"timing {warm.timing}")
        for _ in range(WARM_UP - 1):  # the admission estimate learns from a few warm executions, not one cold one
            await prepared.execute(inputs)
        if args.deadline_ms > 0:
            est_ms = prepared.plan.admission_cost_ns / 1e6
            fit = int(args.deadline_ms / est_ms * device.compute_units) if est_ms > 0 else args.executions
            share = (f"all {args.executions} should fit" if fit >= args.executions
                     else f"only about {fit} of the {args.executions} can finish in time")
            _write(f"admission: about {est_ms:.3f} ms per execution on {device.compute_units} compute unit(s); "
                   f"with all {args.executions} submitted at once and a {args.deadline_ms:g} ms deadline, {share}. "
                   "Those predicted to miss are refused at once (MISSED_DEADLINE_TRANSIENT) instead of queueing to fail")
        outcomes: Counter[str] = Counter()
        latencies: list[float] = []

        async def one() -> None:
            start = time.perf_counter()
            deadline = deadline_after(args.deadline_ms / 1e3) if args.deadline_ms > 0 else None
            try:
                await prepared.execute(inputs, deadline=deadline)
            except NnrtError as err:
                outcomes[err.status.name] += 1
            else:
                outcomes[SUCCEEDED] += 1
                latencies.append((time.perf_counter() - start) * 1e3)

        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(args.executions)))
        wall = time.perf_counter() - t
        _write(f"{args.executions} concurrent executions in {wall * 1e3:.1f} ms ({args.executions / wall:.0f}/s)")
        _write("outcomes: " + _outcome_text(outcomes))
        _write(_refusal_text(device.statistics().get("default", Priority.MEDIUM)))
        _write("latency of successful executions: " + _percentiles(latencies))
        if args.qos:
            await _demo_priorities(device, args.deadline_ms)
    finally:
        device.close()
    return 0


async def _until_compiled(prepared: Any) -> None:
    """Wait for a provisional plan's compiled successor (numba's cache lacked some kernels: the
    first run on a machine), saying so: the demo's figures are the compiled kernels'."""
    if not prepared.provisional:
        return
    t = time.perf_counter()
    _write(f"numba's cache lacks {len(set(prepared.plan.provisional))} of its kernels (the first run on this machine): "
           "they run on numpy while a helper process compiles them; waiting for the compiled plan")
    ok = await prepared.wait_compiled()
    state = "in place" if ok else "NOT in place (see the nnrt.jit log); going on with the numpy kernels"
    _write(f"compiled plan {state} after {time.perf_counter() - t:.1f} s")


async def _demo_priorities(device: CpuDevice, deadline_ms: float) -> None:
    """A LOW background model and a stream of HIGH requests with deadlines, in one app."""
    _write("\npriorities and deadlines: LOW mobilenet_block in the background, HIGH small_cnn every 1 ms")
    low = await device.prepare_model(zoo.mobilenet_block(), priority=Priority.LOW, app="demo-qos")
    high = await device.prepare_model(zoo.small_cnn(), priority=Priority.HIGH, app="demo-qos")
    for prepared in (low, high):
        await _until_compiled(prepared)
    outcomes: dict[str, Counter[str]] = {"LOW": Counter(), "HIGH": Counter()}
    high_ms: list[float] = []

    async def one(name: str, prepared: Any, deadline_s: float | None) -> None:
        start = time.perf_counter()
        try:
            deadline = deadline_after(deadline_s) if deadline_s else None
            await prepared.execute(zoo.example_inputs(prepared.model), deadline=deadline)
        except NnrtError as err:
            outcomes[name][err.status.name] += 1
        else:
            outcomes[name][SUCCEEDED] += 1
            if name == "HIGH":
                high_ms.append((time.perf_counter() - start) * 1e3)

    async def background() -> None:
        for _ in range(4):
            await one("LOW", low, None)

    async def stream() -> None:
        tasks = []
        for _ in range(50):
            tasks.append(asyncio.create_task(one("HIGH", high, deadline_ms / 1e3 if deadline_ms > 0 else None)))
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)

    await asyncio.gather(background(), stream())
    stats = device.statistics()
    for name, prio in (("LOW", Priority.LOW), ("HIGH", Priority.HIGH)):
        c = stats.get("demo-qos", prio)
        _write(f"  {name:4} outcomes: " + _outcome_text(outcomes[name]) + f"; preemptions {c.preemptions}")
    _write("  HIGH latency: " + _percentiles(high_ms))


def _devices(args: argparse.Namespace) -> int:
    try:
        devices = get_devices() + (devices_from_config(args.config) if args.config else [])
        _list_devices(devices)
        if args.model:
            _show_partitioning(args.model, devices)
    except NnrtError as err:
        sys.stderr.write(f"nnrt devices: {err}\n")
        return 2
    return 0


def _list_devices(devices: list[Device]) -> None:
    for dev in devices:
        _write(f"{dev.name}: {dev.type.name}, version {dev.version}, feature level {dev.feature_level}")
        limits = getattr(dev, "restrictions", None)
        if limits is not None:
            for what, names in (("operations", limits.operations), ("operand types", limits.operand_types)):
                _write(f"  {what}: " + ("all at its feature level" if names is None else " ".join(sorted(n.name for n in names))))
        caps = dev.capabilities
        figures = set(caps.operand_performance.values())
        if limits is not None and len(figures) == 1:
            (info,) = figures
            _write(f"  every type: exec time x{info.exec_time:.2f}, power x{info.power_usage:.2f} relative to the CPU")
            continue
        for t, info in sorted(caps.operand_performance.items()):
            _write(f"  {t.name:28} exec time x{info.exec_time:.2f} relative to {'float32' if limits is None else 'the CPU'}")


def _show_partitioning(name: str, devices: list[Device]) -> None:
    """What ``nnrt.prepare`` would do with the model on these devices."""
    from nnrt.framework import partition

    try:
        if name in zoo.NAMES:
            model = getattr(zoo, name)()
        elif name.endswith((".tflite", ".onnx")):
            from nnrt.importers import load

            model = load(name)
        else:
            model = Model.load(name)
    except NnrtError as err:
        raise error_for(err.status, f"--model {name}: {err.args[0]}") from None
    _write(f"model {model.name or name}: {len(model.operations)} operations")
    for dev in devices[1:]:
        for s in dev.operation_support(model):
            if not s.supported:
                _write(f"  {dev.name} does not run operation {s.operation} ({s.type.name}): {s.reason}")
    for k, step in enumerate(partition(model, devices)):
        _write(f"  step {k} on {step.device.name}: operations {', '.join(map(str, step.operations))}")


def _conformance(rest: list[str]) -> int:
    from nnrt.conformance.__main__ import main as conformance_main

    return conformance_main(rest)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nnrt", description="nnrt: an NNAPI-style execution runtime")
    parser.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto", help="event loop to run on")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build a small CNN, run concurrent executions, print latencies")
    demo.add_argument("--model", default="small_cnn", choices=sorted(zoo.NAMES))
    demo.add_argument("--executions", type=int, default=300)
    demo.add_argument("--deadline-ms", type=float, default=50.0, help="deadline per execution (0: none)")
    demo.add_argument("--no-qos", dest="qos", action="store_false", help="skip the priorities and deadlines phase")
    devs = sub.add_parser("devices", help="list devices and their capabilities (and how a model is partitioned)")
    devs.add_argument("--config", help="a TOML file of restricted devices to add ([devices.NAME])")
    devs.add_argument("--model", help="a built-in model, a saved one or a .tflite/.onnx file: its support and "
                                      "partitions on the devices")
    sub.add_parser("conformance", help="run the CTS conformance cases (python -m nnrt.conformance --help)", add_help=False)
    sub.add_parser("simulate", help="replay a QoS scenario in virtual time (nnrt simulate --help)", add_help=False)
    sub.add_parser("bench", help="benchmark a .tflite/.onnx model against its reference runtime (nnrt bench --help)",
                   add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "conformance":
        return _conformance(rest)
    if args.command == "simulate":
        from nnrt.sim._cli import main as simulate_main

        return simulate_main(rest)
    if args.command == "bench":
        from nnrt.bench import main as bench_main

        return bench_main(rest, loop=args.loop)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "demo":
        if args.executions <= 0:
            parser.error("--executions must be positive")

        async def go() -> int:
            return await _demo(args)

        return run_async(go, args.loop)
    return _devices(args)



if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
