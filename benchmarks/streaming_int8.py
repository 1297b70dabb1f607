"""Small int8 streaming models: one ``await execute`` step against LiteRT's ``invoke``: the
compiled plan (``nnrt/execution/_compiled_plan.py``: the whole plan one compiled program call),
the step plan of compiled 8-bit kernels (``nnrt/ops/_jit_quant.py``, ``NNRT_PLAN_JIT=0``) and the
numpy kernels (``NNRT_JIT=0``), in one run.

For each microWakeWord model (``tests/data/models/`` and ``--models DIR``), the model is prepared
three times on one CpuDevice: program, steps, numpy (the reference the CTS runs). Then,
interleaved batch by batch so that the machine's load hits all four alike: ``await execute`` of
each (the public path: request validation, the inline decision, the interpreter, outputs), and
LiteRT's step as ``nnrt bench`` times it (set the input, ``invoke``, copy the output; one
thread, the state kept inside the interpreter). Printed: the load average, medians of wall and
CPU time (``time.thread_time``: what other processes' load does not inflate), the ratios to
LiteRT (target <= 3x), steps / program and numpy / program; then, per op type, the kernels' CPU
time alone (best of five batches of each step called in a loop) on the numpy and step plans,
and the program's one call.

``--cold`` also measures start-up in fresh processes: import plus load, preparation (which
compiles or loads the compiled kernels, and the program runner) and the first step, with an
empty ``NUMBA_CACHE_DIR`` (cold: numba compiles) and again with the same directory (warm:
loaded from numba's cache), for the program and the step plan, next to ``NNRT_JIT=0``.

Run: python benchmarks/streaming_int8.py [--quick] [--cold] [--models /work/models]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NNRT_JIT_BACKGROUND", "0")  # compiled kernels at preparation (see _common.py)

from nnrt.bench._inputs import input_specs, make_inputs, open_model, with_initial_state
from nnrt.bench._reference import feeds_for, open_reference
from nnrt.devices import CpuDevice
from nnrt.execution import PreparedModel
from nnrt.ops import _jit

ROOT = Path(__file__).resolve().parents[1]
TARGET = 3.0


def _models(dirs: list[Path]) -> list[Path]:
    found: dict[str, Path] = {}
    for d in [ROOT / "tests" / "data" / "models", *dirs]:
        for p in sorted(d.rglob("microwakeword_*.tflite")):
            found.setdefault(p.name, p)
    return list(found.values())


def _prepare(device: CpuDevice, model: Any, mode: str) -> PreparedModel:
    """Prepare ``model`` as ``mode``: "program" (the default), "steps" or "numpy"."""
    saved = {k: os.environ.pop(k, None) for k in ("NNRT_JIT", "NNRT_PLAN_JIT")}
    try:
        if mode == "numpy":
            os.environ["NNRT_JIT"] = "0"
        elif mode == "steps":
            os.environ["NNRT_PLAN_JIT"] = "0"
        _jit.reset_for_tests()
        return device.prepare_model_sync(model)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
        _jit.reset_for_tests()


async def _batch(fn: Callable[[], Awaitable[Any]] | Callable[[], Any], n: int, is_async: bool) -> tuple[float, float]:
    """Mean wall and CPU microseconds of ``n`` calls."""
    t, c = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(n):
        if is_async:
            await fn()
        else:
            fn()
    return (time.perf_counter_ns() - t) / n / 1e3, (time.thread_time_ns() - c) / n / 1e3


def _kernels_by_type(p: PreparedModel, inputs: list[Any], calls: int) -> dict[str, float]:
    """CPU microseconds per execution of each op type's kernels (best of 5 batches per step)."""
    plan = p.plan
    slots = plan.template.copy()
    for s, v in zip(plan.inputs, inputs):
        slots[s] = v
    by: dict[str, float] = collections.defaultdict(float)
    for step in plan.steps:
        args = step.fetch(slots)
        fn = step.fn
        assert fn is not None
        result = fn(*args)
        if step.out >= 0:
            slots[step.out] = result
        best = float("inf")
        for _ in range(5):
            c = time.thread_time_ns()
            for _ in range(calls):
                fn(*args)
            best = min(best, (time.thread_time_ns() - c) / calls / 1e3)
        by[step.type.name] += best
    return dict(by)


