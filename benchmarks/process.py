"""A driver in its own process (``nnrt.ProcessDevice``), against the in-process CPU device,
in one run:
(a) one-ADD round trip ([1, 4] float32): p50 and p99 of ``await execute`` through the service
    on its shared-memory rings, next to the same on an in-process ``CpuDevice`` and through a
    service over the socket (``ring_bytes=0``: the transport before the rings), interleaved,
    with the CPU time per call of this process and of the service (polling included; targets on
    an idle machine: p50 <= 40 us, p99 <= 200 us);
(b) what an input's size costs: a MEAN over a [1, n] float32 input (the output is [1, 1], so
    only the input's transport differs), 1 KB and 1 MB, passed as a location in a shared
    ``Memory`` (sent by name) and as a plain array (pickled over the socket at 1 KB, copied
    into the device's shared arena at 1 MB); the service's
    overhead over in-process execution of the same request, and the 1 MB / 1 KB ratio of that
    overhead for shared memory; then the same with a SLICE of the input's first element (output
    [1, 1]), whose compute does not grow with n, so only the input's size differs (target on
    that one: <= 1, i.e. the size costs nothing: with MEAN the 1 MB request also computes
    ~0.2 ms longer, long enough for both sides to stop polling and pay a wake-up each);
(b2) what an output's size costs: [1, 1] + a [1, n] constant (so only the output's transport
    differs), 1 KB and 1 MB, the output in a shared ``Memory`` location (written in place by
    the service), in a caller's array, and allocated; the service's overhead over in-process;
(c) a GIL-bound model (a chain of 200, then 2000, [1, 16] ADDs: Python overhead per
    operation), 8 executions in flight: throughput on two services (two ``ProcessDevice``s,
    requests alternating; on the rings, and over the socket as before them) against one
    in-process ``CpuDevice`` (target: >= 1.6x; needs two
    idle cores; the 200-op chain runs in about 0.1 ms in process, less than a round trip),
    with the CPU time per execution of the app and of the two services (load-robust: the
    throughput ratio needs app + service overhead <= ~25 us per call);
(d) ``kill -9`` of the service during a stream (64 executions in flight): time from the kill to
    the last in-flight call failing with DEAD_OBJECT (target < 100 ms), and time for
    ``restart()`` (the model re-prepared from a warm compilation cache) to the stream's next
    success (target < 1 s), without and with a standby service (``standby=True``).
Run: python benchmarks/process.py [--quick]
"""

from __future__ import annotations

import asyncio
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


