"""ONNX import: load time and peak memory of ``nnrt.load``, and the layout choice it makes.

Part 1 loads a ~10 MB ONNX model (the PP-OCRv4 text recogniser, 10.9 MB, from
``--models`` / ``$NNRT_MODELS`` / ``/work/models/onnx`` when present, else a synthetic float32
MLP of the same size built with onnx.helper) and measures ``nnrt.load`` (best of 5) next to,
in the same run, reading the file alone, ``onnx.load`` (the C++ protobuf parser) and creating
an onnxruntime session. Then the peak Python heap during ``load`` in a fresh child process
(tracemalloc; numpy's allocations are traced) as a multiple of the file size. Targets: under
0.5 s, under 2x the file.

Part 2 measures the layout decision of ``nnrt/importers/_onnx.py``: a chain of 3x3
convolutions (and a max pool) on an NCHW tensor, run (a) as the importer emits it, each op
with NNAPI's NCHW flag, and (b) transposed to NHWC once at entry, NHWC ops, transposed back
once at exit. Both are nnrt models executed on the CPU device, interleaved, median of
``--runs``. The ratio b/a says whether tracking layouts and transposing once would pay.

Run: ``python benchmarks/load_onnx.py [--quick] [--models DIR]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import best

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op

ROOT = Path(__file__).resolve().parent.parent
BIG = "rapidocr_ch_PP-OCRv4_rec_infer.onnx"



def _find_big(models: str | None) -> str | None:
    for d in (models, os.environ.get("NNRT_MODELS"), "/work/models", str(Path.home() / ".cache/nnrt/models")):
        if not d:
            continue
        for sub in ("", "onnx"):
            p = Path(d) / sub / BIG
            if p.exists():
                return str(p)
    return None


def synthetic(path: str, mb: float = 10.0) -> None:
    """A float32 MLP of four Gemm layers whose weights total about ``mb`` MB."""
    from onnx import TensorProto, helper, numpy_helper

    n = int((mb * 2**20 / 4 / 4) ** 0.5)
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for k in range(4):
        inits.append(numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("Gemm", [x, f"w{k}"], [f"h{k}"], transB=1))
        x = f"h{k}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    with open(path, "wb") as f:
        f.write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


_PEAK = """
import sys, tracemalloc, nnrt
nnrt.load(sys.argv[1], input_shapes={})  # warm imports
tracemalloc.start()
m = nnrt.load(sys.argv[1], input_shapes={})
print(tracemalloc.get_traced_memory()[1])
"""


def part1(models: str | None, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _find_big(models)
        shapes: dict[str, list[int]] = {"x": [1, 3, 48, 320]} if path else {}
        if path is None:
            path = os.path.join(tmp, "mlp.onnx")
            synthetic(path)
        size = os.path.getsize(path)
        print(f"load of {os.path.basename(path)} ({size / 2**20:.1f} MB), best of {runs}:")

        def read() -> None:
            with open(path, "rb") as f:
                buf = bytearray(size)
                f.readinto(buf)

        t_read = best(read, runs)
        t_load = best(lambda: nnrt.load(path, input_shapes=shapes), runs)
        print(f"  {'read the file alone':44} {t_read * 1e3:8.1f} ms")
        print(f"  {'nnrt.load':44} {t_load * 1e3:8.1f} ms  (target < 500 ms: {'met' if t_load < 0.5 else 'NOT met'})")
        try:
            import onnx

            t_onnx = best(lambda: onnx.load(path), runs)
            print(f"  {'onnx.load (C++ protobuf parse, no model built)':44} {t_onnx * 1e3:8.1f} ms")
            print(f"  {'ratio nnrt.load / onnx.load':44} {t_load / t_onnx:8.2f}x")
        except ImportError:
            pass
        try:
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            t_ort = best(lambda: ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]), max(2, runs // 2))
            print(f"  {'onnxruntime InferenceSession creation':44} {t_ort * 1e3:8.1f} ms")
            print(f"  {'ratio nnrt.load / onnxruntime session':44} {t_load / t_ort:8.2f}x")
        except ImportError:
            pass
        script = _PEAK.replace("input_shapes={}", f"input_shapes={shapes!r}")
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        out = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, env=env, check=True)
        peak = int(out.stdout.strip().splitlines()[-1])
        verdict = "met" if peak < 2 * size else "NOT met"
        print(f"  {'peak traced memory during load':44} {peak / 2**20:8.1f} MB = {peak / size:.2f}x the file "
              f"(target < 2x: {verdict})")


def _conv_chain(nchw: bool, depth: int, c: int, hw: int) -> nnrt.Model:
    """``depth`` 3x3 convs + a 2x2 max pool on [1, c, hw, hw] NCHW: NCHW flags, or NHWC between two transposes."""
    rng = np.random.default_rng(1)
    m = nnrt.Model()

    def scalar(t: T, v: object) -> int:
        i = m.add_operand(t)
        m.set_operand_value(i, v)
        return i

    def tensor(dims: list[int], value: np.ndarray | None = None, t: T = T.TENSOR_FLOAT32) -> int:
        i = m.add_operand(t, dims)
        if value is not None:
            m.set_operand_value(i, value)
        return i

    x = tensor([1, c, hw, hw])
    cur = x
    if not nchw:
        perm = tensor([4], np.asarray([0, 2, 3, 1], np.int32), T.TENSOR_INT32)
        cur = tensor([1, hw, hw, c])
        m.add_operation(Op.TRANSPOSE, [x, perm], [cur])
    shape = [1, c, hw, hw] if nchw else [1, hw, hw, c]
    pads = [scalar(T.INT32, v) for v in (1, 1, 1, 1, 1, 1)]
    layout = scalar(T.BOOL, nchw)
    for _ in range(depth):
        w = tensor([c, 3, 3, c], (rng.standard_normal((c, 3, 3, c)) * 0.1).astype(np.float32))
        b = tensor([c], np.zeros(c, np.float32))
        y = tensor(shape)
        m.add_operation(Op.CONV_2D, [cur, w, b, *pads, scalar(T.INT32, 1), layout], [y])
        cur = y
    pooled = [1, c, hw // 2, hw // 2] if nchw else [1, hw // 2, hw // 2, c]
    p = tensor(pooled)
    two = scalar(T.INT32, 2)
    zero = scalar(T.INT32, 0)
    m.add_operation(Op.MAX_POOL_2D, [cur, zero, zero, zero, zero, two, two, two, two, zero, layout], [p])
    out = p
    if not nchw:
        back = tensor([4], np.asarray([0, 3, 1, 2], np.int32), T.TENSOR_INT32)
        out = tensor([1, c, hw // 2, hw // 2])
        m.add_operation(Op.TRANSPOSE, [p, back], [out])
    m.identify_inputs_and_outputs([x], [out])
    m.finish()
    return m


def part2(runs: int) -> None:
    dev = nnrt.CpuDevice(name="layout-bench")
    try:
        for c, hw in ((16, 64), (64, 32)):
            a = dev.prepare_model_sync(_conv_chain(True, 6, c, hw))
            b = dev.prepare_model_sync(_conv_chain(False, 6, c, hw))
            x = np.random.default_rng(2).standard_normal((1, c, hw, hw)).astype(np.float32)
            ya, yb = a.execute_sync([x]).outputs[0], b.execute_sync([x]).outputs[0]
            assert np.allclose(ya, yb, atol=1e-4), "the two layouts disagree"
            ta, tb = [], []
            for _ in range(runs):
                for prep, out in ((a, ta), (b, tb)):
                    t = time.perf_counter()
                    prep.execute_sync([x])
                    out.append(time.perf_counter() - t)
            ma, mb = statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
            print(f"6 convs 3x3 + max pool, [1, {c}, {hw}, {hw}]:")
            print(f"  {'NCHW flag on every op':52} {ma:8.2f} ms")
            print(f"  {'NHWC inside, one transpose in and out (emitted)':52} {mb:8.2f} ms")
            print(f"  {'ratio NHWC-with-transposes / NCHW flag':52} {mb / ma:8.2f}x")
    finally:
        dev.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--models", default=None)
    args = parser.parse_args()
    part1(args.models, 3 if args.quick else 5)
    part2(7 if args.quick else 21)


if __name__ == "__main__":
    main()
