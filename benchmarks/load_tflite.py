"""TFLite import: load time and peak memory of ``nnrt.load``, and real models against LiteRT.

Part 1 builds ~10 MB ``.tflite`` files (four FULLY_CONNECTED layers; float32, then int8) and measures
``nnrt.load`` (best of 5) against reading the file alone and against constructing LiteRT's
interpreter, both measured in the same run; then the peak Python heap during ``load`` in a
fresh child process (tracemalloc, numpy allocations included) as a multiple of the file size.
Targets: under 0.5 s, under 2x the file.

Part 2 runs every ``.tflite`` under ``--models`` (default ``/work/models/tflite``, else the
vendored ``tests/data/models``) through ``nnrt.load`` + ``execute_sync`` and through LiteRT's
interpreter (default CPU path, one thread) on the same seeded inputs, and prints a table: ops,
load ms, error (float: max abs error and the share of the atol 1e-4 + rtol 1e-3 tolerance
used, <= 1 is within, next to the same share between LiteRT's default CPU path and its
reference kernels, which shows the float32 rounding spread of the model itself; quantized: max
difference in quantized units, target <= 3), nnrt ms, LiteRT ms and the
ratio. Streaming models (state inputs/outputs) run 8 steps, nnrt carrying its state outputs
to its state inputs while LiteRT keeps its variables inside; their error also covers the state
nnrt returns against the values LiteRT assigned to its variables (read back with
``experimental_preserve_all_tensors``), since a wake-word score on noise is mostly 0.

Needs the ``bench`` extra (ai-edge-litert, flatbuffers). ``--quick``: fewer repetitions.
Run: ``python benchmarks/load_tflite.py [--quick] [--models DIR]``.
"""

from __future__ import annotations

import argparse
import glob
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
from nnrt.importers import state_variables

ROOT = Path(__file__).resolve().parent.parent
#: Input shapes for models whose inputs have dynamic dimensions (by file name stem).
SHAPES = {"openwakeword_melspectrogram": [1, 1760], "openwakeword_embedding_model": [1, 76, 32, 1]}



