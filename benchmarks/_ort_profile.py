"""ONNX Runtime's own per-node profiler, as the step-by-step comparisons use it
(``block_steps.py``, ``model_steps.py``).

One session, one thread, its graph optimizations on (so its nodes are what it really runs:
fused Conv + activation, QuickGelu for a SiLU, its blocked NCHWc layout and the reorders in
and out of it). ``run`` may be called between rounds of nnrt's runs, so that the shared
machine's load touches both alike; ``finish`` ends the profile and gives each node's kernel
times (microseconds, in run order) with its op type and output shapes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OrtNode", "OrtProfile"]


@dataclass
class OrtNode:
    """One node of the optimized graph: its op type, output shapes and kernel times (us)."""

    op_type: str
    outputs: list[list[int]]
    inputs: list[list[int]]
    us: list[float] = field(default_factory=list)


class OrtProfile:
    """A profiling ONNX Runtime session over ``model`` (a path or serialized bytes); its
    trace file goes in the directory ``tmp``."""

    def __init__(self, model: str | bytes, tmp: str) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        self.session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])

    def run(self, feeds: dict[str, Any], n: int) -> None:
        for _ in range(n):
            self.session.run(None, feeds)

    def finish(self) -> dict[str, OrtNode]:
        """End the profile: node name -> its times and what it is."""
        with open(self.session.end_profiling()) as f:
            events = json.load(f)
        nodes: dict[str, OrtNode] = {}
        for e in events:
            if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
                continue
            name = e["name"].removesuffix("_kernel_time")
            args = e.get("args", {})
            node = nodes.get(name)
            if node is None:
                outs, ins = ([next(iter(d.values())) for d in args.get(k, [])] for k in ("output_type_shape",
                                                                                         "input_type_shape"))
                node = nodes[name] = OrtNode(args.get("op_name", "?"), outs, ins)
            node.us.append(float(e["dur"]))
        return nodes
