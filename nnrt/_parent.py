"""A child process of nnrt's (the driver service, the compilation helper) ends when the process
that started it is gone, so that none outlives its app even when that app was killed."""

from __future__ import annotations

import os
import threading
import time

__all__ = ["exit_with_parent"]


def _watch(parent: int) -> None:
    """Exit when the parent process is gone, even if this process's main thread is wedged."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def exit_with_parent(parent: int | None = None) -> None:
    """Start the watch on a daemon thread: the process exits within 0.5 s of its parent (the
    process ``parent``, when the parent passed its pid: it may have died before this call)."""
    pid = os.getppid() if parent is None else parent
    threading.Thread(target=_watch, args=(pid,), name="nnrt-parent-watch", daemon=True).start()
