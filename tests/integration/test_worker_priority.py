"""NNAPI priority reaching the OS, when asked (``CpuDevice(low_priority_nice=N)``): LOW
executions (and LOW bursts' batches) run on worker threads with a lower OS priority, HIGH and
MEDIUM ones on the ordinary workers; by default (``None``) one set of threads runs all; bad
values are INVALID_ARGUMENT."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import AsyncIterator, Callable

import pytest

import nnrt
from nnrt import ErrorStatus, Priority, zoo
from tests.helpers import on_trio_too

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")

Seen = list[tuple[str, int]]


def base_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def record_threads(prepared: nnrt.PreparedModel) -> Seen:
    """Every kernel of ``prepared`` records (thread name, its niceness) when it runs."""
    seen: Seen = []
    for step in prepared.plan.steps:
        fn = step.fn
        assert fn is not None

        def recording(*args: object, _fn: Callable[..., object] = fn) -> object:
            seen.append((threading.current_thread().name, base_nice()))
            return _fn(*args)

        step.fn = recording
    return seen


async def run_each(device: nnrt.CpuDevice) -> dict[Priority, Seen]:
    """One execution per priority of the one-ADD model, every step on a worker."""
    out = {}
    for priority in Priority:
        prepared = await device.prepare_model(zoo.one_add(), priority=priority, app="a")
        out[priority] = record_threads(prepared)
        await prepared.execute(zoo.example_inputs(prepared.model))
    return out


@pytest.fixture
async def device() -> AsyncIterator[nnrt.CpuDevice]:
    dev = nnrt.CpuDevice(compute_units=1, inline_limit_ns=0, low_priority_nice=10)  # every step runs on a worker
    yield dev
    dev.close()


async def test_low_executions_run_on_niced_threads(device: nnrt.CpuDevice) -> None:
    base = base_nice()
    seen = await run_each(device)
    assert seen[Priority.LOW] and all(name.startswith("nnrt-cpu-low") and nice == min(19, base + 10)
                                      for name, nice in seen[Priority.LOW])
    for priority in (Priority.MEDIUM, Priority.HIGH):
        assert seen[priority] and all(name.startswith("nnrt-cpu-worker") and nice == base for name, nice in seen[priority])


@pytest.mark.parametrize("nice", [None, 0])
async def test_by_default_one_set_of_threads_runs_all(nice: int | None) -> None:
    device = nnrt.CpuDevice(compute_units=1, inline_limit_ns=0, **({} if nice is None else {"low_priority_nice": nice}))
    try:
        assert device.low_priority_nice is None
        base = base_nice()
        seen = await run_each(device)
        assert all(name.startswith("nnrt-cpu-worker") and nice == base for s in seen.values() for name, nice in s)
        assert device.workers_for(Priority.LOW) is device.workers_for(Priority.HIGH)
    finally:
        device.close()


async def test_low_burst_batches_run_on_niced_threads(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add(), priority=Priority.LOW, app="a")
    seen = record_threads(prepared)
    async with prepared.burst() as burst:
        for _ in range(3):
            await burst.execute(zoo.example_inputs(prepared.model))
    assert len(seen) == 3 and all(name.startswith("nnrt-cpu-low") and nice == min(19, base_nice() + 10)
                                  for name, nice in seen)


async def test_close_stops_both_sets_of_threads(device: nnrt.CpuDevice) -> None:
    await run_each(device)
    low, normal = device.workers_for(Priority.LOW), device.workers_for(Priority.HIGH)
    assert low is not normal
    device.close()
    for pool in (low, normal):
        with pytest.raises(RuntimeError):
            pool.submit(int)
    seen = await run_each(device)  # started again on demand
    assert seen[Priority.LOW][0][0].startswith("nnrt-cpu-low")


@pytest.mark.parametrize("bad", [-1, 20, 1.5, True, "10"])
def test_bad_niceness_is_invalid_argument(bad: object) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="low_priority_nice") as info:
        nnrt.CpuDevice(low_priority_nice=bad)  # type: ignore[arg-type]
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


on_trio_too(globals())
