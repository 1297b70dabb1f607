"""What crosses the boundary of a ``ProcessDevice`` (issue 18): pools by name, outputs in place.

Outputs in a shared pool are written by the service into the segment (the reply carries only
their shape); ``Memory.from_file`` pools are mapped by path in the service (read-only when the
app's pool is), and a file removed, replaced or truncated since is a GENERAL_FAILURE naming the
argument, never another file's bytes; the service's mappings are bounded.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt.memory import Memory, MemoryLocation
from nnrt.memory._memory import FileKey
from nnrt.process import _device, _driver, _pools
from nnrt.process._wire import PoolRef, encode_args, error_from, error_payload
from nnrt.sched import SchedulerStatistics
from nnrt.types import OutputShape
from tests.helpers import wait_until

N = 256 * 1024  # floats: a 1 MB input and output


@pytest.fixture(scope="module")
def pdev() -> Iterator[nnrt.ProcessDevice]:
    dev = nnrt.ProcessDevice("nnrt-process-data-test")
    yield dev
    dev.close()


@pytest.fixture
def in_place(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The outputs the service reported as written in place (shapes), this test."""
    seen: list[tuple[int, ...]] = []
    real = _driver._in_place

    def spy(buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        seen.append(shape)
        return real(buf, shape)

    monkeypatch.setattr(_driver, "_in_place", spy)
    return seen


def reference(model: nnrt.Model, x: np.ndarray) -> np.ndarray:
    cpu = nnrt.CpuDevice(name="reference")
    try:
        return cpu.prepare_model_sync(model).execute_sync([x]).outputs[0]
    finally:
        cpu.close()


def write_file(path: Path, data: np.ndarray, pad: int = 0) -> None:
    path.write_bytes(b"\0" * pad + data.tobytes())


# -- outputs written in place ----------------------------------------------------------------------


async def test_shared_memory_output_written_in_place(pdev: nnrt.ProcessDevice, in_place: list[Any]) -> None:
    model = zoo.add_chain(2, N)
    prepared = await pdev.prepare_model(model)
    x = zoo.example_inputs(model)[0]
    want = reference(model, x)
    with Memory.from_shared_memory(size=2 * x.nbytes + 128) as mem:
        mem.buffer[:x.nbytes].view(np.float32)[:] = x.reshape(-1)
        src, dst = MemoryLocation(mem, 0, x.nbytes), MemoryLocation(mem, x.nbytes + 128, x.nbytes)
        for measure in (False, True):  # both of _finish's paths
            mem.buffer[x.nbytes:] = 0
            result = await prepared.execute([src], [dst], measure_timing=measure)
            assert in_place[-1] == (1, N)
            np.testing.assert_array_equal(mem.buffer[x.nbytes + 128:].view(np.float32).reshape(1, N), want)
            assert np.shares_memory(result.outputs[0], mem.buffer)
            np.testing.assert_array_equal(result.outputs[0], want)
        # A plain output array still comes back by value.
        n = len(in_place)
        out = np.zeros((1, N), np.float32)
        result = await prepared.execute([src], [out])
        assert len(in_place) == n and result.outputs[0] is out
        np.testing.assert_array_equal(out, want)
        # execute_sync outside a loop's thread takes the same path.
        mem.buffer[x.nbytes:] = 0
        prepared.execute_sync([src], [dst])
        np.testing.assert_array_equal(mem.buffer[x.nbytes + 128:].view(np.float32).reshape(1, N), want)
        del result, src, dst


async def test_small_outputs_come_back_by_value(pdev: nnrt.ProcessDevice, in_place: list[Any]) -> None:
    """Under 4 KB an output in a shared pool comes back by value (on the ring) and is copied in."""
    prepared = await pdev.prepare_model(zoo.one_add())
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    service = pdev._running()
    with Memory.from_shared_memory(size=16) as mem:
        ring = service.ring_sent
        await prepared.execute([x, x], [MemoryLocation(mem, 0, 16)])
        assert in_place == [] and service.ring_sent == ring + 1
        np.testing.assert_array_equal(mem.buffer.view(np.float32), (x + x).reshape(-1))


def test_insufficient_size_crosses_with_its_shapes() -> None:
    err = nnrt.OutputInsufficientSizeError("too small", output_shapes=[OutputShape((2, 3), False), OutputShape((4,), True)])
    back = error_from(error_payload(err))
    assert type(back) is nnrt.OutputInsufficientSizeError and back.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert back.output_shapes == (OutputShape((2, 3), False), OutputShape((4,), True))


# -- file pools by path ----------------------------------------------------------------------------


async def test_file_input_mapped_by_path(pdev: nnrt.ProcessDevice, tmp_path: Path) -> None:
    model = zoo.add_chain(2, N)
    prepared = await pdev.prepare_model(model)
    x = zoo.example_inputs(model)[0]
    path = tmp_path / "input.bin"
    write_file(path, x, pad=100)
    with Memory.from_file(path, 100, x.nbytes) as mem:  # an offset inside the first page
        loc = MemoryLocation(mem, 0, x.nbytes)
        args, _ = prepared._validate_request([loc], None)
        (ref,), blocks = encode_args(args)
        assert blocks == [] and type(ref) is PoolRef and type(ref.pool) is FileKey
        assert ref.pool.path == str(path) and not ref.pool.writable and ref.offset == 100
        del args
        result = await prepared.execute([loc])
        np.testing.assert_array_equal(result.outputs[0], reference(model, x))


async def test_file_output_written_in_place(pdev: nnrt.ProcessDevice, tmp_path: Path, in_place: list[Any]) -> None:
    model = zoo.add_chain(2, N)
    prepared = await pdev.prepare_model(model)
    x = zoo.example_inputs(model)[0]
    path = tmp_path / "output.bin"
    path.write_bytes(bytes(x.nbytes))
    with Memory.from_file(path, writable=True) as mem:
        await prepared.execute([x], [MemoryLocation(mem, 0, x.nbytes)])
    assert in_place == [(1, N)]
    np.testing.assert_array_equal(np.fromfile(path, np.float32).reshape(1, N), reference(model, x))


def test_read_only_file_is_mapped_read_only(tmp_path: Path) -> None:
    path = tmp_path / "ro.bin"
    path.write_bytes(bytes(8192))
    st = path.stat()
    pools = _pools.Pools()
    try:
        ro = pools.attach(FileKey(str(path), 0, 8192, False, st.st_dev, st.st_ino), "input 0")
        assert not ro.flags.writeable and ro.size == 8192
        rw = pools.attach(FileKey(str(path), 0, 8192, True, st.st_dev, st.st_ino), "output 0")
        assert rw.flags.writeable
        with pytest.raises(nnrt.GeneralFailureError, match=r"input 3: .*names no memory pool"):
            pools.attach(("not", "a", "key"), "input 3")  # type: ignore[arg-type]
        with pytest.raises(nnrt.GeneralFailureError, match="output 1: the service cannot map shared memory"):
            pools.attach("nnrt-no-such-segment", "output 1")
    finally:
        pools.close()


async def test_file_removed_replaced_or_truncated(pdev: nnrt.ProcessDevice, tmp_path: Path) -> None:
    model = zoo.add_chain(2, 4096)
    prepared = await pdev.prepare_model(model)
    x = zoo.example_inputs(model)[0]
    want = reference(model, x)

    # Removed after the app mapped it: the service cannot map it by path.
    path = tmp_path / "gone.bin"
    write_file(path, x)
    with Memory.from_file(path) as mem:
        path.unlink()
        with pytest.raises(nnrt.GeneralFailureError, match=r"input 0: .*gone.bin.*removed") as info:
            await prepared.execute([MemoryLocation(mem, 0, x.nbytes)])
        assert info.value.status is ErrorStatus.GENERAL_FAILURE

    # Replaced by another file at the same path: refused, not the other file's bytes.
    path = tmp_path / "replaced.bin"
    write_file(path, x)
    with Memory.from_file(path) as mem:
        other = tmp_path / "other.bin"
        write_file(other, x + 1)
        os.replace(other, path)
        with pytest.raises(nnrt.GeneralFailureError, match=r"input 0: .*replaced"):
            await prepared.execute([MemoryLocation(mem, 0, x.nbytes)])

    # Truncated after the service mapped it: refused before anything reads past the end.
    path = tmp_path / "truncated.bin"
    write_file(path, x)
    with Memory.from_file(path) as mem:
        loc = MemoryLocation(mem, 0, x.nbytes)
        np.testing.assert_array_equal((await prepared.execute([loc])).outputs[0], want)
        os.truncate(path, 100)
        with pytest.raises(nnrt.GeneralFailureError, match=r"input 0: .*truncated to 100 bytes"):
            await prepared.execute([loc])
        del loc
    # The service serves on.
    np.testing.assert_array_equal((await prepared.execute([x])).outputs[0], want)


def test_service_mappings_are_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_pools, "MAX_POOLS", 3)
    pools = _pools.Pools()
    keys = []
    for k in range(5):
        path = tmp_path / f"f{k}.bin"
        path.write_bytes(bytes([k]) * 4096)
        st = path.stat()
        keys.append(FileKey(str(path), 0, 4096, False, st.st_dev, st.st_ino))
    fds = len(os.listdir("/proc/self/fd"))
    try:
        for k, key in enumerate(keys):
            assert pools.attach(key, "input 0")[0] == k
        assert len(pools) == 3
        assert pools.attach(keys[4], "input 0")[0] == 4  # still mapped
        assert len(os.listdir("/proc/self/fd")) == fds + 3
    finally:
        pools.close()
    assert len(os.listdir("/proc/self/fd")) == fds


