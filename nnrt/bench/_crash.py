"""``nnrt bench --crash-test``: each model in a child process under a watchdog, as MLTS does.

A model that crashes the process, hangs it, or fails must not take the benchmark down with
it, so each one runs in its own child process (``spawn``: a fresh interpreter, nothing
inherited but the arguments). The child reports over a pipe: first that it has started (its
imports done), then its result. The watchdog's ``timeout_s`` counts from that start message,
so a slow start on a loaded machine is not taken for a hang (a start that never comes within
``start_timeout_s`` is). Outcomes:

- SUCCESS: the model loaded, prepared and ran ``runs`` executions.
- FAILURE: nnrt refused it with an ``NnrtError`` (its status and message are the detail).
- HANG: no result within the timeout; the child is killed.
- CRASH: the child died (a signal, or a non-zero exit), or raised an exception that is not an
  ``NnrtError`` (a bug: the detail has the traceback's last line).

Every child is joined before the next one starts; none outlives ``crash_test``.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["OUTCOMES", "CrashResult", "crash_test", "run_quietly"]

OUTCOMES = ("SUCCESS", "FAILURE", "HANG", "CRASH")

#: What a child runs: ``runner(path, options)``; returns a one-line summary.
Runner = Callable[[str, dict[str, Any]], str]


@dataclass(frozen=True)
class CrashResult:
    model: str
    outcome: str
    detail: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "outcome": self.outcome, "detail": self.detail, "seconds": self.seconds}


def run_quietly(path: str, options: dict[str, Any]) -> str:
    """The default child: ``run_bench`` in ``execute`` mode only, without a reference."""
    import asyncio

    from nnrt.bench._run import BenchOptions, run_bench

    opts = BenchOptions(modes=("execute",), reference=False, **options)
    report = asyncio.run(run_bench(path, opts))
    lat = report.modes["execute"]
    return f"{report.operations} operations, {lat.runs} executions, p50 {lat.p50:.3f} ms"


def _child(conn: Connection, runner: Runner, path: str, options: dict[str, Any]) -> None:
    import nnrt.bench._run  # noqa: F401 - the imports are done before the watchdog starts counting
    from nnrt.errors import NnrtError

    conn.send(("started", ""))
    try:
        summary = runner(path, options)
    except NnrtError as err:
        conn.send(("FAILURE", f"{err.status.name}: {err}"))
    except BaseException as err:  # a bug in nnrt, not a refusal: the parent reports a CRASH
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        conn.send(("CRASH", f"uncaught {last}"))
        raise SystemExit(1) from None
    else:
        conn.send(("SUCCESS", summary))
    conn.close()


def _died(proc: Any) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code} without a result"


def crash_test_one(path: str, *, timeout_s: float, start_timeout_s: float, options: dict[str, Any],
                   runner: Runner = run_quietly) -> CrashResult:
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, runner, path, options), name=f"nnrt-crash-test:{path}", daemon=True)
    t0 = time.monotonic()
    proc.start()
    send.close()
    try:
        outcome, detail = "CRASH", ""
        if not recv.poll(start_timeout_s):
            outcome, detail = "HANG", f"did not start within {start_timeout_s:g} s"
        else:
            try:
                recv.recv()  # "started"
                if recv.poll(timeout_s):
                    outcome, detail = recv.recv()
                else:
                    outcome, detail = "HANG", f"no result within {timeout_s:g} s: killed"
            except (EOFError, OSError):
                pass  # the child died: CRASH, described below
        if outcome == "HANG":
            proc.kill()
        proc.join(10.0)
        if proc.is_alive():  # pragma: no cover - a child that ignores SIGKILL
            proc.kill()
            proc.join()
        if outcome == "CRASH" and not detail:
            detail = _died(proc)
        elif outcome == "CRASH":
            detail = f"{detail} ({_died(proc)})" if proc.exitcode else detail
    finally:
        recv.close()
        if proc.is_alive():
            proc.kill()
            proc.join()
        proc.close()
    return CrashResult(path, outcome, detail, time.monotonic() - t0)


def crash_test(models: Sequence[str], *, timeout_s: float = 60.0, start_timeout_s: float = 120.0,
               options: dict[str, Any] | None = None, runner: Runner = run_quietly,
               on_result: Callable[[CrashResult], None] | None = None) -> list[CrashResult]:
    """Run each model in its own child process under a watchdog; one ``CrashResult`` each.

    ``options`` are ``BenchOptions`` fields for the child (``runs``, ``warmup``, ``input_shapes``,
    ``input_values``, ``loop_timeout``...). ``runner`` replaces what the child runs (a
    module-level function, as ``spawn`` imports it by name), e.g. a custom harness.
    """
    results = []
    for path in models:
        result = crash_test_one(path, timeout_s=timeout_s, start_timeout_s=start_timeout_s,
                                options=dict(options or {}), runner=runner)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
