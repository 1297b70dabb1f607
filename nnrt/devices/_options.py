"""Checks of ``CpuDevice``'s constructor arguments, before anything is built from them.

The scheduler's policy asserts its own invariants with ``ValueError`` (a bug in its caller);
the device is the public boundary, so every option is checked here first, by type and value,
and a bad one is INVALID_ARGUMENT naming it. Kept apart from ``_cpu.py`` so that the device's
constructor stays a list of assignments.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

from nnrt.errors import InvalidArgumentError

__all__ = ["check_app", "check_cpu_options"]


def _bad(name: str, want: str, value: object) -> InvalidArgumentError:
    return InvalidArgumentError(f"CpuDevice: {name} must be {want}, not {value!r:.60}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_cpu_options(
    *,
    name: object,
    compute_units: object,
    blas_threads: object,
    inline_limit_ns: object,
    loop_slice_ns: object,
    fairness: object,
    app_weights: object,
    aging_s: object,
    max_queued_per_app: object,
    memory_budget: object,
    app_memory_limit: object,
    switch_interval_s: object,
) -> None:
    """INVALID_ARGUMENT naming the first bad option (see ``CpuDevice`` for their meaning)."""
    if not isinstance(name, str) or not name:
        raise _bad("name", "a non-empty str", name)
    for key, value, low in (("compute_units", compute_units, 1), ("blas_threads", blas_threads, 1),
                            ("max_queued_per_app", max_queued_per_app, 1), ("memory_budget", memory_budget, 0),
                            ("app_memory_limit", app_memory_limit, 0)):
        if value is not None and (not _is_int(value) or value < low):  # type: ignore[operator]
            raise _bad(key, f"None or an int >= {low}", value)
    if not _is_real(inline_limit_ns) or inline_limit_ns < 0:  # type: ignore[operator]
        raise _bad("inline_limit_ns", "a finite number >= 0", inline_limit_ns)
    if not _is_real(loop_slice_ns) or loop_slice_ns < 0:  # type: ignore[operator]
        raise _bad("loop_slice_ns", "a finite number >= 0", loop_slice_ns)
    if not _is_real(aging_s) or not aging_s > 0:  # type: ignore[operator]
        raise _bad("aging_s", "a finite number of seconds > 0", aging_s)
    if switch_interval_s is not None and (not _is_real(switch_interval_s) or not switch_interval_s > 0):  # type: ignore[operator]
        raise _bad("switch_interval_s", "None or a finite number of seconds > 0", switch_interval_s)
    if fairness not in ("round_robin", "weighted"):
        raise _bad("fairness", "'round_robin' or 'weighted'", fairness)
    if app_weights is not None:
        if not isinstance(app_weights, Mapping):
            raise _bad("app_weights", "None or a mapping of app to weight", app_weights)
        for app, weight in app_weights.items():
            if not isinstance(app, Hashable) or not _is_real(weight) or not weight > 0:
                raise _bad(f"app_weights[{app!r:.40}]", "a finite number > 0", weight)


def check_app(app: object, where: str) -> str:
    """An app name: a non-empty str (apps key the scheduler, the ledger and buffer tokens)."""
    if not isinstance(app, str) or not app:
        raise InvalidArgumentError(f"{where}: app must be a non-empty str, not {app!r:.60}")
    return app
