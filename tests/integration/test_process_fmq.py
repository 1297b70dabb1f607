"""A ``ProcessDevice``'s executions on its shared-memory rings (``nnrt.process._fmq``).

Every execution mode travels on the rings (the counters say so, and no result needed the
reader thread's last-resort drain); what does not fit takes the socket (a request larger than
the ring, a result larger than the result ring, a ring full of requests behind a wedged
service); malformed packets are answered with the right status under their id and the
service serves on; a lost framing fails what was on the rings and both sides serve on; death
with requests in flight or queued in the ring is DEAD_OBJECT; nothing is left behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import struct
import threading
import time
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.burst._packet import INLINE_SLOT, pack_request, request_datums
from nnrt.process._client import ServiceProcess
from nnrt.process._forms import Expect

os.environ["NNRT_SERVICE_TEST_HOOKS"] = "1"  # the services these tests start serve ``_hang``


@pytest.fixture(scope="module")
def rdev() -> Any:
    dev = nnrt.ProcessDevice("nnrt-fmq-test")
    yield dev
    dev.close()


def service(dev: nnrt.ProcessDevice) -> ServiceProcess:
    svc = dev._running()
    assert svc.channel is not None
    return svc


def wait_for(fut: concurrent.futures.Future[Any], svc: ServiceProcess, timeout: float = 10.0) -> Any:
    """Drain the result ring ourselves (no consumer holds the role in these raw tests)."""
    end = time.monotonic() + timeout
    while not fut.done():
        assert time.monotonic() < end, "no answer"
        svc._drain()
        time.sleep(0.001)
    return fut.result()


def slow_small_output(n: int = 1_000_000, ops: int = 20) -> nnrt.Model:
    """Tens of milliseconds per execution (ADDs over a 4 MB input, through the arena), a
    [1, 1] output: its requests and results travel on the rings."""
    m = nnrt.Model("slow_small_output")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, n])
    c = m.add_operand(T.TENSOR_FLOAT32, [1, n])
    act = m.add_operand(T.INT32)
    m.set_operand_value(c, np.full((1, n), 0.5, np.float32))
    m.set_operand_value(act, 0)
    cur = x
    for _ in range(ops):
        nxt = m.add_operand(T.TENSOR_FLOAT32, [1, n])
        m.add_operation(Op.ADD, [cur, c, act], [nxt])
        cur = nxt
    axes, keep = m.add_operand(T.TENSOR_INT32, [1]), m.add_operand(T.INT32)
    m.set_operand_value(axes, np.array([1], np.int32))
    m.set_operand_value(keep, 1)
    y = m.add_operand(T.TENSOR_FLOAT32, [1, 1])
    m.add_operation(Op.MEAN, [cur, axes, keep], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def reference(model: nnrt.Model, inputs: list[np.ndarray]) -> np.ndarray:
    cpu = nnrt.CpuDevice(name="reference")
    try:
        return cpu.prepare_model_sync(model).execute_sync(inputs).outputs[0]
    finally:
        cpu.close()


def broadcast_add(n: int) -> nnrt.Model:
    """[1, n] + [n, 1] -> [n, n]: small inputs, a large output."""
    m = nnrt.Model("broadcast_add")
    a = m.add_operand(T.TENSOR_FLOAT32, [1, n])
    b = m.add_operand(T.TENSOR_FLOAT32, [n, 1])
    act = m.add_operand(T.INT32)
    y = m.add_operand(T.TENSOR_FLOAT32, [n, n])
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [a, b, act], [y])
    m.identify_inputs_and_outputs([a, b], [y])
    m.finish()
    return m


# -- every execution mode on the rings ----------------------------------------------------------


async def test_every_mode_goes_through_the_rings(rdev: nnrt.ProcessDevice) -> None:
    prepared = await rdev.prepare_model(zoo.one_add())
    svc = service(rdev)
    ring0, sock0, rescues0 = svc.ring_sent, svc.socket_sent, svc.rescues
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    r = await prepared.execute([x, x])
    np.testing.assert_array_equal(r.outputs[0], 2 * x)
    # execute_sync from another thread while the loop waits
    r2 = await asyncio.to_thread(prepared.execute_sync, [x, 3 * x])
    np.testing.assert_array_equal(r2.outputs[0], 4 * x)
    # execute_sync in the consumer loop's own thread (blocking it): drained by the caller itself
    np.testing.assert_array_equal(prepared.execute_sync([x, 2 * x]).outputs[0], 3 * x)
    fenced = [np.zeros((1, 4), np.float32) for _ in range(2)]
    for k, buf in enumerate(fenced):
        fence, callback = await prepared.execute_fenced([x, np.full((1, 4), k, np.float32)], [buf])
        assert await fence.wait(30) and callback.get_execution_info().status is ErrorStatus.NONE
        np.testing.assert_array_equal(buf, k + x)
    async with prepared.burst() as burst:
        for k in range(5):
            b = await burst.execute([np.full((1, 4), k, np.float32), x])
            np.testing.assert_array_equal(b.outputs[0], k + x)
    many = await asyncio.gather(*(prepared.execute([np.full((1, 4), k, np.float32), x]) for k in range(32)))
    for k, m in enumerate(many):
        np.testing.assert_array_equal(m.outputs[0], k + x)
    assert svc.ring_sent - ring0 == 1 + 1 + 1 + 2 + 5 + 32
    assert svc.socket_sent == sock0
    assert svc.rescues == rescues0  # every result was drained by its waiter, not the last resort


def test_execute_sync_without_a_loop_and_loops_one_after_another() -> None:
    with nnrt.ProcessDevice("fmq-sync") as dev:
        prepared = asyncio.run(dev.prepare_model(zoo.one_add()))
        svc = service(dev)
        x = np.ones((1, 4), np.float32)
        for k in range(20):
            np.testing.assert_array_equal(prepared.execute_sync([x, np.full((1, 4), k, np.float32)]).outputs[0], k + x)

        async def once() -> np.ndarray:
            return (await prepared.execute([x, x])).outputs[0]

        for _ in range(3):  # a consumer loop that ended must not strand the next consumer
            np.testing.assert_array_equal(asyncio.run(once()), 2 * x)
            np.testing.assert_array_equal(prepared.execute_sync([x, x]).outputs[0], 2 * x)
        assert svc.ring_sent == 26 and svc.socket_sent == 0 and svc.rescues == 0


async def test_sync_threads_and_the_loop_share_the_result_ring(rdev: nnrt.ProcessDevice) -> None:
    prepared = await rdev.prepare_model(zoo.one_add())
    x = np.ones((1, 4), np.float32)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for j in range(30):
                out = prepared.execute_sync([x, np.full((1, 4), k * 100 + j, np.float32)]).outputs[0]
                np.testing.assert_array_equal(out, k * 100 + j + x)
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for j in range(30):
        r = await prepared.execute([x, np.full((1, 4), j, np.float32)])
        np.testing.assert_array_equal(r.outputs[0], j + x)
    await asyncio.to_thread(lambda: [t.join() for t in threads])
    assert not errors


# -- what does not fit takes the socket ---------------------------------------------------------


async def test_too_large_requests_and_results_take_the_socket() -> None:
    async with nnrt.ProcessDevice("fmq-small", ring_bytes=4096) as dev:
        svc = service(dev)
        chain = zoo.add_chain(1, 1024)
        big_in = await dev.prepare_model(chain)  # a 4 KB input: larger than half the ring
        x = np.ones((1, 1024), np.float32)
        r = await big_in.execute([x])
        np.testing.assert_array_equal(r.outputs[0], reference(chain, [x]))
        assert svc.socket_sent == 1 and svc.ring_sent == 0
        big_out = await dev.prepare_model(broadcast_add(30))  # 240 B in on the ring, 3.6 KB out: over the socket
        a, b = np.arange(30, dtype=np.float32).reshape(1, 30), np.arange(30, dtype=np.float32).reshape(30, 1)
        r = await big_out.execute([a, b])
        np.testing.assert_array_equal(r.outputs[0], a + b)
        assert svc.ring_sent == 1 and svc.socket_sent == 1
        arena_out = await dev.prepare_model(broadcast_add(300))  # a 360 KB output comes back through the arena
        a, b = np.arange(300, dtype=np.float32).reshape(1, 300), np.arange(300, dtype=np.float32).reshape(300, 1)
        np.testing.assert_array_equal((await arena_out.execute([a, b])).outputs[0], a + b)
        assert svc.ring_sent == 1 and svc.socket_sent == 2
        small = await dev.prepare_model(zoo.one_add())
        y = np.ones((1, 4), np.float32)
        np.testing.assert_array_equal((await small.execute([y, y])).outputs[0], 2 * y)
        assert svc.ring_sent == 2


async def test_a_full_ring_behind_a_wedged_service_never_blocks_the_app() -> None:
    dev = nnrt.ProcessDevice("fmq-wedged", ring_bytes=4096, hang_timeout=0.5)
    try:
        prepared = await dev.prepare_model(zoo.one_add())
        svc = service(dev)
        x = np.ones((1, 4), np.float32)
        dev._test_hang()
        await asyncio.sleep(0.05)
        t = time.monotonic()
        tasks = [asyncio.create_task(prepared.execute([x, x])) for _ in range(60)]
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        assert all(isinstance(r, nnrt.DeadObjectError) for r in results), results
        assert svc.ring_sent > 0 and svc.socket_sent > 0  # the ring filled up, the rest took the socket
        assert time.monotonic() - t < 20  # bounded by the watchdog, not a hang
    finally:
        dev.close()


# -- malformed packets ---------------------------------------------------------------------------


def raw_request(svc: ServiceProcess, body: bytes, rid: int) -> Any:
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    assert svc._ring_submit(fut, rid, lambda ring: ring.try_write([body], len(body)), Expect([np.dtype(np.float32)])) is not None
    return wait_for(fut, svc)


async def test_malformed_packets_are_answered_and_the_ring_serves_on(rdev: nnrt.ProcessDevice) -> None:
    prepared = await rdev.prepare_model(zoo.one_add())
    svc = service(rdev)
    handle = prepared._driver.handle  # type: ignore[attr-defined]
    x = np.ones((1, 4), np.float32)

    def packet(rid: int, handle: int = handle, app: str = "default", length: int = 16) -> bytes:
        ins = [(INLINE_SLOT, 0, length, (1, 4)), (INLINE_SLOT, 16, 16, (1, 4))]
        datums = request_datums(ins, [(INLINE_SLOT, 0, 0, None)], True, None, None)
        parts, _ = pack_request(rid, handle, app, datums, [], [x.tobytes(), x.tobytes()], 32)
        return b"".join(bytes(p) for p in parts)

    ok, out = raw_request(svc, packet(svc.new_id()), svc.new_id() - 1)
    assert ok and np.array_equal(out[0][0], 2 * x)
    cases = {
        "garbage after the id": (lambda r: struct.pack("<q", r) + b"\xff" * 40, ErrorStatus.GENERAL_FAILURE),
        "truncated": (lambda r: packet(r)[:60], ErrorStatus.GENERAL_FAILURE),
        "size datum wrong": (lambda r: packet(r)[:32] + struct.pack("<q", 99) + packet(r)[40:], ErrorStatus.GENERAL_FAILURE),
        "unknown handle": (lambda r: packet(r, handle=12345), ErrorStatus.INVALID_ARGUMENT),
        "another app": (lambda r: packet(r, app="mallory"), ErrorStatus.INVALID_ARGUMENT),
        "wrong input length": (lambda r: packet(r, length=12), ErrorStatus.INVALID_ARGUMENT),
    }
    for name, (make, status) in cases.items():
        rid = svc.new_id()
        ok, err = raw_request(svc, make(rid), rid)
        assert not ok, name
        assert err.status is status, (name, err)
    # a packet too short to carry an id is answered under id 0 (nobody waits), then it serves on
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    assert svc._ring_submit(fut, 0, lambda ring: ring.try_write([b"\1\2\3"], 3), Expect([])) is not None
    r = await prepared.execute([x, x])
    np.testing.assert_array_equal(r.outputs[0], 2 * x)
    svc._take(0)


async def test_a_lost_framing_fails_what_is_on_the_ring_and_serves_on() -> None:
    async with nnrt.ProcessDevice("fmq-framing") as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        svc = service(dev)
        ch = svc.channel
        assert ch is not None
        rid = svc.new_id()
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with svc._lock:  # a request outstanding on the ring, whose packet is then corrupted
            svc._pending[rid] = fut
            svc._ring_ids[rid] = Expect([])
            ring = ch.requests
            write = ring._ctl[0]
            ring._words[(write & ring._mask) >> 3] = 1 << 40  # a length that runs past the data
            ring._ctl[0] = write + 16
        ch.request_bell.ring(ring)
        ok, err = await asyncio.wrap_future(fut)
        assert not ok and err.status is ErrorStatus.GENERAL_FAILURE and "framing" in err.message
        x = np.ones((1, 4), np.float32)
        np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)


# -- death with the rings in use; nothing left behind ------------------------------------------


def leftovers() -> tuple[int, int, int]:
    """Open fds, threads, and mappings of ring memory (other tests' devices may hold some)."""
    with open("/proc/self/maps") as maps:
        mapped = maps.read().count("nnrt-fmq")
    ours = sum(t.name.startswith("nnrt-") for t in threading.enumerate())
    return len(os.listdir("/proc/self/fd")), ours, mapped


async def test_death_with_requests_queued_in_the_ring_then_restart() -> None:
    fds, threads, maps = leftovers()
    dev = nnrt.ProcessDevice("fmq-death")
    prepared = await dev.prepare_model(zoo.one_add())
    svc = service(dev)
    x = np.ones((1, 4), np.float32)
    dev._test_hang()  # the service's loop stops reading: requests stay queued in the ring
    await asyncio.sleep(0.05)
    tasks = [asyncio.create_task(prepared.execute([x, x])) for _ in range(8)]
    await asyncio.sleep(0.05)
    assert svc.ring_sent >= 8
    pid = dev.pid
    assert pid is not None
    t = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    assert all(isinstance(r, nnrt.DeadObjectError) for r in results)
    assert time.monotonic() - t < 5  # prompt (the target is 100 ms; this bound only guards a hang)
    await dev.restart()
    new = service(dev)
    np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)
    assert new.ring_sent == 1
    await asyncio.to_thread(dev.close)
    assert svc.channel is not None and svc.channel.closed
    fds2, threads2, maps2 = leftovers()
    assert maps2 <= maps and fds2 <= fds and threads2 <= threads


