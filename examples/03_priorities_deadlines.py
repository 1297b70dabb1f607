"""Priorities and deadlines: two apps share one device.

The "camera" app runs a long LOW-priority enhancement model (the MobileNet-style block) in the
background while a stream of short HIGH-priority frame classifications arrives, each with a
deadline; a MEDIUM request now and then. The "assistant" app runs its MLP at the same time.
HIGH work of the camera preempts the camera's own LOW work at the next operation boundary;
the assistant is never preempted by the camera (priorities are relative within an app), but
shares the device fairly. Run: python examples/03_priorities_deadlines.py
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict

import nnrt
from nnrt import Priority, zoo


async def main() -> None:
    device = nnrt.CpuDevice(tune_process=True)
    enhance = await device.prepare_model(zoo.mobilenet_block(), priority=Priority.LOW, app="camera")
    classify = await device.prepare_model(zoo.small_cnn(), priority=Priority.HIGH, app="camera")
    meta = await device.prepare_model(zoo.mlp(), priority=Priority.MEDIUM, app="camera")
    assistant = await device.prepare_model(zoo.mlp(), priority=Priority.MEDIUM, app="assistant")
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    latencies: dict[str, list[float]] = defaultdict(list)

    async def run(name: str, prepared: nnrt.PreparedModel, deadline_s: float | None = None) -> None:
        start = time.perf_counter()
        deadline = nnrt.deadline_after(deadline_s) if deadline_s else None
        try:
            await prepared.execute(zoo.example_inputs(prepared.model), deadline=deadline)
        except nnrt.NnrtError as err:
            outcomes[name][err.status.name] += 1
        else:
            outcomes[name]["succeeded"] += 1
            latencies[name].append((time.perf_counter() - start) * 1e3)

    async def background() -> None:
        for _ in range(6):
            await run("camera LOW enhance (no deadline)", enhance)

    async def frames() -> None:
        tasks = []
        for k in range(60):
            tasks.append(asyncio.create_task(run("camera HIGH classify (8 ms)", classify, 0.008)))
            if k % 10 == 0:
                tasks.append(asyncio.create_task(run("camera MEDIUM meta (20 ms)", meta, 0.020)))
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)

    async def assistant_load() -> None:
        for _ in range(40):
            await run("assistant MEDIUM mlp (no deadline)", assistant)
            await asyncio.sleep(0.001)

    t = time.perf_counter()
    await asyncio.gather(background(), frames(), assistant_load())
    print(f"ran for {(time.perf_counter() - t) * 1e3:.0f} ms on {device.compute_units} compute unit(s)\n")
    print(f"{'class':38} {'outcomes':44} {'p50 ms':>7} {'max ms':>7}")
    for name in sorted(outcomes):
        lat = sorted(latencies[name])
        p50 = f"{lat[len(lat) // 2]:7.2f}" if lat else "    n/a"
        worst = f"{lat[-1]:7.2f}" if lat else "    n/a"
        print(f"{name:38} {', '.join(f'{k} {v}' for k, v in sorted(outcomes[name].items())):44} {p50} {worst}")
    print("\nscheduler statistics:")
    for c in device.statistics().classes:
        if c.completed or c.failures or c.rejected or c.preemptions:
            rejected = {k.name: v for k, v in c.rejected.items()}
            failed = {k.name: v for k, v in c.failures.items()}
            print(f"  {c.app:10} {c.priority.name:6} completed {c.completed:3}  preemptions {c.preemptions:2}  "
                  f"rejected {rejected}  failed {failed}")
    device.close()


if __name__ == "__main__":
    asyncio.run(main())
