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

What crosses the boundary is ``nnrt.process._wire``'s business: inputs and outputs in shared
pools (``Memory.from_shared_memory``, ``Memory.from_file``) by name, read and written in place
by the service; device buffers (``allocate``, ``nnrt.process._buffers``) live in the service and
cross as handles; ``prepare_model_from_cache`` and ``statistics`` are the service device's.

Lifecycle and failures (documented choices):

* The service starts on first use (``prepare_model``, ``capabilities``,
  ``supported_operations``) or on ``start()``; ``pid`` is its process id (None before).
  ``close()`` (also ``with`` / ``async with``) stops it and reaps it.
* When the service dies (any exit, ``kill -9`` included) every request in flight or queued
  fails with DEAD_OBJECT, ``dead`` turns True, and every later execution of its prepared models
  fails with DEAD_OBJECT at once. Recovery is one call, ``await device.restart()``: a new
  service, and every live prepared model re-prepared on it (through the compilation cache when
  it was prepared with ``cache_dir``/``token``), so the app's ``PreparedModel`` objects work
  again. Device calls on a dead device restart it first, the same way (NNAPI's
  ``ResilientDevice`` recovers on its device calls): ``prepare_model`` and ``ready()`` without
  blocking the event loop (the start runs on an executor thread), ``capabilities``,
  ``supported_operations``, ``operation_support`` and ``statistics`` blocking their caller
  (``nnrt.prepare`` awaits ``ready()`` before asking them). Executions never restart it.
* A wedged service (no answer to the watchdog's ping for ``hang_timeout`` seconds while
  requests are outstanding) is killed, which is then a death: DEAD_OBJECT.
