"""Host overheads: what a real execution costs beyond its kernels, measured once per model.

Step costs are calibrated warm and back to back (``CpuDevice``'s calibration keeps the best
of a few runs). A real app's execution pays more, and ``benchmarks/fidelity.py`` shows it is
most of the latency of a small model: the event loop wakes up late for the arrival (the OS
scheduling a sleeping thread, on a machine shared with other work), and the execution itself
takes longer than its kernels (request validation, admission, the hand-off to a worker
thread and back, and kernels that start with cold caches after the thread slept).

``measure_overheads`` measures both for one model on a real ``CpuDevice``: executions
triggered by timers ``gap_s`` apart, as an app's arrivals are; each gives a *wake* sample
(the timer's lateness) and a *service* sample (the execution's time minus the model's
calibrated kernel time). ``simulate(..., overheads=True)`` then draws, for every request, a
wake sample before the request is issued (open-loop arrivals, and closed-loop clients that
think) and a service sample that the execution spends holding its compute unit before its
first step (``SimDevice``). The samples are cached with the step costs (``_models``), so
reports stay reproducible on one machine; they are not scaled by a device's ``speed``, since
they are the host's, not the accelerator's.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Sequence
from typing import Any

from nnrt.model import Model

__all__ = ["measure_overheads", "real_loop"]


def real_loop() -> asyncio.AbstractEventLoop:
    """The event loop of real-clock runs: select() takes its timeout in µs, whereas epoll rounds
    it up to whole ms, which would make every timer fire up to 1 ms late (0.5 ms on average)."""
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


def measure_overheads(model: Model, inputs: Sequence[Any], *, samples: int = 64,
                      gap_s: float = 0.02) -> tuple[list[float], list[float]]:
    """(wake, service) overhead samples in seconds for ``model`` (module docstring)."""
    from nnrt.devices import CpuDevice

    loop = real_loop()

    async def run() -> tuple[list[float], list[float]]:
        device = CpuDevice(name="nnrt-sim-overhead", compute_units=1)
        try:
            prepared = await device.prepare_model(model)
            kernels = prepared.plan.cost_ns / 1e9
            for _ in range(3):
                await prepared.execute(inputs)
            wake, service = [], []
            for _ in range(samples):
                when = loop.time() + gap_s
                arrived: asyncio.Future[None] = loop.create_future()
                loop.call_at(when, arrived.set_result, None)
                await arrived
                start = loop.time()
                await prepared.execute(inputs)
                end = loop.time()
                wake.append(max(0.0, start - when))
                service.append(max(0.0, end - start - kernels))
            return wake, service
        finally:
            device.close()

    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()
