"""A ``ProcessDevice``'s lean ring path (``nnrt.process._forms``): it is taken (the
service's counters say how many packets it read through a known form and how many results it
wrote in place), it gives the same answers as the full parse, and packets that only look like a
known form (another app, another handle, a released model, cut short, a bad deadline datum, a
deadline already passed) still get NNAPI's statuses; a request too large for the ring takes the
socket; several requests made in one pass of the event loop ring the service's doorbell once.
Outputs the service writes in place into a shared-memory segment travel on the rings as pool
locations (their results carry only shapes; OUTPUT_INSUFFICIENT_SIZE carries the shapes
needed); a forged location outside its pool is INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.memory import Memory, MemoryLocation
from nnrt.process._client import ServiceProcess
from nnrt.process._forms import Expect
from nnrt.process._transport import encode_execute
from nnrt.process._wire import PoolRef

F32 = np.dtype(np.float32)


def service(dev: nnrt.ProcessDevice) -> ServiceProcess:
    svc = dev._running()
    assert svc.channel is not None
    return svc


def counters(dev: nnrt.ProcessDevice) -> tuple[int, int, int]:
    """(forms the service knows, packets read through one, results written through one)."""
    forms, hits, fast, *_ = dev._test_call("_rings")
    return forms, hits, fast


def dynamic_add() -> nnrt.Model:
    """[n, 4] + [n, 4] with n unknown: each batch size is another form."""
    m = nnrt.Model("dynamic_add")
    a = m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    b = m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    act = m.add_operand(T.INT32)
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [a, b, act], [y])
    m.identify_inputs_and_outputs([a, b], [y])
    m.finish()
    return m


def send_raw(svc: ServiceProcess, body: bytes, rid: int) -> tuple[bool, Any]:
    """Put a hand-made packet on the request ring and drain its answer ourselves."""
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    assert svc._ring_submit(fut, rid, lambda ring: ring.try_write([body], len(body)), Expect([F32])) is not None
    end = time.monotonic() + 10
    while not fut.done():
        assert time.monotonic() < end, "no answer"
        svc._drain()
        time.sleep(0.001)
    result: tuple[bool, Any] = fut.result()
    return result


def packet(rid: int, handle: int, app: str, x: np.ndarray, deadline: float | None = None,
           out_refs: list[Any] | None = None) -> bytes:
    """A one-ADD request packet as the app packs it in full."""
    packed = encode_execute(rid, handle, app, [x, x], deadline, None, [F32, F32], 1, None, out_refs)
    assert packed is not None
    return b"".join(bytes(p) for p in packed[0])


@contextlib.asynccontextmanager
async def one_add_service(name: str) -> AsyncIterator[tuple[nnrt.ProcessDevice, nnrt.PreparedModel, ServiceProcess, int]]:
    """A device, one_add prepared on it, its service and the model's handle there."""
    def parts(dev: nnrt.ProcessDevice, prepared: nnrt.PreparedModel) -> Any:
        return dev, prepared, service(dev), prepared._driver.handle  # type: ignore[attr-defined]

    async with nnrt.ProcessDevice(name) as dev:
        yield parts(dev, await dev.prepare_model(zoo.one_add()))  # no local keeps the model alive (a test releases it)


async def test_the_lean_path_is_taken_and_answers_as_the_full_parse() -> None:
    async with nnrt.ProcessDevice("forms") as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        svc = service(dev)
        for k in range(20):
            x = np.full((1, 4), k, np.float32)
            np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)
        forms, hits, fast = counters(dev)
        assert (forms, hits, fast) == (1, 19, 20)  # the first packet parsed in full, the others read through its form
        # a deadline and a loop timeout travel in the same form
        r = await prepared.execute([x, x], deadline=nnrt.deadline_after(5.0), loop_timeout=0.5)
        np.testing.assert_array_equal(r.outputs[0], 2 * x)
        # the caller's output buffer is filled straight from the ring
        buf = np.zeros((1, 4), np.float32)
        r = await prepared.execute([x, x], [buf])
        assert r.outputs[0] is buf and np.array_equal(buf, 2 * x)
        np.testing.assert_array_equal(prepared.execute_sync([x, 3 * x]).outputs[0], 4 * x)
        assert counters(dev) == (1, 22, 23)
        assert svc.socket_sent == 0 and svc.ring_sent == 23

        dyn = await dev.prepare_model(dynamic_add())
        for n in (1, 3, 1, 3):  # two forms; outputs of unknown shape are parsed in full by the app
            a = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
            np.testing.assert_array_equal((await dyn.execute([a, a])).outputs[0], 2 * a)
        assert counters(dev) == (3, 24, 27)


