"""``ProcessDevice``: a device whose driver runs in a child process (issue 18).

The app side keeps the ``Device`` contract; the other half, a service process
(``nnrt.process._service``), runs an ordinary device (a ``CpuDevice``, or a
``RestrictedDevice`` from a config) with its own scheduler. A prepared model of a
``ProcessDevice`` is an ordinary ``PreparedModel`` (request validation, deadline checks,
outputs, timing, fenced executions, bursts: all its own code, the one execution path) whose
plan is one DELEGATED step and whose driver, ``_RemoteDriver``, runs that step by sending the
inputs to the service's prepared model and awaiting its outputs (``drive``: on an asyncio
future, never blocking the loop; ``run_now``: blocking the calling thread, for
``execute_sync`` outside a loop). The app's identity and the execution's deadline and loop
timeout go with every request; the service's scheduler applies priorities and admission.

Lifecycle and failures (documented choices):

* The service starts on first use (``prepare_model``, ``capabilities``,
  ``supported_operations``) or on ``start()``; ``pid`` is its process id (None before).
  ``close()`` (also ``with`` / ``async with``) stops it and reaps it.
* When the service dies (any exit, ``kill -9`` included) every request in flight or queued
  fails with DEAD_OBJECT, ``dead`` turns True, and every later execution of its prepared models
  fails with DEAD_OBJECT at once. Recovery is one call, ``await device.restart()``: a new
  service, and every live prepared model re-prepared on it (through the compilation cache when
  it was prepared with ``cache_dir``/``token``), so the app's ``PreparedModel`` objects work
  again. ``prepare_model`` on a dead device restarts it first (NNAPI's ``ResilientDevice``
  recovers on its device calls the same way); executions never restart it by themselves.
* A wedged service (no answer to the watchdog's ping for ``hang_timeout`` seconds while
  requests are outstanding) is killed, which is then a death: DEAD_OBJECT.
* Deadlines are absolute ``time.monotonic()`` times, which both processes share: the device
  uses the monotonic clock.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Generator, Hashable
from types import TracebackType
from typing import Any

from nnrt.clock import Clock, MonotonicClock, default_clock
from nnrt.devices import Device, DeviceType, OperationSupport
from nnrt.devices._device import check_preparation_args
from nnrt.errors import DeadObjectError, InternalError, InvalidArgumentError, MissedDeadlineError
from nnrt.execution import DELEGATE, DELEGATED, ExecContext, Plan, PreparedModel, Step
from nnrt.execution._plan import _fetcher
from nnrt.model import Model
from nnrt.process._arena import Arena
from nnrt.process._client import ServiceProcess
from nnrt.process._transport import encode_execute, io_dtypes
from nnrt.process._wire import encode_args, model_to_wire
from nnrt.types import Capabilities, ErrorStatus, ExecutionPreference, OperationType, Priority

__all__ = ["ProcessDevice"]

_Gen = Generator[int, None, list[Any]]


class ProcessDevice(Device):
    """A device whose driver is a service in a child process (see the module docstring).

    ``ProcessDevice()`` runs a ``CpuDevice(name, **cpu_options)`` in the service;
    ``ProcessDevice(restricted={...})`` runs ``RestrictedDevice(**restricted)`` instead (its
    ``name`` included). ``hang_timeout`` (seconds, 0 to disable) is the watchdog's patience;
    ``start_timeout`` bounds the service's start-up. ``standby=True`` keeps a second service
    started and idle, so that ``restart()`` does not wait for an interpreter to start (most
    of a recovery): it only re-prepares the models, and starts a new spare in the background.
    ``arena_bytes`` is the size of the shared arena large plain-array inputs are copied into
    (``nnrt.process._arena``; made on first use; 0: always the socket). ``ring_bytes`` is the
    capacity of each of the connection's two shared-memory rings executions travel on
    (``nnrt.process._fmq``; a power of two; 0: executions take the socket, as before the
    rings); ``poll_us`` is how long each side polls its ring before it sleeps on the doorbell.
    """

    def __init__(self, name: str = "nnrt-process", *, restricted: dict[str, Any] | None = None,
                 hang_timeout: float = 5.0, start_timeout: float = 60.0, standby: bool = False,
                 arena_bytes: int = 32 << 20, ring_bytes: int = 1 << 20, poll_us: float = 50.0,
                 **cpu_options: Any) -> None:
        if isinstance(arena_bytes, bool) or not isinstance(arena_bytes, int) or arena_bytes < 0:
            raise InvalidArgumentError(f"ProcessDevice: arena_bytes must be a non-negative int, got {arena_bytes!r}")
        power_of_two = isinstance(ring_bytes, int) and ring_bytes >= 4096 and not ring_bytes & (ring_bytes - 1)
        if isinstance(ring_bytes, bool) or not isinstance(ring_bytes, int) or (ring_bytes and not power_of_two):
            raise InvalidArgumentError(f"ProcessDevice: ring_bytes must be 0 or a power of two >= 4096, got {ring_bytes!r}")
        if isinstance(poll_us, bool) or not isinstance(poll_us, (int, float)) or not 0 <= poll_us <= 1e6:
            raise InvalidArgumentError(f"ProcessDevice: poll_us must be a number of microseconds in [0, 1e6], got {poll_us!r}")
        if not isinstance(hang_timeout, (int, float)) or hang_timeout < 0:
            raise InvalidArgumentError(f"ProcessDevice: hang_timeout must be a non-negative number, got {hang_timeout!r}")
        # The service is nnrt's own process: it opts in to the process-wide latency settings
        # (one BLAS thread, a 0.5 ms GIL switch interval, ...), as nnrt's commands do.
        if restricted is not None:
            self._kind, self._options = "restricted", {"tune_process": True, **restricted}
            self.name = str(self._options.setdefault("name", name))
        else:
            self._kind, self._options = "cpu", {"name": name, "tune_process": True, **cpu_options}
            self.name = name
        self.type = DeviceType.CPU if restricted is None else DeviceType(self._options.get("device_type", DeviceType.ACCELERATOR))
        self.version = "?"
        self.feature_level = int(self._options.get("feature_level", 7)) if restricted is not None else 7
        # The default clock when it is the monotonic one (so ``nnrt.prepare`` can partition across
        # this and in-process devices): deadlines cross to the service as monotonic times.
        shared = default_clock()
        self.clock: Clock = shared if isinstance(shared, MonotonicClock) else MonotonicClock()
        self.hang_timeout = float(hang_timeout)
        self.start_timeout = float(start_timeout)
        self._service: ServiceProcess | None = None
        self._closed = False
        self._capabilities: Capabilities | None = None
        self._drivers: weakref.WeakSet[_RemoteDriver] = weakref.WeakSet()
        self._restarting: asyncio.Future[None] | None = None
        self.restarts = 0
        self.standby = bool(standby)
        self._spare: ServiceProcess | None = None
        self._spare_thread: threading.Thread | None = None
        self._arena = Arena(int(arena_bytes))
        self.ring_bytes, self.poll_us = ring_bytes, float(poll_us)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The service's process id (None before it started or after ``close``)."""
        return None if self._service is None else self._service.pid

    @property
    def dead(self) -> bool:
        """True when the service died and has not been restarted."""
        return self._service is not None and bool(self._service.dead_reason)

    def start(self) -> None:
        """Start the service now if it is not running (blocks while it starts)."""
        if self._closed:
            raise DeadObjectError(f"{self.name}: the device is closed")
        if self._service is None:
            service = self._take_spare() or self._new_service()
            _pid, _name, version, level, _type = service.info
            self.version, self.feature_level = version, level
            self._service = service
            if self.standby:
                self._start_spare()

    def _new_service(self) -> ServiceProcess:
        return ServiceProcess(self._kind, self._options, hang_timeout=self.hang_timeout, start_timeout=self.start_timeout,
                              ring_bytes=self.ring_bytes, poll_us=self.poll_us)

    def _start_spare(self) -> None:
        """Start the standby service on a thread (it takes as long as an interpreter start)."""
        if self._spare_thread is not None or self._spare is not None:
            return

        def run() -> None:
            try:
                spare = self._new_service()
            except Exception:  # no spare: the next restart starts a service itself
                return
            if self._closed:
                spare.close()
            else:
                self._spare = spare

        self._spare_thread = threading.Thread(target=run, name="nnrt-service-standby", daemon=True)
        self._spare_thread.start()

    def _take_spare(self) -> ServiceProcess | None:
        """The standby service, once started, if it is still alive (None without one)."""
        thread, self._spare_thread = self._spare_thread, None
        if thread is not None:
            thread.join()
        spare, self._spare = self._spare, None
        if spare is not None and not spare.alive:
            spare.close()
            return None
        return spare

    def _running(self) -> ServiceProcess:
        if self._service is None or self._service.dead_reason:
            if self.dead:
                raise DeadObjectError(f"{self.name}: {self._service.dead_reason}")  # type: ignore[union-attr]
            self.start()
        assert self._service is not None
        return self._service

    async def _ensure_started(self) -> ServiceProcess:
        if self._restarting is not None:
            await asyncio.shield(self._restarting)
        if self._service is None or self._service.dead_reason:
            await self.restart()
        assert self._service is not None
        return self._service

    async def restart(self) -> None:
        """Start a new service (stopping the old one if it still runs) and re-prepare every
        live prepared model on it. Prepared models that fail to re-prepare stay dead
        (DEAD_OBJECT); the others work again. Concurrent callers share one restart."""
        if self._closed:
            raise DeadObjectError(f"{self.name}: the device is closed")
        if self._restarting is not None:
            return await asyncio.shield(self._restarting)
        loop = asyncio.get_running_loop()
        self._restarting = loop.create_future()
        try:
            old, self._service = self._service, None
            if old is not None:
                await loop.run_in_executor(None, old.close)
            await loop.run_in_executor(None, self.start)
            service = self._service
            assert service is not None
            if old is not None:
                self.restarts += 1
            for driver in list(self._drivers):
                try:
                    await driver.reprepare(service)
                except Exception:
                    continue
            self._restarting.set_result(None)
        except BaseException as err:
            self._restarting.set_exception(err)
            self._restarting.exception()  # retrieved: callers that wait see it
            raise
        finally:
            self._restarting = None

    def close(self) -> None:
        """Stop the service and reap it; executions still running fail with DEAD_OBJECT."""
        self._closed = True
        service, self._service = self._service, None
        if service is not None:
            service.close()
        spare = self._take_spare()
        if spare is not None:
            spare.close()
        self._arena.close()

    def __enter__(self) -> ProcessDevice:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> ProcessDevice:
        await self._ensure_started()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    # -- the Device contract ------------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            self._capabilities = self._running().call_sync("capabilities")
        return self._capabilities

    def supported_operations(self, model: Model) -> list[bool]:
        return [s.supported for s in self.operation_support(model)]

    def operation_support(self, model: Model) -> list[OperationSupport]:
        if not isinstance(model, Model) or not model.finished:
            raise InvalidArgumentError("supported_operations: the model is not finished (call model.finish())")
        answers = self._running().call_sync("support", "", model_to_wire(model))
        return [OperationSupport(op.index, op.type, ok, reason) for op, (ok, reason) in zip(model.operations, answers)]

    async def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: float | None = None,
        app: str = "default",
        cache_dir: str | os.PathLike[str] | None = None,
        token: bytes | None = None,
    ) -> PreparedModel:
        """Prepare ``model`` in the service (the model crosses once); see ``Device.prepare_model``
        and ``CpuDevice.prepare_model`` for the arguments and errors. A dead service is
        restarted first; a service dying during the preparation is DEAD_OBJECT."""
        pref, prio = check_preparation_args(model, preference, priority)
        if not isinstance(app, str):
            raise InvalidArgumentError(f"prepare_model: app must be a str, got {app!r}")
        if deadline is not None and self.clock.now() >= deadline:
            raise MissedDeadlineError("prepare_model: the deadline had passed", status=ErrorStatus.MISSED_DEADLINE_PERSISTENT)
        service = await self._ensure_started()
        options: dict[str, Any] = {"preference": pref, "priority": prio, "deadline": deadline}
        if cache_dir is not None or token is not None:
            options["cache_dir"] = os.fspath(cache_dir) if isinstance(cache_dir, (str, os.PathLike)) else cache_dir
            options["token"] = token
        driver = _RemoteDriver(self, app, model_to_wire(model), options)
        driver.dtypes = io_dtypes(model)
        await driver.reprepare(service)
        driver.options.pop("deadline", None)  # a re-preparation after a restart has no deadline
        self._drivers.add(driver)
        prepared = PreparedModel(driver, model, _service_plan(model, driver), preference=pref, priority=prio, app=app)
        weakref.finalize(prepared, driver.release)
        return prepared

    # -- test hooks ---------------------------------------------------------------------------------

    def _test_hang(self) -> None:
        """Test hook: wedge the service's event loop forever (the watchdog's case)."""
        self._running().notify("_hang", "")

    def _test_call(self, kind: str, *args: Any) -> Any:
        """Test hook: send a raw request (isolation tests forge other apps' requests)."""
        return self._running().call_sync(kind, *args)


