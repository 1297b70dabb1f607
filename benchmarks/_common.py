"""Helpers the benchmark scripts share: median timings, the figure and ratio lines they print,
the ``--quick`` flag and running a benchmark on asyncio and then uvloop.

Imported as ``_common`` by scripts run as ``python benchmarks/NAME.py`` (their folder is on
``sys.path``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

# Benchmarks measure the compiled kernels: a preparation compiles them at once, not in the
# background while a provisional numpy plan runs (``nnrt.devices._tier``).
os.environ.setdefault("NNRT_JIT_BACKGROUND", "0")

__all__ = ["atimed", "atimed_pair", "bench", "quick_flag", "ratio", "report", "run_on_event_loops"]


def bench(fn: Callable[[], object], number: int, repeat: int = 7) -> float:
    """Median microseconds per call over ``repeat`` batches of ``number`` calls."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number * 1e6)
    return statistics.median(times)


def best(fn: Callable[[], object], n: int) -> float:
    """The shortest of ``n`` timed calls, in seconds (one-off work such as loading a file)."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


async def atimed(fn: Callable[[], Awaitable[object]], number: int, repeat: int = 7) -> float:
    """Median microseconds per awaited call over ``repeat`` batches of ``number`` calls."""
    await fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            await fn()
        times.append((time.perf_counter() - t) / number * 1e6)
    return statistics.median(times)


async def atimed_pair(
    base: Callable[[], Awaitable[object]], other: Callable[[], Awaitable[object]], number: int, repeat: int = 11
) -> tuple[float, float]:
    """Median microseconds per awaited call of ``base`` and of ``other``, their batches
    interleaved (base, other, base, ...) so that drift in the machine's load hits both alike."""
    await base()
    await other()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, out in ((base, times[0]), (other, times[1])):
            t = time.perf_counter()
            for _ in range(number):
                await fn()
            out.append((time.perf_counter() - t) / number * 1e6)
    return statistics.median(times[0]), statistics.median(times[1])


def report(name: str, value: float, unit: str = "us", width: int = 56) -> None:
    """One measured figure."""
    sys.stdout.write(f"  {name:{width}} {value:9.2f} {unit}\n")


def ratio(name: str, value: float, target: float | None = None, *, at_least: bool = False, width: int = 56) -> None:
    """A ratio against a baseline measured in the same run, and whether it meets ``target``."""
    verdict = ""
    if target is not None:
        met = value >= target if at_least else value <= target
        verdict = f"  (target {'>=' if at_least else '<='} {target:.2f}x: {'met' if met else 'NOT met'})"
    sys.stdout.write(f"  {name:{width}} {value:9.2f}x{verdict}\n")


def quick_flag() -> bool:
    """Parse the command line: only ``--quick`` (fewer iterations)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    return bool(parser.parse_args().quick)


def run_on_event_loops(main: Callable[[str], Coroutine[Any, Any, None]]) -> None:
    """Run ``main(loop_name)`` on asyncio, then on uvloop when it is installed."""
    asyncio.run(main("asyncio"))
    try:
        import uvloop
    except ImportError:
        return
    uvloop.run(main("uvloop"))
