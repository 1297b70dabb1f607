"""A driver in its own process (``nnrt.ProcessDevice``), against the in-process CPU device,
in one run:
(a) one-ADD round trip ([1, 4] float32): p50 and p99 of ``await execute`` through the service
    on its shared-memory rings, next to the same on an in-process ``CpuDevice`` and through a
    service over the socket (``ring_bytes=0``: the transport before the rings), interleaved,
    with the CPU time per call of this process and of the service (polling included; targets on
    an idle machine: p50 <= 40 us, p99 <= 200 us);
(b) what an input's size costs: a SLICE of a [1, n] float32 input's first element (output
    [1, 1]: compute that does not grow with n, so only the input's size differs), 1 KB and
    1 MB, passed as a location in a shared ``Memory`` (sent by name), in a ``Memory.from_file``
    pool (by its key) and as a plain array (inline in the ring packet at 1 KB, copied into the
    device's shared arena at 1 MB); the service's overhead over in-process execution of the
    same request and its 1 MB / 1 KB ratio (target for shared memory: <= 1, the size costs
    nothing), and the CPU per call of the app and the service on a service that never polls
    (``poll_us=0``: the transport's work, robust to the machine's load; with the same
    target), also running every request as a task (``inline_limit_ns=0``); then a MEAN over
    the input, on the default service and on one that polls for ``LONG_POLL_US``: the 1 MB
    MEAN computes ~0.2 ms, longer than the default 50 us poll window, so both sides stop
    polling and pay a wake-up each (compute time, not size: no target; the long-poll service
    keeps polling on an idle machine);
(b2) what an output's size costs: [1, 1] + a [1, n] constant (so only the output's transport
    differs), 1 KB and 1 MB, the output in a shared ``Memory`` and in a writable file
    ``Memory`` (written in place by the service), in a caller's array, and allocated; the
    service's overhead over in-process, on the default and the long-poll service (no target:
    the 1 MB ADD computes ~0.1 ms, so the default service's 1 MB figure includes two
    wake-ups, and a process that waited between requests computes it ~20 us slower than the
    in-process side's back-to-back runs: colder caches);
(c) a GIL-bound model (a chain of 200, then 2000, [1, 16] ADDs: Python overhead per
    operation), 8 executions in flight: throughput on two services (two ``ProcessDevice``s,
    requests alternating; on the rings, and over the socket as before them) against one
    in-process ``CpuDevice`` (target: >= 1.6x; needs two
    idle cores; the 200-op chain runs in about 0.1 ms in process, less than a round trip),
    with the CPU time per execution of the app and of the two services (load-robust: the
    throughput ratio needs app + service overhead <= ~25 us per call), the doorbells each side
    rang and the services' wake-ups per execution, and the throughput the CPU allows (both
    cores shared evenly; the app on one service's core, as the kernel usually places it);
(d) ``kill -9`` of the service during a stream (64 executions in flight): time from the kill to
    the last in-flight call failing with DEAD_OBJECT (target < 100 ms), and time for
    ``restart()`` (the model re-prepared from a warm compilation cache) to the stream's next
    success (target < 1 s), without and with a standby service (``standby=True``).
Run: python benchmarks/process.py [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _common import quick_flag, ratio, report

import nnrt
from nnrt import Model, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.memory import Memory, MemoryLocation

QUICK = quick_flag()


def mean_model(n: int) -> Model:
    m = Model(f"mean_{n}")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, n])
    axes = m.add_operand(T.TENSOR_INT32, [1])
    keep = m.add_operand(T.INT32)
    y = m.add_operand(T.TENSOR_FLOAT32, [1, 1])
    m.set_operand_value(axes, np.array([1], np.int32))
    m.set_operand_value(keep, 1)
    m.add_operation(Op.MEAN, [x, axes, keep], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def service_cpu_ns(dev: nnrt.ProcessDevice) -> int:
    """The service process's CPU time so far (its ``_rings`` hook: polling counts, as it should)."""
    return int(dev._test_call("_rings")[-1])


def eventfd_writes(dev: nnrt.ProcessDevice) -> tuple[int, int]:
    """Doorbells rung so far: by the app (requests) and by the service (results). Each is an
    ``eventfd`` write that wakes a sleeping peer; none is written while both sides poll."""
    service = dev._service
    assert service is not None and service.channel is not None
    return service.channel.request_bell.rung, int(dev._test_call("_rings")[3])


