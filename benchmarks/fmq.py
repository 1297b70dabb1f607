"""How a ring's consumer should wait (``nnrt.process._fmq``): a ping-pong of 16-byte packets
between this process and a child over one ``Channel`` (two shared-memory rings), with each
wake-up scheme, in one run, interleaved:

* ``eventfd, always``: the producer writes the consumer's eventfd after every packet;
* ``pipe, always``: the same with a pipe (one byte per packet);
* ``flag + eventfd``: the consumer sets its *sleeping* word before it blocks; the producer
  writes the eventfd only when it sees it set (nnrt's default);
* ``flag + eventfd, poll N us``: the same, each side polling its ring N us before sleeping.

Prints p50/p99 of the round trip and the CPU time per round trip of both processes (this
process's ``process_time`` and the child's, which it sends back in its last answer), which on a
loaded machine says more than the wall time. Run: python benchmarks/fmq.py [--quick]

Measured 02:13 UTC on the shared 2-core machine (load average 5.4: other engineers' jobs),
``--quick``: eventfd always p50 18 us / p99 1.5 ms, 14 us CPU per round trip on each side;
pipe always 45 us / 7.3 ms, 30 us; sleeping flag + eventfd 13.5 us / 65 us, 7.5 us (chosen);
flag + 50 us poll window p50 3.2 us (when both sides had a core) but p99 3.8 ms and 27 us CPU
(so the rings poll only while polling pays: ``nnrt.process._fmq.Poller``).
"""

from __future__ import annotations

import os
import statistics
import struct
import subprocess
import sys
import time

from _common import quick_flag

from nnrt.process._fmq import Channel, Doorbell, Ring

MODES = {  # name: (pipe doorbells, always ring, poll window in seconds)
    "eventfd, always": (False, True, 0.0),
    "pipe, always": (True, True, 0.0),
    "flag + eventfd": (False, False, 0.0),
    "flag + eventfd, poll 20 us": (False, False, 20e-6),
    "flag + eventfd, poll 50 us": (False, False, 50e-6),
}


def receive(ring: Ring, bell: Doorbell, window: float) -> bytes:
    while True:
        if ring.poll(window):
            pkt = ring.peek()
            assert pkt is not None
            data = bytes(pkt)
            pkt.release()
            ring.advance()
            return data
        if ring.set_sleeping(True):
            ring.set_sleeping(False)
            continue
        bell.wait(1.0)
        bell.clear()
        ring.set_sleeping(False)


def bells(fds: list[int], pipe: bool, always: bool) -> tuple[Doorbell, Doorbell]:
    """(request doorbell, result doorbell) from ``[mem, req_efd, res_efd, (4 pipe fds)]``."""
    if pipe:
        return Doorbell(fds[3], fds[4], always=always), Doorbell(fds[5], fds[6], always=always)
    return Doorbell(fds[1], fds[1], always=always), Doorbell(fds[2], fds[2], always=always)


def child(argv: list[str]) -> None:
    mode, capacity, n = argv[0], int(argv[1]), int(argv[2])
    fds = [int(a) for a in argv[3:]]
    pipe, always, window = MODES[mode]
    ch = Channel(fds[0], fds[1], fds[2], capacity)
    req_bell, res_bell = bells(fds, pipe, always)
    ch.requests.set_sleeping(True)
    cpu = time.process_time()
    for k in range(n):
        data = receive(ch.requests, req_bell, window)
        if k == n - 1:  # the last answer carries the child's CPU time for the loop
            data = struct.pack("<d", time.process_time() - cpu)
        while not ch.results.try_write([data], len(data)):
            time.sleep(0)
        res_bell.ring(ch.results)


def run(mode: str, n: int) -> tuple[list[float], float, float]:
    pipe, always, window = MODES[mode]
    capacity = 1 << 16
    ch = Channel.create(capacity)
    pipes = [*os.pipe(), *os.pipe()]
    for fd in pipes:
        os.set_blocking(fd, False)
    fds = [*ch.fds(), *pipes]
    req_bell, res_bell = bells(fds, pipe, always)
    ch.results.set_sleeping(True)
    proc = subprocess.Popen([sys.executable, __file__, "--child", mode, str(capacity), str(n), *map(str, fds)],
                            pass_fds=fds)
    lat = []
    packet = b"x" * 16
    cpu = time.process_time()
    for _ in range(n):
        t = time.perf_counter()
        assert ch.requests.try_write([packet], len(packet))
        req_bell.ring(ch.requests)
        answer = receive(ch.results, res_bell, window)
        lat.append((time.perf_counter() - t) * 1e6)
    cpu = time.process_time() - cpu
    (child_cpu,) = struct.unpack("<d", answer)
    proc.wait()
    ch.close()
    for fd in pipes:
        os.close(fd)
    return lat, cpu / n * 1e6, child_cpu / n * 1e6


def main() -> None:
    n = 2000 if quick_flag() else 10_000
    print(f"benchmarks/fmq.py: {n} ping-pongs per mode and round, load average {os.getloadavg()[0]:.2f}")
    results: dict[str, list[tuple[list[float], float, float]]] = {m: [] for m in MODES}
    for _ in range(2):
        for mode in MODES:
            results[mode].append(run(mode, n // 2))
    for mode, runs in results.items():
        lat = sorted(x for r in runs for x in r[0])
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
        app = statistics.mean(r[1] for r in runs)
        svc = statistics.mean(r[2] for r in runs)
        print(f"  {mode:30s} p50 {p50:8.1f} us  p99 {p99:8.1f} us  cpu/round trip: this {app:6.1f} us, child {svc:6.1f} us")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()
