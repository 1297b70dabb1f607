"""An ONNX model's time by kind of layer, nnrt against ONNX Runtime, one thread each.

nnrt's side is ``profile_plan`` (each kernel step of the prepared plan, on this thread); ONNX
Runtime's is its own profiler (``_ort_profile``: its optimized graph, so a SiLU is one
QuickGelu node, convolutions run in its blocked layout with reorder nodes around them). Rounds
of the two alternate so that the shared machine's load touches both alike; each figure is a
median over every run of every round. Layers are grouped by kind (convolutions split into
plain, depthwise and transposed; nnrt's fused LOGISTIC + MUL and ORT's QuickGelu are SiLU), then
by kind and output shape (NCHW, ORT's padded channel blocks as it reports them; a step that
writes into a CONCATENATION's output, ``into operation N``, shows that output's shape). Run, e.g.::

    python benchmarks/model_steps.py /work/models/onnx/ddddocr_common_det.onnx
    python benchmarks/model_steps.py /work/models/onnx/rapidocr_ch_PP-OCRv3_det_infer.onnx \\
        --input-shape x=1,3,320,320 --rounds 4 --runs 10

Without ``--input-shape`` the shapes come from ``benchmarks/models.toml`` (as ``real_models.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import tomllib
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from layers import plan_steps

from nnrt.bench._inputs import input_specs, make_inputs, open_model
from nnrt.bench._profile import profile_plan
from nnrt.devices import CpuDevice
from nnrt.execution._plan import KERNEL, Plan, Step

#: ONNX Runtime op types under nnrt's names (the rest keep their own).
_ORT_KINDS = {
    "Conv": "CONV_2D", "FusedConv": "CONV_2D", "ConvTranspose": "TRANSPOSE_CONV_2D", "QuickGelu": "SiLU",
    "Sigmoid": "LOGISTIC", "Add": "ADD", "Sum": "ADD", "Mul": "MUL", "Div": "DIV", "Sub": "SUB",
    "Concat": "CONCATENATION", "Resize": "RESIZE", "Upsample": "RESIZE", "MaxPool": "MAX_POOL_2D",
    "AveragePool": "AVERAGE_POOL_2D", "GlobalAveragePool": "MEAN", "Transpose": "TRANSPOSE", "Relu": "RELU",
    "Clip": "RELU6", "HardSigmoid": "HARD_SIGMOID", "HardSwish": "HARD_SWISH", "Slice": "STRIDED_SLICE",
    "ReorderInput": "(ORT layout)", "ReorderOutput": "(ORT layout)", "Reshape": "RESHAPE",
}  # fmt: skip
_CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D", "GROUPED_CONV_2D", "TRANSPOSE_CONV_2D")


def _nnrt_kind(step: Step) -> str:
    name = step.type.name
    if name.startswith("RESIZE"):
        return "RESIZE"
    return "SiLU" if name == "MUL" and "LOGISTIC" in step.label else name


def _ort_kind(op_type: str, inputs: list[list[int]]) -> str:
    kind = _ORT_KINDS.get(op_type, op_type)
    if kind == "CONV_2D" and len(inputs) > 1 and len(inputs[1]) == 4 and inputs[1][1] == 1 and inputs[0][1] > 1:
        return "DEPTHWISE_CONV_2D"
    return kind


def _nchw(dims: list[int]) -> tuple[int, ...]:
    return (dims[0], dims[3], dims[1], dims[2]) if len(dims) == 4 else tuple(dims)


def _shapes_from_toml(model: str) -> dict[str, list[int]]:
    table = tomllib.loads((Path(__file__).parent / "models.toml").read_text())
    for entry in table["model"]:
        if entry["file"] == os.path.basename(model):
            return {k: list(v) for k, v in entry.get("input_shapes", {}).items()}
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2,...")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--top", type=int, default=20, help="rows of the by-shape table (non-convolution kinds)")
    args = parser.parse_args()
    try:
        from _ort_profile import OrtProfile
    except ImportError:
        sys.exit("model_steps.py needs onnxruntime (the bench extra)")
    shapes = {name: [int(d) for d in dims.split(",") if d] for name, _, dims in
              (text.partition("=") for text in args.input_shape)} or _shapes_from_toml(args.model)
    model = open_model(args.model, shapes).model
    inputs = make_inputs(input_specs(model, shapes))
    device = CpuDevice(blas_threads=1, tune_malloc=True)  # as ``nnrt bench`` runs
    try:
        prepared = device.prepare_model_sync(model)
        steps = plan_steps(prepared.plan)
        feeds = {spec.name: x for spec, x in zip(input_specs(model, shapes), inputs)}
        ours: dict[str, list[float]] = defaultdict(list)
        with tempfile.TemporaryDirectory() as tmp:
            ort = OrtProfile(args.model, tmp)
            for r in range(args.rounds):
                for st in profile_plan(prepared.plan, inputs, runs=args.runs, warmup=2).steps:
                    ours[st.label].append(st.ms * 1e3)
                ort.run(feeds, args.runs + (3 if r == 0 else 0))
            theirs = ort.finish()
    finally:
        device.close()
    _report(prepared.plan, steps, ours, theirs, args.top)


def _report(plan: Plan, steps: dict[str, Step], ours: dict[str, list[float]], theirs: dict, top: int) -> None:
    ops = plan.model.operands
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0])  # nnrt us, ORT us, steps, nodes
    rows: dict[tuple[str, tuple[int, ...]], list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0])
    for label, times in ours.items():
        step = steps[label]
        if step.kind != KERNEL:
            continue
        us, kind = statistics.median(times), _nnrt_kind(step)
        shape = _nchw(list(ops[step.outs[0]].dimensions)) if step.outs else ()
        for table, key in ((kinds, kind), (rows, (kind, shape))):
            table[key][0] += us
            table[key][2] += 1
    for node in theirs.values():
        us, kind = statistics.median(node.us[3:] or node.us), _ort_kind(node.op_type, node.inputs)
        shape = tuple(node.outputs[0]) if node.outputs else ()
        for table, key in ((kinds, kind), (rows, (kind, shape))):
            table[key][1] += us
            table[key][3] += 1
    total = [sum(v[0] for v in kinds.values()), sum(v[1] for v in kinds.values())]
    out = sys.stdout.write
    out(f"{os.path.basename(plan.model.name or 'model')}: kernels nnrt {total[0] / 1e3:.2f} ms, ORT {total[1] / 1e3:.2f} ms"
        f" ({total[0] / total[1]:.2f}x; medians per execution)\n")
    out(f"  {'kind':22} {'nnrt us':>9} {'steps':>5} {'ORT us':>9} {'nodes':>5} {'ratio':>6} {'gap us':>8}\n")
    non_conv = [0.0, 0.0]
    for kind, (a, b, n, m) in sorted(kinds.items(), key=lambda kv: -max(kv[1][0], kv[1][1])):
        ratio = f"{a / b:5.2f}x" if b else "     -"
        out(f"  {kind:22} {a:9.0f} {n:5} {b:9.0f} {m:5} {ratio} {a - b:8.0f}\n")
        if kind not in _CONVS:
            non_conv[0] += a
            non_conv[1] += b
    out(f"  {'all but convolutions':22} {non_conv[0]:9.0f} {'':5} {non_conv[1]:9.0f} {'':5} "
        f"{non_conv[0] / max(non_conv[1], 1e-9):5.2f}x {non_conv[0] - non_conv[1]:8.0f}\n")
    out(f"\n  by kind and output shape (NCHW), convolutions left out, largest gap first (top {top}):\n")
    picked = [(k, v) for k, v in rows.items() if k[0] not in _CONVS]
    for (kind, shape), (a, b, n, m) in sorted(picked, key=lambda kv: -(kv[1][0] - kv[1][1]))[:top]:
        ratio = f"{a / b:5.2f}x" if b else "     -"
        out(f"  {kind:22} {list(shape)!s:20} nnrt {a:8.0f} us ({n}) ORT {b:8.0f} us ({m}) {ratio}\n")


if __name__ == "__main__":
    main()