def _service_plan(model: Model, driver: _RemoteDriver) -> Plan:
    """The app side's plan: one DELEGATED step from the model's inputs to its outputs."""
    n_in, n_out = len(model.input_indexes), len(model.output_indexes)
    ins, outs = tuple(range(n_in)), tuple(range(n_in, n_in + n_out))
    first = model.operations[0].type if model.operations else OperationType.ADD
    step = Step(0, first, f"{model.name or 'model'} in the service", DELEGATED, ins, outs, target=driver)
    step.fetch = _fetcher(ins)
    step.cost_ns = driver.cost_ns
    return Plan(model, [None] * (n_in + n_out), ins, outs, [step])


class _RemoteDriver:
    """The ``Driver`` of a prepared model whose plan runs in the service."""

    def __init__(self, device: ProcessDevice, app: str, wire: Any, options: dict[str, Any]) -> None:
        self.clock = device.clock
        self.name = device.name
        self.app = app
        self.wire = wire
        self.options = options
        self.cost_ns = 0.0
        self.handle = 0
        self.service: ServiceProcess | None = None
        self.arena = device._arena
        self.dtypes: tuple[list[Any], list[Any]] = ([], [])

    def __repr__(self) -> str:
        return f"<_RemoteDriver {self.name} app={self.app!r} handle={self.handle}>"

    async def reprepare(self, service: ServiceProcess) -> None:
        """Prepare the model on ``service`` (first time, or after a restart)."""
        self.handle, self.cost_ns = await service.call("prepare", self.app, self.wire, self.options)
        self.service = service

    def release(self) -> None:
        service = self.service
        if service is not None and service.alive:
            service.release_later(self.app, self.handle)

    def _target(self) -> ServiceProcess:
        service = self.service
        if service is None or not service.alive:
            reason = service.dead_reason if service is not None else ""
            raise DeadObjectError(f"{self.name}: the service of this prepared model is gone"
                                  + (f" ({reason})" if reason else "; restart the device"))
        return service

    def runs_inline(self, plan: Plan) -> bool:
        return False

    def can_run_now(self, plan: Plan) -> bool:
        return False

    def _request_raw(self, gen: _Gen, ctx: ExecContext, app: Hashable) -> tuple[Any, ...]:
        while next(gen) != DELEGATE:  # INTERRUPTED: nothing interrupts a one-step plan here
            pass
        _step, args = ctx.handoff
        return ("execute", app, self.handle, list(args), ctx.deadline, ctx.loop_timeout)

    def _encoded(self, request: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[tuple[int, int]]]:
        """The request for the socket (large arrays through the arena)."""
        values, blocks = encode_args(request[3], self.arena)
        return (*request[:3], values, *request[4:]), blocks

    def _packet(self, service: ServiceProcess,
                request: tuple[Any, ...]) -> tuple[int, list[Any], int, list[tuple[int, int]]] | None:
        """The request as a ring packet (``nnrt.process._transport``), or None: the socket."""
        _kind, app, handle, values, deadline, loop_timeout = request
        if service.channel is None or type(app) is not str:
            return None
        rid = service.new_id()
        packed = encode_execute(rid, handle, app, values, deadline, loop_timeout, self.dtypes[0], len(self.dtypes[1]), self.arena)
        return None if packed is None else (rid, *packed)

    def _free(self, blocks: list[tuple[int, int]]) -> None:
        for offset, nbytes in blocks:
            self.arena.free(offset, nbytes)

    def run_now(self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority) -> tuple[list[Any], int]:
        blocks: list[tuple[int, int]] = []
        try:
            service = self._target()
            request = self._request_raw(gen, ctx, app)
            packet = self._packet(service, request)
            if packet is not None:
                rid, parts, nbytes, blocks = packet
                sent, reply = service.ring_call_sync(rid, parts, nbytes, self.dtypes[1])
                if sent:
                    return _finish(gen, ctx, *reply)
                self._free(blocks)
            (kind, *args), blocks = self._encoded(request)
            return _finish(gen, ctx, *service.call_sync(kind, *args))
        finally:
            self._free(blocks)
            gen.close()

    async def drive(self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority) -> tuple[list[Any], int]:
        blocks: list[tuple[int, int]] = []
        try:
            service = self._target()
            request = self._request_raw(gen, ctx, app)
            packet = self._packet(service, request)
            if packet is not None:
                rid, parts, nbytes, blocks = packet
                sent, reply = await service.ring_call(rid, parts, nbytes, self.dtypes[1])
                if sent:
                    return _finish(gen, ctx, *reply)
                self._free(blocks)
            (kind, *args), blocks = self._encoded(request)
            return _finish(gen, ctx, *await service.call(kind, *args))
        finally:
            self._free(blocks)
            gen.close()


def _finish(gen: _Gen, ctx: ExecContext, outputs: list[Any], device_ns: int) -> tuple[list[Any], int]:
    """Hand the service's outputs to the interpreter and let it end the plan (its last
    deadline check included)."""
    ctx.handoff = outputs
    try:
        next(gen)
    except StopIteration as stop:
        return stop.value, device_ns
    raise InternalError("the service step did not end the plan")
