"""Partitioning costs, in one run:

(a) step-boundary overhead: a chain of 16 small operations ([1, 4] float32, ADD and MUL
    alternating) prepared by ``nnrt.prepare`` on a CPU and a restricted device taking only ADD
    (16 steps), against the same model prepared on the CPU alone (1 step), both on the inline
    path (``await execute``, and ``execute_sync``), batches interleaved, medians; the overhead
    per boundary is the difference over 15 boundaries (target: < 10 us), on asyncio and uvloop;
    and against 16 one-operation models executed one after the other by the app (a yardstick
    that does not depend on the machine's load);
(b) partitioning a 5,000-operation model (blocks of ADD, MUL, LOGISTIC, TANH; the restricted
    device takes ADD and MUL): support queries, best device per operation and step formation
    (``nnrt.framework.partition``; target: < 100 ms), then building the step models, and a
    whole ``nnrt.prepare`` for scale;
(c) a vendored real model (mediapipe hand_recrop, 63 operations, on the device's worker)
    with its convolutions on the restricted device (27 steps), against one device: what the
    boundaries cost a model too heavy for the inline path (each step is admitted and handed
    to a worker on its own).

Run: python benchmarks/partition.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _common import atimed_pair, bench, quick_flag, ratio, report, run_on_event_loops

import nnrt
from nnrt import ExecutionPreference, Model, RestrictedDevice
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.framework import choose_devices, form_steps, partition

QUICK = quick_flag()


def chain(ops: list[Op]) -> Model:
    m = Model("chain")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    cur = x
    for op in ops:
        y = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
        m.add_operation(op, [cur, x, act] if op in (Op.ADD, Op.MUL) else [cur], [y])
        cur = y
    m.identify_inputs_and_outputs([x], [cur])
    m.finish()
    return m


async def step_overhead(loop_name: str) -> None:
    cpu = nnrt.CpuDevice(name="cpu")
    npu = RestrictedDevice("npu", operations=[Op.ADD])
    model = chain([Op.ADD, Op.MUL] * 8)
    single = await cpu.prepare_model(model)
    parted = await nnrt.prepare(model, [cpu, npu])
    steps = len(parted.partitions)
    x = np.ones((1, 4), np.float32)
    assert (await parted.execute([x])).outputs[0].tobytes() == (await single.execute([x])).outputs[0].tobytes()
    number = 200 if QUICK else 2000

    async def run_single() -> object:
        return await single.execute([x])

    async def run_parted() -> object:
        return await parted.execute([x])

    # What an app would do without partitioning: one prepared model per operation, awaited
    # one after the other (the load-independent yardstick for the boundaries' cost).
    singles = [await (cpu if k % 2 else npu).prepare_model(chain([op])) for k, op in enumerate([Op.ADD, Op.MUL] * 8)]

    async def run_by_hand() -> object:
        cur = x
        for p in singles:
            cur = (await p.execute([cur])).outputs[0]
        return cur

    base, other = await atimed_pair(run_single, run_parted, number)
    _, by_hand = await atimed_pair(run_single, run_by_hand, number // 4)
    sys.stdout.write(f"(a) {loop_name}: 16 operations, {steps} steps against 1\n")
    report("execute, one device", base)
    report(f"execute, {steps} steps", other)
    report(f"{steps} one-operation models executed one after the other", by_hand)
    per = (other - base) / (steps - 1)
    report("overhead per step boundary (target < 10 us)", per)
    ratio("partitioned / one device", other / base)
    ratio(f"partitioned / {steps} executions by hand", other / by_hand)
    if loop_name == "asyncio":
        sync_base = bench(lambda: single.execute_sync([x]), number)
        sync_other = bench(lambda: parted.execute_sync([x]), number)
        report("execute_sync, one device", sync_base)
        report(f"execute_sync, {steps} steps", sync_other)
        report("execute_sync overhead per step boundary", (sync_other - sync_base) / (steps - 1))
    cpu.close()
    npu.close()


def partition_time() -> None:
    n = 5000
    model = chain([Op.ADD, Op.MUL, Op.LOGISTIC, Op.TANH] * (n // 4))
    cpu = nnrt.CpuDevice(name="cpu", calibrate=False)
    npu = RestrictedDevice("npu", operations=[Op.ADD, Op.MUL])
    devices = [cpu, npu]
    fast = ExecutionPreference.FAST_SINGLE_ANSWER
    repeat = 3 if QUICK else 7

    def timed(fn: object) -> float:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()  # type: ignore[operator]
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)

    sys.stdout.write(f"(b) a {n}-operation model, {len(partition(model, devices))} steps\n")
    report("support query of the restricted device", timed(lambda: npu.operation_support(model)), "ms")
    report("best device per operation (queries included)", timed(lambda: choose_devices(model, devices, fast)), "ms")
    choice = choose_devices(model, devices, fast)
    report("step formation", timed(lambda: form_steps(model, choice, devices)), "ms")
    whole = timed(lambda: partition(model, devices))
    report("partitioning in all (target < 100 ms)", whole, "ms")
    steps = partition(model, devices)
    report("building the step models",
           timed(lambda: [model.operations_as_model(s.operations, s.outputs, inputs=s.inputs) for s in steps]), "ms")
    t = time.perf_counter()
    asyncio.run(nnrt.prepare(model, devices))
    report("nnrt.prepare in all (2,500 step preparations)", (time.perf_counter() - t) * 1e3, "ms")
    half = chain([Op.ADD, Op.MUL, Op.LOGISTIC, Op.TANH] * (n // 8))
    ratio("partitioning 5,000 / 2,500 operations (linear: ~2)", whole / timed(lambda: partition(half, devices)))
    cpu.close()
    npu.close()


async def real_model(loop_name: str) -> None:
    from pathlib import Path

    path = Path(__file__).parents[1] / "tests" / "data" / "models" / "mediapipe_hand_recrop.tflite"
    model = nnrt.load(path)
    cpu = nnrt.CpuDevice(name="cpu")
    npu = RestrictedDevice("npu", operations=[Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.ADD])
    single = await cpu.prepare_model(model)
    parted = await nnrt.prepare(model, [cpu, npu])
    steps = len(parted.partitions)
    x = np.random.default_rng(0).standard_normal((1, 256, 256, 3)).astype(np.float32)

    async def run_single() -> object:
        return await single.execute([x])

    async def run_parted() -> object:
        return await parted.execute([x])

    base, other = await atimed_pair(run_single, run_parted, 5 if QUICK else 20, repeat=5 if QUICK else 9)
    sys.stdout.write(f"(c) {loop_name}: mediapipe hand_recrop, {len(model.operations)} operations, {steps} steps against 1\n")
    report("execute, one device", base)
    report(f"execute, {steps} steps", other)
    report("cost per step boundary (worker path)", (other - base) / (steps - 1))
    ratio("partitioned / one device", other / base)
    cpu.close()
    npu.close()


if __name__ == "__main__":
    run_on_event_loops(step_overhead)
    partition_time()
    asyncio.run(real_model("asyncio"))
