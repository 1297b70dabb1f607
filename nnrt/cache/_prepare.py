"""Preparation with the compilation cache, for devices that compile with ``compile_plan``.

``prepare_with_cache`` is ``prepare_model(..., cache_dir=, token=)``: like NNAPI's runtime it
tries the entry first and, on any failure, prepares in full (compiling with a ``RelayStore`` so
the re-laid constants are recorded) and rewrites the entry; a failure to write is logged and
never changes the preparation's result. ``load_from_cache`` is ``prepare_model_from_cache``:
the verified entry's model is compiled with the cached re-laid constants (kernel preparation
re-runs, but does not redo the expensive transforms) and the cached step costs (no calibration).

A plan prepared while compilations are deferred (``nnrt.ops._jit.deferring``: numba's cache
lacks some kernels) runs numpy kernels in their place: it takes its own cost estimates, not the
entry's, and writes no entry; the device's compiled plan that replaces it is not written either,
so the next preparation on the machine (its numba cache warm) writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nnrt._log import get_logger, vlog_enabled
from nnrt.cache._cache import read_entry, write_entry
from nnrt.clock import perf_ns
from nnrt.errors import GeneralFailureError, NnrtError
from nnrt.execution import Plan, compile_plan
from nnrt.model import Model
from nnrt.ops import _jit
from nnrt.ops._relay import RelayStore, relay_store

__all__ = ["load_from_cache", "prepare_with_cache"]

_log = get_logger("compilation")


def load_from_cache(cache_dir: str, key: bytes, meta: dict[str, Any], inline_limit_ns: float) -> tuple[Model, Plan]:
    """The prepared plan of a verified entry; GENERAL_FAILURE when there is none usable."""
    t = perf_ns()
    entry = read_entry(cache_dir, key, meta)
    store = RelayStore(entry.relaid)
    try:
        with relay_store(store):
            plan = compile_plan(entry.model)
    except NnrtError as err:
        raise GeneralFailureError(f"compilation cache: the cached model does not prepare ({err.message})") from None
    if not _jit.deferred_any():  # (else a provisional plan: the costs are the compiled plan's)
        if len(entry.costs) != len(plan.steps):
            raise GeneralFailureError(f"compilation cache: {len(entry.costs)} step costs for {len(plan.steps)} steps")
        for step, cost in zip(plan.steps, entry.costs):
            step.cost_ns = cost
    plan.set_inline_limit(inline_limit_ns)
    if vlog_enabled("compilation"):
        _log.debug("compilation.cache_loaded", model=entry.model.name, steps=len(plan.steps), relaid=store.reused,
                   took_us=(perf_ns() - t) / 1e3)
    return entry.model, plan


def prepare_with_cache(
    model: Model, cache_dir: str, key: bytes, meta: dict[str, Any], inline_limit_ns: float, compile_full: Callable[[Model], Plan]
) -> tuple[Model, Plan]:
    """Load the entry, or prepare ``model`` with ``compile_full`` and (re)write the entry."""
    try:
        return load_from_cache(cache_dir, key, meta, inline_limit_ns)
    except GeneralFailureError as err:
        if vlog_enabled("compilation"):
            _log.debug("compilation.cache_miss", model=model.name, reason=str(err))
    store = RelayStore()
    with relay_store(store):
        plan = compile_full(model)
    if _jit.deferred_any():  # a provisional plan: its costs are not the compiled plan's (written later)
        return model, plan
    try:
        write_entry(cache_dir, key, model, [s.cost_ns for s in plan.steps], store.computed, meta)
    except (OSError, NnrtError) as err:
        _log.warning("compilation.cache_write_failed", model=model.name, error=str(err))
    return model, plan
