"""Burst executions against sequential ``await prepared.execute``, in one run (asyncio and uvloop).

For the one-ADD model and the MLP 784-256-256-10 from ``nnrt.zoo`` (inline on the loop when
their calibrated cost allows, as usual), and the MLP again on a device that runs every plan
on its worker thread (``inline_limit_ns=0``: what heavier models get, and the MLP too when
its calibration lands above the inline limit, which happens on this machine under load):

(a) pipelined throughput: a producer keeps 32 requests in flight in one burst (inputs and
    outputs in registered memory pools), against the same number of sequential
    ``await prepared.execute`` calls (targets: >= 1.0x on one-ADD, >= 1.3x on the MLP);
(b) one request in flight: ``await burst.execute`` latency against ``await prepared.execute``
    (target on the MLP: <= 1.5x);
(c) the polling window: (a) and (b) with the server's window at 0 and at NNAPI's 50 us;
(d) for information: ``burst.execute`` with plain numpy arrays (at once on ``execute``'s
    fast path when the plan runs inline, else transient slots through the server).

The baseline is the faster of ``execute(inputs)`` and ``execute(inputs, outputs=...)``.
Timings are medians of interleaved repetitions (the machine is shared).

Run: python benchmarks/burst.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import _common
import numpy as np
from _common import quick_flag, run_on_event_loops

import nnrt
from nnrt import zoo
from nnrt.execution._interpreter import fp_errors_ignored

IN_FLIGHT = 32


async def per_call(fn: Callable[[int], Awaitable[None]], number: int) -> float:
    """Microseconds per request for one run of ``fn(number)``."""
    t = time.perf_counter()
    await fn(number)
    return (time.perf_counter() - t) / number * 1e6


def pools(burst: nnrt.Burst, model: nnrt.Model) -> tuple[list[nnrt.burst.Location], list[nnrt.burst.Location]]:
    """Register one input pool and one output pool holding the model's example inputs."""
    xs = zoo.example_inputs(model)
    in_pool = nnrt.Memory(np.concatenate([x.reshape(-1).view(np.uint8) for x in xs]))
    out_ops = [model.operands[i] for i in model.output_indexes]
    out_pool = nnrt.Memory(np.zeros(sum(op.byte_size for op in out_ops), np.uint8))
    si, so = burst.register_memory(in_pool), burst.register_memory(out_pool)
    ins, offset = [], 0
    for x in xs:
        ins.append(burst.location(si, offset, x.nbytes, x.shape))
        offset += x.nbytes
    outs, offset = [], 0
    for op in out_ops:
        outs.append(burst.location(so, offset, op.byte_size, op.dimensions))
        offset += op.byte_size
    return ins, outs


