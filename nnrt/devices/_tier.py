"""Tiered compilation: a model prepared on a machine whose numba cache lacks its kernels runs
the numpy kernels at once, and the compiled plan replaces that plan when it is ready.

Compiling a large CNN's kernels takes 6-11 s the first time on a machine (numba then keeps the
machine code on disk, and later processes load it in a fraction of a second). Issue 14's rule is
that import plus the first preparation stays under 2 s. So ``CpuDevice`` prepares inside
``nnrt.ops._jit.deferring``: a kernel whose compiled core is not in numba's disk cache takes its
numpy path, and the plan is marked ``Plan.provisional``. For such a plan this module:

1. writes the model to a temporary file and prepares it in a helper process
   (``_main`` here, ``NNRT_JIT_BACKGROUND=0``), which compiles the
   kernels the model needs and so fills numba's disk cache; one helper runs at a time, on
   whatever core the app leaves idle (a thread here would hold the GIL for seconds);
2. prepares the model again in this process (numba now loads its kernels from the cache,
   about 0.3 s, on a background thread while executions go on with the provisional plan);
3. swaps the new plan in between two executions (``PreparedModel._adopt``).

Float results may change within float32 rounding at the swap (the compiled kernels sum in
another order); 8-bit results do not. A helper that fails (no process could be started, numba
crashed) is logged (``nnrt.jit`` event ``jit.background_failed``), the upgrade then compiles on
the background thread, and later preparations in the process compile at once as before.
``NNRT_JIT_BACKGROUND=0`` turns the whole scheme off. ``PreparedModel.provisional`` tells
whether a model still runs its provisional plan; ``wait_compiled`` waits for the swap.

Nothing outlives the process. Closing the device stops its models' upgrades (they keep the
provisional plan), but a running helper goes on filling numba's cache, and the interpreter's
exit waits for it (at most ``EXIT_WAIT_S``): a short script's first run on a machine thus ends
a few seconds late once, and every later run finds the kernels compiled. The temporary model
file is removed when its helper ends.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import weakref
from typing import TYPE_CHECKING, Any

from nnrt._log import get_logger, vlog_enabled
from nnrt.clock import perf_ns
from nnrt.errors import NnrtError
from nnrt.ops import _jit

if TYPE_CHECKING:
    from nnrt.execution import PreparedModel
    from nnrt.model import Model

__all__ = ["EXIT_WAIT_S", "Upgrade", "start_upgrade", "stop_upgrades"]

_log = get_logger("jit")

#: One helper process at a time (a machine of 2 cores keeps one for the app).
_helper_slot = threading.Lock()
#: Set at the interpreter's exit (``_at_exit``).
_exiting = threading.Event()
#: The helper's program (``-c``: ``-m`` would import this module twice).
_HELPER = "import sys; from nnrt.devices._tier import _main; sys.exit(_main(sys.argv[1], int(sys.argv[2])))"
#: How long the interpreter's exit waits for a running helper.
EXIT_WAIT_S = 120.0
_live: set[Upgrade] = set()
_live_lock = threading.Lock()


class Upgrade:
    """The background upgrade of one provisional prepared model (see the module docstring)."""

    def __init__(self, device: Any, prepared: PreparedModel) -> None:
        self.device = device
        self._prepared = weakref.ref(prepared)
        self._model: Model = prepared.model
        self.done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stopped = False
        self._killed = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, name="nnrt-jit-upgrade", daemon=True)

    def start(self) -> None:
        with _live_lock:
            _live.add(self)
        self._thread.start()

    def stop(self, *, kill: bool, wait: float = 5.0) -> None:
        """Leave the model on its provisional plan. The helper is killed (``kill``) or left to
        fill numba's cache (started if it was waiting for its turn): the thread ends with it,
        and the interpreter waits for it at exit (``_at_exit``)."""
        self._stopped = True
        if not kill:
            return
        self._killed = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(wait)

    def _run(self) -> None:
        t0 = perf_ns()
        try:
            with _helper_slot:
                ok = not self._killed and self._fill_cache()
            if self._stopped or _exiting.is_set():
                return
            _jit.forget_misses()
            prepared = self._prepared()
            if prepared is None:  # collected meanwhile: the cache is filled for the next one
                return
            if not ok:
                _jit.give_up_background()
            plan = self.device._compile(self._model)  # (compiles here what is still missing)
            if self._stopped:
                return
            prepared._adopt(plan)
            if vlog_enabled("compilation"):
                _log.debug("jit.upgraded", model=self._model.name, steps=len(plan.steps), took_s=round((perf_ns() - t0) / 1e9, 3))
        except Exception as exc:  # nnrt's own bug: the provisional plan stays, and says why
            _log.warning("jit.upgrade_failed", model=self._model.name, error=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self.done.set_result(None)
            with _live_lock:
                _live.discard(self)

    def _fill_cache(self) -> bool:
        """Prepare the model in a helper process; True when it ended well."""
        fd, path = tempfile.mkstemp(prefix="nnrt-jit-", suffix=".nnrtmodel")
        os.close(fd)
        try:
            try:
                self._model.save(path)
            except (OSError, NnrtError) as exc:  # (a full disk, say): the upgrade compiles here
                _log.warning("jit.background_failed", model=self._model.name, error=f"{type(exc).__name__}: {exc}")
                return False
            env = {**os.environ, _jit.BACKGROUND_ENV: "0", "NNRT_JIT": "1"}
            cache_dir = _numba_cache_dir()
            if cache_dir:
                env["NUMBA_CACHE_DIR"] = cache_dir
            try:
                self._proc = proc = subprocess.Popen([sys.executable, "-c", _HELPER, path, str(os.getpid())], env=env,
                                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.PIPE)
            except OSError as exc:
                _log.warning("jit.background_failed", model=self._model.name, error=f"{type(exc).__name__}: {exc}")
                return False
            if self._killed:  # killed while it was starting
                proc.kill()
            _, err = proc.communicate()
            if proc.returncode != 0 and not self._killed:
                _log.warning("jit.background_failed", model=self._model.name, returncode=proc.returncode,
                             error=err.decode(errors="replace")[-800:])
                return False
            return True
        finally:
            os.unlink(path)


def _numba_cache_dir() -> str:
    """numba's cache directory as this process sees it (set from ``NUMBA_CACHE_DIR`` or by a
    test), for the helper; empty for numba's default (beside the modules)."""
    numba = sys.modules.get("numba")
    config = getattr(numba, "config", None)
    return str(getattr(config, "CACHE_DIR", "") or "")


