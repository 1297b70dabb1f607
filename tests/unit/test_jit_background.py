"""Tiered compilation (``nnrt.devices._tier``): on a machine whose numba cache lacks a model's
kernels, the preparation returns a provisional plan of numpy kernels at once, a helper process
fills the cache, and the compiled plan replaces the provisional one between two executions.

Each test points numba's cache at an empty directory and forgets the kernels this process
compiled already, so the kernels are cold; the suite itself prepares with the background off
(``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import glob
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

import nnrt
from nnrt import FuseCode, ModelBuilder
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.devices import _tier
from nnrt.execution import compile_plan
from nnrt.ops import _jit

numba = pytest.importorskip("numba")

pytestmark = pytest.mark.skipif(not _jit.available(), reason="compiled kernels are off (NNRT_JIT=0)")

_LOGISTIC = "nnrt.ops._jit_logistic.logistic_f32"


@pytest.fixture
def cold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """numba's cache in an empty directory, no kernel compiled in this process, background on."""
    cache = tmp_path / "numba"
    cache.mkdir()
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(cache))
    monkeypatch.setattr(_jit, "_cache", {})
    monkeypatch.setattr(_jit, "_cold", set())
    monkeypatch.setitem(_jit._state, "background", True)
    yield cache
    _tier.stop_upgrades(kill=True)


