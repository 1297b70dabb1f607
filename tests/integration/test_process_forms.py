"""A ``ProcessDevice``'s lean ring path (``nnrt.process._transport``'s forms): it is taken (the
service's counters say how many packets it read through a known form and how many results it
wrote in place), it gives the same answers as the full parse, and packets that only look like a
known form (another app, another handle, a released model, cut short, a bad deadline datum, a
deadline already passed) still get NNAPI's statuses; a request too large for the ring takes the
socket; several requests made in one pass of the event loop ring the service's doorbell once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import struct
import time
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.process._client import ServiceProcess
from nnrt.process._transport import Expect, encode_execute

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


def packet(rid: int, handle: int, app: str, x: np.ndarray, deadline: float | None = None) -> bytes:
    packed = encode_execute(rid, handle, app, [x, x], deadline, None, [F32, F32], 1, None)
    assert packed is not None
    return b"".join(bytes(p) for p in packed[0])


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
    async with nnrt.ProcessDevice("forms-bad") as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        svc = service(dev)
        handle = prepared._driver.handle  # type: ignore[attr-defined]
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
        many = await asyncio.gather(*(prepared.execute([np.full((1, 4), k, np.float32), x]) for k in range(32)))
        for k, m in enumerate(many):
            np.testing.assert_array_equal(m.outputs[0], k + x)
        assert svc.bells_batched > batched
        assert svc.rescues == 0  # every result reached its waiter without the last-resort drain


@pytest.mark.parametrize("poll_us", [0.0, 50.0])
async def test_both_waiting_modes_give_the_same_answers(poll_us: float) -> None:
    async with nnrt.ProcessDevice("forms-wait", poll_us=poll_us) as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        for k in range(50):
            x = np.full((1, 4), k, np.float32)
            np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)
        assert service(dev).rescues == 0