def synthetic_model(path: str, mb: float = 10.0, int8: bool = False) -> None:
    """An MLP of four FULLY_CONNECTED layers whose weights total about ``mb`` MB: float32, or
    int8 throughout (int8 activations and weights, int32 biases)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as S

    n = int((mb * 2**20 / 4 / (1 if int8 else 4)) ** 0.5)
    rng = np.random.default_rng(0)
    m = S.ModelT()
    m.version, m.buffers, m.operatorCodes = 3, [S.BufferT()], [S.OperatorCodeT()]
    m.operatorCodes[0].builtinCode = m.operatorCodes[0].deprecatedBuiltinCode = S.BuiltinOperator.FULLY_CONNECTED
    g = S.SubGraphT()
    g.tensors, g.operators = [], []

    def tensor(shape: list[int], data: np.ndarray | None = None, dtype: type = np.float32, scale: float = 0.0) -> int:
        t = S.TensorT()
        types = {np.float32: S.TensorType.FLOAT32, np.int8: S.TensorType.INT8, np.int32: S.TensorType.INT32}
        t.shape, t.type, t.name, t.buffer = shape, types[dtype], f"t{len(g.tensors)}", 0
        if scale:
            t.quantization = S.QuantizationParametersT()
            t.quantization.scale, t.quantization.zeroPoint = [scale], [0]
        if data is not None:
            b = S.BufferT()
            b.data = np.frombuffer(data.astype(dtype).tobytes(), np.uint8)
            m.buffers.append(b)
            t.buffer = len(m.buffers) - 1
        g.tensors.append(t)
        return len(g.tensors) - 1

    act = (np.int8, 0.05) if int8 else (np.float32, 0.0)
    x = first = tensor([1, n], None, *act)
    for _ in range(4):
        if int8:
            w = tensor([n, n], rng.integers(-127, 128, (n, n)), np.int8, 0.01)
            b = tensor([n], np.zeros(n), np.int32, 0.0005)
        else:
            w = tensor([n, n], rng.standard_normal((n, n)) / np.sqrt(n))
            b = tensor([n], np.zeros(n))
        y = tensor([1, n], None, *act)
        op = S.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = 0, [x, w, b], [y]
        op.builtinOptionsType, op.builtinOptions = S.BuiltinOptions.FullyConnectedOptions, S.FullyConnectedOptionsT()
        g.operators.append(op)
        x = y
    g.inputs, g.outputs = [first], [x]
    m.subgraphs = [g]
    builder = flatbuffers.Builder(1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    Path(path).write_bytes(bytes(builder.Output()))


_PEAK_CHILD = """
import sys, tracemalloc
import nnrt, nnrt.importers._tflite  # imports outside the measured window
tracemalloc.start()
model = nnrt.load(sys.argv[1])
print(tracemalloc.get_traced_memory()[1])
"""


def peak_bytes(path: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PEAK_CHILD, path], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return int(out.stdout.strip().splitlines()[-1])


def load_figures(path: str, label: str, repeat: int) -> None:
    from ai_edge_litert.interpreter import Interpreter

    size = os.path.getsize(path)
    nnrt.load(path)  # warm: imports and the file in the page cache
    t_load = best(lambda: nnrt.load(path), repeat)
    t_read = best(lambda: Path(path).read_bytes(), repeat)
    t_litert = best(lambda: Interpreter(model_path=path, num_threads=1).allocate_tensors(), repeat)
    peak = peak_bytes(path)
    print(f"{label}: {size / 2**20:.2f} MB")
    print(f"  nnrt.load                      {t_load * 1e3:8.1f} ms  (target < 500 ms: {'met' if t_load < 0.5 else 'NOT met'})")
    print(f"  read the file alone            {t_read * 1e3:8.1f} ms  load/read {t_load / t_read:6.1f}x")
    print(f"  LiteRT Interpreter + allocate  {t_litert * 1e3:8.1f} ms  load/LiteRT {t_load / t_litert:6.2f}x")
    print(f"  peak heap during load          {peak / 2**20:8.2f} MB = {peak / size:.2f}x the file "
          f"(target < 2x: {'met' if peak < 2 * size else 'NOT met'})")


def _inputs(details: list[dict[str, object]], rng: np.random.Generator, shape_override: list[int] | None
            ) -> list[np.ndarray]:
    feeds = []
    for d in details:
        sig = [int(s) for s in d["shape_signature"]]  # type: ignore[attr-defined]
        shape = shape_override if shape_override is not None else [s if s > 0 else 1 for s in sig]
        dtype = np.dtype(d["dtype"])  # type: ignore[call-overload]
        if dtype.kind == "f":
            feeds.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind == "b":
            feeds.append(rng.random(shape) > 0.5)
        else:
            info = np.iinfo(dtype)
            feeds.append(rng.integers(info.min, int(info.max) + 1, shape).astype(dtype))
    return feeds


def compare_model(path: str, device: nnrt.CpuDevice, repeat: int) -> tuple[str, ...]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    stem = Path(path).stem
    it = Interpreter(model_path=path, num_threads=1)
    details = it.get_input_details()
    override = SHAPES.get(stem)
    shapes = {d["name"]: override for d in details} if override else None
    t = time.perf_counter()
    try:
        model = nnrt.load(path, input_shapes=shapes)
    except nnrt.NnrtError as err:
        first = str(err).splitlines()[1].strip(" -") if "\n" in str(err) else str(err)
        return stem, "-", "-", f"rejected: {first[:70]}", "-", "-", "-"
    load_ms = (time.perf_counter() - t) * 1e3
    n_ops = len(it._get_ops_details())  # LiteRT's op list, for the table
    rng = np.random.default_rng(0)
    feeds = _inputs(details, rng, override)
    for d, x in zip(details, feeds):
        if list(d["shape"]) != list(x.shape):
            it.resize_tensor_input(d["index"], list(x.shape))
    it.allocate_tensors()
    prepared = device.prepare_model_sync(model)
    variables = state_variables(model)
    state = [v.initial for v in variables]
    n_out = len(model.output_indexes) - len(variables)
    ref = Interpreter(model_path=path, num_threads=1, experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                      experimental_preserve_all_tensors=True)
    for d, x in zip(details, feeds):
        if list(d["shape"]) != list(x.shape):
            ref.resize_tensor_input(d["index"], list(x.shape))
    ref.allocate_tensors()
    worst_abs, worst_units, worst_tol, spread = 0.0, 0, 0.0, 0.0
    for _step in range(8 if variables else 1):
        want, want_ref = _invoke(it, details, feeds), _invoke(ref, details, feeds)
        outs = prepared.execute_sync([*feeds, *state]).outputs
        state = list(outs[n_out:])
        # the new state nnrt returns against the values LiteRT assigned to its variables
        for g, w in zip(state, _assigned_values(ref, model)):
            worst_units = max(worst_units, int(np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0)))
        for g, w, r in zip(outs[:n_out], want, want_ref):
            g = np.asarray(g).reshape(w.shape)
            if w.dtype.kind == "f":
                err = np.abs(g.astype(np.float64) - w)
                worst_abs = max(worst_abs, float(err.max(initial=0)))
                worst_tol = max(worst_tol, _tolerance_used(g, w))
                spread = max(spread, _tolerance_used(r, w))
            else:
                worst_units = max(worst_units, int(np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0)))
        feeds = _inputs(details, rng, override)
    quantized = any(np.dtype(d["dtype"]).kind != "f" for d in it.get_output_details())
    # float: the share of the tolerance used (<= 1 is within atol 1e-4 + rtol 1e-3), and the same
    # figure between LiteRT's own two CPU paths (default vs reference kernels) for scale
    error = f"{worst_units} units" + (" ok" if worst_units <= 3 else " NOT ok") if quantized else \
        f"{worst_abs:.1e} abs, {worst_tol:.2f} tol (LiteRT paths {spread:.2f})"
    args = [*feeds, *state]
    nnrt_s = statistics.median(_time_each(lambda: prepared.execute_sync(args), repeat))

    def invoke() -> None:
        for d, x in zip(details, feeds):
            it.set_tensor(d["index"], x)
        it.invoke()

    ref_s = statistics.median(_time_each(invoke, repeat))
    kind = f"{len(variables)} state" if variables else ""
    return (stem, f"{n_ops} {kind}".strip(), f"{load_ms:.1f}", error, f"{nnrt_s * 1e3:.2f}", f"{ref_s * 1e3:.3f}",
            f"{nnrt_s / ref_s:.1f}x")


def _invoke(it: object, details: list[dict[str, object]], feeds: list[np.ndarray]) -> list[np.ndarray]:
    for d, x in zip(details, feeds):
        it.set_tensor(d["index"], x)  # type: ignore[attr-defined]
    it.invoke()  # type: ignore[attr-defined]
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]  # type: ignore[attr-defined]


def _assigned_values(it: object, model: nnrt.Model) -> list[np.ndarray]:
    """For each state output of ``model``, the tensor LiteRT last assigned to that variable
    (found by name: a state output is a copy of the operand named after the assigned tensor)."""
    by_name = {d["name"]: d["index"] for d in it.get_tensor_details()}  # type: ignore[attr-defined]
    values = []
    for var in state_variables(model):
        out = model.output_indexes[var.output]
        writer = next(op for op in model.operations if out in op.outputs)
        source = model.operands[writer.inputs[0]].name
        values.append(np.array(it.get_tensor(by_name[source])))  # type: ignore[attr-defined]
    return values


def _tolerance_used(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / (1e-4 + 1e-3 |want|): at most 1 when every element is within tolerance."""
    err = np.abs(got.astype(np.float64) - want) / (1e-4 + 1e-3 * np.abs(want.astype(np.float64)))
    return float(err.max(initial=0.0))


