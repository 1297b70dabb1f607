"""The float LSTM kernel on the real models' shapes, against ONNX Runtime and the per-gate formula.

Each case is one UNIDIRECTIONAL_SEQUENCE_LSTM (tanh, no clipping, constant weights: the form
the ONNX importer gives each direction of an ONNX LSTM) run three ways with the same weights,
in interleaved batches, timed in CPU time of this thread (the machine is shared; other
processes' load does not inflate it), medians:

* ``nnrt``: the model prepared on the CPU device, ``execute_sync`` (so the figure includes
  nnrt's per-call overhead, a few microseconds);
* ``per-gate``: the formulation nnrt's kernel had before (each gate's input and recurrent
  products on their own, every step's gates and states fresh arrays), in numpy, inline: the
  baseline the kernel is measured against;
* ``ORT``: the same LSTM as an ONNX graph, ``intra_op_num_threads=1``.

Outputs are compared first (atol 1e-4 + rtol 1e-3, as ``real_models.py``). Cases: ddddocr's
(32 steps, batch 1, 512 inputs, 512 units: one direction of its bidirectional LSTM), silero
VAD's (one step, 128 in, 128 units) and a batched one (16 steps, batch 8, 64 in, 128 units).

Then silero VAD's MIRROR_PAD ([1, 512] reflected by 64 at the end): nnrt's kernel (one gather
per padded axis) against ``np.pad(mode="reflect")``, what the kernel called before.

Run: python benchmarks/lstm.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NNRT_JIT_BACKGROUND", "0")  # compiled kernels at preparation (see _common.py)

import numpy as np

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op

try:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # pragma: no cover - optional
    ort = None

F = T.TENSOR_FLOAT32
CASES: dict[str, tuple[int, int, int, int]] = {
    "ddddocr T32 B1 I512 H512": (32, 1, 512, 512),
    "silero T1 B1 I128 H128": (1, 1, 128, 128),
    "batched T16 B8 I64 H128": (16, 8, 64, 128),
}


def nnrt_model(w: Sequence[np.ndarray], r: Sequence[np.ndarray], b: Sequence[np.ndarray], shape: tuple[int, ...]
               ) -> nnrt.Model:
    n_time, batch, _, units = shape
    m = nnrt.Model()

    def const(v: np.ndarray | float | None, t: T = F, dims: Sequence[int] | None = None) -> int:
        i = m.add_operand(t, list(np.shape(v)) if dims is None else list(dims))
        m.set_operand_value(i, v)
        return i

    x, h, c = m.add_operand(F, list(shape[:3])), m.add_operand(F, [batch, units]), m.add_operand(F, [batch, units])
    omitted = [const(None, F, [0]) for _ in range(5)]
    ins = [x, *map(const, w), *map(const, r), *omitted[:3], *map(const, b), *omitted[3:], h, c,
           const(4, T.INT32), const(0.0, T.FLOAT32), const(0.0, T.FLOAT32), const(True, T.BOOL)]
    y = m.add_operand(F, [n_time, batch, units])
    m.add_operation(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [y])
    m.identify_inputs_and_outputs([x, h, c], [y])
    m.finish()
    return m


def per_gate(w: Sequence[np.ndarray], r: Sequence[np.ndarray], b: Sequence[np.ndarray], x: np.ndarray,
             h: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The previous formulation: per-gate products, fresh arrays each step."""
    def sig(v: np.ndarray) -> np.ndarray:
        out: np.ndarray = 1.0 / (1.0 + np.exp(-v))
        return out

    pre = [x @ w[k].T + b[k] for k in range(4)]
    out = np.empty((x.shape[0], x.shape[1], h.shape[1]), np.float32)
    for t in range(x.shape[0]):
        i, f = sig(pre[0][t] + h @ r[0].T), sig(pre[1][t] + h @ r[1].T)
        g = np.tanh(pre[2][t] + h @ r[2].T)
        c = f * c + i * g
        h = sig(pre[3][t] + h @ r[3].T) * np.tanh(c)
        out[t] = h
    return out


