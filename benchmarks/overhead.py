"""Per-call and per-operation overhead of nnrt, against bare numpy and ONNX Runtime, in one run.

(a) one ADD on [1, 4] float32: ``await execute`` (asyncio and uvloop), ``execute_sync``, the bare
    numpy call, and ORT ``session.run`` (intra_op_num_threads=1) when onnxruntime is installed;
(b) a chain of 50 ADDs: nnrt's overhead per operation over the bare kernels;
(c) the MobileNet-style block (zoo.mobilenet_block) against the same block in ORT, and
    ``await execute`` on the loop thread in slices (the default on an idle device) against the
    worker thread (``loop_slice_ns=0``): the hand-off's cost, batches interleaved;
(d) peak memory of one block execution against the sum of its intermediate tensors plus
    inputs and outputs (tracemalloc, which numpy reports to).

Everything runs on one BLAS thread. Figures are medians of several timed batches; the machine
is shared, so compare the ratios (measured in the same run), not the absolute times.

Run: python benchmarks/overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import _common
import numpy as np
from _common import atimed, atimed_pair, bench, report

import nnrt
from nnrt import zoo
from nnrt.model import dims_product
from nnrt.types import OperandLifeTime

try:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # pragma: no cover - optional
    ort = None


def abench(make: Callable[[], Awaitable[object]], number: int, repeat: int = 7, loop: str = "asyncio") -> float:
    """``atimed`` in a fresh event loop (asyncio or uvloop)."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(atimed(make, number, repeat))
    return asyncio.run(atimed(make, number, repeat))


def ort_session(model: Any) -> Any:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def ort_add() -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", [x, y], [z])
    return ort_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def ort_block(model: nnrt.Model) -> Any:
    """An ORT session (one thread) of ``ort_block_model``."""
    return ort_session(ort_block_model(model))


