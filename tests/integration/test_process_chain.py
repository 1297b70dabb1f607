"""Several executions in flight on a ``ProcessDevice``'s rings (issue 18's GIL-bound chain).

With requests queued behind a result, the service holds back the app's doorbell until they would
run out (``nnrt.process._poll.hold_doorbell``): a queue of requests is answered with a doorbell or
two, not one per result, and the app, its requests written in one pass of its loop, rings a
sleeping service once for them, never a service that is awake. Results come back in any order
across two services; cancelling some queued requests or killing one of two services mid-queue
still gives each execution its answer or its status (CancelledError, DEAD_OBJECT), with no
waiter left behind. Counts only, never wall-clock time: the policy's arithmetic is unit-tested in
``tests/unit/test_poll.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import pytest

import nnrt
from nnrt import zoo
from nnrt.process._client import ServiceProcess
from nnrt.process._fmq import STRONGLY_ORDERED

os.environ["NNRT_SERVICE_TEST_HOOKS"] = "1"  # the services these tests start serve ``_doorbell``

pytestmark = pytest.mark.skipif(not STRONGLY_ORDERED, reason="weakly ordered CPUs ring after every packet")

CHAIN = 50  # ADDs per execution: tens of microseconds in the service, run inline
WIDTH = 16


def service(dev: nnrt.ProcessDevice) -> ServiceProcess:
    svc = dev._running()
    assert svc.channel is not None
    return svc


def result_bells(dev: nnrt.ProcessDevice) -> int:
    """The app's doorbell rung by the service so far (it slept)."""
    return int(dev._test_call("_rings")[3])


def inputs(n: int) -> list[np.ndarray]:
    return [np.full((1, WIDTH), k, np.float32) for k in range(n)]


async def expected(cpu: nnrt.CpuDevice, model: nnrt.Model, xs: list[np.ndarray]) -> list[np.ndarray]:
    """The in-process device's outputs for ``xs`` (the service runs the same kernels)."""
    local = await cpu.prepare_model(model)
    return [(await local.execute([x])).outputs[0] for x in xs]


def check(outputs: list[np.ndarray], want: list[np.ndarray]) -> None:
    for out, w in zip(outputs, want):
        np.testing.assert_array_equal(out, w)


def no_waiters(svc: ServiceProcess) -> bool:
    return not svc._pending and not svc._ring_ids


async def test_a_queue_of_requests_wakes_the_app_once_or_twice(device: nnrt.CpuDevice) -> None:
    """16 requests written in one pass of the loop: the service finds them queued, holds the
    app's doorbell until nothing is left behind a result (lead 0, hold unbounded: only the
    queue decides), so the sleeping app is rung at most twice for 16 results. The app rang the
    sleeping service at most twice (once when it sent the first, once for the rest of the pass):
    it does not poll for the first reply while the other tasks of the pass wait to send theirs
    (which would send them one by one, a doorbell each)."""
    with nnrt.ProcessDevice("chain-queue") as dev:
        model = zoo.add_chain(CHAIN, WIDTH)
        prepared = await dev.prepare_model(model)
        svc = service(dev)
        dev._test_call("_doorbell", 0.0, 3600.0)
        xs = inputs(16)
        want = await expected(device, model, xs)
        check([(await prepared.execute([x])).outputs[0] for x in xs[:2]], want[:2])
        for _ in range(3):
            await asyncio.sleep(0.02)  # both sides asleep
            rung, app_rung = result_bells(dev), svc.channel.request_bell.rung  # type: ignore[union-attr]
            results = await asyncio.gather(*(prepared.execute([x]) for x in xs))
            check([r.outputs[0] for r in results], want)
            assert result_bells(dev) - rung <= 2
            assert svc.channel.request_bell.rung - app_rung <= 2  # type: ignore[union-attr]
            assert no_waiters(svc) and svc.rescues == 0


async def test_the_default_policy_on_two_services_in_any_order(device: nnrt.CpuDevice) -> None:
    """8 in flight through a semaphore, alternating two services (the benchmark's shape): every
    execution gets its own answer, nothing is left waiting, no result needed the reader
    thread's last-resort drain."""
    with nnrt.ProcessDevice("chain-a") as da, nnrt.ProcessDevice("chain-b") as db:
        model = zoo.add_chain(CHAIN, WIDTH)
        targets = [await da.prepare_model(model), await db.prepare_model(model)]
        xs = inputs(96)
        want = await expected(device, model, xs)
        sem = asyncio.Semaphore(8)
        order: list[int] = []

        async def one(k: int) -> np.ndarray:
            async with sem:
                out = (await targets[k % 2].execute([xs[k]])).outputs[0]
                order.append(k)
                return out

        outs = await asyncio.gather(*(one(k) for k in range(len(xs))))
        check(list(outs), want)
        assert sorted(order) == list(range(len(xs)))
        for dev in (da, db):
            svc = service(dev)
            assert no_waiters(svc) and svc.rescues == 0 and svc.socket_sent == 0


async def test_cancelling_queued_requests_answers_the_rest(device: nnrt.CpuDevice) -> None:
    with nnrt.ProcessDevice("chain-cancel") as dev:
        ops = 2000  # about a millisecond each in the service: the queue is still there to cancel in
        model = zoo.add_chain(ops, WIDTH)
        prepared = await dev.prepare_model(model)
        svc = service(dev)
        xs = inputs(12)
        want = await expected(device, model, xs)
        tasks = [asyncio.create_task(prepared.execute([x])) for x in xs]
        for _ in range(2000):  # until every request is on the ring
            if len(svc._ring_ids) == len(xs) or any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.001)
        for t in tasks[1::2]:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for k, r in enumerate(results):
            if k % 2:
                assert isinstance(r, (asyncio.CancelledError, nnrt.ExecutionResult))
            else:
                assert isinstance(r, nnrt.ExecutionResult)
                check([r.outputs[0]], [want[k]])
        assert no_waiters(svc)
        check([(await prepared.execute([xs[3]])).outputs[0]], [want[3]])
        assert no_waiters(svc)


async def test_one_of_two_services_killed_mid_queue(device: nnrt.CpuDevice) -> None:
    """The app's loop takes both services' results on one wake-up: a sibling that dies leaves
    its executions DEAD_OBJECT and the other service's answered."""
    with nnrt.ProcessDevice("chain-live") as live, nnrt.ProcessDevice("chain-dies") as dies:
        ops = 3000  # over a millisecond each: the doomed service is still busy when it is killed
        model = zoo.add_chain(ops, WIDTH)
        good, doomed = await live.prepare_model(model), await dies.prepare_model(model)
        xs = inputs(8)
        want = await expected(device, model, xs)
        tasks = [asyncio.create_task((good if k % 2 == 0 else doomed).execute([x])) for k, x in enumerate(xs)]
        dead = service(dies)
        for _ in range(2000):
            if dead.ring_sent >= 4:
                break
            await asyncio.sleep(0.001)
        pid = dies.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        for k, r in enumerate(results):
            if k % 2 == 0:
                assert isinstance(r, nnrt.ExecutionResult)
                check([r.outputs[0]], [want[k]])
            else:
                assert isinstance(r, (nnrt.DeadObjectError, nnrt.ExecutionResult))
        assert any(isinstance(r, nnrt.DeadObjectError) for r in results[1::2])
        assert no_waiters(service(live)) and no_waiters(dead)
        with pytest.raises(nnrt.DeadObjectError):
            await doomed.execute([xs[1]])
        check([(await good.execute([xs[2]])).outputs[0]], [want[2]])