def _time_each(fn: object, n: int) -> list[float]:
    fn()  # type: ignore[operator]
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--models", default=None, help="folder of .tflite files")
    args = parser.parse_args()
    repeat = 3 if args.quick else 10
    print("== nnrt.load of a TFLite file: time and peak memory ==")
    with tempfile.TemporaryDirectory() as tmp:
        for int8 in (False, True):
            path = os.path.join(tmp, f"mlp_10mb_{'int8' if int8 else 'float32'}.tflite")
            synthetic_model(path, int8=int8)
            load_figures(path, f"synthetic {'int8' if int8 else 'float32'} MLP (4 x FULLY_CONNECTED)", 5)
    folder = args.models or ("/work/models/tflite" if os.path.isdir("/work/models/tflite")
                             else str(ROOT / "tests" / "data" / "models"))
    paths = sorted(glob.glob(os.path.join(folder, "*.tflite")))
    if paths:
        biggest = max(paths, key=os.path.getsize)
        load_figures(biggest, f"largest real model ({Path(biggest).name})", 5)
    print(f"\n== real models in {folder} against LiteRT (one thread) ==")
    header = ("model", "ops", "load ms", "max error", "nnrt ms", "LiteRT ms", "ratio")
    rows = [header]
    device = nnrt.CpuDevice()
    try:
        for p in paths:
            rows.append(compare_model(p, device, repeat))
    finally:
        device.close()
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