# -- the service runs short requests inline ----------------------------------------------------------


async def test_service_inline_limit(pdev: nnrt.ProcessDevice) -> None:
    """The service's device runs a request on its loop up to 1 ms of estimated cost (the
    in-process default is 100 us); ``inline_limit_ns`` overrides it."""
    assert pdev._options["inline_limit_ns"] == _device.SERVICE_INLINE_LIMIT_NS
    model = zoo.add_chain(2, N)
    prepared = await pdev.prepare_model(model, app="inline")
    driver = prepared._driver
    assert pdev._test_call("_inline", "inline", driver.handle) is (driver.cost_ns <= _device.SERVICE_INLINE_LIMIT_NS)
    with nnrt.ProcessDevice(inline_limit_ns=0) as never:
        other = await never.prepare_model(model, app="inline")
        assert never._test_call("_inline", "inline", other._driver.handle) is False
        np.testing.assert_array_equal((await other.execute(zoo.example_inputs(model))).outputs[0],
                                      reference(model, zoo.example_inputs(model)[0]))


# -- compilation cache and statistics through the service ---------------------------------------------


async def test_prepare_model_from_cache_and_statistics(tmp_path: Path) -> None:
    model = zoo.add_chain(3, 64)
    x = zoo.example_inputs(model)[0]
    want = reference(model, x)
    token = bytes(range(32))
    with nnrt.ProcessDevice("nnrt-process-cache") as dev:
        await dev.prepare_model(model, cache_dir=tmp_path, token=token, app="c")
        cached = await dev.prepare_model_from_cache(tmp_path, token, app="c")
        assert cached.model.operations[0].type is nnrt.OperationType.ADD and len(cached.model.operations) == 3
        for _ in range(3):
            np.testing.assert_array_equal((await cached.execute([x])).outputs[0], want)
        stats = dev.statistics()
        assert isinstance(stats, SchedulerStatistics)
        assert stats.get("c", nnrt.Priority.MEDIUM).completed == 3
        # The CPU device's errors: no entry (another preference) is GENERAL_FAILURE, bad arguments INVALID_ARGUMENT.
        with pytest.raises(nnrt.GeneralFailureError, match="compilation cache"):
            await dev.prepare_model_from_cache(tmp_path, token, preference=nnrt.ExecutionPreference.LOW_POWER)
        with pytest.raises(nnrt.InvalidArgumentError, match="token must be 32 bytes"):
            await dev.prepare_model_from_cache(tmp_path, b"short")
        with pytest.raises(nnrt.InvalidArgumentError, match="preference"):
            await dev.prepare_model_from_cache(tmp_path, token, preference=99)  # type: ignore[arg-type]
        # After a death and a restart, the model prepared from the cache works again.
        old = dev.pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: dev.dead)
        with pytest.raises(nnrt.DeadObjectError):
            await cached.execute([x])
        await dev.restart()
        assert dev.pid != old
        np.testing.assert_array_equal((await cached.execute([x])).outputs[0], want)
        assert dev.statistics().get("c", nnrt.Priority.MEDIUM).completed == 1  # a new service's counters