* The service's device runs a request on its own event loop, without the hand-off to a
  worker thread, when it is idle and the plan's estimate is within ``SERVICE_INLINE_LIMIT_NS``
  (1 ms; ``inline_limit_ns=`` overrides it), not the in-process 100 us: that limit keeps an
  app's loop responsive, while the service's loop only serves requests (a request arriving
  meanwhile waits at most that long; the watchdog's patience is seconds). Each hand-off to a
  thread that has slept a few hundred microseconds costs tens of microseconds on a virtual
  machine; with the worker path a 1 MB input cost ~350 us more than a 1 KB one through the
  service (``benchmarks/process.py`` (b)), inline it costs about the same.
* Deadlines are absolute ``time.monotonic()`` times, which both processes share: the device
  uses the monotonic clock.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import weakref
from collections.abc import Generator, Hashable, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from nnrt._log import get_logger
from nnrt.cache import check_cache_args
from nnrt.clock import Clock, MonotonicClock, default_clock
from nnrt.devices import Device, DeviceType, OperationSupport
from nnrt.devices._device import check_preference_priority, check_preparation_args
from nnrt.errors import DeadObjectError, InternalError, InvalidArgumentError, MissedDeadlineError
from nnrt.execution import DELEGATE, DELEGATED, ExecContext, Plan, PreparedModel, Step
from nnrt.execution._plan import _fetcher
from nnrt.memory import BufferDesc, BufferRole, BufferToken, DeviceBuffer
from nnrt.memory._domain import allocate_buffer
from nnrt.model import Model
from nnrt.process._arena import Arena
from nnrt.process._buffers import RemoteBuffer
from nnrt.process._client import ServiceProcess
from nnrt.process._transport import encode_execute, io_dtypes
from nnrt.process._wire import (
    ARENA_MIN_BYTES,
    InPlace,
    PoolRef,
    encode_args,
    encode_outputs,
    model_from_wire,
    model_to_wire,
    statistics_from_wire,
)
from nnrt.sched import SchedulerStatistics
from nnrt.types import Capabilities, ErrorStatus, ExecutionPreference, OperationType, Priority

__all__ = ["SERVICE_INLINE_LIMIT_NS", "ProcessDevice"]

_log = get_logger("driver")

#: The service device's default ``inline_limit_ns`` (see the module docstring).
SERVICE_INLINE_LIMIT_NS = 1_000_000

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
            self._kind, self._options = "restricted", {"tune_process": True, "inline_limit_ns": SERVICE_INLINE_LIMIT_NS,
                                                       **restricted}
            self.name = str(self._options.setdefault("name", name))
        else:
            self._kind, self._options = "cpu", {"name": name, "tune_process": True,
                                                "inline_limit_ns": SERVICE_INLINE_LIMIT_NS, **cpu_options}
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
        self._lock = threading.RLock()  # one start, restart or close at a time
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
        with self._lock:
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
        """The live service, started on first use or restarted (with every live prepared model
        re-prepared) when it died: what device calls (``capabilities``, ``supported_operations``,
        ...) go through, blocking the calling thread while a service starts."""
        service = self._service
        if service is not None and not service.dead_reason:
            return service
        return self._restart_sync(only_if_dead=True)

    async def _ensure_started(self) -> ServiceProcess:
        if self._restarting is not None:
            await asyncio.shield(self._restarting)
        if self._service is None or self._service.dead_reason:
            await self.restart()
        assert self._service is not None
        return self._service

    async def ready(self) -> None:
        """Start the service (or restart a dead one) without blocking the event loop, so that
        the device calls that follow answer at once (``nnrt.prepare`` awaits this before it
        asks the devices what they support)."""
        await self._ensure_started()

    async def restart(self) -> None:
        """Start a new service (stopping the old one if it still runs) and re-prepare every
        live prepared model on it. Prepared models that fail to re-prepare stay dead
        (DEAD_OBJECT); the others work again. Concurrent callers share one restart; the work
        runs on an executor thread (the event loop never waits for the interpreter to start)."""
        if self._closed:
            raise DeadObjectError(f"{self.name}: the device is closed")
        if self._restarting is not None:
            return await asyncio.shield(self._restarting)
        loop = asyncio.get_running_loop()
        self._restarting = loop.create_future()
        try:
            await loop.run_in_executor(None, self._restart_sync, False)
            self._restarting.set_result(None)
        except BaseException as err:
            self._restarting.set_exception(err)
            self._restarting.exception()  # retrieved: callers that wait see it
            raise
        finally:
            self._restarting = None

    def _restart_sync(self, only_if_dead: bool) -> ServiceProcess:
        """The one restart path (``restart``, and device calls on a dead device): stop the old
        service, start a new one, re-prepare the live prepared models on it (each through the
        compilation cache when it was prepared with one). ``only_if_dead``: leave a live
        service alone (another caller restarted it meanwhile)."""
        with self._lock:
            if self._closed:
                raise DeadObjectError(f"{self.name}: the device is closed")
            old = self._service
            if only_if_dead and old is not None and not old.dead_reason:
                return old
            self._service = None
            if old is not None:
                old.close()
            self.start()
            service = self._service
            assert service is not None
            if old is not None:
                self.restarts += 1
                _log.info("driver.service_restarted", device=self.name, pid=service.pid, restarts=self.restarts)
            for driver in list(self._drivers):
                try:
                    driver.reprepare_sync(service)
                except Exception:
                    continue
            return service

    def close(self) -> None:
        """Stop the service and reap it; executions still running fail with DEAD_OBJECT."""
        self._closed = True
        with self._lock:  # a start or restart in progress finishes first
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
        await driver.reprepare(service)
        driver.options.pop("deadline", None)  # a re-preparation after a restart has no deadline
        return self._adopt(driver, model, pref, prio)

    async def prepare_model_from_cache(
        self,
        cache_dir: str | os.PathLike[str],
        token: bytes,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        app: str = "default",
    ) -> PreparedModel:
        """The model the service's device cached under ``token`` (``CpuDevice``'s contract:
        a missing, damaged or foreign entry is GENERAL_FAILURE; bad arguments
        INVALID_ARGUMENT). The service loads the entry; the model's description and constants
        come back once (the app side validates requests against it, and a restart re-prepares
        it from the cache, or from the model if the entry is gone by then)."""
        pref, prio = check_preference_priority(preference, priority)
        where, tok = check_cache_args(cache_dir, token)
        if not isinstance(app, str):
            raise InvalidArgumentError(f"prepare_model_from_cache: app must be a str, got {app!r}")
        service = await self._ensure_started()
        options: dict[str, Any] = {"preference": pref, "priority": prio, "cache_dir": where, "token": tok}
        handle, cost_ns, wire = await service.call("prepare_cached", app, options)
        driver = _RemoteDriver(self, app, wire, options)
        driver.handle, driver.cost_ns, driver.service = handle, cost_ns, service
        return self._adopt(driver, model_from_wire(*wire), pref, prio)

    def _adopt(self, driver: _RemoteDriver, model: Model, pref: ExecutionPreference, prio: Priority) -> PreparedModel:
        """The app side's ``PreparedModel`` of a model the service prepared: released in the
        service when collected, re-prepared by a restart."""
        self._drivers.add(driver)
        driver.set_outputs(model)
        driver.dtypes = io_dtypes(model)
        prepared = PreparedModel(driver, model, _service_plan(model, driver), preference=pref, priority=prio, app=driver.app)
        weakref.finalize(prepared, driver.release)
        return prepared

    def allocate(
        self,
        desc: BufferDesc | Sequence[int],
        prepared_models: Sequence[PreparedModel],
        input_roles: Sequence[BufferRole] = (),
        output_roles: Sequence[BufferRole] = (),
    ) -> tuple[DeviceBuffer, BufferToken]:
        """A device buffer living in the service (``nnrt.process._buffers``): the CPU device's
        rules and errors (``nnrt.memory._domain``); DEAD_OBJECT when the prepared models'
        service is gone."""
        buffer, token = allocate_buffer(self, desc, prepared_models, input_roles, output_roles, cls=RemoteBuffer)
        assert isinstance(buffer, RemoteBuffer)
        try:
            service = self._running()
            drivers = [pm._driver for pm in prepared_models]
            for k, driver in enumerate(drivers):
                if driver.service is not service:  # type: ignore[attr-defined]
                    raise DeadObjectError(f"allocate: prepared model {k} was prepared by a service that is gone")
            handle = service.call_sync("allocate", buffer.app, buffer.dimensions, [d.handle for d in drivers],  # type: ignore[attr-defined]
                                       list(input_roles), list(output_roles))
        except BaseException:
            buffer.free()
            raise
        buffer.bind(service, handle, self._arena)
        return buffer, token

    def statistics(self) -> SchedulerStatistics:
        """The service's scheduler counters (``CpuDevice.statistics``: per app and priority),
        asked of the service (a dead one is restarted first: a new service's counters)."""
        return statistics_from_wire(self._running().call_sync("statistics"))

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
        self.buffer_domain = device  # its prepared models take the device's buffers (``domain_of``)
        self.out_specs: list[tuple[np.dtype[Any], tuple[int, ...]] | None] = []
        self.dtypes: tuple[list[Any], list[Any]] = ([], [])

    def __repr__(self) -> str:
        return f"<_RemoteDriver {self.name} app={self.app!r} handle={self.handle}>"

    async def reprepare(self, service: ServiceProcess) -> None:
        """Prepare the model on ``service`` (the first time)."""
        self.handle, self.cost_ns = await service.call("prepare", self.app, self.wire, self.options)
        self.service = service

    def reprepare_sync(self, service: ServiceProcess) -> None:
        """Prepare the model again on a new ``service`` (after a restart; blocking)."""
        self.handle, self.cost_ns = service.call_sync("prepare", self.app, self.wire, self.options)
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

    def set_outputs(self, model: Model) -> None:
        """Which outputs may come back through the arena: (dtype, dims) of each output of a
        known size of at least ``ARENA_MIN_BYTES``, else None."""
        specs: list[tuple[np.dtype[Any], tuple[int, ...]] | None] = []
        for i in model.output_indexes:
            op = model.operands[i]
            big = op.fully_specified and op.type.dtype.itemsize * math.prod(op.dimensions) >= ARENA_MIN_BYTES
            specs.append((op.type.dtype, op.dimensions) if big else None)
        self.out_specs = specs if any(specs) else []

    @staticmethod
    def _args(gen: _Gen, ctx: ExecContext) -> list[Any]:
        """Run the plan to its one step: the step's input values."""
        while next(gen) != DELEGATE:  # INTERRUPTED: nothing interrupts a one-step plan here
            pass
        _step, args = ctx.handoff
        return list(args)

    def _packet(self, service: ServiceProcess, args: list[Any], ctx: ExecContext,
                app: Hashable) -> tuple[int, list[Any], int, list[tuple[int, int]]] | None:
        """The request as a ring packet (``nnrt.process._transport``), or None: the socket
        (outputs the service writes in place, into the caller's pool or the arena, travel as
        the socket's ``PoolRef``/``BufRef``: not on the rings)."""
        if service.channel is None or type(app) is not str or self.out_specs or encode_outputs(ctx.outputs) is not None:
            return None
        rid = service.new_id()
        packed = encode_execute(rid, self.handle, app, args, ctx.deadline, ctx.loop_timeout, self.dtypes[0],
                                len(self.dtypes[1]), self.arena)
        return None if packed is None else (rid, *packed)

    def _request(self, args: list[Any], ctx: ExecContext, app: Hashable, staged: dict[int, np.ndarray]
                 ) -> tuple[tuple[Any, ...], list[tuple[int, int]]]:
        """The request for the socket, and the arena blocks it holds; ``staged`` gets the
        arena views of the outputs that come back through the arena."""
        values, blocks = encode_args(args, self.arena)
        bufs = ctx.outputs
        refs = encode_outputs(bufs)
        for j, spec in enumerate(self.out_specs):
            if spec is None or (refs is not None and refs[j] is not None):
                continue
            buf = bufs[j] if bufs is not None else None
            if buf is not None and (buf.shape != spec[1] or buf.dtype != spec[0]):
                continue  # a larger or reshaped caller buffer: by value, _finish handles it
            dtype, dims = spec
            block = self.arena.reserve(dtype.itemsize * math.prod(dims))
            if block is None:
                break  # the arena is full: by value
            name, offset, raw = block
            blocks.append((offset, raw.nbytes))
            staged[j] = raw.view(dtype).reshape(dims)
            refs = refs or [None] * len(self.out_specs)
            refs[j] = PoolRef(name, offset, dtype.str, dims)
        return ("execute", app, self.handle, values, ctx.deadline, ctx.loop_timeout, refs), blocks

    def _free(self, blocks: list[tuple[int, int]]) -> None:
        for offset, nbytes in blocks:
            self.arena.free(offset, nbytes)

    def run_now(self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority) -> tuple[list[Any], int]:
        blocks: list[tuple[int, int]] = []
        staged: dict[int, np.ndarray] = {}
        try:
            service = self._target()
            values = self._args(gen, ctx)
            packet = self._packet(service, values, ctx, app)
            if packet is not None:
                rid, parts, nbytes, blocks = packet
                sent, reply = service.ring_call_sync(rid, parts, nbytes, self.dtypes[1])
                if sent:
                    ring_outputs, ring_ns = reply
                    return _finish(gen, ctx, ring_outputs, ring_ns, staged)
                self._free(blocks)
                blocks = []
            (kind, *args), blocks = self._request(values, ctx, app, staged)
            outputs, device_ns = service.call_sync(kind, *args)
            return _finish(gen, ctx, outputs, device_ns, staged)
        finally:
            self._free(blocks)
            gen.close()

    async def drive(self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority) -> tuple[list[Any], int]:
        blocks: list[tuple[int, int]] = []
        staged: dict[int, np.ndarray] = {}
        try:
            service = self._target()
            values = self._args(gen, ctx)
            packet = self._packet(service, values, ctx, app)
            if packet is not None:
                rid, parts, nbytes, blocks = packet
                sent, reply = await service.ring_call(rid, parts, nbytes, self.dtypes[1])
                if sent:
                    ring_outputs, ring_ns = reply
                    return _finish(gen, ctx, ring_outputs, ring_ns, staged)
                self._free(blocks)
                blocks = []
            (kind, *args), blocks = self._request(values, ctx, app, staged)
            outputs, device_ns = await service.call(kind, *args)
            return _finish(gen, ctx, outputs, device_ns, staged)
        finally:
            self._free(blocks)
            gen.close()


def _finish(gen: _Gen, ctx: ExecContext, outputs: list[Any], device_ns: int,
            staged: dict[int, np.ndarray]) -> tuple[list[Any], int]:
    """Hand the service's outputs to the interpreter and let it end the plan (its last
    deadline check included). An output the service wrote in place (``InPlace``) is the
    caller's buffer (viewed with the result's shape when the buffer is flat or larger); one
    written into the arena (``staged``) is copied out of it now, before its block is freed:
    into the caller's array, or a new one."""
    for j, value in enumerate(outputs):
        if type(value) is InPlace:
            view = staged.get(j)
            if view is None:
                outputs[j] = _in_place(ctx.outputs[j], value.shape)
            elif ctx.outputs is not None and ctx.outputs[j] is not None:
                buf = ctx.outputs[j]
                buf[...] = view
                outputs[j] = buf
            else:
                outputs[j] = view.copy()
    ctx.handoff = outputs
    try:
        next(gen)
    except StopIteration as stop:
        return stop.value, device_ns
    raise InternalError("the service step did not end the plan")


def _in_place(buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if buf.shape == shape:
        return buf
    n = math.prod(shape)
    if n > buf.size:  # the service checked it: only a broken service gets here
        raise InternalError(f"the service wrote {n} elements in place into a buffer of {buf.size}")
    return buf.reshape(-1)[:n].reshape(shape)