async def test_packets_that_look_like_a_known_form_still_get_nnapi_statuses() -> None:
    async with one_add_service("forms-bad") as (dev, prepared, svc, handle):
        x = np.ones((1, 4), np.float32)
        await prepared.execute([x, x])
        ok, out = send_raw(svc, packet(svc.new_id(), handle, "default", x), svc.new_id() - 1)
        assert ok and np.array_equal(out[0][0], 2 * x)
        forms, hits, _ = counters(dev)
        assert forms == 1 and hits == 1
        good = packet(0, handle, "default", x)
        cases = {
            "another app": (lambda r: packet(r, handle, "mallory", x), ErrorStatus.INVALID_ARGUMENT),
            "another handle": (lambda r: packet(r, handle ^ 1, "default", x), ErrorStatus.INVALID_ARGUMENT),
            "cut short": (lambda r: struct.pack("<q", r) + good[8:-8], ErrorStatus.INVALID_ARGUMENT),
            "bad deadline datum": (lambda r: struct.pack("<q", r) + good[8:64] + struct.pack("<q", -5) + good[72:],
                                   ErrorStatus.GENERAL_FAILURE),
            "deadline passed": (lambda r: packet(r, handle, "default", x, deadline=1.0),
                                ErrorStatus.MISSED_DEADLINE_PERSISTENT),
        }
        for name, (make, status) in cases.items():
            rid = svc.new_id()
            ok, err = send_raw(svc, make(rid), rid)
            assert not ok, name
            assert err.status is status, (name, err)
        assert counters(dev)[0] == 1  # none of them taught the service a form

        del prepared  # released in the service (with its forms) by the next request
        gc.collect()
        other = await dev.prepare_model(zoo.one_add())
        await other.execute([x, x])
        rid = svc.new_id()
        ok, err = send_raw(svc, packet(rid, handle, "default", x), rid)
        assert not ok and err.status is ErrorStatus.INVALID_ARGUMENT
        assert counters(dev)[0] == 1  # only the new model's form


async def test_a_request_too_large_for_the_ring_takes_the_socket() -> None:
    async with nnrt.ProcessDevice("forms-small", ring_bytes=4096) as dev:
        svc = service(dev)
        chain = zoo.add_chain(1, 600)  # 2.4 KB of input: a form, but more than half the ring
        prepared = await dev.prepare_model(chain)
        x = np.ones((1, 600), np.float32)
        r = await prepared.execute([x])
        assert r.outputs[0].shape == (1, 600)
        assert svc.socket_sent == 1 and svc.ring_sent == 0


async def test_requests_of_one_pass_ring_the_doorbell_once() -> None:
    async with nnrt.ProcessDevice("forms-batch") as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        svc = service(dev)
        x = np.ones((1, 4), np.float32)
        await prepared.execute([x, x])
        batched = svc.bells_batched
        # Another request outstanding the whole time, so none of these is alone: a lone request may
        # be answered while the loop polls (before the next is written), which is timing, not batching.
        svc._ring_ids[-6] = Expect([])
        try:
            many = await asyncio.gather(*(prepared.execute([np.full((1, 4), k, np.float32), x]) for k in range(32)))
        finally:
            del svc._ring_ids[-6]
        for k, m in enumerate(many):
            np.testing.assert_array_equal(m.outputs[0], k + x)
        assert svc.bells_batched > batched
        assert svc.rescues == 0  # every result reached its waiter without the last-resort drain
        # a batched ring left due on a loop that closed before running it does not hold back
        # the next loop's requests
        gone = asyncio.new_event_loop()
        gone.close()
        svc._bell_due = gone
        svc._ring_ids[-5] = Expect([])  # a request of that loop still outstanding: every new one is batched
        await asyncio.sleep(0.05)  # the service sleeps again
        try:
            many = await asyncio.wait_for(asyncio.gather(*(prepared.execute([x, x]) for _ in range(8))), 5)
        finally:
            del svc._ring_ids[-5]
        assert all(np.array_equal(m.outputs[0], 2 * x) for m in many)


@pytest.mark.parametrize("poll_us", [0.0, 50.0])
async def test_both_waiting_modes_give_the_same_answers(poll_us: float) -> None:
    async with nnrt.ProcessDevice("forms-wait", poll_us=poll_us) as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        for k in range(50):
            x = np.full((1, 4), k, np.float32)
            np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)
        assert service(dev).rescues == 0


# -- outputs written in place travel on the rings too -----------------------------------------------


def dynamic_wide_add(width: int = 1024) -> nnrt.Model:
    """[n, width] + [n, width] with n unknown (an output of unknown size)."""
    m = nnrt.Model("dynamic_wide_add")
    a = m.add_operand(T.TENSOR_FLOAT32, [0, width])
    act = m.add_operand(T.INT32)
    y = m.add_operand(T.TENSOR_FLOAT32, [0, width])
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [a, a, act], [y])
    m.identify_inputs_and_outputs([a], [y])
    m.finish()
    return m


