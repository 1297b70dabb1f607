"""A three-stage pipeline (pre-process, model, post-process) over a stream of frames,
chained only by fences, with a deadline per frame.

A camera task signals an app fence when each frame "arrives"; the three stages of every frame
are queued at once with ``execute_fenced``, each waiting for the previous stage's fence, and
the app awaits only the last fence. Run: python examples/02_fenced_pipeline.py
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt import zoo

FRAMES = 20
FRAME_INTERVAL_S = 0.004
DEADLINE_S = 0.030


def preprocess_model() -> nnrt.Model:
    """(pixels - 127.5) / 127.5 on a 1x32x32x3 frame."""
    m = nnrt.Model(name="preprocess")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 32, 32, 3])
    offset = m.add_operand(T.TENSOR_FLOAT32, [1])
    scale = m.add_operand(T.TENSOR_FLOAT32, [1])
    act = m.add_operand(T.INT32)
    centred = m.add_operand(T.TENSOR_FLOAT32, [1, 32, 32, 3])
    y = m.add_operand(T.TENSOR_FLOAT32, [1, 32, 32, 3])
    m.set_operand_value(offset, np.array([-127.5], np.float32))
    m.set_operand_value(scale, np.array([1 / 127.5], np.float32))
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [x, offset, act], [centred])
    m.add_operation(Op.MUL, [centred, scale, act], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def postprocess_model() -> nnrt.Model:
    """Softmax over the 10 class logits."""
    m = nnrt.Model(name="postprocess")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 10])
    beta = m.add_operand(T.FLOAT32)
    y = m.add_operand(T.TENSOR_FLOAT32, [1, 10])
    m.set_operand_value(beta, 1.0)
    m.add_operation(Op.SOFTMAX, [x, beta], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


async def main() -> None:
    device = nnrt.get_devices()[0]
    pre, cnn, post = await asyncio.gather(
        device.prepare_model(preprocess_model()),
        device.prepare_model(zoo.small_cnn()),
        device.prepare_model(postprocess_model()),
    )
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (1, 32, 32, 3)).astype(np.float32) for _ in range(FRAMES)]
    arrivals = [nnrt.SyncFence() for _ in range(FRAMES)]
    arrived_at: list[float] = [0.0] * FRAMES

    async def camera() -> None:
        for k, fence in enumerate(arrivals):
            await asyncio.sleep(FRAME_INTERVAL_S)
            arrived_at[k] = time.perf_counter()
            fence.signal()

    camera_task = asyncio.create_task(camera())
    finals = []
    for k in range(FRAMES):
        deadline = nnrt.deadline_after(DEADLINE_S + (k + 1) * FRAME_INTERVAL_S)
        normalized = np.empty((1, 32, 32, 3), np.float32)
        logits = np.empty((1, 10), np.float32)
        probs = np.empty((1, 10), np.float32)
        f1, _ = await pre.execute_fenced([frames[k]], [normalized], wait_for=[arrivals[k]], deadline=deadline)
        f2, _ = await cnn.execute_fenced([normalized], [logits], wait_for=[f1], deadline=deadline)
        f3, cb = await post.execute_fenced([logits], [probs], wait_for=[f2], deadline=deadline, measure_timing=True)
        finals.append((f3, cb, probs))

    async def watch(k: int, fence: nnrt.SyncFence) -> float:
        """Milliseconds from the frame's arrival to its last fence signaling."""
        try:
            await fence
        except nnrt.NnrtError:
            return float("nan")
        return (time.perf_counter() - arrived_at[k]) * 1e3

    latencies = await asyncio.gather(*(watch(k, f3) for k, (f3, _, _) in enumerate(finals)))
    print(f"{'frame':>5} {'status':>28} {'latency ms':>11} {'class':>6}")
    for k, ((_, callback, probs), latency) in enumerate(zip(finals, latencies)):
        info = callback.get_execution_info()
        label = int(probs.argmax()) if info.status is nnrt.ErrorStatus.NONE else -1
        print(f"{k:5} {info.status.name:>28} {latency:11.3f} {label:6}")
    await camera_task


if __name__ == "__main__":
    asyncio.run(main())
