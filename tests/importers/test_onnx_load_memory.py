"""Load memory of ONNX files: re-laid weights do not keep the file's copy beside them.

Conv weights (OIHW -> OHWI) and MatMul/Gemm weights ([K, N] -> [N, K]) are re-laid at load.
A weight read by that one node only is written over its own bytes in the loaded file
(``Builder.relaid``), so the model holds about one copy of its weights, not two. A weight
read by anything else keeps its bytes, and every output still matches ONNX Runtime.
"""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

import nnrt
from nnrt import CpuDevice
from tests.importers.onnx_build import compare_with_ort, make_model, save

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
RNG = np.random.default_rng(9)


def _init(name: str, *shape: int) -> object:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.1).astype(np.float32), name)


def _vi(name: str, shape: list[int] | None) -> object:
    return helper.make_tensor_value_info(name, F, shape)


def _weights_model(as_constants: bool) -> object:
    """Three convs 64 -> 64 (3x3), then MatMul 64 -> 512 on the pooled features: ~0.57 MB of
    weights, none over a quarter of it, as initializers or as Constant nodes (PP-OCR's exporter
    writes Constant nodes)."""
    weights = [_init(f"w{k}", 64, 64, 3, 3) for k in range(3)] + [_init("m", 64, 512)]
    nodes = [helper.make_node("Conv", [src, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1])
             for k, src in enumerate(["x", "c0", "c1"])]
    nodes += [
        helper.make_node("GlobalAveragePool", ["c2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["y"]),
    ]
    if as_constants:
        nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in weights] + nodes
        return make_model(nodes, [_vi("x", [1, 64, 8, 8])], [_vi("y", None)])
    return make_model(nodes, [_vi("x", [1, 64, 8, 8])], [_vi("y", None)], weights)


def _traced_load(path: str) -> tuple[float, float]:
    """(peak, retained) of a second load, over the file size (the first one imports modules)."""
    nnrt.load(path)
    tracemalloc.start()
    try:
        model = nnrt.load(path)
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del model
    size = os.path.getsize(path)
    return peak / size, retained / size


@pytest.mark.parametrize("as_constants", [False, True], ids=["initializers", "constant-nodes"])
def test_relaid_weights_keep_one_copy(device: CpuDevice, tmp_path: object, as_constants: bool) -> None:
    model = _weights_model(as_constants)
    compare_with_ort(device, model, tmp_path, {"x": RNG.standard_normal((1, 64, 8, 8)).astype(np.float32)})
    peak, retained = _traced_load(save(model, tmp_path, "w.onnx"))
    # The file is read once (1x); re-laying every weight beside it held 2x. At the peak, one
    # weight's re-laid copy is on its way into the file's bytes (here at most 1/4 of the file).
    assert retained < 1.25, retained
    assert peak < 1.5, peak


def test_weights_read_twice_keep_their_bytes(device: CpuDevice, tmp_path: object) -> None:
    # w feeds two convs; v feeds a conv and is a graph output; u feeds a conv and, through a
    # folded Identity (the same bytes under another name), a second conv.
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["b", "v"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Identity", ["u"], ["u2"]),
        helper.make_node("Conv", ["c", "u"], ["d"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "u2"], ["y"], pads=[1, 1, 1, 1]),
        helper.make_node("Identity", ["v"], ["v_out"]),
    ]
    inits = [_init("w", 4, 4, 3, 3), _init("v", 4, 4, 3, 3), _init("u", 4, 4, 3, 3)]
    model = make_model(nodes, [_vi("x", [1, 4, 6, 6])], [_vi("y", None), _vi("v_out", None)], inits)
    compare_with_ort(device, model, tmp_path, {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)})


def test_gemm_weight_relaid_in_place_matches(device: CpuDevice, tmp_path: object) -> None:
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0)]
    inits = [_init("b", 16, 8), _init("c", 8)]
    model = make_model(nodes, [_vi("a", [3, 16])], [_vi("y", None)], inits)
    compare_with_ort(device, model, tmp_path, {"a": RNG.standard_normal((3, 16)).astype(np.float32)})