def ort_session(w: Sequence[np.ndarray], r: Sequence[np.ndarray], b: Sequence[np.ndarray], shape: tuple[int, ...]
                ) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    if ort is None:
        return None
    n_time, batch, n_in, units = shape
    order = (0, 3, 1, 2)  # ONNX packs the gates i, o, f, c
    inits = [numpy_helper.from_array(np.concatenate([w[k] for k in order])[None], "W"),
             numpy_helper.from_array(np.concatenate([r[k] for k in order])[None], "R"),
             numpy_helper.from_array(np.concatenate([*(b[k] for k in order), np.zeros(4 * units, np.float32)])[None],
                                     "B")]
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "h", "c"], ["y"], hidden_size=units)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([node], "lstm", [vi("x", TensorProto.FLOAT, [n_time, batch, n_in]),
                                               vi("h", TensorProto.FLOAT, [1, batch, units]),
                                               vi("c", TensorProto.FLOAT, [1, batch, units])],
                              [vi("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def run(x: np.ndarray, h: np.ndarray, c: np.ndarray) -> np.ndarray:
        y: np.ndarray = sess.run(None, {"x": x, "h": h[None], "c": c[None]})[0]
        return y[:, 0]

    return run


def interleaved(fns: Sequence[Callable[[], object]], batches: int, per_batch: int) -> list[float]:
    """Median CPU seconds per call of each function, timed in alternating batches."""
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(batches):
        for k, fn in enumerate(fns):
            t0 = time.thread_time()
            for _ in range(per_batch):
                fn()
            times[k].append((time.thread_time() - t0) / per_batch)
    return [statistics.median(t) for t in times]


def run_case(name: str, shape: tuple[int, int, int, int], rng: np.random.Generator, quick: bool) -> None:
    n_time, batch, n_in, units = shape
    w = [(rng.standard_normal((units, n_in)) * 0.05).astype(np.float32) for _ in range(4)]
    r = [(rng.standard_normal((units, units)) * 0.05).astype(np.float32) for _ in range(4)]
    b = [(rng.standard_normal(units) * 0.1).astype(np.float32) for _ in range(4)]
    x = rng.standard_normal(shape[:3]).astype(np.float32)
    h, c = (rng.standard_normal((batch, units)) * 0.5).astype(np.float32), np.zeros((batch, units), np.float32)
    prepared = nnrt.CpuDevice().prepare_model_sync(nnrt_model(w, r, b, shape))
    fns: list[Callable[[], np.ndarray]] = [lambda: prepared.execute_sync([x, h, c]).outputs[0],
                                           lambda: per_gate(w, r, b, x, h, c)]
    run_ort = ort_session(w, r, b, shape)
    if run_ort is not None:
        fns.append(lambda: run_ort(x, h, c))
    want = fns[1]()
    for fn in fns[::2]:
        np.testing.assert_allclose(fn(), want, rtol=1e-3, atol=1e-4)
    per_batch = min(200, max(1, int(0.02 / (n_time * batch * units * units * 4e-9 + 2e-5))))
    ms = [s * 1e3 for s in interleaved(fns, 5 if quick else 15, per_batch)]
    ort_ms = f"{ms[2]:8.3f}" if len(ms) > 2 else "       -"
    vs_ort = f"{ms[0] / ms[2]:8.2f}x" if len(ms) > 2 else "        -"
    print(f"{name:26} {ms[0]:9.3f} {ms[1]:12.3f} {ort_ms} {ms[1] / ms[0]:13.2f}x {vs_ort}")


def mirror_pad_case(quick: bool) -> None:
    m = nnrt.Model()
    x = m.add_operand(F, [1, 512])
    pads, mode = m.add_operand(T.TENSOR_INT32, [2, 2]), m.add_operand(T.INT32)
    m.set_operand_value(pads, np.asarray([[0, 0], [0, 64]], np.int32))
    m.set_operand_value(mode, 0)
    y = m.add_operand(F, [1, 576])
    m.add_operation(Op.MIRROR_PAD, [x, pads, mode], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    prepared = nnrt.CpuDevice().prepare_model_sync(m)
    xv = np.random.default_rng(1).standard_normal((1, 512)).astype(np.float32)
    fns: list[Callable[[], np.ndarray]] = [lambda: prepared.execute_sync([xv]).outputs[0],
                                           lambda: np.pad(xv, [(0, 0), (0, 64)], mode="reflect")]
    np.testing.assert_array_equal(fns[0](), fns[1]())
    ms = [s * 1e3 for s in interleaved(fns, 5 if quick else 15, 200)]
    print(f"\nMIRROR_PAD [1,512] +64 reflect: nnrt execute_sync {ms[0]:.4f} ms, np.pad alone {ms[1]:.4f} ms "
          f"({ms[1] / ms[0]:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer batches")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'case':26} {'nnrt ms':>9} {'per-gate ms':>12} {'ORT ms':>8} {'per-gate/nnrt':>14} {'nnrt/ORT':>9}")
    for name, shape in CASES.items():
        run_case(name, shape, rng, args.quick)
    mirror_pad_case(args.quick)
    print(f"load average: {os.getloadavg()[0]:.2f} (CPU time of this thread; compare the ratios)")


if __name__ == "__main__":
    main()
