"""The float32 products of issue 14's CNNs: numpy's matmul (OpenBLAS), nnrt's MKL product
(``nnrt/ops/_gemm.py``, the compiled wrapper the kernels call) and ONNX Runtime's MatMul (one
thread, including its ``run`` overhead), in one run.

Shapes: the 1x1 and im2col products that carry the real models' convolutions ([pixels, Cin] x
[Cin, Cout]), a first layer's im2col (K = 27), a 3x3 im2col over 64 channels, Winograd's 16
batched products, and the small products of FULLY_CONNECTED and an LSTM step (where a call's
overhead counts). Each shape is timed in interleaved rounds (numpy, MKL, ORT, numpy, ...) and the
figures are medians of CPU time per call (``time.thread_time``: other processes' load does not
inflate it). Compare the ratios, not the times: the machine is shared.

Run: python benchmarks/gemm.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from nnrt.ops import _gemm, _jit

try:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # pragma: no cover - optional
    ort = None

#: (label, batch, M, K, N): batch 0 is one 2-D product, else a stack (Winograd's 16).
SHAPES = [
    ("1x1 160x160 16->32", 0, 25600, 16, 32),
    ("1x1 160x160 32->64", 0, 25600, 32, 64),
    ("1x1 80x80 64->128", 0, 6400, 64, 128),
    ("1x1 80x80 128->128", 0, 6400, 128, 128),
    ("1x1 40x40 256->256", 0, 1600, 256, 256),
    ("1x1 20x20 512->512", 0, 400, 512, 512),
    ("first layer im2col 3x3x3->32", 0, 25600, 27, 32),
    ("im2col 3x3 64->64 on 80x80", 0, 6400, 576, 64),
    ("im2col 3x3 128->128 on 40x40", 0, 1600, 1152, 128),
    ("winograd 16 x [676,96]x[96,96]", 16, 676, 96, 96),
    ("FC 1x1280 -> 1000", 0, 1, 1280, 1000),
    ("FC 1x784 -> 256", 0, 1, 784, 256),
    ("LSTM step 1x128 -> 512", 0, 1, 128, 512),
    ("FC 32x784 -> 256", 0, 32, 784, 256),
]


def _ort_matmul(batch: int, m: int, k: int, w: np.ndarray) -> Callable[[np.ndarray], object] | None:
    if ort is None:
        return None
    shape = [batch, m, k] if batch else [m, k]
    out = [batch, m, w.shape[-1]] if batch else [m, w.shape[-1]]
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"x": x})


def _contenders(x: np.ndarray, w: np.ndarray, out_np: np.ndarray, out_mkl: np.ndarray, mkl: _gemm.Product,
                ort_run: Callable[[np.ndarray], object] | None) -> dict[str, Callable[[], object]]:
    fns: dict[str, Callable[[], object]] = {
        "numpy": lambda: np.matmul(x, w, out=out_np),
        "mkl": lambda: mkl(x, w, out_mkl),
    }
    if ort_run is not None:
        fns["ort"] = lambda: ort_run(x)
    return fns


def _time(fn: Callable[[], object], calls: int) -> float:
    t = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - t) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    args = ap.parse_args()
    rounds = 5 if args.quick else 15
    with _jit.forced(True), _gemm.forced("mkl"):
        backend = _gemm.describe()
        mkl_2d, mkl_batched = _gemm.product(), _gemm.batched_product()
    print(f"MKL product: {backend}; numpy {np.__version__}; ONNX Runtime "
          f"{ort.__version__ if ort is not None else 'not installed'}; CPU us per call, medians of {rounds} rounds")
    print(f"{'product':34s} {'M x K x N':>18s} {'numpy':>9s} {'MKL':>9s} {'ORT':>9s} {'numpy/MKL':>10s} {'MKL/ORT':>8s}")
    rng = np.random.default_rng(0)
    for label, batch, m, k, n in SHAPES:
        lead = (batch,) if batch else ()
        x = rng.random((*lead, m, k), dtype=np.float32)
        w = rng.random((*lead, k, n), dtype=np.float32)
        out_np, out_mkl = np.empty((*lead, m, n), np.float32), np.empty((*lead, m, n), np.float32)
        mkl = mkl_batched if batch else mkl_2d
        ort_run = _ort_matmul(batch, m, k, w)
        calls = max(3, int(3e8 / (2 * max(batch, 1) * m * k * n + 2e5)))
        fns = _contenders(x, w, out_np, out_mkl, mkl, ort_run)
        for fn in fns.values():
            fn()
        np.testing.assert_allclose(out_mkl, out_np, rtol=1e-4, atol=1e-4 * k)
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                times[name].append(_time(fn, calls))
        med = {name: statistics.median(v) for name, v in times.items()}
        ort_t = med.get("ort", float("nan"))
        shape = f"{batch}x" if batch else ""
        print(f"{label:34s} {shape + f'{m}x{k}x{n}':>18s} {med['numpy']:9.1f} {med['mkl']:9.1f} {ort_t:9.1f} "
              f"{med['numpy'] / med['mkl']:10.2f} {med['mkl'] / ort_t:8.2f}")


if __name__ == "__main__":
    main()
