"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def cost_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh simulator step-cost cache for the test (``NNRT_SIM_COSTS``), so no test reads
    or writes the user's cache; simulator test modules use it for every test."""
    path = tmp_path / "costs.json"
    monkeypatch.setenv("NNRT_SIM_COSTS", str(path))
    yield path
