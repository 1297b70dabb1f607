"""Arrival processes: the intended send times of an open-loop workload, from a seeded RNG.

Each workload draws from its own ``numpy.random.Generator`` (seeded with the scenario seed
and the workload's index), so adding a workload never changes another's arrivals. Times are
absolute seconds of virtual time, sorted:

* ``periodic``: ``start + k * period + U[0, jitter)``.
* ``poisson``: exponential gaps of mean ``1 / rate``.
* ``onoff``: bursty: a square wave of ``on`` seconds on and ``off`` seconds off (starting
  on), Poisson at ``rate`` while on; the mean rate is ``rate * on / (on + off)``. Drawn as a
  Poisson process on the "on" time axis, then spread over the wave.
* ``trace``: the file's times, shifted by ``start``.

A workload stops at ``count`` arrivals or at ``start + duration``, whichever comes first.
Closed-loop workloads have no intended times (each client sends when its previous request
ends plus the think time); the engine runs them.
"""

from __future__ import annotations

import math

import numpy as np

from nnrt.sim._scenario import WorkloadSpec

__all__ = ["arrival_times", "expected_rate"]

_CHUNK = 4096


def arrival_times(w: WorkloadSpec, rng: np.random.Generator) -> np.ndarray:
    """The open-loop arrival times of ``w`` (not for ``closed`` workloads)."""
    limit = math.inf if w.duration_s is None else w.duration_s
    count = w.count
    if w.arrival == "periodic":
        n = count if count is not None else math.ceil(limit / w.period_s)
        if count is not None and limit < math.inf:
            n = min(n, math.ceil(limit / w.period_s))
        times = np.arange(n) * w.period_s
        if w.jitter_s > 0:
            times = times + rng.uniform(0.0, w.jitter_s, n)
            times.sort()
    elif w.arrival == "poisson":
        times = _poisson(rng, w.rate_hz, count, limit)
    elif w.arrival == "onoff":
        cycle = w.on_s + w.off_s
        on_limit = math.inf
        if limit < math.inf:
            full, rest = divmod(limit, cycle)
            on_limit = full * w.on_s + min(rest, w.on_s)
        u = _poisson(rng, w.rate_hz, count, on_limit)
        times = np.floor(u / w.on_s) * cycle + np.mod(u, w.on_s)
    elif w.arrival == "trace":
        times = np.asarray(w.trace, dtype=np.float64)
        if count is not None:
            times = times[:count]
    else:
        raise ValueError(f"{w.arrival!r} has no intended arrival times")
    times = times[times < limit]
    return times + w.start_s


def _poisson(rng: np.random.Generator, rate: float, count: int | None, limit: float) -> np.ndarray:
    """Poisson arrival times from 0 until ``count`` of them or ``limit`` seconds."""
    parts: list[np.ndarray] = []
    t, n = 0.0, 0
    while True:
        k = _CHUNK if count is None else min(_CHUNK, count - n)
        if k <= 0:
            break
        ts = t + np.cumsum(rng.exponential(1.0 / rate, k))
        parts.append(ts)
        n += k
        t = float(ts[-1])
        if t >= limit:
            break
    return np.concatenate(parts) if parts else np.zeros(0)


def expected_rate(w: WorkloadSpec) -> float | None:
    """The long-run arrival rate (per second) an open-loop ``w`` is configured for."""
    if w.arrival == "periodic":
        return 1.0 / w.period_s
    if w.arrival == "poisson":
        return w.rate_hz
    if w.arrival == "onoff":
        return w.rate_hz * w.on_s / (w.on_s + w.off_s)
    return None
