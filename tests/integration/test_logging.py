"""``NNRT_VLOG`` tags turn on the debug events of their area, and only those; nothing is logged
without them. The library never configures structlog."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from structlog.testing import capture_logs

import nnrt
from nnrt import Priority, zoo
from nnrt._log import TAGS, reload_vlog
from tests.helpers import gather, on_trio_too, start


@pytest.fixture
def vlog() -> Iterator[None]:
    yield
    reload_vlog("")


async def workload() -> None:
    """Something that touches every area: build, prepare, offload, refuse, preempt."""
    device = nnrt.CpuDevice(clock=nnrt.VirtualClock(), compute_units=1, inline_limit_ns=0)
    low = await device.prepare_model(zoo.add_chain(20), priority=Priority.LOW, app="a")
    high = await device.prepare_model(zoo.one_add(), priority=Priority.HIGH, app="a")
    for step in low.plan.steps:
        step.cost_ns = 1e9
    x16, x4 = np.ones((1, 16), np.float32), np.ones((1, 4), np.float32)
    task = start(low.execute([x16]))
    await anyio.lowlevel.checkpoint()
    await gather(high.execute([x4, x4]), task)
    with pytest.raises(nnrt.MissedDeadlineError):
        await low.execute([x16], deadline=device.clock.now() + 1e-7)  # shorter than any real run
    device.close()


def test_vlog_parsing() -> None:
    assert reload_vlog("1") == frozenset(TAGS) == reload_vlog("all")
    assert reload_vlog("model, execution:bogus") == {"model", "execution"}
    assert reload_vlog("") == frozenset()


@pytest.mark.parametrize("tag", TAGS)
async def test_each_tag_enables_its_events(tag: str, vlog: None) -> None:
    reload_vlog(tag)
    with capture_logs() as logs:
        await workload()
    events = {e["event"].split(".")[0] for e in logs}
    assert events == {tag}, logs


async def test_silent_without_tags(vlog: None) -> None:
    reload_vlog("")
    with capture_logs() as logs:
        await workload()
    assert logs == []


on_trio_too(globals())
