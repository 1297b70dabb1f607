"""Arguments in pools both processes map cost a ``ProcessDevice`` nothing per byte (issue 18).

An input or output in a ``Memory.from_shared_memory`` or ``Memory.from_file`` pool travels on
the rings as a location in its pool (``nnrt.process._forms``): the app looks up where an array
lies once per array object (``pool_origin``), each packet is a header of a few hundred bytes
whatever the argument's size, the service maps the pool once and reads or writes it in place,
also for a request it runs as a task (no copy out of the ring), and it learns the request's
form from the first packet. Counted, not timed: the app's ``pool_origin`` calls, the bytes of
every packet the app writes, the service's mappings and the bytes it copied out of the ring.
No shared-memory segment or file descriptor outlives the device.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import zoo
from nnrt.memory import Memory, MemoryLocation
from nnrt.process import _driver, _fmq
from tests.integration.test_process_device import fd_count, shm_mapped

N = 256 * 1024  # floats: 1 MB


class Spies:
    """The app's ``pool_origin`` calls and the size of every packet it puts on a request ring."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.origins = 0
        self.packets: list[int] = []
        real_origin, real_write = _driver.pool_origin, _fmq.Ring.begin_write  # type: ignore[attr-defined]

        def origin(array: np.ndarray) -> Any:
            self.origins += 1
            return real_origin(array)

        def begin_write(ring: _fmq.Ring, n: int) -> int:
            self.packets.append(n)
            return real_write(ring, n)

        monkeypatch.setattr(_driver, "pool_origin", origin)
        monkeypatch.setattr(_fmq.Ring, "begin_write", begin_write)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Spies:
    return Spies(monkeypatch)


def counts(dev: nnrt.ProcessDevice) -> tuple[int, int, int]:
    """(pools the service mapped, input bytes it copied out of the ring, packets read through a form)."""
    _models, _buffers, _pools, mapped, copied = dev._test_call("_counts")
    return mapped, copied, dev._test_call("_rings")[1]


@contextlib.contextmanager
def no_leaks() -> Iterator[None]:
    """No shared-memory segment or file descriptor outlives the devices and pools made inside
    (entered in the test's body: its event loop's own descriptors are open already)."""
    fds, segments = fd_count(), shm_mapped()
    yield
    gc.collect()
    assert fd_count() == fds and shm_mapped() == segments