def start_upgrade(device: Any, prepared: PreparedModel) -> Upgrade:
    """Begin upgrading ``prepared`` (its plan provisional) in the background."""
    upgrade = Upgrade(device, prepared)
    prepared._upgrade = upgrade.done
    upgrade.start()
    if vlog_enabled("compilation"):
        _log.debug("jit.background_started", model=prepared.model.name, missing=len(prepared.plan.provisional),
                   kernels=sorted(set(prepared.plan.provisional))[:20])
    return upgrade


def stop_upgrades(device: Any = None, *, kill: bool = False) -> None:
    """Stop the upgrades of ``device``'s models (every one when None): their models keep
    the provisional plan; a running helper finishes filling numba's cache unless ``kill``."""
    with _live_lock:
        live = [u for u in _live if device is None or u.device is device]
    for upgrade in live:
        upgrade.stop(kill=kill)


def _at_exit() -> None:
    """At the interpreter's exit: no upgrade is adopted any more, but the helpers run (one
    after the other, at most ``EXIT_WAIT_S`` in all, then killed), so that the first run on a
    machine leaves numba's cache filled even when the app ends before its models were upgraded."""
    _exiting.set()
    with _live_lock:
        live = list(_live)
    end = perf_ns() + EXIT_WAIT_S * 1e9
    for upgrade in live:
        upgrade.stop(kill=False)
    for upgrade in live:
        upgrade._thread.join(max(0.0, (end - perf_ns()) / 1e9))
    for upgrade in live:
        upgrade.stop(kill=True)


atexit.register(_at_exit)


def _main(path: str, parent: int) -> int:
    """The helper: prepare the model at ``path`` as ``CpuDevice`` does, compiling every kernel."""
    import numpy as np

    from nnrt._parent import exit_with_parent
    from nnrt.devices._cpu import CpuDevice
    from nnrt.model import Model

    exit_with_parent(parent)  # (a service ends with os._exit: no atexit there to stop this helper)
    model = Model.load(path)
    device = CpuDevice(blas_threads=1)
    try:
        prepared = device.prepare_model_sync(model)
        if not prepared.plan.dynamic:  # one run: kernels that compile on their first call
            inputs = [np.zeros(model.operands[i].dimensions, model.operands[i].type.dtype) for i in model.input_indexes]
            with contextlib.suppress(Exception):  # zeros may be invalid input: the preparation did the work
                prepared.execute_sync(inputs)
    finally:
        device.close()
    return 0