def percentiles(samples: list[float]) -> tuple[float, float]:
    s = sorted(samples)
    return s[len(s) // 2], s[min(len(s) - 1, int(len(s) * 0.99))]


async def latencies(prepared: nnrt.PreparedModel, inputs: list[object], number: int,
                    outputs: list[object] | None = None) -> list[float]:
    out = []
    for _ in range(number):
        t = time.perf_counter()
        await prepared.execute(inputs, outputs)  # type: ignore[arg-type]
        out.append((time.perf_counter() - t) * 1e6)
    return out


async def interleaved(a: nnrt.PreparedModel, b: nnrt.PreparedModel, inputs: list[object], number: int,
                      rounds: int, outputs: list[object] | None = None) -> tuple[list[float], list[float]]:
    la: list[float] = []
    lb: list[float] = []
    await a.execute(inputs, outputs)  # type: ignore[arg-type]
    await b.execute(inputs, outputs)  # type: ignore[arg-type]
    for _ in range(rounds):
        la += await latencies(a, inputs, number, outputs)
        lb += await latencies(b, inputs, number, outputs)
    return la, lb


async def round_trip(cpu: nnrt.CpuDevice, proc: nnrt.ProcessDevice) -> None:
    print(f"(a) one-ADD round trip (load average {os.getloadavg()[0]:.2f})")
    model = zoo.one_add()
    x = np.ones((1, 4), np.float32)
    # Rounds of 600 calls: the first call of a round finds the service asleep (another device ran
    # the round before) and costs a wake-up; with 80-call rounds those 5 wake-ups alone were the
    # p99 of 400 samples. What a sleeping service costs is printed apart below.
    number = 3000 if QUICK else 10000
    with nnrt.ProcessDevice("socket-transport", ring_bytes=0) as old:
        targets = {"in-process execute": await cpu.prepare_model(model),
                   "through the service (rings)": await proc.prepare_model(model),
                   "through the service (socket, before the rings)": await old.prepare_model(model)}
        devices = {"through the service (rings)": proc, "through the service (socket, before the rings)": old}
        samples: dict[str, list[float]] = {k: [] for k in targets}
        cpu_us: dict[str, float] = dict.fromkeys(targets, 0.0)
        svc_us: dict[str, float] = dict.fromkeys(devices, 0.0)
        for p in targets.values():
            await p.execute([x, x])
        bells = eventfd_writes(proc)
        for _ in range(5):  # interleaved rounds: drift in the machine's load hits all alike
            for label, p in targets.items():
                dev = devices.get(label)
                s = service_cpu_ns(dev) if dev is not None else 0
                c = time.process_time()
                samples[label] += await latencies(p, [x, x], number // 5)
                cpu_us[label] += (time.process_time() - c) * 1e6
                if dev is not None:
                    svc_us[label] += (service_cpu_ns(dev) - s) / 1e3
        app_bells, svc_bells = (b - a for a, b in zip(bells, eventfd_writes(proc)))
        idle: list[float] = []
        for _ in range(20 if QUICK else 100):  # a stream step every 20 ms: the service sleeps in between
            await asyncio.sleep(0.02)
            idle += await latencies(targets["through the service (rings)"], [x, x], 1)
    for label, lat in samples.items():
        p50, p99 = percentiles(lat)
        target = " (target <= 40 / 200 us idle)" if "rings" in label else ""
        report(f"{label} p50{target}", p50)
        report(f"{label} p99", p99)
        report(f"{label} app CPU per call", cpu_us[label] / len(lat))
        if label in svc_us:
            report(f"{label} service CPU per call", svc_us[label] / len(lat))
    print(f"  through the service (rings): eventfd writes in {number} calls: app {app_bells}, service {svc_bells}")
    report("through the service (rings), one call after 20 ms idle, p50", percentiles(idle)[0])
    base = percentiles(samples["in-process execute"])[0]
    ratio("service (rings) / in-process p50", percentiles(samples["through the service (rings)"])[0] / base)
    ratio("socket / rings p50", percentiles(samples["through the service (socket, before the rings)"])[0]
          / percentiles(samples["through the service (rings)"])[0])


#: The poll window of the second service (b) and (b2) measure on: long enough for both sides to
#: keep polling through a 1 MB MEAN or ADD (0.1-0.2 ms of compute) on an idle machine, without
#: the wake-ups a compute longer than the default window costs.
LONG_POLL_US = 2000.0
LONG = f" (poll {LONG_POLL_US:.0f} us)"
SIZES = (("1 KB", 256), ("1 MB", 262_144))
#: A case: (inputs, outputs) of an execution, per size.
Cases = dict[str, dict[str, tuple[list[object], list[object] | None]]]


async def size_costs(cpu: nnrt.CpuDevice, devices: dict[str, nnrt.ProcessDevice], build: Callable[[int], Model],
                     cases: Cases, target: float | None) -> None:
    """The service's overhead over in-process execution of each case at 1 KB and 1 MB, on each
    service (``devices``: tag -> device; the long-poll one measures the shared Memory cases
    only), all of it interleaved round by round (drift in the machine's load hits every figure
    alike); then the 1 MB / 1 KB ratios, ``target`` on the default service's shared Memory one."""
    number, rounds = (100, 3) if QUICK else (300, 5)
    preps = {}
    for label, n in SIZES:
        model = build(n)
        preps[label] = (await cpu.prepare_model(model), {tag: await d.prepare_model(model) for tag, d in devices.items()})
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        for label, _n in SIZES:
            local, remotes = preps[label]
            for case, (inputs, outputs) in cases[label].items():
                samples.setdefault(f"{label} in-process {case}", []).extend(await latencies(local, inputs, number, outputs))
                for tag, remote in remotes.items():
                    if tag and "shared Memory" not in case:
                        continue
                    samples.setdefault(f"{label} {case}{tag}", []).extend(await latencies(remote, inputs, number, outputs))
    overhead: dict[str, float] = {}
    for key, values in samples.items():
        label, rest = key[:4], key[5:]
        if rest.startswith("in-process"):
            continue
        case = next(c for c in cases[label] if rest.startswith(c))
        overhead[key] = statistics.median(values) - statistics.median(samples[f"{label} in-process {case}"])
        report(f"{label}: service overhead, {rest}", overhead[key])
    for key in [k[5:] for k in overhead if k.startswith("1 KB") and "array" not in k and "allocated" not in k]:
        goal = target if "shared Memory" in key and LONG not in key else None
        ratio(f"{key} overhead 1 MB / 1 KB", overhead[f"1 MB {key}"] / max(overhead[f"1 KB {key}"], 1e-9), goal)


async def input_size(cpu: nnrt.CpuDevice, proc: nnrt.ProcessDevice) -> None:
    with (nnrt.ProcessDevice("long-poll", poll_us=LONG_POLL_US) as polling, tempfile.TemporaryDirectory() as tmp,
          contextlib.ExitStack() as pools):
        cases: Cases = {}
        for label, n in SIZES:
            x = np.random.default_rng(0).standard_normal((1, n)).astype(np.float32)
            path = os.path.join(tmp, f"x{n}.bin")
            x.tofile(path)
            mem = pools.enter_context(Memory.from_shared_memory(size=x.nbytes))
            mem.buffer.view(np.float32)[:] = x.reshape(-1)
            fmem = pools.enter_context(Memory.from_file(path))
            cases[label] = {"shared Memory input": ([MemoryLocation(mem, 0, x.nbytes)], None),
                            "file Memory input": ([MemoryLocation(fmem, 0, x.nbytes)], None),
                            "plain array input": ([x], None)}
        print("(b) input size: SLICE of [1, n]'s first element float32, output [1, 1]")
        await size_costs(cpu, {"": proc}, zoo.first_element, cases, 1.0)
        await size_cpu(zoo.first_element, cases)
        print("(b) input size: MEAN over [1, n] float32, output [1, 1]")
        await size_costs(cpu, {"": proc, LONG: polling}, mean_model, cases, None)


async def size_cpu(build: Callable[[int], Model], cases: Cases) -> None:
    """CPU per call of this process and of the service, 1 KB and 1 MB interleaved, on a service
    that never polls (``poll_us=0``: no spinning counts, each side pays a wake-up at every
    size): the transport's work, whatever the machine's load does to wall time; on the same
    service running every request as a task (``inline_limit_ns=0``: the service's other path)."""
    number, rounds = (100, 3) if QUICK else (300, 5)
    inputs = ("shared Memory input", "file Memory input")
    with nnrt.ProcessDevice("no-poll", poll_us=0) as dev, nnrt.ProcessDevice("no-poll-task", poll_us=0,
                                                                           inline_limit_ns=0) as task:
        devices = {"": dev, ", run as a task": task}
        preps = {(tag, label): await d.prepare_model(build(n)) for tag, d in devices.items() for label, n in SIZES}
        cpu_us: dict[str, list[float]] = {}
        for _ in range(rounds):
            for (tag, label), prepared in preps.items():
                for case in inputs:
                    values, outputs = cases[label][case]
                    await latencies(prepared, values, 10, outputs)
                    s, c = service_cpu_ns(devices[tag]), time.process_time_ns()
                    await latencies(prepared, values, number, outputs)
                    spent = time.process_time_ns() - c + service_cpu_ns(devices[tag]) - s
                    cpu_us.setdefault(f"{label} {case}{tag}", []).append(spent / number / 1e3)
    for key, values in cpu_us.items():
        report(f"{key[:4]}: app + service CPU per call (poll_us=0), {key[5:]}", statistics.median(values))
    for tag in devices:
        for case in inputs:
            ratio(f"{case}{tag}: app + service CPU (poll_us=0) 1 MB / 1 KB",
                  statistics.median(cpu_us[f"1 MB {case}{tag}"]) / statistics.median(cpu_us[f"1 KB {case}{tag}"]),
                  1.0 if "shared" in case else None)


async def output_size(cpu: nnrt.CpuDevice, proc: nnrt.ProcessDevice) -> None:
    print("(b2) output size: [1, 1] + a [1, n] constant, output [1, n] float32")
    x = np.ones((1, 1), np.float32)
    with (nnrt.ProcessDevice("long-poll", poll_us=LONG_POLL_US) as polling, tempfile.TemporaryDirectory() as tmp,
          contextlib.ExitStack() as pools):
        cases: Cases = {}
        for label, n in SIZES:
            path = os.path.join(tmp, f"y{n}.bin")
            np.zeros(n, np.float32).tofile(path)
            mem = pools.enter_context(Memory.from_shared_memory(size=4 * n))
            fmem = pools.enter_context(Memory.from_file(path, writable=True))
            cases[label] = {"shared Memory output (in place)": ([x], [MemoryLocation(mem, 0, 4 * n)]),
                            "file Memory output (in place)": ([x], [MemoryLocation(fmem, 0, 4 * n)]),
                            "caller's array output": ([x], [np.zeros((1, n), np.float32)]),
                            "no output buffer (result allocated)": ([x], None)}
        await size_costs(cpu, {"": proc, LONG: polling}, zoo.broadcast_add, cases, None)


async def gil_bound(cpu: nnrt.CpuDevice, ops: int) -> None:
    print(f"(c) GIL-bound {ops}-ADD chain, 8 executions in flight")
    model = zoo.add_chain(ops, 16)
    x = zoo.example_inputs(model)[0]
    # At least 8 waves of 8 in flight: a single wave measures its start (every request sent at
    # once, both services woken) more than the throughput.
    total = max((80 if QUICK else 240) * 200 // ops, 64 if QUICK else 192)
    local = await cpu.prepare_model(model)
    with nnrt.ProcessDevice("svc-1") as d1, nnrt.ProcessDevice("svc-2") as d2, \
            nnrt.ProcessDevice("sock-1", ring_bytes=0) as s1, nnrt.ProcessDevice("sock-2", ring_bytes=0) as s2:
        remotes = [await d1.prepare_model(model), await d2.prepare_model(model)]
        sockets = [await s1.prepare_model(model), await s2.prepare_model(model)]

        cpu = {"local": 0.0, "rings": 0.0, "services": 0.0}
        # per execution on the rings: the app's doorbells (it rang a sleeping service), the
        # services' (they rang the sleeping app) and the services' wake-ups (they had run dry)
        calls = {"app doorbells": 0.0, "service doorbells": 0.0, "service wake-ups": 0.0}

        def counts() -> tuple[int, int, int]:
            rings = [d._test_call("_rings") for d in (d1, d2)]
            return (sum(eventfd_writes(d)[0] for d in (d1, d2)), sum(int(r[3]) for r in rings),
                    sum(int(r[5]) for r in rings))

        async def stream(targets: list[nnrt.PreparedModel], label: str = "") -> float:
            sem = asyncio.Semaphore(8)

            async def one(k: int) -> None:
                async with sem:
                    await targets[k % len(targets)].execute([x])

            s = sum(service_cpu_ns(d) for d in (d1, d2)) if label == "rings" else 0
            before = counts() if label == "rings" else (0, 0, 0)
            c, t = time.process_time(), time.perf_counter()
            await asyncio.gather(*(one(k) for k in range(total)))
            rate = total / (time.perf_counter() - t)
            if label:
                cpu[label] += (time.process_time() - c) * 1e6 / total
            if label == "rings":
                cpu["services"] += (sum(service_cpu_ns(d) for d in (d1, d2)) - s) / 1e3 / total
                for key, a, b in zip(calls, before, counts()):
                    calls[key] += (b - a) / total
            return rate

        await stream([local])
        await stream(remotes)
        await stream(sockets)
        a, b, c = [], [], []
        rounds = 3
        for _ in range(rounds):
            a.append(await stream([local], "local"))
            b.append(await stream(remotes, "rings"))
            c.append(await stream(sockets))
        print(f"  (load average {os.getloadavg()[0]:.2f})")
        report("in-process CpuDevice throughput", statistics.median(a), "exec/s")
        report("in-process CPU per execution", cpu["local"] / rounds)
        report("two services throughput (rings)", statistics.median(b), "exec/s")
        report("two services (rings): app CPU per execution", cpu["rings"] / rounds)
        report("two services (rings): services' CPU per execution", cpu["services"] / rounds)
        print("  two services (rings), per execution: " + ", ".join(f"{k} {v / rounds:.3f}" for k, v in calls.items()))
        # Three processes on two cores: at best both cores busy, 2 / (app + services' CPU); when
        # the app shares one core with one service (the kernel keeps a woken task where it ran),
        # that core carries the app's CPU and half the services': 1 / (app + services / 2).
        app_us, svc_us, local_us = cpu["rings"] / rounds, cpu["services"] / rounds, 1e6 / statistics.median(a)
        ratio("two services (rings): CPU bound, two cores shared evenly / in-process", 2 * local_us / (app_us + svc_us))
        ratio("two services (rings): CPU bound, the app on one service's core / in-process", local_us / (app_us + svc_us / 2))
        report("two services throughput (socket, before the rings)", statistics.median(c), "exec/s")
        ratio("two services (rings) / in-process", statistics.median(b) / statistics.median(a), 1.6, at_least=True)
        ratio("two services (socket) / in-process", statistics.median(c) / statistics.median(a))


async def death_and_recovery(standby: bool) -> None:
    print(f"(d) kill -9 during a stream, then restart from a warm compilation cache (standby={standby})")
    model = zoo.small_cnn()
    x = zoo.example_inputs(model)[0]
    to_dead, to_back = [], []
    with tempfile.TemporaryDirectory() as cache, nnrt.ProcessDevice(standby=standby) as dev:
        prepared = await dev.prepare_model(model, cache_dir=cache, token=bytes(32))
        for _ in range(2 if QUICK else 5):
            if standby:  # recovering with a spare assumes the spare had time to start
                await asyncio.to_thread(lambda: dev._spare_thread and dev._spare_thread.join())
            # 64 in flight: a service running small_cnn on its loop (inline) empties 8 within 5 ms
            tasks = [asyncio.create_task(prepared.execute([x])) for _ in range(64)]
            await asyncio.sleep(0.002)
            pid = dev.pid
            assert pid is not None
            t_kill = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            done: list[float] = []
            for task in tasks:
                try:
                    await task
                except nnrt.DeadObjectError:
                    done.append(time.perf_counter())
            if done:
                to_dead.append((max(done) - t_kill) * 1e3)
            t = time.perf_counter()
            await dev.restart()
            await prepared.execute([x])
            to_back.append((time.perf_counter() - t) * 1e3)
    if to_dead:
        report("kill -9 -> last in-flight call fails, median (target < 100)", statistics.median(to_dead), "ms")
        report("kill -9 -> last in-flight call fails, max", max(to_dead), "ms")
    else:
        print("  kill -9 -> last in-flight call fails: every call had finished before the kill (not measured)")
    report("restart + first success, median (target < 1000)", statistics.median(to_back), "ms")


async def main() -> None:
    cpu = nnrt.CpuDevice(name="in-process", tune_process=True)
    try:
        with nnrt.ProcessDevice() as proc:
            await round_trip(cpu, proc)
            await input_size(cpu, proc)
            await output_size(cpu, proc)
        for ops in (200, 2000):
            await gil_bound(cpu, ops)
        await death_and_recovery(False)
        await death_and_recovery(True)
    finally:
        cpu.close()


if __name__ == "__main__":
    print(f"benchmarks/process.py on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    asyncio.run(main())
