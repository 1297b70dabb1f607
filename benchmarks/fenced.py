"""Fenced execution costs, in one run (asyncio and uvloop):

(a) a chain of 3 models executed with fences, awaiting only the last fence, against the same
    three awaited one after the other with ``execute``: one-ADD models and the MLP
    784-256-256-10 (targets: <= 1.2x and <= 1.0x); batches of the two interleaved, medians;
(b) fence signal to the waiting execution's first kernel starting, against one asyncio future
    round trip (create_future + call_soon(set_result) + await) (target: <= 2x).

Run: python benchmarks/fenced.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _common import atimed as timed
from _common import atimed_pair, quick_flag, ratio, report, run_on_event_loops

import nnrt
from nnrt import zoo


async def chain_ratio(device: nnrt.CpuDevice, model: nnrt.Model, number: int) -> tuple[float, float]:
    prepared = [await device.prepare_model(model) for _ in range(3)]
    x = zoo.example_inputs(model)
    if len(x) == 2:  # one-ADD: each stage adds a constant input to the previous output
        shape, extra = x[0].shape, [x[1]]
    else:
        shape, extra = x[0].shape, []
    out_shape = tuple(model.operands[model.output_indexes[0]].dimensions)
    bufs = [np.zeros(out_shape, np.float32) for _ in range(3)]
    first = x[0]
    same_shape = out_shape == shape

    async def sequential() -> None:
        cur = first
        for k, p in enumerate(prepared):
            inp = cur if (same_shape or k == 0) else first
            cur = (await p.execute([inp, *extra])).outputs[0]

    async def fenced() -> None:
        fence: nnrt.SyncFence | None = None
        for k, p in enumerate(prepared):
            inp = (bufs[k - 1] if k else first) if same_shape else first
            fence, _ = await p.execute_fenced([inp, *extra], [bufs[k]], wait_for=[fence] if fence else [])
        assert fence is not None
        await fence

    return await atimed_pair(sequential, fenced, number)


async def signal_to_start(device: nnrt.CpuDevice, number: int) -> tuple[float, float]:
    prepared = await device.prepare_model(zoo.one_add())
    step = prepared.plan.steps[0]
    fn = step.fn
    assert fn is not None
    started: list[int] = []

    def stamp(*args: object) -> object:
        started.append(time.perf_counter_ns())
        return fn(*args)

    step.fn = stamp
    x = np.ones((1, 4), np.float32)
    gaps = []
    for _ in range(number):
        gate = nnrt.SyncFence()
        fence, _ = await prepared.execute_fenced([x, x], wait_for=[gate])
        await asyncio.sleep(0)
        t0 = time.perf_counter_ns()
        gate.signal()
        await fence
        gaps.append((started[-1] - t0) / 1e3)
    loop = asyncio.get_running_loop()

    async def round_trip() -> None:
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        await fut

    return statistics.median(gaps), await timed(round_trip, number * 10)


async def main(quick: bool, loop_name: str) -> None:
    device = nnrt.CpuDevice(tune_process=True)
    n = 100 if quick else 500
    sys.stdout.write(f"[{loop_name}]\n")
    seq, fen = await chain_ratio(device, zoo.one_add(), n)
    report("3 one-ADD models, sequential await execute", seq)
    report("3 one-ADD models, fenced chain, await last fence", fen)
    ratio("fenced / sequential (one-ADD)", fen / seq, 1.2)
    seq, fen = await chain_ratio(device, zoo.mlp(), n // 5)
    report("3 MLPs, sequential await execute", seq)
    report("3 MLPs, fenced chain", fen)
    ratio("fenced / sequential (MLP)", fen / seq, 1.0)
    gap, rt = await signal_to_start(device, n)
    report("fence signal -> execution's first kernel (median)", gap)
    report("asyncio future round trip", rt)
    ratio("signal-to-start / future round trip", gap / rt, 2.0)
    device.close()


if __name__ == "__main__":
    quick = quick_flag()
    run_on_event_loops(lambda loop_name: main(quick, loop_name))