def ort_block_model(model: nnrt.Model) -> Any:
    """The zoo's MobileNet-style block in ONNX (NCHW), with the very same weights."""
    ops = model.operands
    convs = [o for o in model.operations if o.type.name in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    fc = next(o for o in model.operations if o.type.name == "FULLY_CONNECTED")
    nodes, inits = [], []
    cur = "x"
    for k, op in enumerate(convs):
        w = np.asarray(ops[op.inputs[1]].value)
        b = np.asarray(ops[op.inputs[2]].value)
        if op.type.name == "DEPTHWISE_CONV_2D":  # [1, kh, kw, C] -> [C, 1, kh, kw]
            w_onnx, group = w.transpose(3, 0, 1, 2), w.shape[3]
        else:  # [O, kh, kw, I] -> [O, I, kh, kw]
            w_onnx, group = w.transpose(0, 3, 1, 2), 1
        stride = int(ops[op.inputs[4]].value)  # type: ignore[arg-type]
        inits += [numpy_helper.from_array(np.ascontiguousarray(w_onnx), f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes.append(helper.make_node("Conv", [cur, f"w{k}", f"b{k}"], [f"c{k}"], strides=[stride, stride],
                                      auto_pad="SAME_UPPER", group=group))
        inits += [numpy_helper.from_array(np.float32(0), f"lo{k}"), numpy_helper.from_array(np.float32(6), f"hi{k}")]
        nodes.append(helper.make_node("Clip", [f"c{k}", f"lo{k}", f"hi{k}"], [f"r{k}"]))
        cur = f"r{k}"
    nodes.append(helper.make_node("GlobalAveragePool", [cur], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inits += [numpy_helper.from_array(np.asarray(ops[fc.inputs[1]].value), "fw"),
              numpy_helper.from_array(np.asarray(ops[fc.inputs[2]].value), "fb")]
    nodes.append(helper.make_node("Gemm", ["flat", "fw", "fb"], ["y"], transB=1))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1000])
    graph = helper.make_graph(nodes, "block", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def line(name: str, value: float, unit: str = "us") -> None:
    report(name, value, unit, width=48)


def ratio(name: str, value: float, target: float | None = None) -> None:
    _common.ratio(name, value, target, width=48)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    n = lambda k: max(1, int(k * scale))  # noqa: E731

    device = nnrt.CpuDevice(tune_process=True)
    sys.stdout.write(f"nnrt overhead benchmark (numpy {np.__version__}, onnxruntime {ort.__version__ if ort else 'absent'})\n")

    # (a) one ADD
    sys.stdout.write("(a) one ADD [1,4] float32, per call\n")
    prepared = device.prepare_model_sync(zoo.one_add())
    x, y = np.ones((1, 4), np.float32), np.ones((1, 4), np.float32)
    t_numpy = bench(lambda: np.add(x, y), n(20000))
    t_sync = bench(lambda: prepared.execute_sync([x, y]), n(5000))
    t_async = abench(lambda: prepared.execute([x, y]), n(5000))
    t_uv = abench(lambda: prepared.execute([x, y]), n(5000), loop="uvloop")
    line("bare numpy np.add", t_numpy)
    line("execute_sync", t_sync)
    line("await execute (asyncio)", t_async)
    line("await execute (uvloop)", t_uv)
    if ort is not None:
        sess = ort_add()
        feeds = {"x": x, "y": y}
        t_ort = bench(lambda: sess.run(None, feeds), n(5000))
        line("ORT session.run (intra_op_num_threads=1)", t_ort)
        ratio("await execute (asyncio) / ORT run", t_async / t_ort, 1.0)
        ratio("await execute (uvloop) / ORT run", t_uv / t_ort, 1.0)
        ratio("execute_sync / ORT run", t_sync / t_ort, 0.5)

    # (b) chain of 50 ADDs
    sys.stdout.write("(b) chain of 50 ADDs on [1,16], overhead per operation\n")
    chain = device.prepare_model_sync(zoo.add_chain(50))
    c = np.asarray(chain.model.operands[1].value)
    x16 = np.ones((1, 16), np.float32)

    def bare_chain() -> np.ndarray:
        cur = x16
        for _ in range(50):
            cur = np.add(cur, c)
        return cur

    t_bare = bench(bare_chain, n(2000))
    t_chain = bench(lambda: chain.execute_sync([x16]), n(2000))
    t_chain_async = abench(lambda: chain.execute([x16]), n(2000))
    line("bare kernels (50 np.add)", t_bare)
    line("execute_sync", t_chain)
    line("await execute (asyncio)", t_chain_async)
    line("overhead per operation, execute_sync", (t_chain - t_bare) / 50)
    per_op = (t_chain_async - t_bare) / 50
    line("overhead per operation, await execute", per_op)
    sys.stdout.write(f"  {'target: <= 1 us per operation':48} {'met' if per_op <= 1.0 else 'NOT met'}\n")

    # (c) MobileNet-style block
    sys.stdout.write("(c) MobileNet-style block (1x224x224x3 -> 1000)\n")
    block_model = zoo.mobilenet_block()
    block = device.prepare_model_sync(block_model)
    img = zoo.example_inputs(block_model)[0]
    t_block_sync = bench(lambda: block.execute_sync([img]), n(30), repeat=5)
    on_worker = nnrt.CpuDevice(loop_slice_ns=0)
    block_worker = on_worker.prepare_model_sync(block_model)
    t_worker, t_block = asyncio.run(
        atimed_pair(lambda: block_worker.execute([img]), lambda: block.execute([img]), n(30), repeat=7)
    )
    on_worker.close()
    line("nnrt execute_sync", t_block_sync / 1e3, "ms")
    line("nnrt await execute (loop slices)", t_block / 1e3, "ms")
    line("nnrt await execute (worker thread, slices off)", t_worker / 1e3, "ms")
    ratio("await execute, loop slices / worker thread", t_block / t_worker)
    if ort is not None:
        sess = ort_block(block_model)
        img_nchw = np.ascontiguousarray(img.transpose(0, 3, 1, 2))
        ref = sess.run(None, {"x": img_nchw})[0]
        got = block.execute_sync([img]).outputs[0]
        err = float(np.abs(ref - got).max())
        t_ort_block = bench(lambda: sess.run(None, {"x": img_nchw}), n(30), repeat=5)
        line("ORT session.run (intra_op_num_threads=1)", t_ort_block / 1e3, "ms")
        line("max |nnrt - ORT| on the outputs", err, "")
        ratio("await execute / ORT run", t_block / t_ort_block, 1.5)  # issue 14: the MobileNet-style block <= 1.5x

    # (d) peak memory of one block execution
    sys.stdout.write("(d) peak memory of one block execution\n")
    ops = block_model.operands
    tensors = [o for o in ops if o.lifetime in (OperandLifeTime.TEMPORARY_VARIABLE, OperandLifeTime.SUBGRAPH_INPUT,
                                               OperandLifeTime.SUBGRAPH_OUTPUT)]
    total = sum(dims_product(o.dimensions) * o.type.dtype.itemsize for o in tensors)
    block.execute_sync([img])
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    block.execute_sync([img])
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    peak += img.nbytes  # the input was allocated before tracing began
    line("sum of intermediates + inputs + outputs", total / 2**20, "MiB")
    line("peak traced during one execution (+ input)", peak / 2**20, "MiB")
    ratio("peak / sum", peak / total, 1.0)
    device.close()


if __name__ == "__main__":
    main()
