"""The MobileNet-style block of ``overhead.py`` (c), step by step against ONNX Runtime's nodes.

nnrt's side is ``profile_plan`` (each kernel step's time, the prepared plan's own steps on
this thread); ONNX Runtime's is its own profiler over the very same graph (``overhead.ort_block``,
one thread, its graph optimizations on: it fuses Conv + Clip and runs the convolutions and the
global pool in its blocked NCHWc layout, so its nodes are what it really runs). Rounds of the
two alternate so that the shared machine's load touches both alike; each figure is the median
over every run of every round, in microseconds. The ratio column says which step is furthest
from ONNX Runtime.

Run: python benchmarks/block_steps.py [--quick]
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import _common
import numpy as np

from nnrt import zoo
from nnrt.bench._profile import profile_plan
from nnrt.devices import CpuDevice

try:
    import onnxruntime as ort
    from _ort_profile import OrtProfile
    from overhead import ort_block_model
except ImportError:  # pragma: no cover - optional
    ort = None


def main() -> None:
    if ort is None:
        sys.exit("block_steps.py needs onnxruntime and onnx (the bench extra)")
    quick = _common.quick_flag()
    rounds, runs = (4, 25) if quick else (10, 50)
    model = zoo.mobilenet_block()
    device = CpuDevice(blas_threads=1, tune_malloc=True)
    prepared = device.prepare_model_sync(model)
    img = zoo.example_inputs(model)[0]
    img_nchw = np.ascontiguousarray(img.transpose(0, 3, 1, 2))
    with tempfile.TemporaryDirectory() as tmp:
        session = OrtProfile(ort_block_model(model).SerializeToString(), tmp)
        ours: dict[str, list[float]] = {}
        order: list[tuple[str, str]] = []
        for r in range(rounds):
            prof = profile_plan(prepared.plan, [img], runs=runs, warmup=2)
            if not order:
                order = [(s.label, s.op_type) for s in prof.steps]
            for s in prof.steps:
                ours.setdefault(s.label, []).append(s.ms * 1e3)
            session.run({"x": img_nchw}, runs + (5 if r == 0 else 0))
        theirs = {name: node.us for name, node in session.finish().items()}
    sys.stdout.write(f"(per step, us: medians over {rounds} alternating rounds of {runs} runs)\n")
    steps = [(label, kind) for label, kind in order if label in ours]
    steps.sort(key=lambda s: _step_index(prepared.plan, s[0]))
    sys.stdout.write("  step                 nnrt us  ORT node(s)                 us   nnrt/ORT\n")
    matched = _match(prepared.plan, steps, theirs)
    total_ours = total_theirs = 0.0
    for (label, kind), nodes in zip(steps, matched):
        mine = statistics.median(ours[label])
        ref = sum(statistics.median(theirs[k][5:]) for k in nodes)
        total_ours += mine
        total_theirs += ref
        ratio = f"{mine / ref:6.2f}x" if ref else "     -"
        names = "+".join(k.removesuffix("_nchwc") for k in nodes) or "-"
        sys.stdout.write(f"  {kind:20} {mine:9.1f}  ORT {names:22} {ref:8.1f}  {ratio}  gap {mine - ref:7.1f}\n")
    used = {k for nodes in matched for k in nodes}
    others = sum(statistics.median(v[5:]) for k, v in theirs.items() if k not in used)
    sys.stdout.write(f"  {'ORT other nodes':20} {'':9}  {'':26} {others:8.1f}\n")
    _common.ratio("kernels, nnrt / ORT", total_ours / (total_theirs + others), 1.5, width=48)
    device.close()


def _step_index(plan: object, label: str) -> int:
    steps = getattr(plan, "steps", [])
    return next((k for k, s in enumerate(steps) if s.label == label), len(steps))


def _match(plan: Any, steps: list[tuple[str, str]], theirs: dict[str, list[float]]) -> list[list[str]]:
    """ORT's nodes for each nnrt step: the model's operations in the step's label (a fused step
    names several), each mapped by type in graph order (ORT's fused Conv + Clip nodes are r0,
    r1, ...)."""
    convs = iter(sorted(k for k in theirs if k.startswith("r") and k.endswith("_nchwc")))
    prefix = {"AVERAGE_POOL_2D": "gap", "FULLY_CONNECTED": "Gemm", "RESHAPE": "Flatten"}
    node: dict[int, str] = {}
    for k, op in enumerate(plan.model.operations):
        name = op.type.name
        found = next(convs, None) if name in ("CONV_2D", "DEPTHWISE_CONV_2D") else next(
            (t for t in theirs if t.startswith(prefix.get(name, "?"))), None)
        if found is not None:
            node[k] = found
    owner: dict[int, int] = {}  # each operation to the last step naming it (a fused pair's second)
    for k, (label, _) in enumerate(steps):
        for op in re.findall(r"operation (\d+)", label):
            owner[int(op)] = k
    return [[node[op] for op in sorted(node) if owner.get(op) == k] for k in range(len(steps))]


if __name__ == "__main__":
    main()
