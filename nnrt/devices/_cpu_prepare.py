"""How ``CpuDevice`` prepares a model: compilation on a thread, the compilation cache, the
memory ledger's reservation held until the prepared model is collected, and the placement of
the plan's steps on the loop thread or the workers (``Plan.set_inline_limit``).

Every route prepares through ``_deferred``: kernels whose compiled cores numba has not cached
on this machine yet run on numpy in a provisional plan, and ``_held`` starts its background
upgrade (``nnrt.devices._tier``).

A mixin of ``CpuDevice`` (``nnrt.devices._cpu``), apart so that the device's module keeps to
its execution path; ``RestrictedDevice`` and the simulator's device override ``_check_model``
and ``_compile`` here.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from nnrt._aio import to_thread
from nnrt._log import get_logger, vlog_enabled
from nnrt.cache import cache_key, check_cache_args, load_from_cache, prepare_with_cache
from nnrt.clock import Clock, check_deadline, perf_ns
from nnrt.devices._budget import MemoryLedger, model_footprint
from nnrt.devices._calibrate import calibrate as _calibrate
from nnrt.devices._device import Restrictions, check_preference_priority, check_preparation_args
from nnrt.devices._options import check_app
from nnrt.devices._tier import start_upgrade
from nnrt.errors import MissedDeadlineError
from nnrt.execution import Plan, PreparedModel, compile_plan
from nnrt.model import Model
from nnrt.ops import _jit
from nnrt.types import ErrorStatus, ExecutionPreference, Priority

if TYPE_CHECKING:
    from nnrt.execution._prepared import Driver

__all__ = ["CpuPreparation"]

_log = get_logger("driver")

_R = TypeVar("_R", Plan, tuple[Model, Plan])


class CpuPreparation:
    """``prepare_model``, ``prepare_model_from_cache`` and ``prepare_model_sync`` of the CPU
    device (the attributes below are ``CpuDevice``'s)."""

    name: str
    version: str
    clock: Clock
    memory: MemoryLedger
    restrictions: Restrictions | None
    inline_limit_ns: float
    loop_slice_ns: float
    calibrate: bool

    async def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: float | None = None,
        app: str = "default",
        cache_dir: str | os.PathLike[str] | None = None,
        token: bytes | None = None,
    ) -> PreparedModel:
        """Prepare ``model`` (see ``Device.prepare_model`` for the arguments and errors); with
        ``cache_dir`` and a 32-byte ``token``, through the compilation cache (``nnrt.cache``):
        a valid entry is loaded, else the model is prepared in full and the entry (re)written.
        Compilation and calibration run on a thread, not on the event loop."""
        self._check_model(model)
        pref, prio = check_preparation_args(model, preference, priority)
        if deadline is not None and self.clock.now() >= check_deadline(deadline, "prepare_model"):
            raise MissedDeadlineError("prepare_model: the deadline had passed", status=ErrorStatus.MISSED_DEADLINE_PERSISTENT)
        nbytes = self._reserve(model, app)
        try:
            if cache_dir is None and token is None:
                plan = await to_thread(self._deferred, self._compile, model)
            else:
                where, key, meta = self._cache_entry(cache_dir, token, pref, prio)
                model, plan = await to_thread(
                    self._deferred, prepare_with_cache, model, where, key, meta, self.inline_limit_ns, self._compile
                )
                self._place(plan)
        except BaseException:
            self.memory.release(app, nbytes)
            raise
        if vlog_enabled("driver"):
            _log.debug("driver.prepared", device=self.name, model=model.name, app=app, priority=prio.name,
                       preference=pref.name, bytes=nbytes, inline=plan.inline, cached=cache_dir is not None)
        return self._held(PreparedModel(cast("Driver", self), model, plan, preference=pref, priority=prio, app=app), nbytes)

    def _check_model(self, model: object) -> None:
        """INVALID_ARGUMENT for a model holding an operation the device's restrictions exclude."""
        if self.restrictions is not None:
            self.restrictions.check(model, self.name)

    def _reserve(self, model: Model, app: str) -> int:
        check_app(app, "prepare_model")
        nbytes = model_footprint(model)
        self.memory.reserve(app, nbytes, f"model {model.name or hex(id(model))}")
        return nbytes

    def _held(self, prepared: PreparedModel, nbytes: int) -> PreparedModel:
        """Release the prepared model's reservation when it is garbage collected; start the
        background upgrade of a provisional plan."""
        weakref.finalize(prepared, self.memory.release, prepared.app, nbytes)
        if prepared.plan.provisional:
            start_upgrade(self, prepared)
        return prepared

    @staticmethod
    def _deferred(prepare: Callable[..., _R], *args: Any) -> _R:
        """``prepare(*args)`` (a preparation route, giving the plan or the model and plan) with
        compilations numba's cache cannot serve deferred (``nnrt.ops._jit.deferring``): such a
        plan comes back ``provisional``, naming the kernels it runs on numpy."""
        with _jit.deferring(_jit.background()) as misses:
            result = prepare(*args)
        if misses:
            plan = result if isinstance(result, Plan) else result[1]
            plan.provisional = tuple(dict.fromkeys(misses.names))
        return result

    async def prepare_model_from_cache(
        self,
        cache_dir: str | os.PathLike[str],
        token: bytes,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        app: str = "default",
    ) -> PreparedModel:
        """The model cached under ``token`` (with this preference and priority), without a full
        preparation. A missing, damaged or foreign entry is GENERAL_FAILURE."""
        pref, prio = check_preference_priority(preference, priority)
        where, key, meta = self._cache_entry(cache_dir, token, pref, prio)
        model, plan = await to_thread(self._deferred, load_from_cache, where, key, meta, self.inline_limit_ns)
        self._place(plan)
        nbytes = self._reserve(model, app)
        return self._held(PreparedModel(cast("Driver", self), model, plan, preference=pref, priority=prio, app=app), nbytes)

    def _cache_entry(self, cache_dir: object, token: object, pref: ExecutionPreference,
                     prio: Priority) -> tuple[str, bytes, dict[str, Any]]:
        where, tok = check_cache_args(cache_dir, token)
        meta = {"device": self.name, "version": self.version, "preference": int(pref), "priority": int(prio)}
        return where, cache_key(tok, self.name, self.version, pref, prio), meta

    def prepare_model_sync(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        app: str = "default",
    ) -> PreparedModel:
        """``prepare_model`` for code without an event loop."""
        self._check_model(model)
        pref, prio = check_preparation_args(model, preference, priority)
        nbytes = self._reserve(model, app)
        try:
            plan = self._deferred(self._compile, model)
        except BaseException:
            self.memory.release(app, nbytes)
            raise
        return self._held(PreparedModel(cast("Driver", self), model, plan, preference=pref, priority=prio, app=app), nbytes)

    def _compile(self, model: Model) -> Plan:
        t = perf_ns()
        plan = compile_plan(model)
        if self.calibrate:
            _calibrate(plan)
        self._place(plan)
        if vlog_enabled("compilation"):
            _log.debug("compilation.done", model=model.name, steps=len(plan.steps), cost_us=plan.cost_ns / 1e3,
                       took_us=(perf_ns() - t) / 1e3)
        return plan

    def _place(self, plan: Plan) -> None:
        """Settle where ``plan``'s steps run with this device's inline limit and loop slice."""
        plan.set_inline_limit(self.inline_limit_ns, slice_ns=self.loop_slice_ns)
