"""Memory domains through a ``ProcessDevice`` (issue 18): device buffers living in the service.

The CPU device's contract (``tests/integration/test_memory_domains.py``) through the service:
a buffer is an input (nothing crosses but its handle) or an output of executions on that
device, copied in and out (by name into and out of a shared pool), released in the service
when freed or collected, and DEAD_OBJECT once its service died.
"""

from __future__ import annotations

import gc
import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import pytest

import nnrt
from nnrt import BufferRole, ErrorStatus, zoo
from nnrt.memory import Memory
from nnrt.process._wire import BufRef, encode_args
from tests.helpers import wait_until

W = 1024


@pytest.fixture(scope="module")
def pdev() -> Iterator[nnrt.ProcessDevice]:
    dev = nnrt.ProcessDevice("nnrt-process-buffers")
    yield dev
    dev.close()


def service_buffers(dev: nnrt.ProcessDevice) -> int:
    """How many device buffers the service holds (all apps)."""
    return int(dev._test_call("_counts")[1])


async def two_stage(dev: nnrt.ProcessDevice, app: str = "default") -> tuple[nnrt.PreparedModel, nnrt.PreparedModel]:
    """Two chains whose buffer is stage one's output and stage two's input."""
    first = await dev.prepare_model(zoo.add_chain(2, W), app=app)
    second = await dev.prepare_model(zoo.add_chain(3, W), app=app)
    return first, second


def stage(n: int, x: np.ndarray) -> np.ndarray:
    """What ``zoo.add_chain(n, W)`` computes, on an in-process CPU device."""
    cpu = nnrt.CpuDevice(name="reference")
    try:
        return cpu.prepare_model_sync(zoo.add_chain(n, W)).execute_sync([x]).outputs[0]
    finally:
        cpu.close()


def reference(x: np.ndarray) -> np.ndarray:
    return stage(3, stage(2, x))


async def test_buffer_between_two_models(pdev: nnrt.ProcessDevice) -> None:
    first, second = await two_stage(pdev)
    buf, token = pdev.allocate((), [first, second], input_roles=[BufferRole(1, 0)], output_roles=[BufferRole(0, 0)])
    assert buf.dimensions == (1, W) and not buf.initialized and service_buffers(pdev) == 1
    x = zoo.example_inputs(first.model)[0]
    r1 = await first.execute([x], [buf])
    assert buf.initialized and not r1.outputs[0].flags.writeable  # the result shows it, as on the CPU device
    # As an input nothing crosses but its handle.
    args, _ = second._validate_request([token], None)
    wire, blocks = encode_args(args)
    assert wire == [BufRef(buf.handle)] and blocks == []  # type: ignore[attr-defined]
    del args
    r2 = await second.execute([token])
    want = reference(x)
    np.testing.assert_array_equal(r2.outputs[0], want)
    # Copies out: into an array (by value), into a shared pool (in place).
    out = np.zeros((1, W), np.float32)
    buf.copy_to(out)
    np.testing.assert_array_equal(out, r1.outputs[0])
    with Memory.from_shared_memory(size=4 * W) as mem:
        buf.copy_to(mem)
        np.testing.assert_array_equal(mem.buffer.view(np.float32), r1.outputs[0].reshape(-1))
        # And in: from a shared pool (by name), then from an array.
        mem.buffer.view(np.float32)[:] = 7
        buf.copy_from(mem, (1, W))
    np.testing.assert_array_equal((await second.execute([buf])).outputs[0], stage(3, np.full((1, W), 7, np.float32)))
    buf.copy_from(np.full((1, W), 1, np.float32))
    np.testing.assert_array_equal(second.execute_sync([buf]).outputs[0], stage(3, np.ones((1, W), np.float32)))
    buf.free()
    assert service_buffers(pdev) == 0


