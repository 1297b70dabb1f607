"""Process-wide settings change only when asked: get_devices() and CpuDevice() leave them alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import nnrt

_PROBE = """
import asyncio, json, sys
from threadpoolctl import threadpool_info
import nnrt
from nnrt import zoo

def state():
    blas = {p["filepath"]: p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}
    return {"switch": sys.getswitchinterval(), "blas": blas}

before = state()
async def main():
    device = nnrt.get_devices()[0] if sys.argv[1] == "default" else nnrt.CpuDevice(tune_process=True)
    prepared = await device.prepare_model(zoo.mlp())
    await prepared.execute(zoo.example_inputs(prepared.model))
asyncio.run(main())
print(json.dumps({"before": before, "after": state()}))
"""


def _probe(kind: str) -> dict[str, dict[str, object]]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}  # a BLAS default other than the tuned one
    out = subprocess.run([sys.executable, "-c", _PROBE, kind], capture_output=True, text=True, timeout=120, check=True, env=env)
    result: dict[str, dict[str, object]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_get_devices_changes_no_process_wide_setting() -> None:
    """The switch interval and the BLAS libraries already loaded keep their settings. MKL, when
    installed, is a library of its own that nnrt loads for its float32 products (``_gemm``), one
    thread: it may appear, nothing else."""
    r = _probe("default")
    before, after = r["before"], r["after"]
    assert after["switch"] == before["switch"]
    assert isinstance(before["blas"], dict) and isinstance(after["blas"], dict) and before["blas"]
    assert {path: after["blas"].get(path) for path in before["blas"]} == before["blas"]
    assert all("mkl" in path and n == 1 for path, n in after["blas"].items() if path not in before["blas"])


def test_tune_process_applies_the_latency_settings() -> None:
    r = _probe("tuned")
    assert r["after"]["switch"] == pytest.approx(0.0005)
    blas = r["after"]["blas"]
    assert isinstance(blas, dict) and blas and all(n == 1 for n in blas.values())


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"blas_threads": 0}, "blas_threads"), ({"switch_interval_s": -1.0}, "switch_interval_s")]
)
def test_bad_settings_are_invalid_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match=match):
        nnrt.CpuDevice(**kwargs)  # type: ignore[arg-type]