async def test_outputs_written_in_place_travel_on_the_rings() -> None:
    async with nnrt.ProcessDevice("forms-in-place") as dev:
        svc = service(dev)
        chain = zoo.add_chain(2, 2048)  # an 8 KB output: written in place, not sent back
        prepared = await dev.prepare_model(chain)
        x = zoo.example_inputs(chain)[0]
        want = (await prepared.execute([x])).outputs[0]
        ring, sock = svc.ring_sent, svc.socket_sent
        with Memory.from_shared_memory(size=x.nbytes + 64) as mem:
            dst = MemoryLocation(mem, 64, x.nbytes)
            for _ in range(3):
                mem.buffer[:] = 0
                result = await prepared.execute([x], [dst])
                np.testing.assert_array_equal(mem.buffer[64:].view(np.float32).reshape(1, 2048), want)
                assert np.shares_memory(result.outputs[0], mem.buffer)
            np.testing.assert_array_equal(prepared.execute_sync([x], [dst]).outputs[0], want)
            del result, dst
        assert (svc.ring_sent - ring, svc.socket_sent - sock) == (4, 0)

        # an output of unknown size too large for its region: OUTPUT_INSUFFICIENT_SIZE with the
        # shape it needs, carried by the result packet
        dyn = await dev.prepare_model(dynamic_wide_add())
        a = np.ones((2, 1024), np.float32)
        with Memory.from_shared_memory(size=4096) as mem:
            with pytest.raises(nnrt.OutputInsufficientSizeError) as info:
                await dyn.execute([a], [MemoryLocation(mem, 0, 4096)])
            assert info.value.output_shapes[0].dimensions == (2, 1024)
            assert not info.value.output_shapes[0].is_sufficient
            one = np.ones((1, 1024), np.float32)
            r = await dyn.execute([one], [MemoryLocation(mem, 0, 4096)])
            assert r.output_shapes[0].dimensions == (1, 1024)  # the region is the caller's (flat) buffer
            np.testing.assert_array_equal(r.outputs[0].reshape(1, 1024), 2 * one)
            assert np.shares_memory(r.outputs[0], mem.buffer)
            del r
        assert svc.socket_sent == sock


async def test_a_forged_output_location_outside_its_pool_is_invalid_argument() -> None:
    async with one_add_service("forms-forged-out") as (_dev, prepared, svc, handle):
        x = np.ones((1, 4), np.float32)
        with Memory.from_shared_memory(size=4096) as mem:
            assert mem.name is not None
            cases = [(mem.name, 4090, ErrorStatus.INVALID_ARGUMENT), (mem.name, -16, ErrorStatus.INVALID_ARGUMENT),
                     ("nnrt-no-such-segment", 0, ErrorStatus.GENERAL_FAILURE)]  # as over the socket: unmappable
            for name, offset, status in cases:
                rid = svc.new_id()
                ok, err = send_raw(svc, packet(rid, handle, "default", x, out_refs=[PoolRef(name, offset, "<f4", (1, 4))]), rid)
                assert not ok and err.status is status, (name, offset, err)
        np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)


async def test_a_deadline_too_far_to_count_in_nanoseconds_is_never() -> None:
    """``deadline=inf`` ("never") and deadlines past an int64 of nanoseconds travel as "no
    deadline" (they once escaped as a bare OverflowError / struct.error), packed from a form or in
    full (an output written in place), and a failed write leaves no waiter behind."""
    async with one_add_service("forms-never") as (_dev, prepared, svc, _handle):
        x = np.ones((1, 4), np.float32)
        for deadline in (float("inf"), 1e12):
            r = await prepared.execute([x, x], deadline=deadline)
            np.testing.assert_array_equal(r.outputs[0], 2 * x)
        chain = await _dev.prepare_model(zoo.add_chain(1, 2048))
        y = np.ones((1, 2048), np.float32)
        want = (await chain.execute([y])).outputs[0]
        with Memory.from_shared_memory(size=y.nbytes) as mem:
            r = await chain.execute([y], [MemoryLocation(mem, 0, y.nbytes)], deadline=float("inf"))
            np.testing.assert_array_equal(mem.buffer.view(np.float32), want.reshape(-1))
            del r
        assert svc.socket_sent == 0 and not svc._pending and not svc._ring_ids


async def test_a_cancelled_ring_call_leaves_no_waiter_and_the_next_ones_run() -> None:
    """``ring_call`` returns a future the driver awaits itself: a caller cancelled while the
    service computes forgets its request at once (no waiter, no expected result left), the late
    result is dropped, and the requests after it still go on the rings with the right answers."""
    async with one_add_service("forms-cancel") as (dev, prepared, svc, _handle):
        slow = await dev.prepare_model(zoo.add_chain(4000, 4096))  # tens of ms in the service
        y = np.ones((1, 4096), np.float32)
        sent = svc.ring_sent
        task = asyncio.ensure_future(slow.execute([y]))
        for _ in range(2000):  # until the request is on the ring (the app's scheduler admits it first)
            if svc.ring_sent > sent:
                break
            await asyncio.sleep(0.001)
        assert svc.ring_sent == sent + 1 and len(svc._ring_ids) == 1 and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not svc._pending and not svc._ring_ids
        x = np.ones((1, 4), np.float32)
        for _ in range(3):
            np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)
        assert svc.ring_sent == sent + 4 and svc.socket_sent == 0 and not svc._pending and not svc._ring_ids
