"""Which layer shapes carry a model's time: ``nnrt bench --profile``'s per-step medians, grouped
by op type and shapes (input, filter, output, scalar parameters), largest total first.

The profile (``nnrt.bench.profile_plan``) runs the prepared plan's own steps on this thread with
the interpreter's timer on; a fused step (PAD + DEPTHWISE_CONV_2D, ADD + RELU) counts under
its label's last operation and shows its first input. Run, for example::

    python benchmarks/layers.py /work/models/tflite/mediapipe_face_landmark.tflite
    python benchmarks/layers.py MODEL --ops DEPTHWISE_CONV_2D,PRELU,PAD --top 15 --runs 50

Each row: total ms per execution over the steps of that shape, its share of the kernels' time,
the number of steps, and the shapes. Figures are wall-clock medians on a shared machine:
compare rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NNRT_JIT_BACKGROUND", "0")  # compiled kernels at preparation (see _common.py)

from nnrt.bench._inputs import input_specs, make_inputs, open_model
from nnrt.bench._profile import profile_plan
from nnrt.devices import CpuDevice
from nnrt.execution._plan import KERNEL, Plan, Step


def plan_steps(plan: Plan) -> dict[str, Step]:
    """Every step of ``plan`` and its sub-plans, by label."""
    found: dict[str, Step] = {}
    todo = [plan]
    while todo:
        for s in todo.pop().steps:
            found[s.label] = s
            todo.extend(s.branches)
    return found


def _shapes(plan: Plan, step: Step) -> str:
    ops = plan.model.operands
    tensors = [list(ops[i].dimensions) for i in step.ins if not ops[i].type.is_scalar]
    scalars = [ops[i].value for i in step.ins if ops[i].type.is_scalar]
    outs = [list(ops[i].dimensions) for i in step.outs]
    return f"in {tensors} params {scalars} out {outs}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model")
    parser.add_argument("--ops", default="", help="comma-separated op types to show (default: all)")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2,...",
                        help="fix an input's dynamic dimensions (repeatable), as nnrt bench")
    args = parser.parse_args()
    shapes = {name: [int(d) for d in dims.split(",") if d] for name, _, dims in
              (text.partition("=") for text in args.input_shape)}
    wanted = {t for t in args.ops.split(",") if t}
    model = open_model(args.model, shapes).model
    device = CpuDevice(blas_threads=1, tune_malloc=True)  # as ``nnrt bench`` runs
    try:
        prepared = device.prepare_model_sync(model)
        plan = prepared.plan
        profile = profile_plan(plan, make_inputs(input_specs(model, shapes)), runs=args.runs, warmup=3)
    finally:
        device.close()
    steps = plan_steps(plan)
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for st in profile.steps:
        s = steps[st.label]
        if s.kind == KERNEL and (not wanted or st.op_type in wanted):
            groups[(st.op_type, _shapes(plan, s))].append(st.ms)
    total = profile.kernels_ms or 1.0
    sys.stdout.write(f"{os.path.basename(args.model)}: kernels {profile.kernels_ms:.3f} ms + interpreter "
                     f"{profile.interpreter_ms:.3f} ms per execution (medians of {args.runs} runs)\n")
    sys.stdout.write(f"  {'ms':>7} {'share':>6} {'steps':>5}  op type and shapes\n")
    rows = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    for (op_type, shapes), times in rows[: args.top]:
        sys.stdout.write(f"  {sum(times):7.3f} {sum(times) / total:6.1%} {len(times):5}  {op_type} {shapes}\n")


if __name__ == "__main__":
    main()
