"""``nnrt.Memory``: pools over arrays, bytes, named shared memory (also from a second process)
and mapped files; their bounds, lifecycle and zero-copy guarantees."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Memory


def test_array_pool_is_a_view() -> None:
    a = np.arange(6, dtype=np.float32)
    mem = Memory.from_array(a)
    assert mem.kind == "array" and mem.size == 24 and mem.writable
    assert np.shares_memory(mem.buffer, a)
    mem.buffer.view(np.float32)[0] = 42
    assert a[0] == 42
    assert Memory(a).size == 24  # the old constructor still works


def test_array_pool_rejects_bad_sources() -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="C-contiguous"):
        Memory.from_array(np.zeros((4, 4), np.float32)[:, 1])
    with pytest.raises(nnrt.InvalidArgumentError, match="not a numpy array"):
        Memory.from_array([1, 2])  # type: ignore[arg-type]
    with pytest.raises(nnrt.InvalidArgumentError):
        Memory(3)  # type: ignore[arg-type]


def test_bytes_pool_is_read_only() -> None:
    mem = Memory(b"\x00" * 8)
    assert mem.kind == "bytes" and not mem.writable


def test_shared_memory_create_attach_and_unlink() -> None:
    with Memory.from_shared_memory(size=64) as owner:
        assert owner.owner and owner.kind == "shared_memory" and owner.size == 64 and owner.name
        owner.buffer[:4] = [1, 2, 3, 4]
        other = Memory.from_shared_memory(owner.name)
        assert not other.owner and other.buffer[:4].tolist() == [1, 2, 3, 4]
        other.buffer[4] = 9
        assert owner.buffer[4] == 9  # the same pages
        with pytest.raises(nnrt.InvalidArgumentError, match="only its owner"):
            other.unlink()
        other.close()
        name = owner.name
    with pytest.raises(nnrt.InvalidArgumentError, match="cannot attach"):
        Memory.from_shared_memory(name)  # unlinked on leaving the block


def test_shared_memory_arguments() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(nnrt.InvalidArgumentError) as info:
            Memory.from_shared_memory(size=bad)  # type: ignore[arg-type]
        assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(nnrt.InvalidArgumentError, match="needs a size"):
        Memory.from_shared_memory()
    with Memory.from_shared_memory(size=16) as mem:
        with pytest.raises(nnrt.InvalidArgumentError, match="16 bytes, 32 asked"):
            Memory.from_shared_memory(mem.name, size=32)
        assert Memory.from_shared_memory(mem.name, size=8).size == 8


def test_views_outlive_close() -> None:
    """Closing releases the pool's mapping; a view still alive keeps its pages valid."""
    with Memory.from_shared_memory(size=32) as mem:
        mem.buffer[:] = 7
        view = mem.buffer[:8]
        mem.close()
        assert mem.size == 0
        assert view.tolist() == [7] * 8
        del view


def test_shared_memory_from_a_second_process() -> None:
    """A child process attaches by name, reads what the parent wrote and writes back; its exit
    does not destroy the parent's segment (no resource-tracker unlink, no leak warning)."""
    with Memory.from_shared_memory(size=16) as mem:
        mem.buffer.view(np.float32)[:] = [1, 2, 3, 4]
        child = textwrap.dedent(f"""
            import numpy as np, nnrt
            mem = nnrt.Memory.from_shared_memory({mem.name!r})
            x = mem.buffer.view(np.float32)
            x *= 10
            print(x.tolist())
            mem.close()
        """)
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.strip() == "[10.0, 20.0, 30.0, 40.0]"
        assert "leaked" not in out.stderr and out.stderr == ""
        assert mem.buffer.view(np.float32).tolist() == [10, 20, 30, 40]
        assert Memory.from_shared_memory(mem.name).size == 16  # still there after the child exited


def test_file_pool(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    data = np.arange(10_000, dtype=np.float32)
    path.write_bytes(b"hdr!" + data.tobytes())
    mem = Memory.from_file(path, offset=4)
    assert mem.kind == "file" and mem.size == data.nbytes and not mem.writable
    assert np.array_equal(mem.buffer.view(np.float32), data)
    part = Memory.from_file(path, offset=4 + 4 * 5000, size=8)
    assert part.buffer.view(np.float32).tolist() == [5000, 5001]
    mem.close()
    part.close()


def test_writable_file_pool_writes_through(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    path.write_bytes(bytes(16))
    mem = Memory.from_file(path, writable=True)
    mem.buffer[:3] = [1, 2, 3]
    mem.close()
    assert path.read_bytes()[:3] == b"\x01\x02\x03"


@pytest.mark.parametrize(("offset", "size"), [(-1, None), (0, 0), (10, 100), (200, None), (0, 65)])
def test_file_pool_bounds(tmp_path: Path, offset: int, size: int | None) -> None:
    path = tmp_path / "small.bin"
    path.write_bytes(bytes(64))
    with pytest.raises(nnrt.InvalidArgumentError) as info:
        Memory.from_file(path, offset, size)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match=r"small\.bin"):
        Memory.from_file(tmp_path / "small.bin")


def test_constants_from_a_file_pool_are_not_copied(tmp_path: Path, device: nnrt.CpuDevice) -> None:
    from nnrt import OperandType as T
    from nnrt import OperationType as Op

    path = tmp_path / "b.bin"
    path.write_bytes(np.full(4, 2, np.float32).tobytes())
    pool = Memory.from_file(path)
    m = nnrt.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    b = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    act = m.add_operand(T.INT32)
    c = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    m.set_operand_value_from_memory(b, pool, 0, 16)
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a], [c])
    m.finish()
    prepared = device.prepare_model_sync(m)
    assert np.shares_memory(prepared.plan.template[b], pool.buffer)
    assert prepared.execute_sync([np.ones((1, 4), np.float32)]).outputs[0].tolist() == [[3, 3, 3, 3]]
