"""``ProcessDevice``: a device whose driver runs in a child process (issue 18).

The app side keeps the ``Device`` contract; the other half, a service process
(``nnrt.process._service``), runs an ordinary device (a ``CpuDevice``, or a
``RestrictedDevice`` from a config) with its own scheduler. A prepared model of a
``ProcessDevice`` is an ordinary ``PreparedModel`` (request validation, deadline checks,
outputs, timing, fenced executions, bursts: all its own code, the one execution path) whose
plan is one DELEGATED step and whose driver, ``RemoteDriver``, runs that step by sending the
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
import os
import threading
import weakref
from collections.abc import Generator, Sequence
from types import TracebackType
from typing import Any

from nnrt._log import get_logger
from nnrt.cache import check_cache_args
from nnrt.clock import Clock, MonotonicClock, default_clock
from nnrt.devices import Device, DeviceType, OperationSupport
from nnrt.devices._device import check_preference_priority, check_preparation_args
from nnrt.errors import DeadObjectError, InvalidArgumentError, MissedDeadlineError
from nnrt.execution import PreparedModel
from nnrt.memory import BufferDesc, BufferRole, BufferToken, DeviceBuffer
from nnrt.memory._domain import allocate_buffer
from nnrt.model import Model
from nnrt.process._arena import Arena
from nnrt.process._buffers import RemoteBuffer
from nnrt.process._client import ServiceProcess
from nnrt.process._driver import RemoteDriver, service_plan
from nnrt.process._wire import (
    model_from_wire,
    model_to_wire,
    statistics_from_wire,
)
from nnrt.sched import SchedulerStatistics
from nnrt.types import Capabilities, ErrorStatus, ExecutionPreference, Priority

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
    rings); ``poll_us`` is the shortest window each side polls its ring for before it sleeps on
    the doorbell (``nnrt.process._poll`` fits the window to the wait, up to 200 us; 0: never poll).
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
        self._drivers: weakref.WeakSet[RemoteDriver] = weakref.WeakSet()
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
        driver = RemoteDriver(self, app, model_to_wire(model), options)
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
        driver = RemoteDriver(self, app, wire, options)
        driver.handle, driver.cost_ns, driver.service = handle, cost_ns, service
        driver.device_s = cost_ns * 1e-9
        return self._adopt(driver, model_from_wire(*wire), pref, prio)

    def _adopt(self, driver: RemoteDriver, model: Model, pref: ExecutionPreference, prio: Priority) -> PreparedModel:
        """The app side's ``PreparedModel`` of a model the service prepared: released in the
        service when collected, re-prepared by a restart."""
        self._drivers.add(driver)
        driver.set_outputs(model)
        prepared = PreparedModel(driver, model, service_plan(model, driver), preference=pref, priority=prio, app=driver.app)
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
