"""Optional compiled kernels: numba, when it is installed (``pip install 'nnrt[fast]'``) and not
switched off with the environment variable ``NNRT_JIT=0``.

Why: a numpy kernel pays about 1 us per ufunc call and a fresh temporary per step; on small
int8 streaming models that is 15-20 us per operation whatever the work, and the depthwise
convolution sits at numpy's per-element rate (``benchmarks/kernels.py``). A loop compiled by
numba does the same arithmetic in one pass.

The numpy kernels stay the reference: the CTS runs them, and every compiled kernel is tested
against its numpy twin on the same inputs. A kernel asks for its compiled core once, when it is
prepared (``compiled(fn)`` returns ``None`` when numba is absent or disabled), so executions pay
no lookup and a model prepared without numba simply runs the numpy path.

Compiled functions are cached on disk by numba (``cache=True``: next to the module's
``__pycache__``, or under ``NUMBA_CACHE_DIR``), so only the first run on a machine compiles.

That first compilation takes seconds (10 s of CPU for a large CNN's 30 cores). A preparation
that asks inside ``deferring()`` (``CpuDevice`` does, unless ``NNRT_JIT_BACKGROUND=0``) gets
``None`` for a function numba's disk cache does not hold yet, as if numba were off, and the miss
is noted; the device then prepares the numpy plan at once, fills the cache in a helper process
and swaps in the compiled plan when it is ready (``nnrt.devices._tier``). Outside
``deferring()`` every function compiles here, as before.

A kernel whose whole run, for one static geometry, is a single call of a compiled core says so
with ``set_core_call`` (a ``CoreCall``: the core and its arguments); the plan compiler then calls
that core from one compiled function per plan instead of from Python
(``nnrt.execution._compiled_plan``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from nnrt._log import get_logger

__all__ = ["Arg", "CoreCall", "Misses", "available", "background", "compiled", "core_call_of", "deferring", "forced",
           "set_core_call"]

_lock = threading.Lock()
_state: dict[str, Any] = {}
_cache: dict[Callable[..., Any], Callable[..., Any] | None] = {}
#: Functions found missing from numba's disk cache (until ``forget_misses``): not looked up again.
_cold: set[Callable[..., Any]] = set()
_local = threading.local()
#: ``NNRT_JIT_BACKGROUND``: whether ``CpuDevice`` compiles missing kernels in a helper process.
BACKGROUND_ENV = "NNRT_JIT_BACKGROUND"


def _import_numba() -> Any:
    """The numba module, or None when it is not installed (the fast extra)."""
    try:
        import numba  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    return numba


def available() -> bool:
    """Whether compiled kernels are in use: numba importable and ``NNRT_JIT`` not ``0``.

    numba is imported on the first call (about 0.2 s), not when nnrt is imported.
    """
    if "numba" not in _state:
        with _lock:
            if "numba" not in _state:
                off = os.environ.get("NNRT_JIT", "1").strip().lower() in ("0", "false", "no", "off")
                _state["numba"] = None if off else _import_numba()
    return _state["numba"] is not None


def background() -> bool:
    """Whether preparations defer cold compilations to a helper process (``deferring``):
    compiled kernels in use, ``NNRT_JIT_BACKGROUND`` not ``0``, and no helper failed before in
    this process (``give_up_background``)."""
    if not available():
        return False
    if "background" not in _state:
        env = os.environ.get(BACKGROUND_ENV, "1").strip().lower()
        _state["background"] = env not in ("0", "false", "no", "off")
    return bool(_state["background"])


def give_up_background() -> None:
    """From now on this process compiles at preparation (a helper could not fill the cache)."""
    _state["background"] = False


@dataclass(slots=True)
class Misses:
    """What ``deferring`` collected: the functions numba's cache did not hold (qualified names)."""

    names: list[str]

    def __bool__(self) -> bool:
        return bool(self.names)


@contextmanager
def deferring(on: bool = True) -> Iterator[Misses]:
    """In this block, on this thread, ``compiled`` returns None for a function numba's disk cache
    does not hold (instead of compiling it: seconds) and notes it in the ``Misses`` yielded.
    With ``on`` False it yields an empty ``Misses`` and changes nothing."""
    misses = Misses([])
    before = getattr(_local, "misses", None)
    _local.misses = misses if on else None
    try:
        yield misses
    finally:
        _local.misses = before


def deferred_any() -> bool:
    """Whether a compilation was deferred so far in the enclosing ``deferring`` block."""
    misses: Misses | None = getattr(_local, "misses", None)
    return misses is not None and bool(misses.names)


def forget_misses() -> None:
    """Look again in numba's disk cache for the functions found missing (a helper filled it)."""
    with _lock:
        _cold.clear()


