"""``ProcessDevice``: a driver in its own process (issue 18).

Every execution mode goes through the service; the service's death at each stage
(preparation, execution, burst, idle) fails what was in flight with DEAD_OBJECT and the device
recovers with ``restart()``; the watchdog turns a wedged service into DEAD_OBJECT; one app
cannot reach another's prepared model; closing leaves no process, shared-memory segment or
file descriptor behind.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt.memory import Memory, MemoryLocation
from nnrt.process._wire import PoolRef, encode_args

TOKEN = bytes(range(32))

# The services these tests start serve the ``_hang`` test hook (the watchdog's test).
os.environ["NNRT_SERVICE_TEST_HOOKS"] = "1"


@pytest.fixture(scope="module")
def pdev() -> Iterator[nnrt.ProcessDevice]:
    dev = nnrt.ProcessDevice("nnrt-process-test")
    yield dev
    dev.close()


def expected_chain(model: nnrt.Model, x: np.ndarray) -> np.ndarray:
    cpu = nnrt.CpuDevice(name="reference")
    try:
        prepared = cpu.prepare_model_sync(model)
        return prepared.execute_sync([x]).outputs[0]
    finally:
        cpu.close()


def slow_model() -> nnrt.Model:
    """Tens of milliseconds per execution: long enough to be killed in flight."""
    return zoo.add_chain(40, 1_000_000)


def wait_until(pred: object, timeout: float = 10.0) -> None:
    """Hang guard, not a timing assertion."""
    end = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.005)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def fd_count() -> int:
    """Open file descriptors, once garbage from earlier tests (views in cycles keeping a closed
    pool's mapping, and so its descriptor) is collected."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def shm_mapped() -> set[str]:
    """The shared-memory segments this process maps or holds open (``/dev/shm`` itself is
    shared with every other process on the machine)."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            if "/dev/shm/" in line:
                out.add(line.split("/dev/shm/")[1].split()[0])
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/shm/"):
            out.add(target[len("/dev/shm/"):].split()[0])
    return out


# -- every execution mode --------------------------------------------------------------------------


async def test_execute_matches_cpu(pdev: nnrt.ProcessDevice) -> None:
    model = zoo.add_chain(20, 8)
    prepared = await pdev.prepare_model(model, app="a")
    x = zoo.example_inputs(model)[0]
    result = await prepared.execute([x], measure_timing=True)
    np.testing.assert_array_equal(result.outputs[0], expected_chain(model, x))
    assert result.output_shapes[0].dimensions == (1, 8)
    assert result.timing.time_in_driver_ns is not None
    assert pdev.pid is not None and pdev.pid != os.getpid()
    assert prepared.partitions[0].device == "nnrt-process-test"


async def test_concurrent_executions_and_caller_outputs(pdev: nnrt.ProcessDevice) -> None:
    model = zoo.one_add()
    prepared = await pdev.prepare_model(model)
    xs = [np.full((1, 4), k, np.float32) for k in range(16)]
    results = await asyncio.gather(*(prepared.execute([x, x]) for x in xs))
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r.outputs[0], x + x)
    out = np.zeros((1, 4), np.float32)
    r = await prepared.execute([xs[3], xs[3]], [out])
    assert r.outputs[0] is out and out[0, 0] == 6


def test_execute_sync_without_a_loop(pdev: nnrt.ProcessDevice) -> None:
    model = zoo.one_add()
    prepared = asyncio.run(pdev.prepare_model(model))
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(prepared.execute_sync([x, x]).outputs[0], x + x)


async def test_execute_sync_from_another_thread(pdev: nnrt.ProcessDevice) -> None:
    prepared = await pdev.prepare_model(zoo.one_add())
    x = np.ones((1, 4), np.float32)
    out = await asyncio.to_thread(prepared.execute_sync, [x, x])
    np.testing.assert_array_equal(out.outputs[0], x + x)


async def test_execute_fenced_chain(pdev: nnrt.ProcessDevice) -> None:
    prepared = await pdev.prepare_model(zoo.one_add())
    x = np.ones((1, 4), np.float32)
    mid, out = np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32)
    f1, _ = await prepared.execute_fenced([x, x], [mid])
    f2, cb = await prepared.execute_fenced([mid, mid], [out], wait_for=[f1])
    assert await f2.wait(30)
    assert cb.get_execution_info().status is ErrorStatus.NONE
    np.testing.assert_array_equal(out, 4 * x)


async def test_burst(pdev: nnrt.ProcessDevice) -> None:
    prepared = await pdev.prepare_model(zoo.one_add())
    async with prepared.burst() as burst:
        for k in range(5):
            x = np.full((1, 4), k, np.float32)
            r = await burst.execute([x, x])
            np.testing.assert_array_equal(r.outputs[0], 2 * x)


async def test_errors_keep_their_status(pdev: nnrt.ProcessDevice) -> None:
    prepared = await pdev.prepare_model(zoo.one_add())
    x = np.ones((1, 4), np.float32)
    with pytest.raises(nnrt.InvalidArgumentError, match="input 1"):
        await prepared.execute([x, np.ones((1, 5), np.float32)])
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await prepared.execute([x, x], deadline=time.monotonic() - 1)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    not_finished = nnrt.Model()
    with pytest.raises(nnrt.InvalidArgumentError, match="not finished"):
        await pdev.prepare_model(not_finished)
    # A model the service's device refuses: the status crosses back.
    restricted = nnrt.ProcessDevice(restricted={"name": "no-add", "operations": ["MUL"]})
    try:
        assert restricted.supported_operations(zoo.one_add()) == [False]
        with pytest.raises(nnrt.InvalidArgumentError, match="ADD"):
            await restricted.prepare_model(zoo.one_add())
    finally:
        restricted.close()


async def test_shared_memory_input_is_sent_by_name(pdev: nnrt.ProcessDevice) -> None:
    model = zoo.add_chain(2, 256 * 1024)
    prepared = await pdev.prepare_model(model)
    x = zoo.example_inputs(model)[0]
    with Memory.from_shared_memory(size=x.nbytes + 64) as mem:
        mem.buffer[64:].view(np.float32)[:] = x.reshape(-1)
        loc = MemoryLocation(mem, 64, x.nbytes)
        args, _ = prepared._validate_request([loc], None)
        wire, blocks = encode_args(args)
        assert blocks == []
        assert type(wire[0]) is PoolRef and wire[0].pool == mem.name and wire[0].offset == 64
        result = await prepared.execute([loc])
        del args
    np.testing.assert_array_equal(result.outputs[0], expected_chain(model, x))


async def test_large_plain_inputs_go_through_the_arena() -> None:
    model = zoo.add_chain(2, 128 * 1024)
    with nnrt.ProcessDevice(arena_bytes=1 << 20) as dev:  # room for two 512 KB inputs at a time
        prepared = await dev.prepare_model(model)
        xs = [np.random.default_rng(k).standard_normal((1, 128 * 1024)).astype(np.float32) for k in range(6)]
        wire, blocks = encode_args([xs[0]], dev._arena)
        assert type(wire[0]) is PoolRef and wire[0].pool == dev._arena.name and blocks == [(0, xs[0].nbytes)]
        dev._arena.free(*blocks[0])
        results = await asyncio.gather(*(prepared.execute([x]) for x in xs))  # some fall back to the socket
        for x, r in zip(xs, results):
            np.testing.assert_array_equal(r.outputs[0], expected_chain(model, x))
        assert dev._arena.free_bytes == 1 << 20  # every block returned
        name = dev._arena.name
        assert name is not None and name in shm_mapped()
    assert name not in shm_mapped() and name not in os.listdir("/dev/shm")


def test_arena_first_fit_and_coalescing() -> None:
    from nnrt.process._arena import Arena

    arena = Arena(1024)
    try:
        a, b, c = (arena.put(np.zeros(16, np.float32)) for _ in range(3))  # 64 bytes each
        assert [w[1] for w in (a, b, c) if w] == [0, 64, 128]
        assert arena.put(np.zeros(1024, np.uint8)) is None  # does not fit
        arena.free(64, 64)
        arena.free(0, 64)
        assert arena.put(np.zeros(128, np.uint8)) == (arena.name, 0)  # the two freed blocks merged
        arena.free(0, 128)
        arena.free(128, 64)
        assert arena.free_bytes == 1024 and arena._free == [(0, 1024)]
    finally:
        arena.close()


# -- isolation ----------------------------------------------------------------------------------------


async def test_an_app_cannot_reach_another_apps_prepared_model(pdev: nnrt.ProcessDevice) -> None:
    prepared = await pdev.prepare_model(zoo.one_add(), app="alice")
    handle = prepared._driver.handle  # type: ignore[attr-defined]
    x = np.ones((1, 4), np.float32)
    ok = pdev._test_call("execute", "alice", handle, [x, x], None, 2.0)
    np.testing.assert_array_equal(ok[0][0], x + x)
    with pytest.raises(nnrt.InvalidArgumentError, match="'mallory' has no prepared model"):
        pdev._test_call("execute", "mallory", handle, [x, x], None, 2.0)
    pdev._test_call("ping")  # a release by another app does nothing either
    pdev._running().notify("release", "mallory", handle)
    np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], x + x)


# -- malformed requests ---------------------------------------------------------------------------------


async def test_malformed_requests_are_answered_and_the_service_serves_on(pdev: nnrt.ProcessDevice, tmp_path: Path) -> None:
    import pickle
    import struct

    service = pdev._running()
    for body in (b"", b"not a pickle at all", pickle.dumps(["a", "list"]), pickle.dumps(("execute", "rid-not-int"))):
        with service._send_lock:
            service._sock.sendall(struct.pack("<Q", len(body)) + body)
    with pytest.raises(nnrt.InvalidArgumentError, match="unknown request 'frobnicate'"):
        pdev._test_call("frobnicate")
    with pytest.raises(nnrt.GeneralFailureError, match="malformed execute request: 1 arguments"):
        pdev._test_call("execute", "default")  # too few arguments
    with pytest.raises(nnrt.GeneralFailureError, match="malformed execute request: argument 1 is a str"):
        pdev._test_call("execute", "default", "handle", [], None, None)
    with pytest.raises(nnrt.GeneralFailureError, match="unknown options"):
        pdev._test_call("prepare", "default", ({}, []), {"bogus": 1})
    # A frame that would call a function while unpickling is refused before anything runs.
    marker = tmp_path / "created-by-the-frame"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.mkdir, (str(marker),)

    evil = pickle.dumps(("ping", 7, Evil()))
    with service._send_lock:
        service._sock.sendall(struct.pack("<Q", len(evil)) + evil)
    assert pdev._test_call("ping") == pdev.pid and not marker.exists()
    with pytest.raises(nnrt.InvalidArgumentError, match="malformed model description"):
        pdev._test_call("support", "", ({"not": "a model"}, []))
    assert pdev._test_call("ping") == pdev.pid
    prepared = await pdev.prepare_model(zoo.one_add())
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)
    assert not pdev.dead


# -- lifecycle: nothing left behind -------------------------------------------------------------------


async def test_close_leaves_no_process_shm_or_fd() -> None:
    # The segment is the app's (made first: creating one starts Python's resource tracker,
    # and its fd outlives ``close`` while cached views exist, as on any device).
    with Memory.from_shared_memory(size=4 * 4096) as mem:
        fds, shms = fd_count(), shm_mapped()
        async with nnrt.ProcessDevice() as dev:
            pid = dev.pid
            assert pid is not None
            prepared = await dev.prepare_model(zoo.add_chain(1, 2048))
            x = np.ones((1, 2048), np.float32)
            await prepared.execute([x])
            await prepared.execute([MemoryLocation(mem, 0, x.nbytes)])  # attached by name in the service
        assert gone(pid)
        assert dev.pid is None
        assert fd_count() == fds
        assert shm_mapped() == shms
    with pytest.raises(nnrt.DeadObjectError):
        await prepared.execute([x])


def test_context_manager_and_restart_leave_nothing() -> None:
    fds = fd_count()
    with nnrt.ProcessDevice() as dev:
        dev.start()
        first = dev.pid
        assert first is not None
        asyncio.run(dev.restart())
        assert dev.pid != first and gone(first)
        second = dev.pid
    assert second is not None and gone(second)
    assert fd_count() == fds


def test_service_exits_when_the_app_dies(tmp_path: Path) -> None:
    """A child app starts a service and is killed: the service notices and exits."""
    import subprocess
    import sys

    script = tmp_path / "app.py"
    script.write_text(
        "import sys, nnrt\n"
        "d = nnrt.ProcessDevice()\n"
        "d.start()\n"
        "print(d.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(nnrt.__file__)))
    app = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert app.stdout is not None
        service_pid = int(app.stdout.readline())
        assert not gone(service_pid)
        app.kill()
        app.wait()
        wait_until(lambda: gone(service_pid))
    finally:
        app.kill()
        app.wait()
        assert app.stdin is not None and app.stdout is not None
        app.stdin.close()
        app.stdout.close()


# -- death at each stage, and recovery ------------------------------------------------------------------


async def test_death_during_execution_fails_everything_in_flight_then_restart() -> None:
    with nnrt.ProcessDevice(compute_units=1) as dev:
        model = slow_model()
        prepared = await dev.prepare_model(model)
        x = zoo.example_inputs(model)[0]
        tasks = [asyncio.create_task(prepared.execute([x])) for _ in range(4)]  # one runs, three queue
        await asyncio.sleep(0.02)
        old = dev.pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        # The first may have finished before the kill on a loaded machine; those queued
        # behind it on the one compute unit cannot have.
        assert all(isinstance(r, nnrt.DeadObjectError) for r in results[1:]), results
        assert all(r.status is ErrorStatus.DEAD_OBJECT for r in results[1:])  # type: ignore[union-attr]
        assert dev.dead
        with pytest.raises(nnrt.DeadObjectError):
            await prepared.execute([x])
        await dev.restart()
        assert not dev.dead and dev.pid != old and gone(old)
        result = await prepared.execute([x])
        np.testing.assert_array_equal(result.outputs[0], expected_chain(model, x))


async def test_death_during_preparation_then_prepare_restarts() -> None:
    with nnrt.ProcessDevice() as dev:
        dev.start()
        pid = dev.pid
        assert pid is not None
        task = asyncio.create_task(dev.prepare_model(slow_model()))
        await asyncio.sleep(0)  # the request is sent
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(nnrt.DeadObjectError):
            await asyncio.wait_for(task, 30)
        assert dev.dead
        prepared = await dev.prepare_model(zoo.one_add())  # a dead device restarts on prepare_model
        assert dev.pid != pid
        x = np.ones((1, 4), np.float32)
        np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)


async def test_death_during_a_burst() -> None:
    with nnrt.ProcessDevice() as dev:
        model = slow_model()
        prepared = await dev.prepare_model(model)
        x = zoo.example_inputs(model)[0]
        async with prepared.burst() as burst:
            timer = threading.Timer(0.02, os.kill, (dev.pid, signal.SIGKILL))
            timer.start()
            try:
                with pytest.raises(nnrt.DeadObjectError):
                    for _ in range(1000):  # a stream of requests, one of them in flight at the kill
                        await asyncio.wait_for(burst.execute([x]), 30)
            finally:
                timer.join()
            with pytest.raises(nnrt.DeadObjectError):
                await burst.execute([x])


async def test_death_while_idle_then_restart_from_the_cache(tmp_path: Path) -> None:
    with nnrt.ProcessDevice() as dev:
        model = zoo.small_cnn()
        prepared = await dev.prepare_model(model, cache_dir=tmp_path, token=TOKEN)
        entries = sorted(os.listdir(tmp_path))
        assert entries  # the service wrote a cache entry
        x = zoo.example_inputs(model)[0]
        before = (await prepared.execute([x])).outputs[0]
        pid = dev.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: dev.dead)
        with pytest.raises(nnrt.DeadObjectError, match="died"):
            await prepared.execute([x])
        await dev.restart()
        assert dev.restarts == 1
        np.testing.assert_array_equal((await prepared.execute([x])).outputs[0], before)
        assert sorted(os.listdir(tmp_path)) == entries


def test_death_during_execute_sync() -> None:
    with nnrt.ProcessDevice() as dev:
        model = slow_model()
        prepared = asyncio.run(dev.prepare_model(model))
        x = zoo.example_inputs(model)[0]
        timer = threading.Timer(0.02, os.kill, (dev.pid, signal.SIGKILL))
        timer.start()
        try:
            with pytest.raises(nnrt.DeadObjectError):
                for _ in range(1000):
                    prepared.execute_sync([x])
        finally:
            timer.join()


async def test_partitioned_across_a_service_falls_back_to_the_cpu_when_it_dies() -> None:
    cpu = nnrt.CpuDevice(name="cpu")
    try:
        with nnrt.ProcessDevice(restricted={"name": "npu", "operations": ["CONV_2D", "DEPTHWISE_CONV_2D"],
                                            "performance": 0.5}) as npu:
            model = zoo.mobilenet_block()
            prepared = await nnrt.prepare(model, [npu, cpu])
            assert "npu" in [part.device for part in prepared.partitions]
            x = zoo.example_inputs(model)[0]
            expected = (await (await cpu.prepare_model(model)).execute([x])).outputs[0]
            np.testing.assert_array_equal((await prepared.execute([x])).outputs[0], expected)
            os.kill(npu.pid, signal.SIGKILL)  # type: ignore[arg-type]
            wait_until(lambda: npu.dead)
            # the npu's steps fail with DEAD_OBJECT and run on the CPU instead (nnrt.framework)
            np.testing.assert_array_equal((await prepared.execute([x])).outputs[0], expected)
    finally:
        cpu.close()


# -- the watchdog --------------------------------------------------------------------------------------


async def test_watchdog_turns_a_wedged_service_into_dead_object() -> None:
    with nnrt.ProcessDevice(hang_timeout=0.2) as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        pid = dev.pid
        assert pid is not None
        dev._test_hang()
        x = np.ones((1, 4), np.float32)
        with pytest.raises(nnrt.DeadObjectError, match="wedged"):
            await asyncio.wait_for(prepared.execute([x, x]), 30)
        assert dev.dead and gone(pid)
        await dev.restart()
        np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)


async def test_restart_takes_the_standby_service() -> None:
    fds = fd_count()
    with nnrt.ProcessDevice(standby=True) as dev:
        prepared = await dev.prepare_model(zoo.one_add())
        wait_until(lambda: dev._spare is not None, 60)
        spare = dev._spare.pid  # type: ignore[union-attr]
        first = dev.pid
        assert first is not None and spare != first
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: dev.dead)
        await dev.restart()
        assert dev.pid == spare
        x = np.ones((1, 4), np.float32)
        np.testing.assert_array_equal((await prepared.execute([x, x])).outputs[0], 2 * x)
        wait_until(lambda: dev._spare is not None, 60)  # a new spare
        third = dev._spare.pid  # type: ignore[union-attr]
    assert gone(first) and gone(spare) and gone(third)
    assert fd_count() == fds


def test_bad_arguments() -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="hang_timeout"):
        nnrt.ProcessDevice(hang_timeout=-1)
    dev = nnrt.ProcessDevice()
    dev.close()
    with pytest.raises(nnrt.DeadObjectError, match="closed"):
        dev.start()
    fds = fd_count()
    bad = nnrt.ProcessDevice(no_such_option=1)
    with pytest.raises(nnrt.InvalidArgumentError, match="no_such_option"):
        bad.start()
    assert bad.pid is None and fd_count() == fds
    bad.close()
