"""Figures ``nnrt bench`` reports, computed without I/O: latency summaries and accuracy.

Accuracy follows MLTS's rules. A float output is within tolerance when every element meets
``|nnrt - ref| <= atol + rtol * |ref|`` (atol 1e-4, rtol 1e-3); ``tolerance_used`` is the
largest ``|nnrt - ref| / (atol + rtol * |ref|)`` (<= 1 passes), so one number says how close
the worst element came. A quantized output (nnrt operand with a scale) is compared in
quantized units: the largest integer difference, at most ``max_units`` (3 end to end).
``max_rel`` is taken over elements whose reference magnitude is at least ``atol`` (a relative
error against a near-zero reference says nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["ATOL", "MAX_UNITS", "RTOL", "Accuracy", "Latency", "compare", "summarize"]

ATOL, RTOL, MAX_UNITS = 1e-4, 1e-3, 3


@dataclass(frozen=True)
class Latency:
    """Latency percentiles of one mode, in milliseconds; ``cpu_p50``: the median CPU time the
    process spent per call (all its threads), which other processes' load does not inflate."""

    runs: int
    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    cpu_p50: float = float("nan")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(samples_ms: Sequence[float], cpu_ms: Sequence[float] = ()) -> Latency:
    arr = np.asarray(samples_ms, dtype=np.float64)
    if arr.size == 0:
        return Latency(0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan"))
    p = np.percentile(arr, [50, 90, 99])
    cpu = float(np.median(cpu_ms)) if len(cpu_ms) else float("nan")
    return Latency(int(arr.size), float(p[0]), float(p[1]), float(p[2]), float(arr.mean()), float(arr.min()), cpu)


@dataclass(frozen=True)
class Accuracy:
    """One output of nnrt against the reference's."""

    output: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    #: Largest integer difference for quantized outputs, else None.
    quant_units: int | None
    #: Largest |error| / (atol + rtol |ref|) for float outputs (<= 1 passes), else None.
    tolerance_used: float | None
    ok: bool
    problem: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def compare(name: str, got: Any, ref: Any, *, quantized: bool, max_units: int = MAX_UNITS) -> Accuracy:
    """nnrt's output ``got`` against the reference's ``ref``."""
    a = np.asarray(got)
    b = np.asarray(ref)
    if a.shape != b.shape:
        if a.size == b.size:  # the same values laid out differently (a squeezed dimension): compare them
            b = b.reshape(a.shape)
        else:
            return Accuracy(name, a.shape, float("inf"), float("inf"), None, None, False,
                            f"shape {list(a.shape)} but the reference gives {list(b.shape)}")
    if a.size == 0:
        return Accuracy(name, a.shape, 0.0, 0.0, 0 if quantized else None, None if quantized else 0.0, True)
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    if not np.isfinite(diff).all():
        same_nonfinite = np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[np.isinf(a)], b[np.isinf(b)])
        diff = np.where(np.isfinite(diff), diff, 0.0 if same_nonfinite else np.inf)
    mag = np.abs(np.nan_to_num(b.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0))
    max_abs = float(diff.max())
    big = mag >= ATOL
    max_rel = float((diff[big] / mag[big]).max()) if big.any() else 0.0
    if quantized:
        units = int(np.ceil(max_abs)) if np.isfinite(max_abs) else 2**31
        return Accuracy(name, a.shape, max_abs, max_rel, units, None, units <= max_units)
    used = float((diff / (ATOL + RTOL * mag)).max())
    return Accuracy(name, a.shape, max_abs, max_rel, None, used, used <= 1.0)
