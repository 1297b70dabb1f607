"""Issue 16, items 1, 2 and 7 (budget): the memory ledger under the garbage collector, verified
artifacts that cannot change under a prepared model, and outputs counted in ``memory_budget``."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.devices._budget import MemoryLedger


class _Cycle:
    """An object kept alive only by a reference cycle, releasing its reservation when collected."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self.me = self
        self.ledger = ledger
        ledger.reserve("app", 8, "cycle")

    def __del__(self) -> None:
        self.ledger.release("app", 8)


def test_a_finalizer_releasing_during_reserve_does_not_deadlock() -> None:
    """Item 1: ``reserve`` allocates under its lock; a collection there runs finalizers that
    release on the same thread. With a GC threshold of 1 every allocation may collect."""
    ledger = MemoryLedger(budget=1 << 30)
    done = threading.Event()

    def churn() -> None:
        old = gc.get_threshold()
        gc.set_threshold(1, 1, 1)
        try:
            for _ in range(3000):
                _Cycle(ledger)
        finally:
            gc.set_threshold(*old)
        done.set()

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    assert done.wait(60), "MemoryLedger deadlocked: a finalizer's release waited on reserve's lock"
    gc.collect()
    assert ledger.in_use() == 0


def test_release_while_the_lock_is_held_on_the_same_thread_is_applied_later() -> None:
    ledger = MemoryLedger(budget=100)
    ledger.reserve("a", 60, "m")
    finished = threading.Event()

    def hold_and_release() -> None:
        with ledger._lock:  # what a finalizer run inside reserve sees
            ledger.release("a", 60)
        finished.set()

    threading.Thread(target=hold_and_release, daemon=True).start()
    assert finished.wait(10), "release blocked on the ledger's lock"
    assert ledger.in_use("a") == 0
    ledger.reserve("a", 100, "m")


def _big_output_model(n: int) -> nnrt.Model:
    m = nnrt.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [1])
    b = m.add_operand(T.TENSOR_FLOAT32, [n])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    c = m.add_operand(T.TENSOR_FLOAT32, [n])
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a, b], [c])
    m.finish()
    return m


def test_memory_budget_counts_the_models_outputs() -> None:
    """Item 7: 4 MB of output under a 1 MB budget is refused at preparation."""
    dev = nnrt.CpuDevice(memory_budget=1 << 20, calibrate=False)
    try:
        with pytest.raises(nnrt.ResourceExhaustedError) as info:
            dev.prepare_model_sync(_big_output_model(1 << 20))
        assert info.value.status is ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
        prepared = dev.prepare_model_sync(_big_output_model(1 << 10))
        assert dev.memory.in_use() == 4 << 10  # the output; the input is the caller's
        del prepared
        gc.collect()
        assert dev.memory.in_use() == 0
    finally:
        dev.close()


# -- item 2: a verified artifact is immutable once loaded ---------------------------------------

_TOKEN = bytes(range(32))

_CHILD = r"""
import asyncio, os, sys
import numpy as np
import nnrt
from nnrt import zoo

async def main(where: str, kind: str) -> None:
    model = zoo.small_cnn()
    inputs = zoo.example_inputs(model)
    device = nnrt.CpuDevice(calibrate=False)
    if kind == "cache":
        await device.prepare_model(model, cache_dir=where, token=bytes(range(32)))
        prepared = await device.prepare_model_from_cache(where, bytes(range(32)))
        victim = [os.path.join(where, f) for f in os.listdir(where) if f.endswith("2")][0]
    else:
        path = os.path.join(where, "m.nnrt")
        model.save(path)
        prepared = await device.prepare_model(nnrt.Model.load(path))
        victim = path
    before = (await prepared.execute(inputs)).outputs[0].copy()
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:  # rewritten in place (same inode), then truncated
        f.write(b"\xff" * size)
        f.flush()
    after_write = (await prepared.execute(inputs)).outputs[0]
    with open(victim, "r+b") as f:
        f.truncate(0)
    after_truncate = (await prepared.execute(inputs)).outputs[0]
    assert np.array_equal(before, after_write), "a rewrite of the file changed the outputs"
    assert np.array_equal(before, after_truncate), "a truncation of the file changed the outputs"
    device.close()
    print("SAME")

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.parametrize("kind", ["cache", "model_file"])
def test_rewriting_or_truncating_a_loaded_file_changes_nothing(tmp_path: Path, kind: str) -> None:
    """Item 2: constants were views of a shared mapping of the file: a rewrite made the model
    compute NaN, a truncation killed the process with SIGBUS (hence a child process)."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), kind], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, f"child exited with {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.strip() == "SAME"


def test_the_constants_of_a_verified_entry_do_not_alias_its_file(tmp_path: Path) -> None:
    """Item 2: what is verified is what is used: ``read_entry``'s arrays do not alias the file."""
    from nnrt.cache import cache_key, read_entry
    from nnrt.types import ExecutionPreference, Priority

    dev = nnrt.CpuDevice(calibrate=False)
    try:
        asyncio.run(dev.prepare_model(zoo.mlp(), cache_dir=tmp_path, token=_TOKEN))
        key = cache_key(_TOKEN, dev.name, dev.version, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM)
        meta = {"device": dev.name, "version": dev.version, "preference": int(ExecutionPreference.FAST_SINGLE_ANSWER),
                "priority": int(Priority.MEDIUM)}
        entry = read_entry(str(tmp_path), key, meta)
        arrays = [op.value for op in entry.model.operands if isinstance(op.value, np.ndarray)]
        snapshot = [a.copy() for a in arrays]
        data = next(p for p in tmp_path.iterdir() if p.name.endswith("2"))
        data.write_bytes(b"\x00" * data.stat().st_size)
        assert all(np.array_equal(a, s) for a, s in zip(arrays, snapshot))
        assert all(not a.flags.writeable for a in arrays)
    finally:
        dev.close()


def test_a_device_buffer_collected_while_its_tracker_is_locked_does_not_block() -> None:
    """Item 1's pattern in the memory domains: a device buffer's weakref callback took the
    tracker's lock, which ``add`` holds while it allocates (a GC run there deadlocked)."""
    from nnrt import BufferDesc, BufferRole
    from nnrt.memory import tracker_for

    dev = nnrt.CpuDevice(calibrate=False)
    try:
        prepared = dev.prepare_model_sync(zoo.one_add())
        tracker = tracker_for(dev)
        buffers = [dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)])[0] for _ in range(3)]
        assert len(tracker) == 3
        finished = threading.Event()

        def drop_while_locked() -> None:
            with tracker._lock:  # what a collection inside ``add`` sees
                buffers.clear()
                gc.collect()
            finished.set()

        threading.Thread(target=drop_while_locked, daemon=True).start()
        assert finished.wait(10), "a collected device buffer waited on its tracker's lock"
        assert len(tracker) == 0
    finally:
        dev.close()
