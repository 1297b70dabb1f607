"""Shared fixtures: a CPU device per test module, closed afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from nnrt import CpuDevice


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="run the adversarial suite (tests/adversarial) with its long budgets")


@pytest.fixture(scope="module")
def device() -> Iterator[CpuDevice]:
    dev = CpuDevice(name="nnrt-cpu-test")
    yield dev
    dev.close()



def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async test runs on asyncio and on uvloop."""
    import uvloop

    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
