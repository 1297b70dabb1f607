"""The fuzz targets: one function per parser of untrusted bytes, each taking ``bytes``.

A target returns normally when nnrt accepted the input or refused it with an ``NnrtError``
carrying an NNAPI status; anything else escapes, and the fuzzer reports it as a crash (with
the input that caused it). Targets:

* ``model_file``: ``Model.load`` of the bytes as a file; an accepted model is prepared and,
  when its inputs are small and fully specified, executed once on zeros.
* ``cache``: a compilation-cache entry. The input is ``u32 n`` + the model cache's body (``n``
  bytes) + the data cache. The harness signs the body with the entry's key, as a writer holding
  the key would: the HMAC check alone would otherwise refuse every mutation, and the fuzzer
  must reach the JSON, model and re-laid-array parsing behind it.
* ``burst_packet``: the bytes as little-endian int64 datums of a flat burst request packet,
  served by a burst server holding two registered pools.
* ``load``: ``nnrt.load`` (TFLite or ONNX by content) of the bytes as a file; an accepted model
  is prepared. It covers the importers as they grow.
* ``service_request``: the bytes as one request frame's body to a ``ProcessDevice``'s service
  loop (in this process, on a socket pair): every request is answered with an NNAPI status and
  the service serves on (``nnrt.process._wire.loads_request``, ``check_request``).
* ``ring_request``: the bytes as one packet on the service's request ring (the same harness,
  with rings): every packet is answered once, with a result packet that parses and carries an
  NNAPI status (or a socket reply when it does not fit the result ring), whether it took the
  known-form fast path (``nnrt.process._forms``) or the full parse (``nnrt.process._transport``).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import struct
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

import nnrt
from nnrt import ErrorStatus, zoo
from nnrt.process._fmq import Channel

__all__ = ["TARGETS", "UnexpectedError", "check_status"]

#: Statuses an NNAPI call may fail with.
NNAPI_STATUSES = frozenset(s for s in ErrorStatus if s is not ErrorStatus.NONE)


class UnexpectedError(AssertionError):
    """An outcome outside the contract (a wrong status, a bare exception turned into a packet)."""


#: How the interpreter reports an exception other than ``NnrtError`` escaping a kernel: a kernel
#: that let a bare Python/numpy exception out, which the suite counts as a crash.
_WRAPPED = re.compile(r" failed: [A-Za-z_.]*(Error|Exception|Warning)\b")


def check_status(err: nnrt.NnrtError) -> None:
    """The contract for a refusal: an NNAPI status, and no bare exception wrapped inside it."""
    if err.status not in NNAPI_STATUSES:
        raise UnexpectedError(f"NnrtError with status {err.status!r}")
    if err.status is ErrorStatus.GENERAL_FAILURE and _WRAPPED.search(err.message):
        raise UnexpectedError(f"a kernel let a bare exception out: {err.message}")


class _Env:
    """What the targets share in one process: a device, a scratch directory, a burst."""

    def __init__(self) -> None:
        self.device = nnrt.CpuDevice(name="nnrt-fuzz", calibrate=False)
        self.dir = tempfile.mkdtemp(prefix="nnrt-fuzz-")
        self.path = os.path.join(self.dir, "input")
        self.loop = asyncio.new_event_loop()
        self._burst: Any = None

    def write(self, data: bytes) -> str:
        with open(self.path, "wb") as f:
            f.write(data)
        return self.path

    def burst(self) -> Any:
        if self._burst is None:
            prepared = self.device.prepare_model_sync(zoo.one_add())
            self._burst = self.loop.run_until_complete(prepared.burst().configure())
            self._burst.register_memory(nnrt.Memory(np.zeros(64, np.float32)))
            self._burst.register_memory(nnrt.Memory(np.zeros(16, np.float32)))
            self._prepared = prepared
        return self._burst


_env: _Env | None = None


def env() -> _Env:
    global _env
    if _env is None:
        _env = _Env()
    return _env


def _try_model(model: nnrt.Model) -> None:
    """Prepare an accepted model and run it once on zeros when that is cheap."""
    prepared = env().device.prepare_model_sync(model)
    inputs = []
    for i in model.input_indexes:
        op = model.operands[i]
        if not op.fully_specified or op.byte_size > 1 << 16:
            return
        inputs.append(op.type.dtype.type(0).item() if op.type.is_scalar else np.zeros(op.dimensions, op.type.dtype))
    prepared.execute_sync(inputs, loop_timeout=0.01)


def _guard(fn: Callable[[bytes], None]) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        try:
            fn(data)
        except nnrt.NnrtError as err:
            check_status(err)

    target.__name__ = fn.__name__
    return target


@_guard
def model_file(data: bytes) -> None:
    _try_model(nnrt.Model.load(env().write(data)))


_CACHE_TOKEN = bytes(range(32))


@_guard
def cache(data: bytes) -> None:
    import hashlib
    import hmac

    from nnrt.cache import cache_key, file_names, load_from_cache
    from nnrt.types import ExecutionPreference, Priority

    if len(data) < 4:
        return
    (n,) = struct.unpack("<I", data[:4])
    body, blob = data[4 : 4 + n], data[4 + n :]
    dev = env().device
    key = cache_key(_CACHE_TOKEN, dev.name, dev.version, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM)
    model_name, data_name = file_names(key)
    where = env().dir
    with open(os.path.join(where, model_name), "wb") as f:
        f.write(body + hmac.new(key, body, hashlib.sha256).digest())
    with open(os.path.join(where, data_name), "wb") as f:
        f.write(blob)
    meta = {"device": dev.name, "version": dev.version, "preference": int(ExecutionPreference.FAST_SINGLE_ANSWER),
            "priority": int(Priority.MEDIUM)}
    load_from_cache(where, key, meta, dev.inline_limit_ns)


def cache_seed(model: nnrt.Model) -> bytes:
    """A corpus entry for ``cache``: the entry the device writes for ``model``, re-framed."""
    from nnrt.cache import cache_key, file_names
    from nnrt.types import ExecutionPreference, Priority

    dev = env().device
    where = tempfile.mkdtemp(prefix="nnrt-seed-")
    env().loop.run_until_complete(dev.prepare_model(model, cache_dir=where, token=_CACHE_TOKEN))
    key = cache_key(_CACHE_TOKEN, dev.name, dev.version, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM)
    model_name, data_name = file_names(key)
    with open(os.path.join(where, model_name), "rb") as f:
        body = f.read()[:-32]
    with open(os.path.join(where, data_name), "rb") as f:
        blob = f.read()
    return struct.pack("<I", len(body)) + body + blob


@_guard
def burst_packet(data: bytes) -> None:
    burst = env().burst()
    usable = len(data) - len(data) % 8
    datums = [int(v) for v in np.frombuffer(data[:usable], "<i8")]
    result = env().loop.run_until_complete(burst._server.serve(datums))
    if result.message.startswith("bad request packet:") and "MalformedPacketError" not in result.message:
        raise UnexpectedError(f"the server turned a bare exception into a packet: {result.message}")
    if result.status is not ErrorStatus.NONE and result.status not in NNAPI_STATUSES:
        raise UnexpectedError(f"result status {result.status!r}")


@_guard
def load(data: bytes) -> None:
    _try_model(nnrt.load(env().write(data)))


class _ServiceHarness:
    """A ``ProcessDevice``'s service loop (``nnrt.process._service._Service``) in this process,
    on a socket pair, serving the env's CPU device: one prepared ONE_ADD filed under
    ("default", 1) and a device buffer for its input 0 under ("default", 2), test hooks off."""

    def __init__(self) -> None:
        from nnrt.process._service import _Service

        self.peer, end = socket.socketpair()
        self.service = _Service(end, env().device)
        self.service.done = env().loop.create_future()
        prepared = env().device.prepare_model_sync(zoo.one_add())
        buffer, _ = env().device.allocate((), [prepared], input_roles=[nnrt.BufferRole(0, 0)])
        buffer.copy_from(np.ones((1, 4), np.float32))
        self.service.prepared[("default", 1)] = prepared
        self.service.buffers[("default", 2)] = buffer
        self._keep = (prepared, buffer)
        self.channel = self.service.channel = Channel.create(1 << 16)  # its rings (``ring_request``)

    def close(self) -> None:
        self.peer.close()
        self.service.sock.close()
        self.channel.close()

    async def serve(self) -> None:
        """Serve the frame on the socket, and let the tasks it spawned (a preparation, an
        execution) finish."""
        self.service._on_readable()
        await self.serve_tasks()

    async def serve_tasks(self) -> None:
        """Let the tasks the last request spawned finish."""
        await asyncio.gather(*self.service.tasks.values(), return_exceptions=True)

    def replies(self) -> list[Any]:
        from nnrt.process._wire import recv_frame

        out = []
        self.peer.setblocking(False)
        try:
            while True:
                out.append(recv_frame(self.peer))
        except (BlockingIOError, EOFError):
            pass
        finally:
            self.peer.setblocking(True)
        return out


_service: _ServiceHarness | None = None


@_guard
def service_request(data: bytes) -> None:
    """The bytes as the body of one request frame to a service: it must answer every request
    (a reply with an NNAPI status, never a bare exception) and keep serving."""
    from nnrt.process._wire import error_from

    global _service
    if _memo_bomb(data):
        return  # a known limitation of pickle, not fuzzed (see _memo_bomb)
    if _service is None:
        _service = _ServiceHarness()
    harness = _service
    harness.peer.sendall(struct.pack("<Q", len(data)) + data)
    env().loop.run_until_complete(asyncio.wait_for(harness.serve(), 10))
    if harness.service.done.done():  # only a lost framing ends a service: never here
        raise UnexpectedError("the service stopped serving after a well-framed request")
    for reply in harness.replies():
        if not (type(reply) is tuple and len(reply) == 3 and type(reply[1]) is bool):
            raise UnexpectedError(f"malformed reply {reply!r:.200}")
        if not reply[1]:
            err = error_from(reply[2])
            if err.message.startswith("the service sent a malformed failure"):
                raise UnexpectedError(err.message)
            check_status(err)


@_guard
def ring_request(data: bytes) -> None:
    """The bytes as one request packet on the service's request ring: answered once (a result
    packet that parses, with an NNAPI status, or a socket reply), and the service serves on."""
    from nnrt.burst._packet import unpack_result
    from nnrt.errors import error_for
    from nnrt.process._wire import error_from

    global _service
    if _service is None:
        _service = _ServiceHarness()
    harness = _service
    harness.service._serve_packet(memoryview(data))
    env().loop.run_until_complete(asyncio.wait_for(harness.serve_tasks(), 10))
    results = harness.channel.results
    answers = 0
    while (pkt := results.peek()) is not None:
        try:
            _rid, status, _shapes, _on, message, _data = unpack_result(pkt)  # MalformedPacketError: a crash
        finally:
            pkt.release()
            results.advance()
        answers += 1
        if status is not ErrorStatus.NONE:
            check_status(error_for(status, message))
    for reply in harness.replies():  # a result that did not fit the result ring
        answers += 1
        if not (type(reply) is tuple and len(reply) == 3 and type(reply[1]) is bool):
            raise UnexpectedError(f"malformed reply {reply!r:.200}")
        if not reply[1]:
            check_status(error_from(reply[2]))
    if answers != 1:
        raise UnexpectedError(f"a ring packet got {answers} answers")


def ring_seeds() -> dict[str, bytes]:
    """Corpus entries for ``ring_request``: well-formed packets for the harness's ONE_ADD."""
    from nnrt.process._transport import encode_execute
    from nnrt.process._wire import PoolRef

    x = np.ones((1, 4), np.float32)
    f32 = [np.dtype(np.float32)] * 2
    packets = {
        "plain": encode_execute(3, 1, "default", [x, x], None, None, f32, 1, None),
        "timed": encode_execute(4, 1, "default", [x, x], 1e12, 0.5, f32, 1, None),
        "pool_output": encode_execute(5, 1, "default", [x, x], None, None, f32, 1, None,
                                      [PoolRef("nnrt-none", 0, "<f4", (1, 4))]),
        "other_app": encode_execute(6, 1, "mallory", [x, x], None, None, f32, 1, None),
    }
    return {name: b"".join(bytes(p) for p in packed[0]) for name, packed in packets.items() if packed is not None}


