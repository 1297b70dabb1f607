"""The adversarial suite's session: long mode, and its figures printed at the end."""

from __future__ import annotations

import json
import os

import pytest

from tests.adversarial import _tally


def pytest_configure(config: pytest.Config) -> None:
    _tally.set_long(bool(config.getoption("--long", default=False)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _tally.TALLY:
        return
    mode = "long" if _tally.is_long() else "CI"
    terminalreporter.write_sep("=", f"nnrt adversarial figures ({mode} run)")
    for line in _tally.table():
        terminalreporter.write_line(line)
    path = os.environ.get("NNRT_ADVERSARIAL_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"mode": mode, "figures": _tally.as_json()}, f, indent=1)