def _model() -> nnrt.Model:
    """LOGISTIC then ADD (+ RELU): one compiled float32 kernel, quick to compile."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [4, 1024])
    y = b.op(Op.LOGISTIC, x, out=[4, 1024])
    z = b.op(Op.ADD, y, b.constant(np.full([4, 1024], -0.25, np.float32)), FuseCode.RELU, out=[4, 1024])
    return b.finish(outputs=[z])


def _expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(1.0 / (1.0 + np.exp(-x.astype(np.float64))) - 0.25, 0.0)


def _input() -> np.ndarray:
    return np.random.default_rng(3).standard_normal([4, 1024]).astype(np.float32) * 4


def _upgrade_threads() -> list[threading.Thread]:
    """The upgrade threads still running a second after their work ended."""
    threads = [t for t in threading.enumerate() if t.name == "nnrt-jit-upgrade"]
    for t in threads:
        t.join(1.0)
    return [t for t in threads if t.is_alive()]


def _temp_models() -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), "nnrt-jit-*.nnrtmodel"))


def test_a_cold_cache_gives_a_provisional_plan_then_the_compiled_one(cold: Path) -> None:
    before = set(_temp_models())
    device = nnrt.CpuDevice()
    try:
        prepared = device.prepare_model_sync(_model())
        assert prepared.provisional and _LOGISTIC in prepared.plan.provisional
        provisional_plan = prepared.plan
        x = _input()
        first = prepared.execute_sync([x]).outputs[0]
        np.testing.assert_allclose(first, _expected(x), rtol=1e-6, atol=1e-6)
        assert prepared.wait_compiled_sync(240)
        assert not prepared.provisional and prepared.plan is not provisional_plan
        again = prepared.execute_sync([x]).outputs[0]
        np.testing.assert_allclose(again, _expected(x), rtol=1e-6, atol=1e-6)
        # The helper filled numba's cache: the kernel is found there now, and this process has it.
        assert list(cold.rglob("*logistic_f32*.nbi"))
        assert _jit._cache.get(_jit_fn()) is not None
    finally:
        device.close()
    assert not _upgrade_threads()
    assert set(_temp_models()) <= before


def _jit_fn() -> Any:
    from nnrt.ops._jit_logistic import logistic_f32

    return logistic_f32


def test_a_second_preparation_after_the_upgrade_is_compiled_at_once(cold: Path) -> None:
    device = nnrt.CpuDevice()
    try:
        first = device.prepare_model_sync(_model())
        assert first.wait_compiled_sync(240)
        second = device.prepare_model_sync(_model())
        assert not second.provisional and second._upgrade is None
    finally:
        device.close()


async def test_wait_compiled_and_a_burst_opened_before_the_swap(cold: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nnrt.burst import _lane

    ran: list[Any] = []
    real = _lane.run_kernels

    def spy(plan: Any, *args: Any) -> Any:
        ran.append(plan)
        return real(plan, *args)

    monkeypatch.setattr(_lane, "run_kernels", spy)
    device = nnrt.CpuDevice()
    try:
        prepared = await device.prepare_model(_model())
        assert prepared.provisional
        x = _input()
        async with prepared.burst() as burst:
            out = (await burst.execute([x])).outputs[0]
            np.testing.assert_allclose(out, _expected(x), rtol=1e-6, atol=1e-6)
            async with asyncio.timeout(240):
                assert await prepared.wait_compiled()
            ran.clear()
            out = (await burst.execute([x])).outputs[0]
            np.testing.assert_allclose(out, _expected(x), rtol=1e-6, atol=1e-6)
        assert all(plan is prepared.plan for plan in ran)
        result = await prepared.execute([x])
        np.testing.assert_allclose(result.outputs[0], _expected(x), rtol=1e-6, atol=1e-6)
    finally:
        device.close()


@pytest.mark.parametrize("helper", ["missing", "failing", "model not written"])
def test_a_helper_that_fails_is_logged_and_the_upgrade_compiles_here(
    cold: Path, monkeypatch: pytest.MonkeyPatch, helper: str
) -> None:
    if helper == "model not written":
        def full_disk(self: nnrt.Model, path: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(nnrt.Model, "save", full_disk)
    else:
        monkeypatch.setattr(sys, "executable", "/nonexistent/python" if helper == "missing" else "/bin/false")
    device = nnrt.CpuDevice()
    try:
        with capture_logs() as logs:
            prepared = device.prepare_model_sync(_model())
            assert prepared.provisional
            assert prepared.wait_compiled_sync(240)
        failed = [e for e in logs if e["event"] == "jit.background_failed"]
        assert failed and failed[0]["log_level"] == "warning"
        x = _input()
        np.testing.assert_allclose(prepared.execute_sync([x]).outputs[0], _expected(x), rtol=1e-6, atol=1e-6)
        # From now on this process compiles at preparation.
        assert not _jit.background()
        monkeypatch.setattr(_jit, "_cache", {})
        assert not device.prepare_model_sync(_model()).provisional
    finally:
        device.close()
    assert not _upgrade_threads()


def test_closing_the_device_keeps_the_numpy_plan_and_the_helper_fills_the_cache(cold: Path) -> None:
    before = set(_temp_models())
    device = nnrt.CpuDevice()
    prepared = device.prepare_model_sync(_model())
    assert prepared.provisional
    device.close()
    assert not prepared.wait_compiled_sync(240)
    assert prepared.provisional and not _upgrade_threads()
    assert set(_temp_models()) <= before
    assert list(cold.rglob("*logistic_f32*.nbi"))  # the helper finished its work
    x = _input()
    np.testing.assert_allclose(prepared.execute_sync([x]).outputs[0], _expected(x), rtol=1e-6, atol=1e-6)
    device.close()


def test_the_interpreter_exit_waits_for_a_running_helper(tmp_path: Path) -> None:
    """A script that prepares on a cold cache and ends at once: its exit waits for the helper,
    so the next process finds the kernels compiled."""
    import subprocess

    script = (
        "import numpy as np, nnrt, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_jit_background import _model\n"
        "d = nnrt.CpuDevice(); p = d.prepare_model_sync(_model())\n"
        "print('provisional' if p.provisional else 'compiled')\n"
        "d.close()\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), _jit.BACKGROUND_ENV: "1"}
    here = str(Path(__file__).parent)
    runs = [subprocess.run([sys.executable, "-c", script, here], env=env, capture_output=True, text=True, timeout=300,
                           check=True).stdout.strip() for _ in range(2)]
    assert runs == ["provisional", "compiled"]
def test_the_background_is_off_with_the_environment_switch(cold: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(_jit._state, "background")
    monkeypatch.setenv(_jit.BACKGROUND_ENV, "0")
    assert not _jit.background()
    device = nnrt.CpuDevice()
    try:
        assert not device.prepare_model_sync(_model()).provisional
    finally:
        device.close()


def test_outside_a_device_preparation_a_cold_kernel_compiles_at_once(cold: Path) -> None:
    plan = compile_plan(_model())
    assert plan.provisional == ()
    assert _jit._cache.get(_jit_fn()) is not None


def test_the_cache_index_lookup(cold: Path) -> None:
    from nnrt.ops._jit_logistic import LOGISTIC_F32, logistic_f32
    from nnrt.ops._jit_quant import _lookup_q

    flags = frozenset({"contract"})
    assert not _jit._on_disk(logistic_f32, LOGISTIC_F32, flags, "numpy")
    assert not _jit._on_disk(_lookup_q, None, frozenset(), "python")
    with _jit.deferring() as misses:
        assert _jit.compiled(logistic_f32, LOGISTIC_F32, flags, error_model="numpy") is None
    assert misses.names == [_LOGISTIC]
    assert _jit.compiled(logistic_f32, LOGISTIC_F32, flags, error_model="numpy") is not None  # compiled here
    _jit.forget_misses()
    assert _jit._on_disk(logistic_f32, LOGISTIC_F32, flags, "numpy")
    assert not _jit._on_disk(logistic_f32, "void(float32[::1], float32[::1], int64, boolean)", flags, "numpy")


async def test_a_cached_preparation_of_a_provisional_plan_writes_no_entry(cold: Path, tmp_path: Path) -> None:
    entries = tmp_path / "entries"
    entries.mkdir()
    token = bytes(range(32))
    device = nnrt.CpuDevice()
    try:
        prepared = await device.prepare_model(_model(), cache_dir=entries, token=token)
        assert prepared.provisional
        async with asyncio.timeout(240):
            assert await prepared.wait_compiled()
        assert not any(entries.iterdir())  # its costs were the numpy plan's
        warm = await device.prepare_model(_model(), cache_dir=entries, token=token)
        assert not warm.provisional and any(entries.iterdir())
        loaded = await device.prepare_model_from_cache(entries, token)
        x = _input()
        np.testing.assert_allclose((await loaded.execute([x])).outputs[0], _expected(x), rtol=1e-6, atol=1e-6)
    finally:
        device.close()


def test_loading_a_model_file_compiles_nothing(cold: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The importer checks each operation's kernel at load; on a cold cache that must not wait
    for numba (it did: 9.8 s to load mediapipe_pose_detection.tflite)."""
    compiles: list[str] = []
    real = _jit._compile

    def spy(fn: Any, *args: Any) -> Any:
        compiles.append(fn.__qualname__)
        return real(fn, *args)

    monkeypatch.setattr(_jit, "_compile", spy)
    path = Path(__file__).parent.parent / "data" / "models" / "mediapipe_hand_recrop.tflite"
    model = nnrt.load(path)
    assert compiles == []
    device = nnrt.CpuDevice()
    try:
        prepared = device.prepare_model_sync(model)
        assert compiles == [] and prepared.provisional
        assert any(name.endswith("depthwise_rows_f32") or "depthwise" in name for name in prepared.plan.provisional)
    finally:
        _tier.stop_upgrades(kill=True)
        device.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line for line in f)
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_helper_ends_when_its_app_is_killed(tmp_path: Path) -> None:
    """An app killed (no atexit) while its helper compiles: the helper exits soon after."""
    import signal
    import subprocess
    import time

    script = (
        "import time, nnrt\n"
        "from nnrt import zoo\n"
        "from nnrt.devices import _tier\n"
        "d = nnrt.CpuDevice(); p = d.prepare_model_sync(zoo.mobilenet_block())\n"
        "assert p.provisional\n"
        "while not any(u._proc for u in _tier._live): time.sleep(0.01)\n"
        "print(next(u._proc.pid for u in _tier._live), flush=True)\n"
        "time.sleep(120)\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), _jit.BACKGROUND_ENV: "1"}
    app = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert app.stdout is not None
        helper = int(app.stdout.readline())
        assert _alive(helper)
    finally:
        app.send_signal(signal.SIGKILL)
        app.wait(30)
        if app.stdout is not None:
            app.stdout.close()
    end = time.monotonic() + 4.0  # (its own work takes longer: 6-9 s to compile mobilenet_block's kernels)
    while _alive(helper) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _alive(helper)


def test_wait_compiled_on_trio(cold: Path) -> None:
    trio = pytest.importorskip("trio")

    async def main() -> None:
        device = nnrt.CpuDevice()
        try:
            prepared = await device.prepare_model(_model())
            assert prepared.provisional
            with trio.fail_after(240):
                assert await prepared.wait_compiled()
            x = _input()
            np.testing.assert_allclose((await prepared.execute([x])).outputs[0], _expected(x), rtol=1e-6, atol=1e-6)
        finally:
            device.close()

    trio.run(main)