def compiled(fn: Callable[..., Any], signature: str | None = None, fastmath: frozenset[str] = frozenset(),
             error_model: str = "python") -> Callable[..., Any] | None:
    """``fn`` compiled by ``numba.njit(cache=True, nogil=True)``, or ``None`` when not available.

    ``fastmath``: numba's fast-math flags for this function (e.g. ``{"contract"}``: fused
    multiply-adds), only where the kernel's tolerance allows the different rounding.
    ``error_model="numpy"``: a float division by zero gives IEEE's result instead of raising
    (numba's check keeps a loop that divides from vectorizing: 3-4x slower).

    One dispatcher per function, made on first request. With a ``signature`` (numba's string
    form, e.g. ``"void(float32[:, ::1], int64)"``) the function is compiled for exactly those
    types right here, or loaded from numba's disk cache: a kernel asks at preparation, so no
    execution pays a compilation (seconds) and a call with other types fails instead of
    compiling again. Without one, numba compiles lazily on the first call per argument types.

    A function numba fails to compile (a numba bug, bytecode rewritten by a coverage tool) is
    logged once (``nnrt.jit`` event ``jit.compile_failed``) and gives ``None`` from then on:
    the numpy kernel runs.
    """
    if not available():
        return None
    if fn in _cache:
        return _cache[fn]
    misses: Misses | None = getattr(_local, "misses", None)
    with _lock:
        if fn not in _cache:
            if misses is not None and (fn in _cold or not _on_disk(fn, signature, fastmath, error_model)):
                _cold.add(fn)
                misses.names.append(f"{fn.__module__}.{fn.__qualname__}")
                return None
            _cache[fn] = _compile(fn, signature, fastmath, error_model)
    return _cache[fn]


def _flags(fastmath: frozenset[str], error_model: str) -> dict[str, Any]:
    flags: dict[str, Any] = {"fastmath": set(fastmath)} if fastmath else {}
    if error_model != "python":
        flags["error_model"] = error_model
    return flags


def _on_disk(fn: Callable[..., Any], signature: str | None, fastmath: frozenset[str], error_model: str) -> bool:
    """Whether numba's disk cache holds ``fn`` for this machine (for ``signature``; without one,
    for any argument types), read from its index without loading or compiling anything.

    True too when that cannot be told (a function made at run time has no cache to fill; an
    unknown numba whose cache is laid out otherwise): then it compiles at preparation, as it
    would without ``deferring``.
    """
    try:
        dispatcher = _state["numba"].njit(cache=True, nogil=True, **_flags(fastmath, error_model))(fn)
        cache = dispatcher._cache
        index = cache._cache_file._load_index()
        key = cache._index_key(signature, dispatcher.targetctx.codegen())
    except Exception:  # numba's internals moved, or no file to cache beside: compile as before
        return True
    if signature is not None:
        return key in index
    return any(tuple(k[1:]) == tuple(key[1:]) for k in index)


def _compile(fn: Callable[..., Any], signature: str | None, fastmath: frozenset[str], error_model: str
             ) -> Callable[..., Any] | None:
    njit = _state["numba"].njit
    args: tuple[str, ...] = (signature,) if signature is not None else ()
    flags = _flags(fastmath, error_model)
    try:
        try:
            hit: Callable[..., Any] = njit(*args, cache=True, nogil=True, **flags)(fn)
        except RuntimeError:  # no file to cache beside (a function made at run time)
            hit = njit(*args, nogil=True, **flags)(fn)
    except Exception as exc:  # numba's errors have no common public base; the numpy kernel is the fallback
        get_logger("jit").warning("jit.compile_failed", function=fn.__qualname__, error=f"{type(exc).__name__}: {exc}"[:500])
        return None
    return hit


@dataclass(frozen=True, slots=True)
class Arg:
    """In a ``CoreCall``: the kernel's input ``index``, C-contiguous, reshaped to ``shape``."""

    index: int
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CoreCall:
    """A kernel's run as one call of a compiled core: ``core(*args)``, where an ``Arg`` stands
    for one of the kernel's inputs and anything else is a constant (an array, read only, or a
    numpy or Python scalar). The core writes its result into one more argument, the output's
    bytes (``core(*args, out)``); read as the output operand's type and dimensions, they are the
    kernel's result bit for bit."""

    core: Callable[..., Any]
    args: tuple[Any, ...]


#: What ``set_core_call`` attaches: the kernel's arguments (tensors not known before the run
#: given as zeros of their static shape and type) -> its ``CoreCall``, or None when that run
#: does not take a single core.
CorePlanner = Callable[[tuple[Any, ...]], "CoreCall | None"]

_CORE_CALL = "_nnrt_core_call"


def set_core_call(kernel: Callable[..., Any], planner: CorePlanner) -> None:
    """Declare that ``kernel`` runs as ``planner(args)`` describes (``CoreCall``)."""
    setattr(kernel, _CORE_CALL, planner)


def core_call_of(kernel: Callable[..., Any] | None) -> CorePlanner | None:
    """The planner ``set_core_call`` attached to ``kernel``, or None."""
    return getattr(kernel, _CORE_CALL, None)


@contextmanager
def forced(on: bool) -> Iterator[None]:
    """Preparations inside the block use the compiled kernels (``on``, when numba is importable)
    or the numpy ones, whatever ``NNRT_JIT`` says: for tests and benchmarks that compare both.

    Not for concurrent use: the decision is process-wide while the block runs.
    """
    available()
    with _lock:
        before = _state["numba"]
        if on and before is None:
            _state["numba"] = _import_numba()
        elif not on:
            _state["numba"] = None
    try:
        yield
    finally:
        with _lock:
            _state["numba"] = before


def reset_for_tests() -> None:
    """Forget the numba decision so a test can change ``NNRT_JIT`` (compiled functions are kept)."""
    with _lock:
        _state.clear()