# -- device calls on a dead device ----------------------------------------------------------------


def kill(dev: nnrt.ProcessDevice) -> int:
    pid = dev.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: dev.dead)
    return pid


def test_device_calls_restart_a_dead_device() -> None:
    model = zoo.one_add()
    x = np.ones((1, 4), np.float32)
    with nnrt.ProcessDevice("nnrt-process-resilient") as dev:
        prepared = asyncio.run(dev.prepare_model(model))
        caps = dev.capabilities
        for call in (lambda: dev.supported_operations(model), lambda: dev.operation_support(model), dev.statistics):
            old = kill(dev)
            call()
            assert not dev.dead and dev.pid not in (None, old)
            # Its prepared models were re-prepared on the new service.
            np.testing.assert_array_equal(prepared.execute_sync([x, x]).outputs[0], x + x)
        assert dev.restarts == 3 and dev.capabilities == caps


async def test_ready_restarts_without_blocking_the_loop() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    model = zoo.add_chain(4, 16)
    x = zoo.example_inputs(model)[0]
    cpu = nnrt.CpuDevice(name="nnrt-cpu-beside")
    try:
        with nnrt.ProcessDevice("nnrt-process-ready", restricted={"name": "npu", "operations": ["ADD"],
                                                                   "performance": 0.5}) as npu:
            task = asyncio.get_running_loop().create_task(ticker())
            try:
                await npu.ready()  # the first start
                assert ticks > 0 and npu.pid is not None
                kill(npu)
                ticks = 0
                # nnrt.prepare asks each device what it supports: the dead one restarts first, off the loop.
                prepared = await nnrt.prepare(model, [npu, cpu])
                assert ticks > 0 and not npu.dead and npu.restarts == 1
            finally:
                task.cancel()
            assert prepared.partitions[0].device == "npu"
            np.testing.assert_array_equal((await prepared.execute([x])).outputs[0], reference(model, x))
    finally:
        cpu.close()


