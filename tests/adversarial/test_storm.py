"""A concurrency storm in one process: thousands of executions on every path (``execute``,
fenced chains whose upstream app fences signal or fail, bursts, device buffers), random
deadlines and random cancellation. Afterwards nothing is left: no task, no worker thread once
the device is closed, no scheduler entry, no device buffer, no reserved byte; every execution
that succeeded computed the reference result.
"""

from __future__ import annotations

import asyncio
import gc
import random
import threading
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import BufferDesc, BufferRole, zoo
from nnrt.memory import tracker_for
from tests.adversarial import _tally

EXECUTIONS = (2000, 40_000)


class _Storm:
    def __init__(self, device: nnrt.CpuDevice, rng: random.Random) -> None:
        self.device, self.rng = device, rng
        self.crashes = self.wrong = self.done = 0
        self.first_crash: BaseException | None = None
        self.first_wrong = ""

    def outcome(self, value: Any, want: list[np.ndarray] | None) -> None:
        """Count one finished request: a result (checked against ``want``) or an exception."""
        self.done += 1
        if isinstance(value, BaseException):
            if not isinstance(value, (nnrt.NnrtError, asyncio.CancelledError)):
                self.crashes += 1
                self.first_crash = self.first_crash or value
            return
        outs = value.outputs if isinstance(value, nnrt.ExecutionResult) else value
        if want is not None and not all(np.array_equal(a, b) for a, b in zip(outs, want)):
            self.wrong += 1
            self.first_wrong = self.first_wrong or f"got {outs}, want {want}"

    def deadline(self) -> float | None:
        r = self.rng.random()
        return None if r < 0.6 else nnrt.deadline_after(self.rng.choice((0.0, 0.0002, 0.002, 0.02, 1.0)))


async def _settle(storm: _Storm, make: Any, want: list[np.ndarray] | None) -> None:
    """Await ``make()`` (a factory: a task cancelled before it starts leaves no coroutine unawaited)."""
    try:
        value = await make()
    except BaseException as exc:  # counted, never lost
        storm.outcome(exc, want)
        return
    storm.outcome(value, want)


async def _fenced_chain(storm: _Storm, prepared: nnrt.PreparedModel, x: np.ndarray) -> None:
    """Three ADD stages after an app fence that signals, fails or is cancelled."""
    rng = storm.rng
    gate = nnrt.SyncFence()
    bufs = [np.empty((1, 4), np.float32) for _ in range(3)]
    fences, prev = [], x
    try:
        for k in range(3):
            fence, cb = await prepared.execute_fenced([prev, x], [bufs[k]], wait_for=[fences[-1] if fences else gate],
                                                      deadline=storm.deadline())
            fences.append(fence)
            prev = bufs[k]
            if rng.random() < 0.05:
                cb.cancel()
    except nnrt.NnrtError as exc:
        storm.outcome(exc, None)
        gate.signal()
        return
    fate = rng.random()
    if fate < 0.7:
        gate.signal()
    elif fate < 0.9:
        gate.signal_error(nnrt.ErrorStatus.GENERAL_FAILURE, "upstream failed")
    else:
        asyncio.get_running_loop().call_later(0.001, gate.signal)
    last = fences[-1]
    await _settle(storm, lambda: last, None)
    if last.state is nnrt.FenceState.SIGNALED:  # the chain computed x * 4
        storm.outcome([bufs[-1]], [x * 4])


async def _device_buffer_pair(storm: _Storm, prepared: nnrt.PreparedModel, x: np.ndarray) -> None:
    buf, _ = storm.device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
    try:
        await prepared.execute([x, x], [buf])
        result = await prepared.execute([buf, x])
    except BaseException as exc:
        storm.outcome(exc, None)
        return
    storm.outcome(result, [x * 3])


async def _run(storm: _Storm, n: int) -> None:
    rng, device = storm.rng, storm.device
    add = await device.prepare_model(zoo.one_add(), app="a")
    cnn = await device.prepare_model(zoo.small_cnn(), app="b", priority=nnrt.Priority.HIGH)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    cnn_in = zoo.example_inputs(zoo.small_cnn())
    cnn_want = list((await cnn.execute(cnn_in)).outputs)
    tasks: list[asyncio.Task[None]] = []
    async with add.burst() as burst:
        for _ in range(n):
            kind = rng.random()
            if kind < 0.45:
                coro: Any = _settle(storm, lambda: add.execute([x, x], deadline=storm.deadline()), [x * 2])
            elif kind < 0.55:
                coro = _settle(storm, lambda: cnn.execute(cnn_in, deadline=storm.deadline()), cnn_want)
            elif kind < 0.75:
                coro = _fenced_chain(storm, add, x)
            elif kind < 0.9:
                coro = _settle(storm, lambda: burst.execute([x, x], deadline=storm.deadline()), [x * 2])
            else:
                coro = _device_buffer_pair(storm, add, x)
            tasks.append(asyncio.ensure_future(coro))
            if rng.random() < 0.08:
                rng.choice(tasks).cancel()
            if rng.random() < 0.1:
                await asyncio.sleep(0)
        _, pending = await asyncio.wait(tasks, timeout=120)
    storm.hung = len(pending)  # type: ignore[attr-defined]
    for t in pending:
        t.cancel()


@pytest.mark.parametrize("seed", [1, 2])
def test_concurrency_storm_leaves_nothing_behind(seed: int) -> None:
    n = _tally.budget(*EXECUTIONS) // 2
    threads_before = {t.ident for t in threading.enumerate()}
    device = nnrt.CpuDevice(name=f"nnrt-storm-{seed}", calibrate=True, max_queued_per_app=128)
    storm = _Storm(device, random.Random(seed))

    async def main() -> int:
        await _run(storm, n)
        return len(asyncio.all_tasks()) - 1  # all but this one

    left_tasks = asyncio.run(main())
    stats = device.statistics()
    busy = stats.queued + stats.running + stats.busy_units
    gc.collect()
    leaks = {"tasks": left_tasks, "scheduler": busy, "ledger bytes": device.memory.in_use(),
             "device buffers": len(tracker_for(device))}
    device.close()
    leaks["threads"] = len([t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()])
    hung = getattr(storm, "hung", 0)
    _tally.record("storm (in process)", tries=n, crashes=storm.crashes, hangs=hung,
                  leaks=sum(1 for v in leaks.values() if v), wrong=storm.wrong)
    assert storm.crashes == 0, repr(storm.first_crash)
    assert hung == 0 and storm.wrong == 0, storm.first_wrong
    assert not any(leaks.values()), leaks
    assert storm.done >= n
