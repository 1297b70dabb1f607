"""The rings' joint polling policy (``nnrt.process._poll``) with real services.

The app polls for a reply only for its one request outstanding in the process (across every
service), says so in the request ring's *polling* word and clears its result ring's *sleeping*
word before it rings; it never polls for a model whose recent time on the device is long;
neither side spins once the device is idle (process CPU time over an idle second, not wall
clock). The decisions themselves are unit-tested on fake clocks (``tests/unit/test_poll.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import zoo
from nnrt.process import _client
from nnrt.process._client import ServiceProcess
from nnrt.process._fmq import STRONGLY_ORDERED
from nnrt.process._forms import Expect

pytestmark = pytest.mark.skipif(not STRONGLY_ORDERED, reason="weakly ordered CPUs never poll")


def service(dev: nnrt.ProcessDevice) -> ServiceProcess:
    svc = dev._running()
    assert svc.channel is not None
    return svc


def service_cpu_s(dev: nnrt.ProcessDevice) -> float:
    return int(dev._test_call("_rings")[-1]) / 1e9


async def test_an_idle_device_burns_no_cpu() -> None:
    with nnrt.ProcessDevice("nnrt-idle-test") as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        x = np.ones((1, 4), np.float32)
        for _ in range(300):  # a stream of cheap requests: the joint policy's case
            await prepared.execute([x, x])
        await asyncio.to_thread(prepared.execute_sync, [x, x])
        svc0, app0 = service_cpu_s(dev), time.process_time()
        await asyncio.sleep(1.0)
        svc1, app1 = service_cpu_s(dev), time.process_time()
        # A spinner would burn up to a second; the app's reader thread wakes 20 times.
        assert svc1 - svc0 < 0.05, f"the idle service burnt {svc1 - svc0:.3f} s of CPU in 1 s"
        assert app1 - app0 < 0.05, f"the idle app burnt {app1 - app0:.3f} s of CPU in 1 s"
        svc = service(dev)
        assert not svc.channel.requests.producer_polling or svc.poller.polls > 0  # type: ignore[union-attr]


_fake_ids = itertools.count(1000)


def fake_outstanding(svc: ServiceProcess, n: int) -> list[int]:
    """``n`` requests outstanding on ``svc``'s rings as far as the app knows (no packet sent)."""
    ids = [-next(_fake_ids) for _ in range(n)]
    for rid in ids:
        svc._ring_ids[rid] = Expect([])
    return ids


async def test_the_app_polls_only_for_its_one_request_in_the_process() -> None:
    with nnrt.ProcessDevice("nnrt-poll-a") as a, nnrt.ProcessDevice("nnrt-poll-b") as b:
        await a.prepare_model(zoo.one_add())
        await b.prepare_model(zoo.one_add())
        sa, sb = service(a), service(b)
        ch = sa.channel
        assert ch is not None
        ids = fake_outstanding(sa, 1)
        try:
            _, window = sa._reply_window(5e-6, True)
            assert window > 0 and ch.requests.producer_polling and not ch.results.consumer_sleeping
            ch.results.set_sleeping(True)
            assert sa._reply_window(5e-6, False)[1] == 0.0  # not the consumer: no poll
            assert not ch.requests.producer_polling
            ids += fake_outstanding(sa, 1)  # two outstanding on this service
            assert sa._reply_window(5e-6, True)[1] == 0.0 and not ch.requests.producer_polling
            assert ch.results.consumer_sleeping  # nothing said the app was awake
            for rid in ids[1:]:
                del sa._ring_ids[rid]
            other = fake_outstanding(sb, 1)  # one here, one on the other service
            try:
                assert _client._outstanding() == 2
                assert sa._reply_window(5e-6, True)[1] == 0.0 and not ch.requests.producer_polling
            finally:
                del sb._ring_ids[other[0]]
            assert sa._reply_window(200e-6, True)[1] == 0.0  # a long model: the reply is far off
        finally:
            for rid in ids:
                sa._ring_ids.pop(rid, None)
            ch.requests.set_producer_polling(False)
            ch.results.set_sleeping(True)


async def test_no_poll_for_a_long_model() -> None:
    with nnrt.ProcessDevice("nnrt-long-test") as dev:
        prepared = await dev.prepare_model(zoo.add_chain(2000, 16))
        x = zoo.example_inputs(prepared.model)[0]
        svc = service(dev)
        await prepared.execute([x])  # its time on the device is known from here on
        before = svc.poller.polls
        for _ in range(5):
            await prepared.execute([x])
        driver: Any = prepared._driver
        assert driver.device_s > 100e-6
        assert svc.poller.polls == before
        assert not svc.channel.requests.producer_polling  # type: ignore[union-attr]