def _memo_bomb(data: bytes) -> bool:
    """True for a frame whose memo opcodes (PUT, BINPUT, LONG_BINPUT) name an index above 2**20:
    CPython's C unpickler grows its memo table to twice that index, so such a frame of a few
    bytes makes the service allocate gigabytes. nnrt's encoder never emits these opcodes
    (protocol 5 memoizes with MEMOIZE), and a check in the service would cost a Python-level
    scan of every request (~35 us), so the service does not refuse them: a frame that malformed
    can exhaust its own service's memory (then a death: DEAD_OBJECT), never run code in it
    (``loads_request``). The fuzzer leaves them out."""
    import pickletools

    try:
        for op, arg, _pos in pickletools.genops(data):
            if op.name in ("PUT", "BINPUT", "LONG_BINPUT") and isinstance(arg, int) and arg > 1 << 20:
                return True
    except Exception:  # not a pickle up to there: the unpickler refuses it
        return False
    return False


def service_seeds() -> dict[str, bytes]:
    """Corpus entries for ``service_request``: one well-formed request of each kind."""
    import pickle

    from nnrt.memory._memory import FileKey
    from nnrt.process._wire import BufRef, PoolRef, model_to_wire

    x = np.ones((1, 4), np.float32)
    wire = model_to_wire(zoo.one_add())
    requests: dict[str, tuple[Any, ...]] = {
        "execute": ("execute", 3, "default", 1, [x, x], None, 2.0),
        "execute_buffer": ("execute", 4, "default", 1, [BufRef(2), x], 1e12, None, [None]),
        "execute_pool": ("execute", 5, "default", 1, [PoolRef("nnrt-none", 0, "<f4", (1, 4)), x], None, None,
                         [PoolRef(FileKey("/nonexistent", 0, 4096, True, 1, 2), 0, "<f4", (1, 4))]),
        "prepare": ("prepare", 6, "default", wire, {"priority": nnrt.Priority.HIGH}),
        "support": ("support", 7, "", wire),
        "allocate": ("allocate", 8, "default", (1, 4), [1], [nnrt.BufferRole(0, 1)], []),
        "copy": ("copy_from", 9, "default", 2, [x]),
        "copy_to": ("copy_to", 10, "default", 2, None),
        "ping": ("ping", 11, ""),
        "release": ("release", 0, "default", 99),
    }
    return {name: pickle.dumps(r, protocol=5) for name, r in requests.items()}


TARGETS: dict[str, Callable[[bytes], None]] = {
    "model_file": model_file, "cache": cache, "burst_packet": burst_packet, "load": load,
    "service_request": service_request, "ring_request": ring_request,
}