async def test_large_plain_outputs_come_back_through_the_arena(monkeypatch: pytest.MonkeyPatch) -> None:
    model = zoo.add_chain(2, 64 * 1024)  # 256 KB in, 256 KB out
    x = zoo.example_inputs(model)[0]
    want = reference(model, x)
    # Four 256 KB blocks; no rings (a 256 KB result fits a 1 MB ring: only larger ones take the arena there).
    with nnrt.ProcessDevice("nnrt-process-arena-out", arena_bytes=1 << 20, ring_bytes=0) as dev:
        prepared = await dev.prepare_model(model)
        reserved: list[int] = []
        real = dev._arena.reserve

        def spy(nbytes: int) -> Any:
            block = real(nbytes)
            reserved.append(-1 if block is None else block[1])
            return block

        monkeypatch.setattr(dev._arena, "reserve", spy)
        out = np.zeros((1, 64 * 1024), np.float32)
        result = await prepared.execute([x], [out])
        assert result.outputs[0] is out and len(reserved) == 2 and min(reserved) >= 0  # the input's block, the output's
        np.testing.assert_array_equal(out, want)
        result = await prepared.execute([x])  # allocated: a copy out of the arena, owned by the result
        assert result.outputs[0].flags.owndata and len(reserved) == 4
        np.testing.assert_array_equal(result.outputs[0], want)
        assert not np.shares_memory(result.outputs[0], dev._arena._memory.buffer)  # type: ignore[union-attr]
        # Eight in flight: the arena fills (inputs and outputs), the rest go by value; all correct.
        xs = [zoo.example_inputs(model, seed=k)[0] for k in range(8)]
        results = await asyncio.gather(*(prepared.execute([v]) for v in xs))
        assert -1 in reserved  # some did not fit
        for v, r in zip(xs, results):
            np.testing.assert_array_equal(r.outputs[0], reference(model, v))
        assert dev._arena.free_bytes == 1 << 20  # every block returned
        # A caller's array of another shape than the model's output comes back by value.
        n = len(reserved)
        flat = np.zeros(64 * 1024 + 5, np.float32)
        await prepared.execute([x], [flat])
        assert len(reserved) == n + 1  # the input's block only
        np.testing.assert_array_equal(flat[: 64 * 1024], want.reshape(-1))


async def test_with_rings_a_result_larger_than_half_a_ring_takes_the_arena(pdev: nnrt.ProcessDevice) -> None:
    big, small = zoo.add_chain(2, N), zoo.add_chain(2, 1024)  # 1 MB and 4 KB results, 1 MB rings
    service = pdev._running()
    for model, by_ring in ((big, False), (small, True)):
        prepared = await pdev.prepare_model(model)
        x = zoo.example_inputs(model)[0]
        ring, sock = service.ring_sent, service.socket_sent
        np.testing.assert_array_equal((await prepared.execute([x])).outputs[0], reference(model, x))
        assert (service.ring_sent - ring, service.socket_sent - sock) == ((1, 0) if by_ring else (0, 1))
