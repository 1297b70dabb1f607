"""Shared fixtures: a CPU device per test module, closed afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nnrt import CpuDevice


@pytest.fixture(scope="module")
def device() -> Iterator[CpuDevice]:
    dev = CpuDevice(name="nnrt-cpu-test")
    yield dev
    dev.close()
