"""Process-wide and per-thread settings of the CPU device (``nnrt.devices._cpu``).

The worker threads' setup (numpy's floating-point warnings off; LOW workers at a lower OS
priority) and the process-wide latency settings ``CpuDevice`` applies only when asked
(``blas_threads``, ``tune_malloc``; see its module docstring for what each buys). Kept apart from
the device because they are about the process, not about running plans.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

from nnrt._log import get_logger

__all__ = ["init_low_worker", "init_worker", "pin_blas", "tune_allocator"]

_log = get_logger("driver")


def init_worker() -> None:
    np.seterr(all="ignore")


def init_low_worker(nice: int) -> None:
    """A LOW-priority worker: lower this thread's OS priority by ``nice`` (Linux, where
    ``setpriority`` on a thread id applies to that thread only)."""
    init_worker()
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as err:  # e.g. a sandbox forbidding it: the thread keeps its priority
        _log.warning("driver.nice_failed", nice=nice, error=str(err))


_blas_limiter: Any = None


def pin_blas(threads: int) -> None:
    """Limit BLAS to ``threads`` threads for the process (once)."""
    global _blas_limiter
    if _blas_limiter is not None:
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        return
    _blas_limiter = threadpool_limits(limits=threads, user_api="blas")


_malloc_tuned = False

# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def tune_allocator() -> None:
    """Keep freed multi-MB blocks for reuse (glibc only, once per process).

    An execution allocates its intermediate tensors afresh. glibc serves large blocks with
    mmap and returns them at free, so every execution pays page faults on first touch: about
    a quarter of the MobileNet-style block's time. Raising the mmap threshold to glibc's
    maximum (32 MiB) and the trim threshold keeps that memory mapped for the next execution.
    """
    global _malloc_tuned
    if _malloc_tuned or not sys.platform.startswith("linux"):
        return
    _malloc_tuned = True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, 256 * 1024 * 1024)
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass

