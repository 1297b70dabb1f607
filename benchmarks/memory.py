"""Memory pools, memory domains and compilation caching, against baselines measured in the same run.

(a) Compilation cache. A model with about 50 MB of CONV_2D weights (five 3x3 512->512 layers on
    a 1x16x16x512 input): cold preparation (compile + calibration, no cache), preparation that
    writes the cache, and ``prepare_model_from_cache`` (median of several loads). Target: from
    cache <= 0.2x cold. The cache files are in the page cache when loaded (a warm start).
(b) Execution with inputs and outputs in a shared-memory pool or a device buffer, against the
    same execution with plain numpy arrays: zero copy checked with ``np.shares_memory``;
    target: latency <= 1.0x. Done on an ADD of two [1, 256, 256, 32] float32 tensors (8 MB
    each), and on the tiny one_add model to show the fixed per-call cost of resolving pool
    arguments. Results written into a pool are compared with plain output buffers (both copy
    the kernel's result once into the caller's memory); a device-buffer output adopts the
    kernel's array (no copy at all).

Run: python benchmarks/memory.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from _common import bench

import nnrt
from nnrt import BufferDesc, BufferRole, FuseCode, Memory, Model, PaddingCode, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op


def conv_stack(layers: int = 5, channels: int = 512, size: int = 16) -> Model:
    rng = np.random.default_rng(0)
    m = Model(name="conv_stack")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, size, size, channels])
    first = x
    for _ in range(layers):
        w = m.add_operand(T.TENSOR_FLOAT32, [channels, 3, 3, channels])
        b = m.add_operand(T.TENSOR_FLOAT32, [channels])
        m.set_operand_value(w, (rng.standard_normal((channels, 3, 3, channels)) * 0.02).astype(np.float32))
        m.set_operand_value(b, np.zeros(channels, np.float32))
        params = []
        for v in (PaddingCode.SAME, 1, 1, FuseCode.RELU):  # padding, stride_w, stride_h, fused activation
            p = m.add_operand(T.INT32)
            m.set_operand_value(p, v)
            params.append(p)
        y = m.add_operand(T.TENSOR_FLOAT32, [1, size, size, channels])
        m.add_operation(Op.CONV_2D, [x, w, b, *params], [y])
        x = y
    m.identify_inputs_and_outputs([first], [x])
    m.finish()
    return m


def big_add(shape: tuple[int, ...] = (1, 256, 256, 32)) -> Model:
    m = Model(name="big_add")
    a = m.add_operand(T.TENSOR_FLOAT32, list(shape))
    b = m.add_operand(T.TENSOR_FLOAT32, list(shape))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    c = m.add_operand(T.TENSOR_FLOAT32, list(shape))
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a, b], [c])
    m.finish()
    return m


def file_sizes(directory: str) -> dict[str, int]:
    """Cache file sizes by kind ('1' model cache, '2' data cache)."""
    return {n[-1]: os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)}


def caching(loads: int) -> None:
    model = conv_stack()
    weights = sum(o.value.nbytes for o in model.operands if isinstance(o.value, np.ndarray))
    token = os.urandom(32)
    device = nnrt.CpuDevice(name="bench-cpu", tune_process=True)

    async def run() -> None:
        with tempfile.TemporaryDirectory() as cache_dir:
            t = time.perf_counter()
            cold = await device.prepare_model(model)
            t_cold = time.perf_counter() - t
            t = time.perf_counter()
            await device.prepare_model(model, cache_dir=cache_dir, token=token)
            t_write = time.perf_counter() - t
            sizes = file_sizes(cache_dir)
            times = []
            for _ in range(loads):
                t = time.perf_counter()
                warm = await device.prepare_model_from_cache(cache_dir, token)
                times.append(time.perf_counter() - t)
            t_load = statistics.median(times)
            x = zoo.example_inputs(model)
            same = np.array_equal((await cold.execute(x)).outputs[0], (await warm.execute(x)).outputs[0])
            print(f"(a) compilation cache, {len(model.operations)} CONV_2D layers, {weights / 1e6:.1f} MB of weights")
            print(f"    cold preparation (compile + calibrate)   {t_cold * 1e3:8.1f} ms   1.00x")
            print(f"    preparation writing the cache            {t_write * 1e3:8.1f} ms   {t_write / t_cold:.2f}x")
            print(f"    prepare_model_from_cache (median of {loads}) {t_load * 1e3:8.1f} ms   {t_load / t_cold:.3f}x"
                  f"   target <= 0.2x: {'met' if t_load <= 0.2 * t_cold else 'MISSED'}")
            print(f"    model cache {sizes.get('1', 0)} bytes, data cache {sizes.get('2', 0) / 1e6:.1f} MB;"
                  f" outputs identical to the cold preparation: {same}")

    asyncio.run(run())
    device.close()


def pools(number: int) -> None:
    device = nnrt.CpuDevice(name="bench-cpu", tune_process=True)
    print("(b) execution with arguments in a shared-memory pool or a device buffer (execute_sync, median per call)")
    for model, n in ((big_add(), max(3, number // 20)), (zoo.one_add(), number * 20)):
        pool_case(device, model, n)
    device.close()


def pool_case(device: nnrt.CpuDevice, model: Model, n: int) -> None:
    prepared = device.prepare_model_sync(model)
    shape = model.operands[model.input_indexes[0]].dimensions
    rng = np.random.default_rng(1)
    x, x2 = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    nb = x.nbytes
    with Memory.from_shared_memory(size=3 * nb) as shm:
        shm.buffer[: 2 * nb].view(np.float32)[:] = np.concatenate([x.ravel(), x2.ravel()])
        ins = [(shm, 0, nb), (shm, nb, nb)]
        out_loc = [(shm, 2 * nb, nb)]
        args, bufs = prepared._validate_request(ins, out_loc)
        assert bufs is not None
        zero_copy = all(np.shares_memory(a, shm.buffer) for a in args) and np.shares_memory(bufs[0], shm.buffer)
        result = prepared.execute_sync(ins, out_loc)
        written = np.shares_memory(result.outputs[0], shm.buffer) and np.array_equal(result.outputs[0], x + x2)
        out = np.empty_like(x)
        t_plain = bench(lambda: prepared.execute_sync([x, x2]), n)
        t_shm_in = bench(lambda: prepared.execute_sync(ins), n)
        t_plain_out = bench(lambda: prepared.execute_sync([x, x2], [out]), n)
        t_shm_io = bench(lambda: prepared.execute_sync(ins, out_loc), n)
        views = list(args)
        t_copy_in = bench(lambda: prepared.execute_sync([np.array(a) for a in views]), n)
        del args, bufs, result
        buf_a, tok_a = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
        buf_b, _ = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
        buf_a.copy_from(x)
        prepared.execute_sync([buf_a, x], [buf_b])
        d_args, _ = prepared._validate_request([buf_b, x], None)
        dev_zero_copy = np.shares_memory(d_args[0], buf_b._storage)
        del d_args
        y = prepared.execute_sync([x, x]).outputs[0]
        t_plain_chain = bench(lambda: prepared.execute_sync([y, x]), n)
        t_dev = bench(lambda: prepared.execute_sync([tok_a, x], [buf_b]), n)
        buf_a.free()
        buf_b.free()
    print(f"    {model.name} ({nb / 1e6:.3f} MB per tensor); zero copy: pool inputs and outputs {zero_copy and written},"
          f" device-buffer input {dev_zero_copy}")
    print(f"      plain arrays in, result allocated    {t_plain:10.1f} us   1.00x")
    print(f"      shared-memory inputs                 {t_shm_in:10.1f} us   {t_shm_in / t_plain:.2f}x")
    print(f"      (copying the inputs out of the pool  {t_copy_in:10.1f} us   {t_copy_in / t_plain:.2f}x)")
    print(f"      plain arrays in and out              {t_plain_out:10.1f} us   1.00x")
    print(f"      shared-memory inputs and outputs     {t_shm_io:10.1f} us   {t_shm_io / t_plain_out:.2f}x")
    print(f"      plain: previous result as input      {t_plain_chain:10.1f} us   1.00x")
    print(f"      device buffer in, device buffer out  {t_dev:10.1f} us   {t_dev / t_plain_chain:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    caching(loads=3 if args.quick else 5)
    pools(number=20 if args.quick else 100)


if __name__ == "__main__":
    main()
