"""Helpers for the hand-built ONNX test models: build with onnx.helper, run in nnrt and onnxruntime."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

import nnrt

__all__ = ["compare_with_ort", "make_model", "run_nnrt", "run_onnx_reference", "run_ort", "save"]


def make_model(nodes: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any],
               initializers: Sequence[Any] = (), opset: int = 17, name: str = "test") -> Any:
    from onnx import helper

    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def save(model: Any, tmp_path: Any, name: str = "model.onnx") -> str:
    path = os.path.join(str(tmp_path), name)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def run_ort(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(None, feeds)]


def run_onnx_reference(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX's own reference evaluator, for what onnxruntime does not run (batch-major recurrent ops)."""
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]


def run_nnrt(device: nnrt.CpuDevice, path: str, feeds: Sequence[np.ndarray], **load_kw: Any) -> list[np.ndarray]:
    model = nnrt.load(path, **load_kw)
    prepared = device.prepare_model_sync(model)
    return list(prepared.execute_sync([x.astype(np.int32) if x.dtype == np.int64 else x for x in feeds]).outputs)


def compare_with_ort(device: nnrt.CpuDevice, model: Any, tmp_path: Any, feeds: dict[str, np.ndarray],
                     atol: float = 1e-4, rtol: float = 1e-3, reference: str = "ort", **load_kw: Any) -> list[np.ndarray]:
    """Load ``model`` through a file into nnrt, run both, and check every output matches."""
    path = save(model, tmp_path)
    want = run_ort(model, feeds) if reference == "ort" else run_onnx_reference(model, feeds)
    got = run_nnrt(device, path, list(feeds.values()), **load_kw)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {k}: {g.shape} vs {w.shape}"
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g.astype(np.int64), w.astype(np.int64), err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(g, w, atol=atol, rtol=rtol, err_msg=f"output {k}")
    return got