async def _one(path: Path, rounds: int, per: int) -> dict[str, Any]:
    model = open_model(path).model
    specs = input_specs(model)
    inputs = with_initial_state(model, make_inputs(specs, seed=0))
    ref = open_reference(str(path), "tflite", {s.name: s.shape for s in specs})
    feeds = feeds_for(ref, [s.name for s in specs], inputs)
    device = CpuDevice()
    try:
        prepared = {mode: _prepare(device, model, mode) for mode in ("program", "steps", "numpy")}
        first = {mode: (await p.execute(inputs)).outputs for mode, p in prepared.items()}
        for mode in ("steps", "numpy"):
            assert all((x == y).all() for x, y in zip(first["program"], first[mode])), f"program and {mode} differ"
        runs: dict[str, list[tuple[float, float]]] = {"program": [], "steps": [], "numpy": [], "litert": []}
        for _ in range(rounds):
            for mode, p in prepared.items():
                runs[mode].append(await _batch(lambda p=p: p.execute(inputs), per, True))  # type: ignore[misc]
            runs["litert"].append(await _batch(lambda: ref.run(feeds), per, False))
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
        calls = max(per // 2, 20)
        return {"model": path.name, "ops": len(prepared["steps"].plan.steps), "steps": len(prepared["program"].plan.steps),
                "median_us": med, "kernels_compiled": _kernels_by_type(prepared["steps"], inputs, calls),
                "kernels_numpy": _kernels_by_type(prepared["numpy"], inputs, calls),
                "kernel_program": sum(_kernels_by_type(prepared["program"], inputs, calls).values())}
    finally:
        device.close()


def _print(rows: list[dict[str, Any]]) -> None:
    w = sys.stdout.write
    w(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    w("one streaming step, await execute vs LiteRT (set input + invoke + copy output), medians, us (wall / CPU):\n")
    w(f"  {'model':34s} {'ops':>4s} {'numpy':>14s} {'steps':>14s} {'program':>14s} {'LiteRT':>12s} "
      f"{'program/LiteRT':>15s} {'steps/program':>14s} {'numpy/program':>14s}\n")
    for r in rows:
        m = r["median_us"]
        (nw, nc), (sw, sc), (pw, pc), (lw, lc) = m["numpy"], m["steps"], m["program"], m["litert"]
        w(f"  {r['model']:34s} {r['ops']:4d} {nw:7.1f}/{nc:6.1f} {sw:6.1f}/{sc:6.1f} {pw:6.1f}/{pc:6.1f} "
          f"{lw:5.1f}/{lc:5.1f} {pw / lw:6.1f}x/{pc / lc:5.1f}x {sw / pw:6.1f}x/{sc / pc:4.1f}x "
          f"{nw / pw:6.1f}x/{nc / pc:4.1f}x\n")
    ratios = [r["median_us"]["program"][1] / r["median_us"]["litert"][1] for r in rows]
    if ratios:
        verdict = "met" if max(ratios) <= TARGET else "NOT met"
        w(f"  program step / LiteRT (CPU): {min(ratios):.1f}x-{max(ratios):.1f}x (target <= {TARGET:.0f}x: {verdict})\n")
    for r in rows:
        w(f"\nkernels alone, CPU us per execution by op type, {r['model']} (numpy -> compiled steps):\n")
        kn, kc = r["kernels_numpy"], r["kernels_compiled"]
        for name in sorted(kn, key=lambda k: -kn[k]):
            w(f"  {name:20s} {kn[name]:7.1f} -> {kc[name]:6.1f}   {kn[name] / kc[name]:5.1f}x\n")
        tn, tc = sum(kn.values()), sum(kc.values())
        w(f"  {'total':20s} {tn:7.1f} -> {tc:6.1f}   {tn / tc:5.1f}x\n")
        w(f"  {'the program (1 call)':20s} {'':7s}    {r['kernel_program']:6.1f}   {tc / r['kernel_program']:5.1f}x the steps\n")


_CHILD = """
import asyncio, json, sys, time
t0 = time.perf_counter()
from nnrt.bench._inputs import input_specs, make_inputs, open_model, with_initial_state
from nnrt.devices import CpuDevice
model = open_model(sys.argv[1]).model
t1 = time.perf_counter()
device = CpuDevice()
prepared = device.prepare_model_sync(model)
t2 = time.perf_counter()
inputs = with_initial_state(model, make_inputs(input_specs(model), seed=0))
prepared.execute_sync(inputs)
t3 = time.perf_counter()
device.close()
print(json.dumps({"import_load_ms": (t1 - t0) * 1e3, "prepare_ms": (t2 - t1) * 1e3, "first_step_ms": (t3 - t2) * 1e3}))
"""


def _start_up(path: Path) -> None:
    sys.stdout.write(f"\nstart-up in a fresh process, {path.name} (ms: import + load, prepare incl. calibration, first step):\n")
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as steps_cache:
        for label, env in (("NNRT_JIT=0", {"NNRT_JIT": "0"}),
                           ("steps, cold numba cache", {"NUMBA_CACHE_DIR": steps_cache, "NNRT_PLAN_JIT": "0"}),
                           ("steps, warm numba cache", {"NUMBA_CACHE_DIR": steps_cache, "NNRT_PLAN_JIT": "0"}),
                           ("program, cold numba cache", {"NUMBA_CACHE_DIR": cache}),
                           ("program, warm numba cache", {"NUMBA_CACHE_DIR": cache})):
            full = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
            for k in ("NNRT_JIT", "NNRT_PLAN_JIT"):
                if k not in env:
                    full.pop(k, None)
            out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], env=full, capture_output=True, text=True,
                                 check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            sys.stdout.write(f"  {label:28s} {r['import_load_ms']:7.0f} {r['prepare_ms']:8.0f} {r['first_step_ms']:8.1f}"
                             f"   total {sum(r.values()):6.0f}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, action="append", default=[], help="another directory of models")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter batches")
    parser.add_argument("--cold", action="store_true", help="also measure start-up with a cold and a warm numba cache")
    args = parser.parse_args()
    if not _jit.available():
        sys.exit("numba is not installed (pip install 'nnrt[fast]'): nothing to compare")
    rounds, per = (5, 100) if args.quick else (15, 300)
    models = _models(args.models)
    rows = [asyncio.run(_one(p, rounds, per)) for p in models]
    _print(rows)
    if args.cold and models:
        _start_up(max(models, key=lambda p: p.stat().st_size))


if __name__ == "__main__":
    main()
