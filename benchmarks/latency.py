"""Where ``await execute`` spends time beyond ``execute_sync``: the loop slice against the worker.

For models of a few milliseconds (the MobileNet-style block of ``nnrt.zoo``, the vendored
PaddleOCR direction classifier when its file is there), in one process, runs interleaved one
for one, each figure the median of its runs, wall clock and this process's CPU time:

* ``execute_sync``: the kernels and the interpreter, no scheduler, no event loop;
* ``await execute`` with a loop slice larger than the plan (``loop_slice_ns=5e6``): at once on the
  loop thread, as a cheap plan (no admission);
* ``await execute`` with the default slice (1 ms): admitted, run on the loop thread in slices,
  one loop iteration at each boundary;
* ``await execute`` on the worker thread (``loop_slice_ns=0``: before issue 14, and what every
  plan gets when another execution is admitted): a worker wake-up and a loop wake-up.

Then the cost of each path over ``execute_sync``: what the scheduler's bookkeeping, the loop's
checkpoints and the thread hand-offs add (CPU time counts both threads; a hand-off that waits
for a sleeping CPU shows in the wall clock only). The machine is shared: compare in one run.

Run: python benchmarks/latency.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _common import quick_flag, ratio, report

import nnrt
from nnrt import zoo
from nnrt.execution._plan import LOOP_SLICE_NS

PPOCR = Path(__file__).resolve().parents[1] / "tests" / "data" / "models" / "rapidocr_ch_ppocr_mobile_v2.0_cls_infer.onnx"

#: (label, device options)
PATHS = (
    ("at once on the loop (slice 5 ms)", {"loop_slice_ns": 5e6}),
    (f"loop slices ({LOOP_SLICE_NS / 1e6:g} ms, the default)", {}),
    ("worker thread (loop_slice_ns=0)", {"loop_slice_ns": 0}),
)


def models() -> list[tuple[str, nnrt.Model, list[np.ndarray]]]:
    block = zoo.mobilenet_block()
    found = [("MobileNet-style block", block, zoo.example_inputs(block))]
    if PPOCR.exists():
        from nnrt.importers import load

        cls = load(PPOCR, input_shapes={"x": [1, 3, 48, 192]})
        found.append(("ppocr mobile v2.0 cls", cls, [np.random.default_rng(0).standard_normal((1, 3, 48, 192), np.float32)]))
    return found


async def measure(name: str, model: nnrt.Model, inputs: list[np.ndarray], runs: int) -> None:
    devices = [nnrt.CpuDevice(tune_process=True, **opts) for _, opts in PATHS]  # type: ignore[arg-type]
    prepared = [await d.prepare_model(model) for d in devices]
    sync = prepared[1]
    plan = sync.plan
    sys.stdout.write(f"{name}: {len(plan.steps)} steps, calibrated {plan.cost_ns / 1e3:.0f} us, "
                     f"{sum(1 for s in plan.steps if s.stop)} stops in the default slices\n")
    calls: list[tuple[str, Callable[[], Any]]] = [("execute_sync", lambda: sync.execute_sync(inputs))]
    calls += [(f"await execute, {label}", lambda p=p: p.execute(inputs)) for (label, _), p in zip(PATHS, prepared)]
    wall: dict[str, list[float]] = {k: [] for k, _ in calls}
    cpu: dict[str, list[float]] = {k: [] for k, _ in calls}
    for k in range(runs + 5):
        for key, fn in calls:
            t, c = time.perf_counter(), time.process_time()
            result = fn()
            if asyncio.iscoroutine(result):
                await result
            if k >= 5:  # warm-up first
                wall[key].append((time.perf_counter() - t) * 1e3)
                cpu[key].append((time.process_time() - c) * 1e3)
            await asyncio.sleep(0)
    base_wall, base_cpu = statistics.median(wall["execute_sync"]), statistics.median(cpu["execute_sync"])
    for key, _ in calls:
        w, c = statistics.median(wall[key]), statistics.median(cpu[key])
        report(f"{key} (cpu {c:.3f} ms)", w, "ms", width=70)
    for key, _ in calls[1:]:
        w, c = statistics.median(wall[key]), statistics.median(cpu[key])
        report(f"  over execute_sync: {key[len('await execute, '):]} (cpu {(c - base_cpu) * 1e3:+.0f} us)",
               (w - base_wall) * 1e3, "us", width=70)
    ratio("await execute: default slices / worker thread (wall)",
          statistics.median(wall[calls[2][0]]) / statistics.median(wall[calls[3][0]]), width=70)
    for d in devices:
        d.close()


async def main() -> None:
    runs = 40 if quick_flag() else 200
    sys.stdout.write(f"await execute against execute_sync ({runs} interleaved runs; load average "
                     f"{os.getloadavg()[0]:.2f})\n")
    for name, model, inputs in models():
        await measure(name, model, inputs, runs)


if __name__ == "__main__":
    asyncio.run(main())
