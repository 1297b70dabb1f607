"""The service half of a ``ProcessDevice``: a child process running an ordinary device.

Started as ``python -m nnrt.process._service FD`` (a fresh interpreter: the safe start
method in a parent that runs threads and an event loop), it reads its configuration from
the socket ``FD`` (the first frame: which device, with which options), builds that device
(a ``CpuDevice`` or a ``RestrictedDevice``, each with its own scheduler) and serves requests
on one asyncio event loop, reading frames as the socket becomes readable:

* ``prepare`` rebuilds the model from its wire form, prepares it on the device (through the
  compilation cache when given ``cache_dir``/``token``) and answers a random handle; the
  prepared model is filed under ``(app, handle)``, so a request naming another app's handle
  finds nothing (INVALID_ARGUMENT), as if it did not exist;
* ``execute`` runs a task per request, so several executions (of several apps) are in flight
  and the device's scheduler orders them; ``cancel`` cancels one;
* ``prepare_cached`` is ``prepare_model_from_cache`` (the model goes back with the handle);
* ``allocate``, ``copy_from``, ``copy_to`` are a device buffer's calls; the buffer is filed
  under ``(app, random handle)`` like a prepared model, and ``release`` drops either;
* ``release`` drops a prepared model; ``support``, ``capabilities``, ``statistics`` and ``ping``
  answer at once
  (``ping`` is the app's watchdog: a wedged loop does not answer it);
* ``_hang`` (block the loop thread forever) and ``_doorbell`` (set ``hold_doorbell``'s lead
  and hold) are test hooks, served only when the service's environment has
  ``NNRT_SERVICE_TEST_HOOKS=1``; ``_inline`` and ``_counts`` answer questions
  tests ask (would a request run at once; how many models, buffers, pools it holds, how many
  pools it mapped and how many input bytes it copied out of the ring).

A malformed request (a frame that does not unpickle, is not ``(kind, id, ...)``, names an
unknown kind or has the wrong arguments) is answered with a failure (GENERAL_FAILURE, or
INVALID_ARGUMENT for an unknown kind; id 0 when the id could not be read) and the service
keeps serving, as NNAPI's burst server does with an ill-formed FMQ packet. Only a frame whose
length prefix is absurd ends the connection: the stream's framing is lost.

Executions arrive on the connection's request ring (``nnrt.process._fmq``) as burst packets
(``nnrt.process._transport``); the loop watches the ring's doorbell, and after serving what it
found it polls the ring for the app's next request before it sleeps again, when the app polls
for its replies (``nnrt.process._poll``: the joint policy; not while its own executions run on
worker threads: they need the interpreter lock). A cheap request runs inline at once,
reading its inputs in place in the ring; another is copied out and runs as a task. Its result
goes on the result ring, or over the socket when it does not fit there; the app's doorbell is
rung only when the app sleeps, and while requests are still queued behind a result it waits
until they would run out within what the app needs to refill the ring (at most ``HOLD_S``:
``_poll.hold_doorbell``): the app wakes once for several results and the service never runs
dry. A request packet that
does not parse is answered with GENERAL_FAILURE under its id, one naming no prepared model
with INVALID_ARGUMENT, and the ring serves on; a ring whose framing is lost (a length that runs
past the written data) is reset and the app is told over the socket (id -1), as the socket's
absurd length prefix would end the connection.

The service exits when its socket reaches EOF (the device closed it, or the app process died)
and, should its loop be wedged, when a watcher thread sees that its parent process changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt._log import get_logger
from nnrt._parent import exit_with_parent
from nnrt.burst._packet import MalformedPacketError, packet_id, unpack_request
from nnrt.clock import perf_ns
from nnrt.devices import CpuDevice, Device, RestrictedDevice
from nnrt.errors import InvalidArgumentError
from nnrt.execution import ExecutionResult, PreparedModel
from nnrt.memory import BufferDesc, BufferRole, DeviceBuffer
from nnrt.process._fmq import Channel
from nnrt.process._forms import FormCache, ResultForm, ServiceForm, write_result
from nnrt.process._poll import HOLD_S, LEAD_S, RequestPoller, hold_doorbell
from nnrt.process._pools import Pools
from nnrt.process._transport import decode_execute, encode_outputs, inline_inputs, io_dtypes, output_locations
from nnrt.process._wire import (
    InPlace,
    PoolRef,
    check_request,
    decode_args,
    error_payload,
    loads_request,
    model_from_wire,
    model_to_wire,
    output_views,
    recv_frame,
    send_frame,
    statistics_to_wire,
)
from nnrt.types import ErrorStatus

__all__ = ["main"]

_log = get_logger("driver")


def make_device(kind: str, options: dict[str, Any]) -> Device:
    """The device a service runs: ``"cpu"`` (``CpuDevice(**options)``) or ``"restricted"``."""
    try:
        if kind == "restricted":
            return RestrictedDevice(**options)
        return CpuDevice(**options)
    except TypeError as err:  # an option the device does not take
        raise InvalidArgumentError(f"ProcessDevice: the service's device refused its options: {err}") from None


class _Service:
    def __init__(self, sock: socket.socket, device: Device, *, test_hooks: bool = False,
                 ring: tuple[int, int, int, int, float] | None = None) -> None:
        self.sock = sock
        self.device = device
        self.test_hooks = test_hooks
        self.channel = None if ring is None else Channel(*ring[:4])
        self.poller = RequestPoller(ring[4] * 1e-6 if ring is not None else 0.0)
        self.dtypes: dict[tuple[str, int], tuple[list[Any], list[Any]]] = {}
        self.forms = FormCache()
        self.fast_results = 0  # results written in place through a result form
        self.copied = 0  # bytes of input values copied out of the request ring (requests run as tasks)
        self.passes = 0  # times the request doorbell woke the service
        self._serving = False  # in a pass over the request ring (``_on_ring``)
        self._held = 0.0  # when the first result whose doorbell is held back was written (0.0: none)
        self._per_request = 0.0  # the CPU time a request of the ring takes to serve (s, a moving average)
        self.lead_s, self.hold_s = LEAD_S, HOLD_S  # when a doorbell is held back (``_poll.hold_doorbell``)
        self._app_awake = False  # the app was awake (no doorbell needed) when its last result was published
        self._published = 0.0  # when this pass last published results (0.0: none yet)
        self.prepared: dict[tuple[str, int], PreparedModel] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.pools = Pools()
        self.buffers: dict[tuple[str, int], DeviceBuffer] = {}
        self.done: asyncio.Future[None] | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        loop.add_reader(self.sock.fileno(), self._on_readable)
        if self.channel is not None:
            self.channel.requests.set_sleeping(True)
            loop.add_reader(self.channel.req_fd, self._on_ring)
        try:
            await self.done
        finally:
            loop.remove_reader(self.sock.fileno())
            if self.channel is not None:
                loop.remove_reader(self.channel.req_fd)
            for task in list(self.tasks.values()):
                task.cancel()
            self.pools.close()
            close = getattr(self.device, "close", None)
            if close is not None:
                close()
            if self.channel is not None:
                self.channel.close()

    def _reply(self, rid: int, ok: bool, payload: Any) -> None:
        try:
            send_frame(self.sock, (rid, ok, payload))
        except OSError:  # the app is gone: stop serving
            self._stop()

    def _stop(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def _on_readable(self) -> None:
        try:
            msg = recv_frame(self.sock, loads_request)
        except (EOFError, OSError):  # the app closed the socket or died (or framing is lost)
            self._stop()
            return
        except Exception as err:  # a frame whose body does not unpickle: answered, then serve on
            self._reply(0, False, (int(ErrorStatus.GENERAL_FAILURE), f"malformed request frame: {err}"))
            return
        if not (type(msg) is tuple and len(msg) >= 2 and type(msg[0]) is str and type(msg[1]) is int):
            self._reply(0, False, (int(ErrorStatus.GENERAL_FAILURE), f"malformed request: {type(msg).__name__}"))
            return
        kind, rid = msg[0], msg[1]
        try:
            check_request(kind, msg[2:])
            if kind == "execute":
                if not self._execute_now(rid, *msg[2:]):
                    self._spawn(rid, self._execute(rid, *msg[2:]))
            elif kind == "prepare":
                self._spawn(rid, self._prepare(rid, *msg[2:]))
            elif kind == "prepare_cached":
                self._spawn(rid, self._prepare_cached(rid, *msg[2:]))
            elif kind == "statistics":
                self._reply(rid, True, statistics_to_wire(self.device.statistics()))  # type: ignore[attr-defined]
            elif kind == "cancel":
                task = self.tasks.get(msg[3])
                if task is not None:
                    task.cancel()
            elif kind == "release":  # a prepared model or a device buffer
                self.prepared.pop((msg[2], msg[3]), None)
                self.dtypes.pop((msg[2], msg[3]), None)
                self.forms.forget(msg[2], msg[3])
                buffer = self.buffers.pop((msg[2], msg[3]), None)
                if buffer is not None:
                    buffer.free()
            elif kind == "allocate":
                self._reply(rid, True, self._allocate(*msg[2:]))
            elif kind == "copy_from":
                self._copy_from(*msg[2:])
                self._reply(rid, True, None)
            elif kind == "copy_to":
                self._reply(rid, True, self._copy_to(*msg[2:]))
            elif kind == "ping":
                self._reply(rid, True, os.getpid())
            elif kind == "support":
                model = model_from_wire(*msg[3])
                self._reply(rid, True, [(s.supported, s.reason) for s in self.device.operation_support(model)])
            elif kind == "capabilities":
                self._reply(rid, True, self.device.capabilities)
            elif kind == "_hang":  # test hook: a wedged service
                if not self.test_hooks:
                    raise InvalidArgumentError("unknown request '_hang'")
                while True:
                    time.sleep(3600)
            elif kind == "_doorbell":  # test hook: the doorbell policy's lead and hold (seconds)
                if not self.test_hooks:
                    raise InvalidArgumentError("unknown request '_doorbell'")
                self.lead_s, self.hold_s = float(msg[2]), float(msg[3])
                self._reply(rid, True, None)
            elif kind == "_inline":  # test hook: would this prepared model's request run at once?
                prepared = self._lookup(msg[2], msg[3])
                self._reply(rid, True, prepared._driver.can_run_now(prepared.plan))
            elif kind == "_counts":  # test hook: what the service holds, pools mapped, bytes copied out of the ring
                self._reply(rid, True, (len(self.prepared), len(self.buffers), len(self.pools), self.pools.mapped,
                                        self.copied))
            elif kind == "_rings":  # test hook: forms known, packets read and results written through
                # them, the app's doorbell rung and spared, passes over the request ring, polls
                # for the next request and those that paid, CPU ns
                ch = self.channel
                bell = (ch.result_bell.rung, ch.result_bell.spared) if ch is not None else (0, 0)
                self._reply(rid, True, (len(self.forms), self.forms.hits, self.fast_results, *bell, self.passes,
                                        self.poller.polls, self.poller.hits, time.process_time_ns()))
        except Exception as err:
            self._reply(rid, False, error_payload(err))

    # -- the rings -----------------------------------------------------------------------------

    def _on_ring(self) -> None:
        """The request ring's doorbell: serve every packet, poll for the window, sleep again."""
        ch = self.channel
        assert ch is not None
        ring = ch.requests
        ch.request_bell.clear()
        ring.set_sleeping(False)
        self.passes += 1
        self._published = 0.0
        self._serving = True
        try:
            self._serve_ring(ch, ring)
        finally:
            self._serving = False
            self._flush(ch)

    def _flush(self, ch: Channel) -> None:
        """Ring the app's doorbell for the results whose doorbell was held back."""
        if self._held:
            self._held = 0.0
            self._publish(ch)

    def _publish(self, ch: Channel) -> None:
        """Ring the app's doorbell if it sleeps, and note whether it was awake, and when."""
        self._app_awake = not ch.result_bell.ring(ch.results)
        self._published = time.perf_counter()

    def _serve_ring(self, ch: Channel, ring: Any) -> None:
        while True:
            try:
                pkt = ring.peek()
            except ValueError as err:
                ring.reset()
                self._reply(-1, False, f"the service lost the request ring's framing ({err})")
                pkt = None
            if pkt is not None:
                t = time.thread_time()  # CPU time: a service preempted by other work still holds its queue's worth
                try:
                    self._serve_packet(pkt)
                finally:
                    pkt.release()
                    ring.advance()
                self._per_request += 0.25 * (time.thread_time() - t - self._per_request)
                continue
            self._flush(ch)  # before polling: the app waits for these
            kind = self._app_kind(ch, ring.producer_polling)
            window = self.poller.should(kind, busy=bool(self.tasks))
            if window and self.poller.wait(ring.readable, window, kind, self._published or None):
                continue
            if not ring.set_sleeping(True):
                return
            ring.set_sleeping(False)

    def _app_kind(self, ch: Channel, app_polls: bool) -> int:
        """What the app does as this service looks for its next request (``_poll.RequestPoller``):
        it polls for its replies, or was awake when its last result was published (or is now)."""
        awake = self._app_awake or not ch.results.consumer_sleeping
        self._app_awake = False
        return self.poller.kind(app_polls, awake)

    def _serve_packet(self, pkt: memoryview) -> None:
        rid = packet_id(pkt)
        form: ServiceForm | None = None
        outs: list[Any] | None = None  # views of the outputs written in place (their pools)
        try:
            hit = self.forms.match(pkt)
            if hit is not None:  # a known form: read without parsing (``_forms``)
                form, deadline, loop_timeout = hit
                app, handle = form.app, form.handle
                prepared = self._lookup(app, handle)
                values = form.values(pkt, self.pools.attach)
                outs = form.outputs(self.pools.attach)
                inline = form.inline
            else:
                req = unpack_request(pkt)
                app, handle, deadline, loop_timeout = req.app, req.handle, req.deadline, req.loop_timeout
                prepared = self._lookup(app, handle)
                dtypes = self.dtypes.get((app, handle))
                if dtypes is None:
                    dtypes = self.dtypes[(app, handle)] = io_dtypes(prepared.model)
                values = decode_execute(req, dtypes[0], len(dtypes[1]), self.pools.attach)
                outs = output_locations(req, dtypes[1], self.pools.attach)
                form = self.forms.learn(pkt, req, *dtypes)
                inline = inline_inputs(req)
            if prepared._driver.can_run_now(prepared.plan):
                self._run_now(rid, prepared, values, outs, deadline, loop_timeout, self._ring_reply, form)
                return
            # out of the ring before it is freed (a pool's view stays valid: not copied)
            values = [v.copy() if copy else v for v, copy in zip(values, inline)]
            self.copied += sum(v.nbytes for v, copy in zip(values, inline) if copy)
            known = form

            def reply(rid: int, ok: bool, payload: Any) -> None:
                self._ring_reply(rid, ok, payload, known)

            self._spawn(rid, self._execute(rid, app, handle, values, deadline, loop_timeout, outs, reply))
        except MalformedPacketError as err:
            self._ring_reply(rid, False, (int(ErrorStatus.GENERAL_FAILURE), f"FMQ request packet ill-formed: {err.message}"))
        except Exception as err:
            self._ring_reply(rid, False, error_payload(err))

    def _ring_reply(self, rid: int, ok: bool, payload: Any, form: ServiceForm | None = None) -> None:
        """Answer a ring request on the result ring (in place when the outputs have the form's
        result shapes: ``_transport.write_result``), or over the socket when it does not fit."""
        ch = self.channel
        assert ch is not None
        if ch.closed:
            self._reply(rid, ok, payload)
            return
        result = self._result_form(form, payload) if ok and form is not None else None
        if result is not None:
            if not write_result(ch.results, result, rid, *payload):
                self._reply(rid, ok, payload)
                return
            self.fast_results += 1
        else:
            try:
                parts, nbytes = encode_outputs(rid, ok, payload)
            except Exception as err:
                ok, payload = False, error_payload(err)
                parts, nbytes = encode_outputs(rid, ok, payload)
            if not ch.results.try_write(parts, nbytes):
                self._reply(rid, ok, payload)
                return
        if self._serving and self._hold(ch):
            return
        self._held = 0.0
        self._publish(ch)

    def _hold(self, ch: Channel) -> bool:
        """Whether the doorbell for a result just written in a pass over the request ring waits
        (``_poll.hold_doorbell``: the requests queued behind it keep this service busy longer than
        the app needs to refill the ring). It rings, when it does, only if the app sleeps."""
        now = time.perf_counter()
        if not self._held:
            self._held = now
        return hold_doorbell(ch.requests.packets_after(), self._per_request, now - self._held, self.lead_s, self.hold_s)

    def _result_form(self, form: ServiceForm, payload: Any) -> ResultForm | None:
        """The result form of a success of ``form`` (learnt from its first success; again when
        the shapes change), or None when its outputs are not all arrays (or written in place) or
        it would not fit."""
        outputs = payload[0]
        result = form.result
        if result is None or not result.matches(outputs):
            in_place = [type(o) is InPlace for o in outputs]
            if not all(p or type(o) is np.ndarray for o, p in zip(outputs, in_place)):
                return None
            result = form.result = ResultForm([tuple(o.shape) for o in outputs],
                                              [None if p else o.dtype for o, p in zip(outputs, in_place)], in_place)
        assert self.channel is not None
        return result if result.nbytes <= self.channel.results.max_packet else None

    def _spawn(self, rid: int, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks[rid] = task
        task.add_done_callback(lambda _t: self.tasks.pop(rid, None))

    async def _prepare(self, rid: int, app: str, wire: Any, options: dict[str, Any]) -> None:
        try:
            model = model_from_wire(*wire)
            prepared = await self.device.prepare_model(model, app=app, **options)
            self._reply(rid, True, (self._file(app, prepared), prepared.plan.cost_ns))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._reply(rid, False, error_payload(err))

    async def _prepare_cached(self, rid: int, app: str, options: dict[str, Any]) -> None:
        """``prepare_model_from_cache``; the model goes back with the handle (the app's side
        validates requests against it)."""
        try:
            opts = dict(options)
            prepared = await self.device.prepare_model_from_cache(  # type: ignore[attr-defined]
                opts.pop("cache_dir"), opts.pop("token"), app=app, **opts)
            self._reply(rid, True, (self._file(app, prepared), prepared.plan.cost_ns, model_to_wire(prepared.model)))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._reply(rid, False, error_payload(err))

    # -- device buffers (``ProcessDevice.allocate``) ----------------------------------------------

    def _allocate(self, app: str, dims: tuple[int, ...], handles: list[int], input_roles: list[BufferRole],
                  output_roles: list[BufferRole]) -> int:
        models = [self._lookup(app, h) for h in handles]
        buffer, _token = self.device.allocate(BufferDesc(dims), models, input_roles, output_roles)
        handle = secrets.randbits(62)
        self.buffers[(app, handle)] = buffer
        return handle

    def _finder(self, app: str) -> Callable[[int, str], DeviceBuffer]:
        def find(handle: int, where: str) -> DeviceBuffer:
            buffer = self.buffers.get((app, handle))
            if buffer is None:
                raise InvalidArgumentError(f"{where}: app {app!r} has no device buffer {handle} in this service")
            return buffer
        return find

    def _copy_from(self, app: str, handle: int, args: list[Any]) -> None:
        find = self._finder(app)
        find(handle, "copy_from").copy_from(*decode_args(args, self.pools.attach, find))

    def _copy_to(self, app: str, handle: int, ref: PoolRef | None) -> np.ndarray | None:
        """Into the app's shared pool in place (``ref``), else back by value."""
        buffer = self._finder(app)(handle, "copy_to")
        if ref is not None:
            raw = output_views([ref], self.pools.attach, self._finder(app))[0]  # type: ignore[index]
            buffer.copy_to(raw.reshape(-1).view(np.uint8).view(buffer.type.dtype))
            return None
        out = np.empty(buffer.dimensions, buffer.type.dtype)
        buffer.copy_to(out)
        return out

    def _file(self, app: str, prepared: PreparedModel) -> int:
        """File a prepared model under ``(app, a random handle)``; the handle."""
        handle = secrets.randbits(62)
        self.prepared[(app, handle)] = prepared
        return handle

    def _lookup(self, app: str, handle: int) -> PreparedModel:
        prepared = self.prepared.get((app, handle))
        if prepared is None:
            raise InvalidArgumentError(f"app {app!r} has no prepared model {handle} in this service")
        return prepared

    def _execute_now(self, rid: int, app: str, handle: int, args: list[Any], deadline: float | None,
                     loop_timeout: float | None, out_refs: list[Any] | None = None) -> bool:
        """Run a cheap socket request at once when the device may (``_run_now``); False: it
        needs the scheduler."""
        prepared = self.prepared.get((app, handle))
        if prepared is None or not prepared._driver.can_run_now(prepared.plan):
            return False
        try:
            find = self._finder(app)
            outs = output_views(out_refs, self.pools.attach, find)
            values = decode_args(args, self.pools.attach, find)
        except Exception as err:
            self._reply(rid, False, error_payload(err))
            return True
        self._run_now(rid, prepared, values, outs, deadline, loop_timeout, self._reply)
        return True

    def _run_now(self, rid: int, prepared: PreparedModel, values: list[Any], outs: list[Any] | None,
                 deadline: float | None, loop_timeout: float | None, reply: Any, form: ServiceForm | None = None) -> None:
        """Run a request at once, without a task (``Driver.can_run_now`` said it may: the path a
        burst's inline requests take): ``PreparedModel._execute_now``, the request validated
        and the device's idle-path admission applied as in process. The time on device
        reported is the execution's time in this service."""
        t = perf_ns()
        try:
            result = prepared._execute_now(values, outs, False, deadline, loop_timeout)
        except Exception as err:
            reply(rid, False, error_payload(err))
            return
        payload = (_reply_outputs(result, outs), perf_ns() - t)
        if form is None:
            reply(rid, True, payload)
        else:
            reply(rid, True, payload, form)

    async def _execute(self, rid: int, app: str, handle: int, args: list[Any], deadline: float | None,
                       loop_timeout: float | None, out_refs: list[Any] | None = None, reply: Any = None) -> None:
        reply = reply or self._reply
        try:
            prepared = self._lookup(app, handle)
            find = self._finder(app)
            values = decode_args(args, self.pools.attach, find)
            outs = output_views(out_refs, self.pools.attach, find)
            result = await prepared.execute(values, outs, measure_timing=True, deadline=deadline, loop_timeout=loop_timeout)
            reply(rid, True, (_reply_outputs(result, outs), result.timing.time_on_device_ns or 0))
        except asyncio.CancelledError:
            reply(rid, False, (int(ErrorStatus.GENERAL_FAILURE), "the execution was cancelled"))
            raise
        except Exception as err:
            reply(rid, False, error_payload(err))


def _reply_outputs(result: ExecutionResult, outs: list[Any] | None) -> list[Any]:
    """The outputs for the reply: those written in place are only their shape (``InPlace``)."""
    if outs is None:
        return result.outputs
    return [InPlace(s.dimensions) if type(b) is np.ndarray else v for v, b, s in zip(result.outputs, outs, result.output_shapes)]


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    exit_with_parent()
    try:
        kind, options, ring = recv_frame(sock)
        device = make_device(kind, options)
        # numba's import (about 0.2 s) before the service reports itself started: a standby
        # service pays it while it waits, not while it re-prepares after a death
        from nnrt.ops._jit import available

        available()
    except Exception as err:
        with contextlib.suppress(OSError):
            send_frame(sock, (0, False, error_payload(err)))
        return 1
    send_frame(sock, (0, True, (os.getpid(), device.name, device.version, device.feature_level, int(device.type))))
    try:
        hooks = os.environ.get("NNRT_SERVICE_TEST_HOOKS") == "1"
        asyncio.run(_Service(sock, device, test_hooks=hooks, ring=ring).run())
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
