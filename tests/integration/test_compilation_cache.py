"""Compilation caching (digest section 6): ``prepare_model(..., cache_dir=, token=)`` writes an
entry, ``prepare_model_from_cache`` loads it; every damage to the model cache is
GENERAL_FAILURE, a damaged data cache is refused (never a crash, never wrong outputs), and
``prepare_model`` falls back to a full preparation and rewrites the entry."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, ExecutionPreference, Priority, zoo
from nnrt.cache import cache_key, file_names, read_entry, write_entry
from tests.helpers import on_trio_too

TOKEN = bytes(range(32))


def entry_files(device: nnrt.CpuDevice, cache_dir: Path, token: bytes = TOKEN,
                preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                priority: Priority = Priority.MEDIUM) -> tuple[Path, Path]:
    model, data = file_names(cache_key(token, device.name, device.version, preference, priority))
    return cache_dir / model, cache_dir / data


def meta(device: nnrt.CpuDevice) -> dict[str, object]:
    return {"device": device.name, "version": device.version, "preference": int(ExecutionPreference.FAST_SINGLE_ANSWER),
            "priority": int(Priority.MEDIUM)}


async def cached(device: nnrt.CpuDevice, tmp_path: Path, model: nnrt.Model | None = None) -> nnrt.PreparedModel:
    return await device.prepare_model(model or zoo.small_cnn(), cache_dir=tmp_path, token=TOKEN)


async def test_save_and_load(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    model = zoo.small_cnn()
    first = await cached(device, tmp_path, model)
    mfile, dfile = entry_files(device, tmp_path)
    assert mfile.exists() and dfile.exists()
    assert sorted(os.listdir(tmp_path)) == sorted([mfile.name, dfile.name])  # no temporary left
    assert len(mfile.name) == 65 and set(mfile.name[:64]) <= set("ABCDEFGHIJKLMNOP") and mfile.name[64] == "1"
    assert dfile.name[64] == "2"
    loaded = await device.prepare_model_from_cache(tmp_path, TOKEN)
    ins = zoo.example_inputs(model)
    assert np.array_equal((await first.execute(ins)).outputs[0], (await loaded.execute(ins)).outputs[0])
    # calibration is not redone: the costs are the cached ones
    assert [s.cost_ns for s in loaded.plan.steps] == [s.cost_ns for s in first.plan.steps]


async def test_relaid_constants_are_mapped_from_the_data_cache(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    await cached(device, tmp_path)
    from nnrt.ops._relay import RelayStore, relay_store

    entry = read_entry(str(tmp_path), cache_key(TOKEN, device.name, device.version, ExecutionPreference.FAST_SINGLE_ANSWER,
                                                Priority.MEDIUM), meta(device))
    assert entry.relaid  # the CONV_2D and FULLY_CONNECTED weight layouts
    assert all(not a.flags.writeable and not a.flags.owndata for a in entry.relaid.values())
    store = RelayStore(entry.relaid)
    with relay_store(store):
        nnrt.execution.compile_plan(entry.model)
    assert store.reused == len(entry.relaid) and not store.computed


async def test_prepare_model_uses_the_entry(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    await cached(device, tmp_path)
    mfile, _ = entry_files(device, tmp_path)
    before = mfile.stat().st_mtime_ns
    again = await cached(device, tmp_path)
    assert mfile.stat().st_mtime_ns == before  # loaded, not rewritten
    assert again.model is not None


@pytest.mark.parametrize("bad", [b"short", bytes(31), bytes(33), "x" * 32, None])
async def test_token_must_be_32_bytes(device: nnrt.CpuDevice, tmp_path: Path, bad: object) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="token must be 32 bytes") as info:
        await device.prepare_model(zoo.one_add(), cache_dir=tmp_path, token=bad)  # type: ignore[arg-type]
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(nnrt.InvalidArgumentError):
        await device.prepare_model_from_cache(tmp_path, bad)  # type: ignore[arg-type]


async def test_cache_dir_must_be_a_path(device: nnrt.CpuDevice) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="cache_dir"):
        await device.prepare_model(zoo.one_add(), cache_dir=3, token=TOKEN)  # type: ignore[arg-type]


async def test_missing_entry(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    with pytest.raises(nnrt.GeneralFailureError) as info:
        await device.prepare_model_from_cache(tmp_path, TOKEN)
    assert info.value.status is ErrorStatus.GENERAL_FAILURE


def flip_bit(path: Path, where: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x10
    path.write_bytes(bytes(data))


MODEL_DAMAGE = {
    "bit flipped in the header": lambda m, d: flip_bit(m, 0.5),
    "bit flipped in the tag": lambda m, d: flip_bit(m, 0.999),
    "bit flipped in the magic": lambda m, d: flip_bit(m, 0.0),
    "bytes appended": lambda m, d: m.write_bytes(m.read_bytes() + b"\0"),
    "truncated": lambda m, d: m.write_bytes(m.read_bytes()[:-1]),
    "empty": lambda m, d: m.write_bytes(b""),
    "swapped with the data cache": lambda m, d: (m.write_bytes(d.read_bytes())),
}


@pytest.mark.parametrize("damage", list(MODEL_DAMAGE), ids=list(MODEL_DAMAGE))
async def test_damaged_model_cache(device: nnrt.CpuDevice, tmp_path: Path, damage: str) -> None:
    model = zoo.small_cnn()
    await cached(device, tmp_path, model)
    mfile, dfile = entry_files(device, tmp_path)
    MODEL_DAMAGE[damage](mfile, dfile)
    with pytest.raises(nnrt.GeneralFailureError, match="compilation cache") as info:
        await device.prepare_model_from_cache(tmp_path, TOKEN)
    assert info.value.status is ErrorStatus.GENERAL_FAILURE
    # the normal path falls back to a full preparation and rewrites the entry
    prepared = await cached(device, tmp_path, model)
    assert prepared.model is model
    await device.prepare_model_from_cache(tmp_path, TOKEN)


DATA_DAMAGE = {
    "bit flipped": lambda d: flip_bit(d, 0.5),
    "bit flipped at the end": lambda d: flip_bit(d, 0.9999),
    "bytes appended": lambda d: d.write_bytes(d.read_bytes() + b"\0"),
    "truncated": lambda d: d.write_bytes(d.read_bytes()[:-64]),
    "empty": lambda d: d.write_bytes(b""),
    "removed": lambda d: d.unlink(),
}


@pytest.mark.parametrize("damage", list(DATA_DAMAGE), ids=list(DATA_DAMAGE))
async def test_damaged_data_cache_is_refused(device: nnrt.CpuDevice, tmp_path: Path, damage: str) -> None:
    await cached(device, tmp_path)
    _, dfile = entry_files(device, tmp_path)
    DATA_DAMAGE[damage](dfile)
    with pytest.raises(nnrt.GeneralFailureError, match="data cache"):
        await device.prepare_model_from_cache(tmp_path, TOKEN)
    model = zoo.small_cnn()
    prepared = await cached(device, tmp_path, model)  # fallback, then a good entry again
    ins = zoo.example_inputs(model)
    reference = (await device.prepare_model(model)).execute_sync(ins).outputs[0]
    assert np.array_equal(prepared.execute_sync(ins).outputs[0], reference)
    assert np.array_equal((await device.prepare_model_from_cache(tmp_path, TOKEN)).execute_sync(ins).outputs[0], reference)


async def test_entries_of_two_tokens_swapped(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    other = bytes(31) + b"\x01"
    await cached(device, tmp_path)
    await device.prepare_model(zoo.mlp(), cache_dir=tmp_path, token=other)
    m1, d1 = entry_files(device, tmp_path)
    m2, d2 = entry_files(device, tmp_path, other)
    blob1, blob2 = m1.read_bytes(), m2.read_bytes()
    m1.write_bytes(blob2)
    m2.write_bytes(blob1)
    for token in (TOKEN, other):
        with pytest.raises(nnrt.GeneralFailureError, match="failed verification"):
            await device.prepare_model_from_cache(tmp_path, token)
    # the model caches back, the data caches swapped: refused by the data checksum
    m1.write_bytes(blob1)
    m2.write_bytes(blob2)
    data1, data2 = d1.read_bytes(), d2.read_bytes()
    d1.write_bytes(data2)
    d2.write_bytes(data1)
    with pytest.raises(nnrt.GeneralFailureError, match="data cache"):
        await device.prepare_model_from_cache(tmp_path, TOKEN)


async def test_token_with_one_bit_flipped(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    await cached(device, tmp_path)
    flipped = bytes([TOKEN[0] ^ 1]) + TOKEN[1:]
    with pytest.raises(nnrt.GeneralFailureError):
        await device.prepare_model_from_cache(tmp_path, flipped)
    # even with the entry's files renamed to the flipped token's names, verification fails
    m1, d1 = entry_files(device, tmp_path)
    m2, d2 = entry_files(device, tmp_path, flipped)
    m1.rename(m2)
    d1.rename(d2)
    with pytest.raises(nnrt.GeneralFailureError, match="failed verification"):
        await device.prepare_model_from_cache(tmp_path, flipped)


def test_key_depends_on_device_version_preference_priority() -> None:
    base = (TOKEN, "dev", "1.0", ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM)
    keys = {cache_key(*base)}
    for k, alt in ((1, "dev2"), (2, "1.1"), (3, ExecutionPreference.SUSTAINED_SPEED), (4, Priority.HIGH),
                   (0, bytes(32))):
        args = list(base)
        args[k] = alt
        keys.add(cache_key(*args))  # type: ignore[arg-type]
    assert len(keys) == 6 and all(len(k) == 32 for k in keys)


async def test_other_preference_or_priority_is_another_entry(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    await cached(device, tmp_path)
    for kw in ({"priority": Priority.HIGH}, {"preference": ExecutionPreference.LOW_POWER}):
        with pytest.raises(nnrt.GeneralFailureError):
            await device.prepare_model_from_cache(tmp_path, TOKEN, **kw)  # type: ignore[arg-type]
    with pytest.raises(nnrt.InvalidArgumentError, match="priority"):
        await device.prepare_model_from_cache(tmp_path, TOKEN, priority=7)  # type: ignore[arg-type]


async def test_another_device_version_misses(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    await cached(device, tmp_path)
    newer = nnrt.CpuDevice(name=device.name)
    newer.version = "9.9"
    try:
        with pytest.raises(nnrt.GeneralFailureError):
            await newer.prepare_model_from_cache(tmp_path, TOKEN)
    finally:
        newer.close()


async def test_unwritable_cache_does_not_change_the_result(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    missing = tmp_path / "does-not-exist"
    prepared = await device.prepare_model(zoo.one_add(), cache_dir=missing, token=TOKEN)
    assert prepared.execute_sync([np.ones((1, 4), np.float32)] * 2).outputs[0].tolist() == [[2, 2, 2, 2]]


def test_concurrent_writers_never_leave_a_loadable_half_entry(device: nnrt.CpuDevice, tmp_path: Path) -> None:
    """Writers of one entry race with readers: a read either fails cleanly or gives a model
    whose outputs are exactly right; no temporary file is left behind."""
    model = zoo.small_cnn()
    plan = device.prepare_model_sync(model).plan
    key = cache_key(TOKEN, device.name, device.version, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM)
    ins = zoo.example_inputs(model)
    reference = device.prepare_model_sync(model).execute_sync(ins).outputs[0]
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        try:
            for k in range(5):
                write_entry(str(tmp_path), key, model, [s.cost_ns + seed + k for s in plan.steps], {}, meta(device))
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    loaded = 0
    while any(t.is_alive() for t in threads) or not loaded:
        try:
            entry = read_entry(str(tmp_path), key, meta(device))
        except nnrt.GeneralFailureError:
            continue
        p = device.prepare_model_sync(entry.model)
        assert np.array_equal(p.execute_sync(ins).outputs[0], reference)
        loaded += 1
    for t in threads:
        t.join()
    assert not errors
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".nnrt-tmp")]


on_trio_too(globals())
