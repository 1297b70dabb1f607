"""What each of CpuDevice's opt-in process-wide settings buys, measured in the same run.

Each configuration runs in a child process of its own (the settings are process-wide and
never undone), with ``OPENBLAS_NUM_THREADS`` and friends removed from its environment so that
BLAS starts with its own default:

  none     CpuDevice() — what nnrt.get_devices() gives
  blas     CpuDevice(blas_threads=1)
  switch   CpuDevice(switch_interval_s=0.0005)
  malloc   CpuDevice(tune_malloc=True)
  all      CpuDevice(tune_process=True)

Figures per configuration:
(a) the MobileNet-style block (zoo.mobilenet_block), one ``await execute`` at a time: median ms;
(b) the same with two executions in flight (both compute units busy): median ms per execution;
(c) event-loop wake-up lateness of a 1 ms ``asyncio.sleep`` while (b)'s executions run on the
    workers: p50 and p99 in ms (what a HIGH request arriving then would pay first).

Ratios are against ``none`` from the same run; the machine is shared, so compare ratios.

Run: python benchmarks/settings.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = {
    "none": {},
    "blas": {"blas_threads": 1},
    "switch": {"switch_interval_s": 0.0005},
    "malloc": {"tune_malloc": True},
    "all": {"tune_process": True},
}
os.environ.setdefault("NNRT_JIT_BACKGROUND", "0")  # compiled kernels at preparation (see _common.py)
_BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


async def _measure(config: dict[str, object], n: int) -> dict[str, float]:
    import nnrt
    from nnrt import zoo

    device = nnrt.CpuDevice(**config)  # type: ignore[arg-type]
    try:
        prepared = await device.prepare_model(zoo.mobilenet_block())
        x = zoo.example_inputs(prepared.model)
        for _ in range(3):
            await prepared.execute(x)
        one = []
        for _ in range(n):
            t = time.perf_counter()
            await prepared.execute(x)
            one.append((time.perf_counter() - t) * 1e3)
        stop = False
        busy: list[float] = []

        async def worker() -> None:
            while not stop:
                t = time.perf_counter()
                await prepared.execute(x)
                busy.append((time.perf_counter() - t) * 1e3)

        tasks = [asyncio.create_task(worker()) for _ in range(2)]
        late = []
        for _ in range(n * 10):
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append((time.perf_counter() - t) * 1e3 - 1.0)
        stop = True
        await asyncio.gather(*tasks)
    finally:
        device.close()
    late.sort()
    return {
        "one_ms": statistics.median(one),
        "busy_ms": statistics.median(busy),
        "late_p50_ms": late[len(late) // 2],
        "late_p99_ms": late[int(len(late) * 0.99)],
    }


def _child(name: str, n: int) -> None:
    sys.stdout.write(json.dumps(asyncio.run(_measure(CONFIGS[name], n))) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer executions")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = 10 if args.quick else 40
    if args.child:
        _child(args.child, n)
        return 0
    env = {k: v for k, v in os.environ.items() if k not in _BLAS_ENV}
    results = {}
    for name in CONFIGS:
        cmd = [sys.executable, __file__, "--child", name] + (["--quick"] if args.quick else [])
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
    base = results["none"]
    sys.stdout.write(f"{'config':8} {'(a) one ms':>14} {'(b) two ms':>14} {'(c) late p50':>16} {'(c) late p99':>16}\n")
    for name, r in results.items():
        cells = [f"{r[k]:7.2f} ({r[k] / base[k]:4.2f}x)" if base[k] > 0 else f"{r[k]:7.2f}" for k in
                 ("one_ms", "busy_ms", "late_p50_ms", "late_p99_ms")]
        sys.stdout.write(f"{name:8} {cells[0]:>14} {cells[1]:>14} {cells[2]:>16} {cells[3]:>16}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
