"""Preparation-time fusions on the real models: CPU time per execution of each model's plan
with the fusions (``nnrt/execution/_fuse.py``, ``_fuse_pad.py``, ...) against the same model's
plan compiled without them (constant folding kept), measured in the same run, interleaved.

    python benchmarks/fusions.py --models /work/models [--quick] [--only NAME]

Each plan runs synchronously on this thread (``run_plan``, no scheduler); the figure is the
median of ``time.thread_time`` per execution, which the load of a shared machine distorts far
less than wall time. The process takes the latency settings ``nnrt bench`` runs with
(``CpuDevice(tune_process=True)``: one BLAS thread, glibc keeping freed blocks for reuse;
without the latter, page faults on fresh intermediates dominate every comparison). The
outputs of both plans are compared first (the fusions are exact: the largest difference is
printed, and must be 0 unless a fusion says it rounds differently). The fused plan's top
three op types (``nnrt bench --profile``'s attribution) follow. A third plan has every fusion
but the convolution epilogues (``_fuse_epilogue``, "no epi"); the "epi" column is fused / that,
the epilogues' own effect. ``--epilogue-shapes`` prints the same comparison per layer shape: a
CONV_2D then a HARD_SWISH, a PRELU or a residual ADD (folded whatever its size here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from real_models import VENDORED, find_models

import nnrt.execution._fuse as fuse_module
import nnrt.execution._fuse_epilogue as fuse_epilogue_module
import nnrt.execution._plan as plan_module
from nnrt import CpuDevice, Model, OperandType, OperationType
from nnrt.bench._inputs import input_specs, make_inputs, open_model, with_initial_state
from nnrt.bench._profile import profile_plan
from nnrt.errors import NnrtError
from nnrt.execution._interpreter import ExecContext, fp_errors_ignored, fp_errors_restored, run_plan
from nnrt.execution._plan import Plan, compile_plan


@contextmanager
def unfused() -> Iterator[None]:
    """Compile plans without the fusions inside the block."""
    original = plan_module.fuse_steps
    plan_module.fuse_steps = lambda model, steps, fetcher, operands: steps
    try:
        yield
    finally:
        plan_module.fuse_steps = original


@contextmanager
def without_epilogues() -> Iterator[None]:
    """Compile plans with every fusion but the convolution epilogues (``_fuse_epilogue``)."""
    original = fuse_module.fold_epilogues
    fuse_module.fold_epilogues = lambda model, steps, *rest: steps
    try:
        yield
    finally:
        fuse_module.fold_epilogues = original


def execute(plan: Plan, args: list[Any]) -> tuple[list[np.ndarray], int]:
    """The plan's outputs and the thread's CPU time, in ns, of one execution (on this thread)."""
    token = fp_errors_ignored()
    t = time.thread_time_ns()
    gen = run_plan(plan, args, ExecContext())
    try:
        while True:
            next(gen)  # nothing interrupts the run; a heavy step asking to be offloaded stays here
    except StopIteration as stop:
        result = [np.asarray(v) for v in stop.value]
    finally:
        fp_errors_restored(token)
    return result, time.thread_time_ns() - t


#: (input shape, K, output channels) of the per-shape epilogue table: 1x1 (pointwise), 3x3
#: stride 1 with few channels (blocked im2col) and with 96 (Winograd).
EPILOGUE_SHAPES = [((1, 160, 160, 8), 1, 32), ((1, 80, 80, 16), 1, 64), ((1, 52, 52, 96), 1, 96),
                   ((1, 13, 13, 192), 1, 192), ((1, 104, 104, 24), 3, 24), ((1, 26, 26, 96), 3, 96)]


def _conv_then(shape: tuple[int, ...], k: int, cout: int, kind: str) -> tuple[Model, list[np.ndarray]]:
    """CONV_2D (SAME, stride 1) then ``kind`` (HARD_SWISH, PRELU per channel or a residual ADD)."""
    rng = np.random.default_rng(0)
    m = Model()
    f32 = OperandType.TENSOR_FLOAT32
    out_dims = [*shape[:3], cout]

    def const(value: Any, t: OperandType = f32) -> int:
        i = m.add_operand(t, list(np.shape(value)) if np.ndim(value) else None)
        m.set_operand_value(i, value)
        return i

    x, c, y = m.add_operand(f32, list(shape)), m.add_operand(f32, out_dims), m.add_operand(f32, out_dims)
    w = (rng.standard_normal((cout, k, k, shape[3])) * 0.1).astype(np.float32)
    ints = [const(v, OperandType.INT32) for v in (1, 1, 1, 0)]  # SAME, strides, no activation
    m.add_operation(OperationType.CONV_2D, [x, const(w), const(np.zeros(cout, np.float32)), *ints], [c])
    inputs = [x]
    if kind == "HARD_SWISH":
        m.add_operation(OperationType.HARD_SWISH, [c], [y])
    elif kind == "PRELU":
        m.add_operation(OperationType.PRELU, [c, const(np.linspace(-0.5, 0.5, cout, dtype=np.float32))], [y])
    else:
        r = m.add_operand(f32, out_dims)
        inputs.append(r)
        m.add_operation(OperationType.ADD, [c, r, ints[3]], [y])
    m.identify_inputs_and_outputs(inputs, [y])
    m.finish()
    return m, [rng.standard_normal(m.operands[i].dimensions).astype(np.float32) for i in inputs]


def epilogue_shapes(rounds: int, per_round: int) -> None:
    """Each CONV_2D + successor of ``EPILOGUE_SHAPES`` with and without the epilogue (CPU time)."""
    print(f"{'conv':32} {'then':10} {'separate us':>12} {'epilogue us':>12} {'ratio':>6}")
    for shape, k, cout in EPILOGUE_SHAPES:
        for kind in ("HARD_SWISH", "PRELU", "ADD"):
            model, inputs = _conv_then(shape, k, cout, kind)
            with without_epilogues():
                plain = compile_plan(model)
            with patched(fuse_epilogue_module, "RESIDUAL_MIN_ELEMENTS", 0):
                fused = compile_plan(model)
            times: dict[str, list[int]] = {"plain": [], "fused": []}
            for _ in range(rounds):
                for name, plan in (("plain", plain), ("fused", fused)):
                    times[name].extend(execute(plan, inputs)[1] for _ in range(per_round))
            p_us, f_us = (statistics.median(times[n]) / 1e3 for n in ("plain", "fused"))
            print(f"{str(list(shape)) + f' {k}x{k} -> {cout}':32} {kind:10} {p_us:12.1f} {f_us:12.1f} {f_us / p_us:6.2f}")


@contextmanager
def patched(module: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def main() -> int:
    CpuDevice(tune_process=True).close()  # the process settings nnrt bench runs with
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, action="append", default=[])
    parser.add_argument("--only", default="")
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--epilogue-shapes", action="store_true",
                        help="a CONV_2D then HARD_SWISH / PRELU / ADD per shape, with and without the epilogue")
    args = parser.parse_args()
    rounds, per_round = (3, 4) if args.quick else (5, 10)
    if args.epilogue_shapes:
        epilogue_shapes(rounds, per_round * 3)
        return 0
    models = [(p, e) for p, e in find_models([*args.models, VENDORED]) if args.only in p.name]
    print(f"{'model':46} {'steps':>13} {'unfused ms':>11} {'no epi ms':>9} {'fused ms':>9} {'ratio':>6} "
          f"{'epi':>5}  max diff  top op types (fused)")
    ratios, epi_ratios = [], []
    for path, entry in models:
        try:
            loaded = open_model(path, entry.get("input_shapes"), entry.get("load_values"))
            specs = input_specs(loaded.model, entry.get("input_shapes"), entry.get("input_values"))
            inputs = with_initial_state(loaded.model, make_inputs(specs, values=entry.get("input_values")))
            fused = compile_plan(loaded.model)
            with unfused():
                base = compile_plan(loaded.model)
            with without_epilogues():
                plain = compile_plan(loaded.model)
        except NnrtError as err:
            print(f"{path.name:46} skipped: {str(err).splitlines()[0][:80]}")
            continue
        want = execute(base, inputs)[0]
        diff = max((float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
                    for plan in (fused, plain) for a, b in zip(want, execute(plan, inputs)[0], strict=True)),
                   default=0.0)
        times: dict[str, list[int]] = {"base": [], "plain": [], "fused": []}
        for _ in range(rounds):
            for name, plan in (("base", base), ("plain", plain), ("fused", fused)):
                for _ in range(per_round):
                    times[name].append(execute(plan, inputs)[1])
        b_ms, p_ms, f_ms = (statistics.median(times[k]) / 1e6 for k in ("base", "plain", "fused"))
        ratios.append(f_ms / b_ms)
        epi_ratios.append(f_ms / p_ms)
        prof = profile_plan(fused, inputs, runs=per_round)
        top = ", ".join(f"{t.op_type} {t.share:.0%}" for t in prof.op_types[:3])
        steps = f"{len(base.steps)}>{len(plain.steps)}>{len(fused.steps)}"
        print(f"{path.name:46} {steps:>13} {b_ms:11.3f} {p_ms:9.3f} {f_ms:9.3f} {f_ms / b_ms:6.2f} {f_ms / p_ms:5.2f}"
              f"  {diff:8.2g}  {top}")
        sys.stdout.flush()
    if ratios:
        print(f"median fused/unfused CPU time over {len(ratios)} models: {statistics.median(ratios):.2f}; "
              f"with/without the convolution epilogues: {statistics.median(epi_ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
