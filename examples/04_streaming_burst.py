"""Stream camera frames through a burst, with a deadline per frame.

The frames live in a ring of 8 frame buffers inside one memory pool, registered in the burst
once; so do the class scores. A camera task writes each frame into the next ring entry and
submits it with its own deadline (arrival + 30 ms); a consumer awaits the results in order
and reports throughput, latency percentiles and deadline misses. A ring entry is reused only
once the frame in it has been answered, and the burst's ``max_in_flight`` bounds the queue,
so a camera that gets ahead waits (backpressure): no frame is dropped or overwritten. This
CNN is too heavy to run inline on the event loop, so its frames go through the burst's
server task (and the device's worker); a cheap model's frames would run at once, before
``submit`` returns, whenever nothing is queued (the "ran at once" count).

Run: python examples/04_streaming_burst.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

import numpy as np

import nnrt
from nnrt import zoo

FRAMES = 300
RING = 8
FRAME_INTERVAL_S = 0.002
DEADLINE_S = 0.030


async def main() -> None:
    device = nnrt.get_devices()[0]
    prepared = await device.prepare_model(zoo.small_cnn(), priority=nnrt.Priority.HIGH)
    frames = np.zeros((RING, 1, 32, 32, 3), np.float32)
    scores = np.zeros((RING, 1, 10), np.float32)
    rng = np.random.default_rng(0)
    latencies: list[float] = []
    missed = 0

    async with prepared.burst(max_in_flight=RING) as burst:
        frame_slot = burst.register_memory(nnrt.Memory(frames))
        score_slot = burst.register_memory(nnrt.Memory(scores))
        # One Location per ring entry, made once: the server resolves and checks each once.
        inputs = [burst.location(frame_slot, k * frames[0].nbytes, frames[0].nbytes, frames[0].shape) for k in range(RING)]
        outputs = [burst.location(score_slot, k * scores[0].nbytes, scores[0].nbytes, scores[0].shape) for k in range(RING)]
        in_flight: asyncio.Queue[tuple[float, asyncio.Future[nnrt.ExecutionResult]] | None] = asyncio.Queue()

        async def camera() -> None:
            start = time.perf_counter()
            ring: list[asyncio.Future[nnrt.ExecutionResult] | None] = [None] * RING
            for n in range(FRAMES):
                await asyncio.sleep(max(0.0, start + n * FRAME_INTERVAL_S - time.perf_counter()))
                k = n % RING
                previous = ring[k]
                if previous is not None and not previous.done():
                    await asyncio.wait([previous])  # entry k still holds a frame in flight
                frames[k] = rng.random((1, 32, 32, 3), np.float32)  # the frame "arrives"
                arrival = time.perf_counter()
                future = await burst.submit([inputs[k]], [outputs[k]], deadline=nnrt.deadline_after(DEADLINE_S))
                ring[k] = future
                await in_flight.put((arrival, future))
            await in_flight.put(None)

        async def consumer() -> None:
            nonlocal missed
            while (item := await in_flight.get()) is not None:
                arrival, future = item
                try:
                    result = await future
                except nnrt.MissedDeadlineError:
                    missed += 1
                    continue
                latencies.append((time.perf_counter() - arrival) * 1e3)
                assert result.outputs[0].shape == (1, 10)

        t0 = time.perf_counter()
        await asyncio.gather(camera(), consumer())
        elapsed = time.perf_counter() - t0
        stats = burst.statistics()

    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    print(f"frames: {FRAMES} through one burst (ring of {RING}), one every {FRAME_INTERVAL_S * 1e3:.1f} ms")
    print(f"throughput: {FRAMES / elapsed:.0f} frames/s")
    if latencies:  # (a machine busy with other work can make every frame miss its deadline)
        print(f"latency ms: median {statistics.median(latencies):.2f}  p90 {p(0.9):.2f}  p99 {p(0.99):.2f}  "
              f"max {latencies[-1]:.2f}")
    print(f"deadline ({DEADLINE_S * 1e3:.0f} ms) met: {len(latencies)}, missed: {missed}")
    print(f"burst: completed {stats.completed}, failed {stats.failed}, ran at once {stats.inline}, "
          f"max queue depth {stats.max_queue_depth}, server polling hits {stats.poll_hits}, parked {stats.blocking_waits}")


if __name__ == "__main__":
    asyncio.run(main())