async def test_buffer_errors(pdev: nnrt.ProcessDevice) -> None:
    first, second = await two_stage(pdev, app="e")
    buf, token = pdev.allocate((), [first, second], input_roles=[BufferRole(1, 0)], output_roles=[BufferRole(0, 0)])
    x = zoo.example_inputs(first.model)[0]
    with pytest.raises(nnrt.GeneralFailureError, match="uninitialized"):
        await second.execute([token])
    with pytest.raises(nnrt.GeneralFailureError, match="uninitialized"):
        buf.copy_to(np.zeros((1, W), np.float32))
    with pytest.raises(nnrt.InvalidArgumentError, match="role"):
        await first.execute([buf])  # not an input role of the first model
    with pytest.raises(nnrt.InvalidArgumentError, match="not fully specified or not compatible"):
        buf.copy_from(np.zeros(3, np.float32))
    assert not buf.initialized
    other = await pdev.prepare_model(zoo.add_chain(3, W), app="other")
    with pytest.raises(nnrt.InvalidArgumentError, match="token"):
        await other.execute([token])  # another app's token names nothing
    with pytest.raises(nnrt.InvalidArgumentError, match="different apps"):
        pdev.allocate((), [first, other], input_roles=[BufferRole(1, 0)], output_roles=[BufferRole(0, 0)])
    cpu = nnrt.CpuDevice(name="nnrt-cpu-other")
    try:
        local = cpu.prepare_model_sync(zoo.add_chain(2, W), app="e")
        with pytest.raises(nnrt.InvalidArgumentError, match="not a model prepared by this device"):
            pdev.allocate((), [local], output_roles=[BufferRole(0, 0)])
        with pytest.raises(nnrt.InvalidArgumentError, match="not a model prepared by this device"):
            cpu.allocate((), [first], output_roles=[BufferRole(0, 0)])
    finally:
        cpu.close()
    # A failed execution writing it leaves it uninitialized, as on the CPU device.
    buf.copy_from(np.ones((1, W), np.float32))
    with pytest.raises(nnrt.MissedDeadlineError):
        await first.execute([x], [buf], deadline=time.monotonic() - 1)
    assert not buf.initialized
    with pytest.raises(nnrt.GeneralFailureError, match="uninitialized"):
        await second.execute([buf])
    await first.execute([x], [buf])
    assert buf.initialized
    buf.free()
    with pytest.raises(nnrt.InvalidArgumentError, match="freed"):
        await second.execute([buf])


async def test_collected_buffer_is_released_in_the_service(pdev: nnrt.ProcessDevice) -> None:
    first, second = await two_stage(pdev, app="gc")
    n = service_buffers(pdev)
    buf, _ = pdev.allocate((), [first, second], input_roles=[BufferRole(1, 0)], output_roles=[BufferRole(0, 0)])
    assert service_buffers(pdev) == n + 1
    del buf
    gc.collect()
    service_buffers(pdev)  # the next request carries the release
    assert service_buffers(pdev) == n


async def test_buffer_dies_with_its_service() -> None:
    with nnrt.ProcessDevice("nnrt-process-buffers-death") as dev:
        first, second = await two_stage(dev)
        buf, token = dev.allocate((), [first, second], input_roles=[BufferRole(1, 0)], output_roles=[BufferRole(0, 0)])
        buf.copy_from(np.ones((1, W), np.float32))
        pid = dev.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: dev.dead)
        with pytest.raises(nnrt.DeadObjectError):
            buf.copy_to(np.zeros((1, W), np.float32))
        with pytest.raises(nnrt.DeadObjectError):
            buf.copy_from(np.ones((1, W), np.float32))
        with pytest.raises(nnrt.DeadObjectError):
            await second.execute([token])
        await dev.restart()  # the models work again; the buffer does not
        x = zoo.example_inputs(first.model)[0]
        assert (await first.execute([x])).outputs[0].shape == (1, W)
        with pytest.raises(nnrt.DeadObjectError) as info:
            await second.execute([token])
        assert info.value.status is ErrorStatus.DEAD_OBJECT
        with pytest.raises(nnrt.DeadObjectError):
            await first.execute([x], [buf])
        # A new buffer on the new service works.
        buf2, _ = dev.allocate((), [first, second], input_roles=[BufferRole(1, 0)], output_roles=[BufferRole(0, 0)])
        await first.execute([x], [buf2])
        np.testing.assert_array_equal((await second.execute([buf2])).outputs[0], reference(x))
        # allocate is a device call: on a dead device it restarts it (models re-prepared) first.
        os.kill(dev.pid, signal.SIGKILL)  # type: ignore[arg-type]
        wait_until(lambda: dev.dead)
        buf3, _ = dev.allocate((), [first], output_roles=[BufferRole(0, 0)])
        assert dev.restarts == 2
        await first.execute([x], [buf3])
        out = np.zeros((1, W), np.float32)
        buf3.copy_to(out)
        np.testing.assert_array_equal(out, stage(2, x))