class ThreadBound:
    """A toy threaded server: the kernels alone on a dedicated thread, back to back, for
    futures the loop queues; results resolved in batches of up to 16 (one
    ``call_soon_threadsafe`` per batch). No validation, no scheduler, no packets: what a
    burst server on its own thread could reach at best, with the GIL shared with the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, run_once: Callable[[], None]) -> None:
        self._loop = loop
        self._run_once = run_once
        self._queue: deque[asyncio.Future[None]] = deque()
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="burst-bench-thread-bound")
        self._thread.start()

    def submit(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self._loop.create_future()
        self._queue.append(fut)
        self._wake.set()
        return fut

    def _serve(self) -> None:
        fp_errors_ignored()
        queue, post = self._queue, self._loop.call_soon_threadsafe
        while not self._stop:
            self._wake.wait(0.05)
            self._wake.clear()
            done: list[asyncio.Future[None]] = []
            while queue:
                fut = queue.popleft()
                self._run_once()
                done.append(fut)
                if len(done) >= 16:
                    post(_resolve, done)
                    done = []
            if done:
                post(_resolve, done)

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join()


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for fut in futures:
        fut.set_result(None)


async def measure(device: nnrt.CpuDevice, model: nnrt.Model, number: int, repeat: int) -> dict[str, float]:
    prepared = await device.prepare_model(model)
    xs = zoo.example_inputs(model)
    out_ops = [model.operands[i] for i in model.output_indexes]
    bufs = [np.zeros(op.dimensions, op.type.dtype) for op in out_ops]
    bursts = {w: prepared.burst(polling_window=w) for w in (0.0, 50e-6)}
    locs = {}
    for w, b in bursts.items():
        await b.configure()
        locs[w] = pools(b, model)

    async def seq_plain(n: int) -> None:
        for _ in range(n):
            await prepared.execute(xs)

    async def seq_outs(n: int) -> None:
        for _ in range(n):
            await prepared.execute(xs, bufs)

    def pipelined(w: float, inline: bool) -> Callable[[int], Awaitable[None]]:
        burst, (ins, outs) = bursts[w], locs[w]

        async def run(n: int) -> None:
            burst._inline_ok = inline
            window: deque[asyncio.Future[nnrt.ExecutionResult]] = deque()
            for _ in range(n):
                if len(window) >= IN_FLIGHT:
                    await window.popleft()
                window.append(await burst.submit(ins, outs))
            for fut in window:
                await fut
            burst._inline_ok = True

        return run

    def one(w: float, inline: bool, eager: bool) -> Callable[[int], Awaitable[None]]:
        burst, (ins, outs) = bursts[w], locs[w]

        async def run(n: int) -> None:
            burst._inline_ok, burst._eager = inline, eager
            for _ in range(n):
                await burst.execute(ins, outs)
            burst._inline_ok = burst._eager = True

        return run

    async def arrays(n: int) -> None:
        for _ in range(n):
            await bursts[50e-6].execute(xs, bufs)

    steps = prepared.plan.steps
    template, inputs, outputs = prepared.plan.template, prepared.plan.inputs, prepared.plan.outputs

    def run_kernels() -> None:  # the model's kernels back to back, no runtime
        slots = template.copy()
        for i, x in zip(inputs, xs):
            slots[i] = x
        for step in steps:
            slots[step.out] = step.fn(*step.fetch(slots))  # type: ignore[misc]
        [slots[i] for i in outputs]

    async def kernels(n: int) -> None:
        for _ in range(n):
            run_kernels()

    bound = ThreadBound(asyncio.get_running_loop(), run_kernels)

    async def thread_bound(n: int) -> None:
        window: deque[asyncio.Future[None]] = deque()
        for _ in range(n):
            if len(window) >= IN_FLIGHT:
                await window.popleft()
            window.append(bound.submit())
        for fut in window:
            await fut

    cases: dict[str, Callable[[int], Awaitable[None]]] = {
        "seq_plain": seq_plain,
        "seq_outs": seq_outs,
        "pipe": pipelined(50e-6, True),
        "pipe_0": pipelined(0.0, False),
        "pipe_50": pipelined(50e-6, False),
        "one": one(50e-6, True, True),
        "one_eager": one(50e-6, False, True),
        "one_0": one(0.0, False, False),
        "one_50": one(50e-6, False, False),
        "arrays": arrays,
        "kernels": kernels,
        "thread": thread_bound,
    }
    for fn in cases.values():  # warm up
        await fn(max(IN_FLIGHT, number // 10))
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            samples[name].append(await per_call(fn, number))
    bound.close()
    for b in bursts.values():
        stats = b.statistics()
        assert stats.failed == 0, stats
        await b.close()
    sys.stdout.write(f"  {model.name}: calibrated cost {prepared.plan.cost_ns / 1e3:.1f} us, "
                     f"{'runs inline on the loop' if prepared.plan.inline else 'runs on the worker thread'}\n")
    return {k: statistics.median(v) for k, v in samples.items()}


def report(name: str, value: float, unit: str = "us") -> None:
    _common.report(name, value, unit, width=60)


def ratio(name: str, value: float, target: float | None, at_least: bool) -> None:
    _common.ratio(name, value, target, at_least=at_least, width=60)


async def main(quick: bool, loop_name: str) -> None:
    device = nnrt.CpuDevice(tune_process=True)
    # Every plan on the worker thread: what a heavier model, or an MLP whose calibration came
    # out above the inline limit, gets.
    on_worker = nnrt.CpuDevice(tune_process=True, inline_limit_ns=0)
    sys.stdout.write(f"[{loop_name}]\n")
    cases = (("one_add", device, zoo.one_add(), 2000, 1.0, None), ("mlp", device, zoo.mlp(), 400, 1.3, 1.5),
             ("mlp on the worker", on_worker, zoo.mlp(), 400, 1.3, 1.5))
    for name, dev, model, number, pipe_target, one_target in cases:
        n = number // 4 if quick else number
        r = await measure(dev, model, n, 3 if quick else 7)
        base = min(r["seq_plain"], r["seq_outs"])
        report(f"{name}: sequential await execute (no outputs)", r["seq_plain"])
        report(f"{name}: sequential await execute, outputs given", r["seq_outs"])
        report(f"{name}: burst, {IN_FLIGHT} in flight, default path (per request)", r["pipe"])
        report(f"{name}: burst, {IN_FLIGHT} in flight, server task, polling 0", r["pipe_0"])
        report(f"{name}: burst, {IN_FLIGHT} in flight, server task, polling 50 us", r["pipe_50"])
        report(f"{name}: burst, 1 in flight, default path", r["one"])
        report(f"{name}: burst, 1 in flight, eager (server code in the caller's task)", r["one_eager"])
        report(f"{name}: burst, 1 in flight, server task, polling 0", r["one_0"])
        report(f"{name}: burst, 1 in flight, server task, polling 50 us", r["one_50"])
        report(f"{name}: burst.execute with plain arrays", r["arrays"])
        report(f"{name}: the kernels alone, back to back (no runtime)", r["kernels"])
        report(f"{name}: toy threaded server, {IN_FLIGHT} in flight (kernels alone)", r["thread"])
        ratio(f"{name}: pipelined throughput / sequential (default path)", base / r["pipe"], pipe_target, True)
        ratio(f"{name}: pipelined throughput / sequential (server task, polling 50 us)", base / r["pipe_50"], None, True)
        ratio(f"{name}: pipelined throughput / sequential (server task, polling 0)", base / r["pipe_0"], None, True)
        ratio(f"{name}: ceiling of one-at-a-time: sequential / kernels alone", base / r["kernels"], None, True)
        ratio(f"{name}: toy threaded server (kernels alone on a thread) / sequential", base / r["thread"], None, True)
        ratio(f"{name}: 1-in-flight latency / await execute (default path)", r["one"] / base, one_target, False)
        ratio(f"{name}: 1-in-flight latency / await execute (eager)", r["one_eager"] / base, None, False)
        ratio(f"{name}: 1-in-flight latency / await execute (server, polling 50 us)", r["one_50"] / base, None, False)
        ratio(f"{name}: 1-in-flight latency / await execute (server, polling 0)", r["one_0"] / base, None, False)
    device.close()
    on_worker.close()


if __name__ == "__main__":
    quick = quick_flag()
    run_on_event_loops(lambda loop_name: main(quick, loop_name))
