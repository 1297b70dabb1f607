"""The provisional-plan side of ``PreparedModel``: a plan prepared with numpy kernels in place
of compiled ones numba had not cached yet, and its swap for the compiled plan
(``nnrt.devices._tier`` makes that plan and calls ``_adopt``)."""

from __future__ import annotations

import concurrent.futures

from nnrt._aio import wait_future
from nnrt.execution._plan import Plan, fresh_outputs

__all__ = ["Upgradable"]


class Upgradable:
    """Mixin of ``PreparedModel``: ``provisional``, ``wait_compiled`` and the swap."""

    plan: Plan
    _fresh_outputs: tuple[bool, ...]
    _all_fresh: bool
    #: Done when a provisional plan's compiled successor is adopted (or its upgrade ended).
    _upgrade: concurrent.futures.Future[None] | None

    @property
    def provisional(self) -> bool:
        """True while the model runs numpy kernels in place of compiled ones that numba had not
        cached on this machine; its compiled plan replaces them when ready (``wait_compiled``)."""
        return bool(self.plan.provisional)

    async def wait_compiled(self) -> bool:
        """Wait until the model runs its compiled plan, or its upgrade ended without one (False;
        see the ``nnrt.jit`` log). Bound the wait with ``asyncio.timeout`` (or trio's)."""
        if self._upgrade is not None and not self._upgrade.done():
            await wait_future(self._upgrade, shielded=True)
        return not self.provisional

    def wait_compiled_sync(self, timeout: float | None = None) -> bool:
        """``wait_compiled`` for code without an event loop, for at most ``timeout`` s."""
        if self._upgrade is not None:
            concurrent.futures.wait([self._upgrade], timeout)
        return not self.provisional

    def _adopt(self, plan: Plan) -> None:
        """Run ``plan`` from the next execution on (the compiled successor of a provisional
        plan). An output counts as fresh only when both plans make it so: executions of the
        old plan may still be finishing."""
        fresh = fresh_outputs(plan)
        self._fresh_outputs = tuple(a and b for a, b in zip(self._fresh_outputs, fresh))
        self._all_fresh = bool(self._fresh_outputs) and all(self._fresh_outputs)
        self.plan = plan