def slice_model(n: int) -> Model:
    """The first element of a [1, n] input: a compute that does not grow with n."""
    m = Model(f"slice_{n}")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, n])
    begin = m.add_operand(T.TENSOR_INT32, [2])
    size = m.add_operand(T.TENSOR_INT32, [2])
    y = m.add_operand(T.TENSOR_FLOAT32, [1, 1])
    m.set_operand_value(begin, np.array([0, 0], np.int32))
    m.set_operand_value(size, np.array([1, 1], np.int32))
    m.add_operation(Op.SLICE, [x, begin, size], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def percentiles(samples: list[float]) -> tuple[float, float]:
    s = sorted(samples)
    return s[len(s) // 2], s[min(len(s) - 1, int(len(s) * 0.99))]


async def latencies(prepared: nnrt.PreparedModel, inputs: list[object], number: int) -> list[float]:
    out = []
    for _ in range(number):
        t = time.perf_counter()
        await prepared.execute(inputs)
        out.append((time.perf_counter() - t) * 1e6)
    return out


async def interleaved(a: nnrt.PreparedModel, b: nnrt.PreparedModel, inputs: list[object], number: int,
                      rounds: int) -> tuple[list[float], list[float]]:
    la: list[float] = []
    lb: list[float] = []
    await a.execute(inputs)
    await b.execute(inputs)
    for _ in range(rounds):
        la += await latencies(a, inputs, number)
        lb += await latencies(b, inputs, number)
    return la, lb


async def round_trip(cpu: nnrt.CpuDevice, proc: nnrt.ProcessDevice) -> None:
    print(f"(a) one-ADD round trip (load average {os.getloadavg()[0]:.2f})")
    model = zoo.one_add()
    x = np.ones((1, 4), np.float32)
    number = 400 if QUICK else 2000
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
    for label, lat in samples.items():
        p50, p99 = percentiles(lat)
        target = " (target <= 40 / 200 us idle)" if "rings" in label else ""
        report(f"{label} p50{target}", p50)
        report(f"{label} p99", p99)
        report(f"{label} app CPU per call", cpu_us[label] / len(lat))
        if label in svc_us:
            report(f"{label} service CPU per call", svc_us[label] / len(lat))
    print(f"  through the service (rings): eventfd writes in {number} calls: app {app_bells}, service {svc_bells}")
    base = percentiles(samples["in-process execute"])[0]
    ratio("service (rings) / in-process p50", percentiles(samples["through the service (rings)"])[0] / base)
    ratio("socket / rings p50", percentiles(samples["through the service (socket, before the rings)"])[0]
          / percentiles(samples["through the service (rings)"])[0])


async def input_size(cpu: nnrt.CpuDevice, proc: nnrt.ProcessDevice) -> None:
    for title, build, target in (("MEAN over [1, n]", mean_model, None),
                                 ("SLICE of [1, n]'s first element", slice_model, 1.0)):
        await input_size_of(cpu, proc, title, build, target)


async def input_size_of(cpu: nnrt.CpuDevice, proc: nnrt.ProcessDevice, title: str,
                        build: Callable[[int], Model], target: float | None) -> None:
    print(f"(b) input size: {title} float32, output [1, 1]")
    number, rounds = (100, 3) if QUICK else (300, 5)
    overhead: dict[str, float] = {}
    for label, n in (("1 KB", 256), ("1 MB", 262_144)):
        model = build(n)
        local, remote = await cpu.prepare_model(model), await proc.prepare_model(model)
        x = np.random.default_rng(0).standard_normal((1, n)).astype(np.float32)
        with Memory.from_shared_memory(size=x.nbytes) as mem:
            mem.buffer.view(np.float32)[:] = x.reshape(-1)
            loc = MemoryLocation(mem, 0, x.nbytes)
            la, lb = await interleaved(local, remote, [loc], number, rounds)
            _, lc = await interleaved(local, remote, [x], number, rounds)
        base, shared, plain = statistics.median(la), statistics.median(lb), statistics.median(lc)
        report(f"{label}: in-process (shared Memory input) median", base)
        report(f"{label}: service, shared Memory input (by name) median", shared)
        report(f"{label}: service, plain array input median", plain)
        overhead[label] = shared - base
        report(f"{label}: service overhead, shared Memory input", shared - base)
        report(f"{label}: service overhead, plain array input", plain - base)
    ratio("shared Memory overhead 1 MB / 1 KB", overhead["1 MB"] / max(overhead["1 KB"], 1e-9), target)


def broadcast_model(n: int) -> Model:
    """[1, 1] + a [1, n] constant: a tiny input, an output of n floats."""
    m = Model(f"broadcast_{n}")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 1])
    c = m.add_operand(T.TENSOR_FLOAT32, [1, n])
    act = m.add_operand(T.INT32)
    y = m.add_operand(T.TENSOR_FLOAT32, [1, n])
    m.set_operand_value(c, np.arange(n, dtype=np.float32).reshape(1, n))
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [x, c, act], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


async def output_size(cpu: nnrt.CpuDevice, proc: nnrt.ProcessDevice) -> None:
    print("(b2) output size: [1, 1] + a [1, n] constant, output [1, n] float32")
    number, rounds = (100, 3) if QUICK else (300, 5)
    overhead: dict[str, float] = {}
    x = np.ones((1, 1), np.float32)
    for label, n in (("1 KB", 256), ("1 MB", 262_144)):
        model = broadcast_model(n)
        local, remote = await cpu.prepare_model(model), await proc.prepare_model(model)
        with Memory.from_shared_memory(size=4 * n) as mem:
            cases: dict[str, list[object] | None] = {
                "shared Memory output (in place)": [MemoryLocation(mem, 0, 4 * n)],
                "caller's array output": [np.zeros((1, n), np.float32)],
                "no output buffer (result allocated)": None,
            }
            for case, outs in cases.items():
                la, lb = [], []
                for _ in range(rounds):
                    for samples, target in ((la, local), (lb, remote)):
                        for _ in range(number):
                            t = time.perf_counter()
                            await target.execute([x], outs)  # type: ignore[arg-type]
                            samples.append((time.perf_counter() - t) * 1e6)
                over = statistics.median(lb) - statistics.median(la)
                report(f"{label}: service overhead, {case}", over)
                overhead[f"{label} {case}"] = over
    ratio("shared Memory output overhead 1 MB / 1 KB", overhead["1 MB shared Memory output (in place)"]
          / max(overhead["1 KB shared Memory output (in place)"], 1e-9), 1.0)


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

        async def stream(targets: list[nnrt.PreparedModel], label: str = "") -> float:
            sem = asyncio.Semaphore(8)

            async def one(k: int) -> None:
                async with sem:
                    await targets[k % len(targets)].execute([x])

            s = sum(service_cpu_ns(d) for d in (d1, d2)) if label == "rings" else 0
            c, t = time.process_time(), time.perf_counter()
            await asyncio.gather(*(one(k) for k in range(total)))
            rate = total / (time.perf_counter() - t)
            if label:
                cpu[label] += (time.process_time() - c) * 1e6 / total
            if label == "rings":
                cpu["services"] += (sum(service_cpu_ns(d) for d in (d1, d2)) - s) / 1e3 / total
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
