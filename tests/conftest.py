"""Shared fixtures: a CPU device per test module, closed afterwards."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator

# Tests compare compiled kernels with their numpy twins: a preparation compiles them at once,
# whatever numba's cache holds (tests/unit/test_jit_background.py turns the background on).
os.environ.setdefault("NNRT_JIT_BACKGROUND", "0")

import pytest

from nnrt import CpuDevice


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="run the adversarial suite (tests/adversarial) with its long budgets")


@pytest.fixture(params=["numpy", "mkl"])
def blas(request: pytest.FixtureRequest) -> Iterator[str]:
    """Preparations in the test use this backend's float32 products (``nnrt.ops._gemm``); the
    MKL run is skipped where MKL is not installed (it is an optional extra)."""
    from nnrt.ops import _gemm, _jit

    name: str = request.param
    if name == "mkl" and (not _gemm.mkl_loaded() or not _jit.available()):
        pytest.skip("MKL (the fast extra) is not installed, or compiled kernels are off")
    with _gemm.forced(name):
        yield name


@pytest.fixture(scope="module")
def device() -> Iterator[CpuDevice]:
    # The suite is nnrt's own process: it asks for the latency settings (one BLAS thread, a
    # 0.5 ms GIL switch interval), as CpuDevice() used to apply them unasked; tests that wait
    # briefly for tasks or threads to get going rely on the short switch interval.
    dev = CpuDevice(name="nnrt-cpu-test", tune_process=True)
    yield dev
    dev.close()



def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async test runs on asyncio and on uvloop."""
    import uvloop

    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
