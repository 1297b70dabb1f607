"""What the MLTS-style crash tests run in their child processes (``nnrt.bench``'s ``crash_test``
watchdog: SUCCESS / FAILURE / HANG / CRASH per child). Module-level functions, as ``spawn``
imports them by name.

* ``model_runner(path)``: load a model file (valid or mutated), prepare it, and run it with
  hostile inputs (zeros, NaN, +-inf, huge and tiny values) on ``execute``, ``execute_sync``,
  ``execute_fenced`` and a burst; every path must agree on every accepted request.
* ``storm_runner(name)``: a request storm on a built-in model: many concurrent executions with
  random deadlines and cancellations; afterwards no task, scheduler entry or ledger byte left.
"""

from __future__ import annotations

import asyncio
import gc
import random
from typing import Any

import numpy as np

__all__ = ["model_runner", "storm_runner"]


def _hostile(op: Any, rng: random.Random) -> Any:
    dtype = op.type.dtype
    if op.type.is_scalar:
        return dtype.type(rng.choice((0, 1, -1, 2**31 - 1))).item() if dtype.kind != "b" else rng.random() < 0.5
    dims = op.dimensions
    if dtype.kind == "f":
        pool = (0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 1e30, -1e-30, 65504.0)
        return rng.choice(pool) * np.ones(dims, dtype) if rng.random() < 0.3 else \
            np.array(np.random.default_rng(rng.randrange(1 << 30)).normal(0, 1e3, dims), dtype)
    if dtype.kind == "b":
        return np.random.default_rng(rng.randrange(1 << 30)).random(dims) < 0.5
    info = np.iinfo(dtype)
    return np.random.default_rng(rng.randrange(1 << 30)).integers(info.min, info.max, dims, dtype, endpoint=True)


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
                                    for x, y in zip(a, b))


def model_runner(path: str, options: dict[str, Any]) -> str:
    import nnrt
    from tests.adversarial._targets import check_status

    rng = random.Random(options.get("seed", 0))
    model = nnrt.Model.load(path)

    async def main() -> str:
        device = nnrt.CpuDevice(name="nnrt-crash", calibrate=False)
        try:
            prepared = await device.prepare_model(model)
            ins = [model.operands[i] for i in model.input_indexes]
            if not all(op.fully_specified and (op.type.is_scalar or op.byte_size <= 1 << 20) for op in ins):
                return "accepted; inputs not fully specified: not run"
            runs = agreed = 0
            for _ in range(options.get("requests", 4)):
                args = [_hostile(op, rng) for op in ins]
                try:
                    first = [np.array(x) for x in (await prepared.execute(args, loop_timeout=0.05)).outputs]
                except nnrt.NnrtError as err:
                    check_status(err)  # a refusal, not a kernel's bare exception wrapped
                    continue
                others = [prepared.execute_sync(args, loop_timeout=0.05).outputs]
                fence, cb = await prepared.execute_fenced(args, loop_timeout=0.05)
                await fence
                others.append(cb.result.outputs)
                async with prepared.burst() as burst:
                    others.append((await burst.execute(args, loop_timeout=0.05)).outputs)
                runs += 1
                if all(_same(first, [np.array(x) for x in o]) for o in others):
                    agreed += 1
            if agreed != runs:
                raise AssertionError(f"WRONG: the execution paths disagree on {runs - agreed} of {runs} requests")
            return f"{runs} requests, every path agreed"
        finally:
            device.close()

    return asyncio.run(main())


def storm_runner(name: str, options: dict[str, Any]) -> str:
    import nnrt
    from nnrt import zoo

    rng = random.Random(options.get("seed", 0))
    n = options.get("executions", 500)

    async def main(device: nnrt.CpuDevice) -> str:
        try:
            model = zoo.build(name)
            prepared = [await device.prepare_model(model, priority=p, app=f"app{p % 3}") for p in
                        (nnrt.Priority.LOW, nnrt.Priority.MEDIUM, nnrt.Priority.HIGH)]
            inputs = zoo.example_inputs(model)
            tasks = []
            for _ in range(n):
                p = rng.choice(prepared)
                deadline = nnrt.deadline_after(rng.choice((0.0005, 0.005, 0.05, 1.0))) if rng.random() < 0.5 else None
                tasks.append(asyncio.ensure_future(p.execute(inputs, deadline=deadline)))
                if rng.random() < 0.1:
                    rng.choice(tasks).cancel()
                if rng.random() < 0.05:
                    await asyncio.sleep(0)
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            refusals = (nnrt.NnrtError, asyncio.CancelledError)
            bad = [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, refusals)]
            if bad:
                raise bad[0]
            stats = device.statistics()
            busy = stats.queued + stats.running + stats.busy_units
            if busy:
                raise AssertionError(f"LEAK: {busy} executions still queued or running after the storm")
            ok = sum(1 for o in outcomes if not isinstance(o, BaseException))
            return f"{n} executions: {ok} succeeded, {n - ok} refused or cancelled"
        except BaseException:
            device.close()
            raise

    device = nnrt.CpuDevice(name="nnrt-storm", calibrate=True, max_queued_per_app=64)
    summary = asyncio.run(main(device))
    gc.collect()  # after the loop: its tasks, and the failures' tracebacks, are gone
    held = device.memory.in_use()
    device.close()
    if held:
        raise AssertionError(f"LEAK: {held} bytes still reserved after every prepared model was dropped")
    return summary