def test_death_during_execute_sync_on_the_ring() -> None:
    dev = nnrt.ProcessDevice("fmq-death-sync")
    try:
        prepared = asyncio.run(dev.prepare_model(slow_small_output()))
        x = np.ones((1, 1_000_000), np.float32)
        svc = service(dev)
        pid = dev.pid
        assert pid is not None
        threading.Timer(0.2, os.kill, (pid, signal.SIGKILL)).start()
        with pytest.raises(nnrt.DeadObjectError):
            for _ in range(1000):
                prepared.execute_sync([x])
        assert svc.ring_sent >= 1
    finally:
        dev.close()


def test_close_while_threads_wait_on_the_ring() -> None:
    dev = nnrt.ProcessDevice("fmq-close")
    prepared = asyncio.run(dev.prepare_model(slow_small_output()))
    x = np.ones((1, 1_000_000), np.float32)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(1000):
                prepared.execute_sync([x])
        except BaseException as err:  # inspected below
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    dev.close()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert len(errors) == 3 and all(isinstance(e, nnrt.DeadObjectError) for e in errors), errors


async def test_death_during_a_burst_on_the_ring() -> None:
    async with nnrt.ProcessDevice("fmq-burst-death") as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        x = np.ones((1, 4), np.float32)
        async with prepared.burst() as burst:
            np.testing.assert_array_equal((await burst.execute([x, x])).outputs[0], 2 * x)
            dev._test_hang()
            await asyncio.sleep(0.05)  # the socket and the ring are not ordered: let the hang land first
            pending = asyncio.create_task(burst.execute([x, x]))
            await asyncio.sleep(0.05)
            pid = dev.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(nnrt.DeadObjectError):
                await asyncio.wait_for(pending, 10)


def test_ring_options_are_checked() -> None:
    for bad in (1000, 2048, -1, True, "1"):
        with pytest.raises(nnrt.InvalidArgumentError, match="ring_bytes"):
            nnrt.ProcessDevice(ring_bytes=bad)  # type: ignore[arg-type]
    for bad_poll in (-1, 2e6, "x"):
        with pytest.raises(nnrt.InvalidArgumentError, match="poll_us"):
            nnrt.ProcessDevice(poll_us=bad_poll)  # type: ignore[arg-type]
    with nnrt.ProcessDevice(ring_bytes=0) as dev:  # no rings: the socket, as before
        prepared = asyncio.run(dev.prepare_model(zoo.one_add()))
        x = np.ones((1, 4), np.float32)
        np.testing.assert_array_equal(prepared.execute_sync([x, x]).outputs[0], 2 * x)
        svc = dev._running()
        assert svc.channel is None and svc.socket_sent == 1
