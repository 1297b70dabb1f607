"""Execution arguments in memory pools: ``MemoryLocation`` (or a tuple) as inputs and outputs of
``execute``, ``execute_sync`` and ``execute_fenced``; zero-copy views, bounds and size rules."""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Memory, MemoryLocation, Model, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution import _request
from tests.helpers import on_trio_too, unknown_shape_add


def scalar_input_add() -> Model:
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    b = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    act = m.add_operand(T.INT32)
    c = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a, b, act], [c])
    m.finish()
    return m


@pytest.fixture
def pool() -> Memory:
    """48 bytes: x = [1, 2, 3, 4] at 0, y = ones at 16, room for the output at 32."""
    data = np.zeros(12, np.float32)
    data[:4] = [1, 2, 3, 4]
    data[4:8] = 1
    return Memory.from_array(data)


def test_inputs_are_zero_copy_views_and_outputs_land_in_the_pool(device: nnrt.CpuDevice, pool: Memory) -> None:
    prepared = device.prepare_model_sync(zoo.one_add())
    args, bufs = prepared._validate_request([MemoryLocation(pool, 0, 16), (pool, 16, 16)], [(pool, 32, 16)])
    assert np.shares_memory(args[0], pool.buffer) and np.shares_memory(args[1], pool.buffer)
    assert bufs is not None and np.shares_memory(bufs[0], pool.buffer)
    result = prepared.execute_sync([MemoryLocation(pool, 0, 16), (pool, 16, 16)], [(pool, 32, 16)])
    assert pool.buffer.view(np.float32)[8:].tolist() == [2, 3, 4, 5]
    assert np.shares_memory(result.outputs[0], pool.buffer)


