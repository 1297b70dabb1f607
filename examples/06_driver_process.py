"""A driver in its own process: a pipeline survives its service being killed.

``nnrt.ProcessDevice`` runs the CPU device in a child process (the service, as an NNAPI HAL
driver runs in its own). A small CNN is prepared on it with a compilation cache and 30 frames
go through a burst, 4 in flight; after frame 12 the service is killed with SIGKILL. The frames
in flight fail with DEAD_OBJECT (a ``driver.service_died`` warning is logged), the device
reports itself dead, the app calls ``await device.restart()`` (a new service; the model is
re-prepared from the cache) and sends the lost frames again. Every output is compared with
the same model run in this process.

Run: python examples/06_driver_process.py
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time

import numpy as np

import nnrt
from nnrt import zoo

FRAMES, KILL_AFTER, IN_FLIGHT = 30, 12, 4


async def main() -> None:
    model = zoo.small_cnn()
    frames = [zoo.example_inputs(model, seed=k)[0] for k in range(FRAMES)]
    reference = nnrt.CpuDevice(name="in-process")
    local = await reference.prepare_model(model)
    with tempfile.TemporaryDirectory() as cache, nnrt.ProcessDevice() as device:
        prepared = await device.prepare_model(model, cache_dir=cache, token=b"06_driver_process".ljust(32, b"."))
        first_pid = device.pid
        print(f"service pid {first_pid} (this process {os.getpid()})")
        results: dict[int, np.ndarray] = {}
        failed: list[int] = []
        async with prepared.burst() as burst:
            pending = list(range(FRAMES))
            while pending:
                batch, pending = pending[:IN_FLIGHT], pending[IN_FLIGHT:]
                if batch[0] >= KILL_AFTER and device.pid == first_pid:
                    print(f"frame {batch[0]}: killing the service (kill -9 {device.pid})")
                    os.kill(device.pid, signal.SIGKILL)  # type: ignore[arg-type]
                outs = await asyncio.gather(*(burst.execute([frames[k]]) for k in batch), return_exceptions=True)
                lost = []
                for k, out in zip(batch, outs):
                    if isinstance(out, nnrt.NnrtError):
                        print(f"frame {k}: {out.status.name}")
                        failed.append(k)
                        lost.append(k)
                    elif isinstance(out, BaseException):
                        raise out
                    else:
                        results[k] = out.outputs[0]
                if lost:
                    print(f"device dead: {device.dead}")
                    t = time.perf_counter()
                    await device.restart()
                    print(f"restarted: new service pid {device.pid}, model re-prepared from the cache "
                          f"in {time.perf_counter() - t:.1f} s")
                    pending = lost + pending
        same = True
        for k in range(FRAMES):
            same = same and np.array_equal(results[k], (await local.execute([frames[k]])).outputs[0])
        print(f"frames done {len(results)}/{FRAMES}, failed with DEAD_OBJECT then resent {len(failed)}, "
              f"outputs identical to in-process: {same}")
    reference.close()


if __name__ == "__main__":
    asyncio.run(main())