@pytest.fixture(params=["shared_memory", "file"])
def pool(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    """A 1 MB pool of each kind both processes map (a file pool mapped writable)."""
    if request.param == "file":
        path = tmp_path / "pool.bin"
        path.write_bytes(bytes(4 * N))
        mem = Memory.from_file(path, writable=True)
        yield mem
        mem.close()
    else:
        with Memory.from_shared_memory(size=4 * N) as mem:
            yield mem


@pytest.mark.parametrize("inline", [True, False], ids=["run-inline", "run-as-task"])
async def test_an_input_in_a_pool_is_neither_copied_nor_mapped_per_request(
        pool: Memory, inline: bool, spies: Spies) -> None:
    options = {} if inline else {"inline_limit_ns": 0}  # 0: every request runs as a task in the service
    with no_leaks(), nnrt.ProcessDevice("pools-in", **options) as dev:  # type: ignore[arg-type]
        prepared = await dev.prepare_model(zoo.first_element(N))
        assert dev._test_call("_inline", "default", prepared._driver.handle) is inline  # type: ignore[attr-defined]
        svc = dev._running()
        mapped, copied, hits = counts(dev)
        loc = MemoryLocation(pool, 0, 4 * N)
        values = pool.buffer.view(np.float32)
        for k in range(20):
            values[0], values[-1] = k, -k  # read where it lies, at each request
            result = await prepared.execute([loc]) if k % 5 else prepared.execute_sync([loc])  # both trips
            assert result.outputs[0][0, 0] == k
        assert svc.socket_sent == 0 and svc.ring_sent == 20
        assert spies.origins == 1  # where the input lies: looked up once for that array
        assert spies.packets and max(spies.packets) < 1024  # headers only, never the 1 MB
        assert counts(dev) == (mapped + 1, copied, hits + 19)  # mapped once; nothing copied; the form learnt
        # The counter does count: plain small inputs of a request run as a task are copied out of the ring.
        small = await dev.prepare_model(zoo.first_element(64))
        await small.execute([np.ones((1, 64), np.float32)])
        assert counts(dev)[1] == copied + (0 if inline else 256)
        del result, loc, values


async def test_an_output_in_a_pool_is_written_in_place_on_the_rings(pool: Memory, spies: Spies) -> None:
    """A 1 MB output written in place into a pool takes the rings (before: the socket, since a
    model with a large output sent it back through the arena) and its result packet is a form's."""
    with no_leaks(), nnrt.ProcessDevice("pools-out") as dev:
        prepared = await dev.prepare_model(zoo.broadcast_add(N))
        svc = dev._running()
        mapped, _copied, hits = counts(dev)
        fast = dev._test_call("_rings")[2]
        loc = MemoryLocation(pool, 0, 4 * N)
        want = np.arange(N, dtype=np.float32)
        for k in range(5):
            pool.buffer[:] = 0
            x = [np.full((1, 1), k, np.float32)]
            result = prepared.execute_sync(x, [loc]) if k == 2 else await prepared.execute(x, [loc])  # type: ignore[list-item]
            np.testing.assert_array_equal(pool.buffer.view(np.float32), want + k)
            assert np.shares_memory(result.outputs[0], pool.buffer) and result.output_shapes[0].dimensions == (1, N)
        assert svc.socket_sent == 0 and svc.ring_sent == 5
        assert spies.origins == 1 and max(spies.packets) < 1024
        assert counts(dev)[0::2] == (mapped + 1, hits + 4)
        assert dev._test_call("_rings")[2] == fast + 5  # every result written and read through its result form
        # A plain array output of that size still comes back by value, through the arena (the socket).
        out = np.zeros((1, N), np.float32)
        assert (await prepared.execute([np.ones((1, 1), np.float32)], [out])).outputs[0] is out
        np.testing.assert_array_equal(out[0], want + 1)
        assert svc.socket_sent == 1
        del result, loc


async def test_another_place_in_the_pool_is_another_form(spies: Spies) -> None:
    """Views at other offsets (made afresh each time) are other forms with the right bytes; a
    view that died leaves nothing behind that a new array at the same address could match."""
    with no_leaks(), nnrt.ProcessDevice("pools-places") as dev, Memory.from_shared_memory(size=8 * N) as mem:
        prepared = await dev.prepare_model(zoo.first_element(N))
        data = mem.buffer.view(np.float32)
        data[:] = np.arange(2 * N, dtype=np.float32)
        for offset in (0, 4 * N, 4096, 0, 4 * N):
            result = await prepared.execute([MemoryLocation(mem, offset, 4 * N)])
            assert result.outputs[0][0, 0] == offset // 4
            view = mem.buffer[offset : offset + 4 * N].view(np.float32).reshape(1, N)  # a plain view, made anew
            assert (await prepared.execute([view])).outputs[0][0, 0] == offset // 4
            del view
        assert dev._running().socket_sent == 0
        assert len(prepared._driver._forms) == 3  # type: ignore[attr-defined]
        del result, data


def test_a_file_pool_is_named_on_the_rings_by_its_key(tmp_path: Path) -> None:
    from nnrt.errors import GeneralFailureError
    from nnrt.memory._memory import FileKey
    from nnrt.process._pools import Pools, _file_key, ring_name

    path = tmp_path / "a:b.bin"  # a colon in the path: the path is the last field
    path.write_bytes(bytes(range(256)) * 16)
    st = path.stat()
    key = FileKey(str(path), 0, 4096, False, st.st_dev, st.st_ino)
    name = ring_name(key)
    assert name is not None and name.startswith("\0") and _file_key(name, "input 0") == key
    assert ring_name("psm_segment") == "psm_segment"
    assert ring_name(key._replace(path="/tmp/\udcff")) is None  # not UTF-8: the socket carries it
    assert ring_name(key._replace(path="/" + "x" * 5000)) is None  # longer than a packet's name
    pools = Pools()
    try:
        assert pools.attach(name, "input 0")[255] == 255 and pools.mapped == 1
        assert pools.attach(name, "input 0")[1] == 1 and pools.mapped == 1  # kept under its name
        for bad in ("\0file:1:0", "\0file:x:0:1:2:3:/p", "\0file:2:0:1:2:3:/p", "\0file:0:0:1:2:3:relative"):
            with pytest.raises(GeneralFailureError, match="input 2: malformed file pool name"):
                pools.attach(bad, "input 2")
        other = ring_name(key._replace(ino=st.st_ino + 1))
        assert other is not None
        with pytest.raises(GeneralFailureError, match=r"input 1: .*not the one Memory.from_file mapped"):
            pools.attach(other, "input 1")
        os.truncate(path, 100)
        with pytest.raises(GeneralFailureError, match=r"input 0: .*truncated to 100 bytes"):
            pools.attach(name, "input 0")
    finally:
        pools.close()