async def test_execute_and_fenced_with_shared_memory(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    with Memory.from_shared_memory(size=48) as shm:
        shm.buffer.view(np.float32)[:8] = [1, 2, 3, 4, 1, 1, 1, 1]
        ins: list[Any] = [(shm, 0, 16), (shm, 16, 16)]
        await prepared.execute(ins, [(shm, 32, 16)])
        assert shm.buffer.view(np.float32)[8:].tolist() == [2, 3, 4, 5]
        shm.buffer.view(np.float32)[:4] = 10
        fence, _cb = await prepared.execute_fenced(ins, [(shm, 32, 16)])
        await fence
        assert shm.buffer.view(np.float32)[8:].tolist() == [11, 11, 11, 11]
        del ins, fence, _cb


def test_mixed_arrays_and_locations(device: nnrt.CpuDevice, pool: Memory) -> None:
    prepared = device.prepare_model_sync(zoo.one_add())
    out = prepared.execute_sync([(pool, 0, 16), np.ones((1, 4), np.float32)]).outputs[0]
    assert out.tolist() == [[2, 3, 4, 5]] and not np.shares_memory(out, pool.buffer)


def test_scalar_input_from_a_pool(device: nnrt.CpuDevice) -> None:
    prepared = device.prepare_model_sync(scalar_input_add())
    act = Memory.from_array(np.array([1], np.int32))  # RELU
    x = -np.ones((1, 4), np.float32)
    assert prepared.execute_sync([x, x, (act, 0, 4)]).outputs[0].tolist() == [[0, 0, 0, 0]]
    with pytest.raises(nnrt.InvalidArgumentError, match=r"input 2 .*length 8 given, 4 bytes expected"):
        prepared.execute_sync([x, x, (Memory.from_array(np.zeros(2, np.int32)), 0, 8)])


def test_unspecified_dimensions_come_with_the_location(device: nnrt.CpuDevice) -> None:
    prepared = device.prepare_model_sync(unknown_shape_add())
    pool = Memory.from_array(np.arange(12, dtype=np.float32))
    loc = MemoryLocation(pool, 0, 24, dimensions=(3, 2))
    out = prepared.execute_sync([loc, loc], [(pool, 24, 24)])
    assert out.output_shapes[0].dimensions == (3, 2)
    assert pool.buffer.view(np.float32)[6:].tolist() == [0, 2, 4, 6, 8, 10]
    with pytest.raises(nnrt.InvalidArgumentError, match=r"input 0 .*give the location dimensions"):
        prepared.execute_sync([(pool, 0, 24), loc])
    with pytest.raises(nnrt.InvalidArgumentError, match="not compatible"):
        prepared.execute_sync([MemoryLocation(pool, 0, 24, dimensions=(2, 3)), loc])


def test_output_location_too_small_reports_shapes(device: nnrt.CpuDevice) -> None:
    prepared = device.prepare_model_sync(unknown_shape_add())
    pool = Memory.from_array(np.zeros(12, np.float32))
    loc = MemoryLocation(pool, 0, 24, dimensions=(3, 2))
    with pytest.raises(nnrt.OutputInsufficientSizeError) as info:
        prepared.execute_sync([loc, loc], [(pool, 24, 16)])
    assert info.value.output_shapes == (nnrt.OutputShape((3, 2), False),)


BAD = [
    ((None, 0, 16), "is not a Memory"),
    (("pool", -1, 16), "outside the memory"),
    (("pool", 0, 0), "outside the memory"),
    (("pool", 40, 16), "outside the memory"),
    (("pool", 0, 12), "length 12 given, 16 bytes expected"),
    (("pool", 0, 32), "length 32 given, 16 bytes expected"),
    (("pool", 1.0, 16), "offset 1.0 is not an int"),
]


@pytest.mark.parametrize(("loc", "message"), BAD)
def test_bad_input_locations(device: nnrt.CpuDevice, pool: Memory, loc: tuple[Any, ...], message: str) -> None:
    prepared = device.prepare_model_sync(zoo.one_add())
    if loc[0] == "pool":
        loc = (pool, *loc[1:])
    if loc[0] is None:
        loc = MemoryLocation(loc[0], loc[1], loc[2])  # type: ignore[arg-type]
    with pytest.raises(nnrt.InvalidArgumentError, match=message) as info:
        prepared.execute_sync([np.ones((1, 4), np.float32), loc])
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    assert "input 1" in str(info.value)


@pytest.mark.parametrize(("loc", "message"), BAD[1:])
def test_bad_output_locations(device: nnrt.CpuDevice, pool: Memory, loc: tuple[Any, ...], message: str) -> None:
    prepared = device.prepare_model_sync(zoo.one_add())
    x = np.ones((1, 4), np.float32)
    with pytest.raises(nnrt.InvalidArgumentError, match=message) as info:
        prepared.execute_sync([x, x], [(pool, *loc[1:])])
    assert "output 0" in str(info.value)


def test_read_only_pool_cannot_take_outputs(device: nnrt.CpuDevice) -> None:
    prepared = device.prepare_model_sync(zoo.one_add())
    ro = Memory(bytes(16))
    x = np.ones((1, 4), np.float32)
    with pytest.raises(nnrt.InvalidArgumentError, match=r"output 0 .*read-only"):
        prepared.execute_sync([x, x], [(ro, 0, 16)])
    assert prepared.execute_sync([(ro, 0, 16), x]).outputs[0].tolist() == [[1, 1, 1, 1]]  # fine as an input


def test_wrong_counts_with_locations(device: nnrt.CpuDevice, pool: Memory) -> None:
    prepared = device.prepare_model_sync(zoo.one_add())
    with pytest.raises(nnrt.InvalidArgumentError, match="2 inputs, the request gives 1"):
        prepared.execute_sync([(pool, 0, 16)])
    with pytest.raises(nnrt.InvalidArgumentError, match="1 outputs, the request gives 2"):
        prepared.execute_sync([(pool, 0, 16), (pool, 0, 16)], [(pool, 32, 16), None])


def test_plain_tuples_of_numbers_are_still_arrays(device: nnrt.CpuDevice) -> None:
    prepared = device.prepare_model_sync(zoo.one_add())
    row = ((1.0, 2.0, 3.0, 4.0),)
    assert prepared.execute_sync([row, row]).outputs[0].tolist() == [[2, 4, 6, 8]]


def test_reused_locations_after_close_are_rejected(device: nnrt.CpuDevice) -> None:
    """Resolved views are reused across executions, but never once the pool is closed."""
    prepared = device.prepare_model_sync(zoo.one_add())
    with Memory.from_shared_memory(size=48) as shm:
        shm.buffer.view(np.float32)[:8] = 1
        for _ in range(2):
            assert prepared.execute_sync([(shm, 0, 16), (shm, 16, 16)]).outputs[0].tolist() == [[2, 2, 2, 2]]
        shm.close()
        with pytest.raises(nnrt.InvalidArgumentError, match="outside the memory of 0 bytes"):
            prepared.execute_sync([(shm, 0, 16), (shm, 16, 16)])


def segment_fds(name: str) -> int:
    """This process's open file descriptors on the shared-memory segment ``name``."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used, closed since
            continue
        n += target.removesuffix(" (deleted)") == f"/dev/shm/{name}"
    return n


def segment_mappings(name: str) -> int:
    """This process's mappings of the shared-memory segment ``name``."""
    with open("/proc/self/maps") as maps:
        fields = (line.rstrip("\n").split(maxsplit=5) for line in maps)
        return sum(len(f) == 6 and f[5].removesuffix(" (deleted)") == f"/dev/shm/{name}" for f in fields)


async def test_closed_shared_memory_keeps_no_fd_or_mapping_for_cached_views(
    device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The views resolved for locations are cached for the next execution, but closing the pool
    drops them: the segment's descriptor and mapping go at once, even while the Memory lives."""
    made = 0
    location_view = _request._location_view

    def counting(*args: Any, **kwargs: Any) -> np.ndarray:
        nonlocal made
        made += 1
        return location_view(*args, **kwargs)

    monkeypatch.setattr(_request, "_location_view", counting)
    prepared = await device.prepare_model(zoo.one_add())
    pools = []
    for i in range(3):
        with Memory.from_shared_memory(size=48) as shm:
            assert shm.name is not None and segment_fds(shm.name) > 0 and segment_mappings(shm.name) == 1
            pools.append(shm)
            shm.buffer.view(np.float32)[:8] = [i, i, i, i, 1, 1, 1, 1]
            ins = [MemoryLocation(shm, 0, 16), MemoryLocation(shm, 16, 16)]
            for _ in range(3):
                await prepared.execute(ins, [MemoryLocation(shm, 32, 16)])
            assert shm.buffer.view(np.float32)[8:].tolist() == [i + 1] * 4
            del ins
        assert made == 3 * (i + 1)  # three views per pool, made once, reused by the later executions
    gc.collect()
    for shm in pools:  # closed and unlinked, but alive: nothing of the segment is left open
        assert shm.name is not None
        assert (segment_fds(shm.name), segment_mappings(shm.name)) == (0, 0)


async def test_views_the_caller_keeps_hold_a_closed_segment_only_while_they_live(device: nnrt.CpuDevice) -> None:
    prepared = await device.prepare_model(zoo.one_add())
    shm = Memory.from_shared_memory(size=48)
    name = shm.name
    assert name is not None
    shm.buffer.view(np.float32)[:8] = 1
    result = await prepared.execute([(shm, 0, 16), (shm, 16, 16)], [(shm, 32, 16)])
    out = result.outputs[0]
    del result
    shm.close()
    shm.unlink()
    assert segment_mappings(name) == 1 and out.tolist() == [[2, 2, 2, 2]]  # still readable
    del out
    gc.collect()
    assert (segment_fds(name), segment_mappings(name)) == (0, 0) and shm.size == 0


on_trio_too(globals())
