"""The adversarial suite's figures: per category, tries, crashes, hangs, leaks, wrong outputs.

Each test records what it tried and what went wrong *before* it asserts, so a failing run
still prints its figures. ``tests/adversarial/conftest.py`` prints the table at the end of the
session (and writes it as JSON to ``$NNRT_ADVERSARIAL_REPORT`` when set).

Definitions: a *crash* is an exception other than an ``NnrtError`` with an NNAPI status (or a
child process that died); a *hang* is a call that did not return within its watchdog; a
*leak* is a task, thread, device buffer, scheduler entry, ledger byte or shared-memory segment
left behind; a *wrong output* is a result that differs from the reference or between two
execution paths.

Budgets: ``budget(ci, long)`` gives the CI figure, or the long one when the suite runs with
``--long`` or ``NNRT_ADVERSARIAL=long``; ``NNRT_ADVERSARIAL_SCALE=k`` multiplies the long one.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

__all__ = ["FIELDS", "Figures", "TALLY", "budget", "is_long", "record", "set_long", "table"]

FIELDS = ("tries", "crashes", "hangs", "leaks", "wrong")


@dataclass
class Figures:
    tries: int = 0
    crashes: int = 0
    hangs: int = 0
    leaks: int = 0
    wrong: int = 0


TALLY: dict[str, Figures] = {}
_long = os.environ.get("NNRT_ADVERSARIAL", "").lower() == "long"


def set_long(on: bool) -> None:
    global _long
    _long = _long or on


def is_long() -> bool:
    return _long


def budget(ci: int, long: int) -> int:
    if not _long:
        return ci
    return int(long * float(os.environ.get("NNRT_ADVERSARIAL_SCALE", "1")))


def record(category: str, *, tries: int = 0, crashes: int = 0, hangs: int = 0, leaks: int = 0, wrong: int = 0) -> None:
    f = TALLY.setdefault(category, Figures())
    f.tries += tries
    f.crashes += crashes
    f.hangs += hangs
    f.leaks += leaks
    f.wrong += wrong


def as_json() -> dict[str, dict[str, int]]:
    return {k: asdict(v) for k, v in sorted(TALLY.items())}


def table() -> list[str]:
    total = Figures()
    lines = [f"{'category':<28}" + "".join(f"{f:>10}" for f in FIELDS)]
    for name, fig in sorted(TALLY.items()):
        lines.append(f"{name:<28}" + "".join(f"{getattr(fig, f):>10}" for f in FIELDS))
        for f in FIELDS:
            setattr(total, f, getattr(total, f) + getattr(fig, f))
    lines.append(f"{'TOTAL':<28}" + "".join(f"{getattr(total, f):>10}" for f in FIELDS))
    return lines
