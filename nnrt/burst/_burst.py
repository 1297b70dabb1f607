"""``Burst``: the client side of a burst, made by ``PreparedModel.burst()``.

A burst streams executions of one prepared model through a bounded request channel to a
server task, and gets results back in order (NNAPI's burst, digest section 4)::

    async with prepared.burst() as burst:
        slot = burst.register_memory(nnrt.Memory(frames))       # once
        x = burst.location(slot, offset, length, dimensions)     # once per region
        result = await burst.execute([x], [y])                  # per frame

Rules, and why:

* **Slots.** ``register_memory`` caches a pool on the server side and returns its slot (a
  pool already registered keeps its slot; freed slots are reused, lowest first).
  ``release_memory(slot)`` evicts it at once: requests still queued that name it fail with
  INVALID_ARGUMENT, like any request naming an unknown slot. The client half of the cache,
  and the packing of a request into a packet over it, live in ``_slots.py``; this module is
  the burst's life cycle and the order and paths its requests take.
* **Plain arrays work too.** ``execute([x, y])`` with C-contiguous arrays of the model's
  dtypes registers them in transient slots for that one request (zero copy; outputs are
  allocated when the model's output dimensions are known). A request that a packet cannot
  express (lists, scalars, strided arrays, outputs of unknown size) runs as a normal
  ``prepared.execute`` when its turn comes: after every request already submitted, before
  any submitted later.
* **One execution at a time, in order.** The server runs one request at a time. A second
  concurrent ``execute`` (or ``submit``) is not refused (NNAPI's NDK may answer BAD_STATE):
  it *waits its turn* in the request channel, which is FIFO and bounded by
  ``max_in_flight``; a full channel makes ``submit`` wait for room (backpressure).
* **Pipelining.** ``fut = await burst.submit(...)`` queues a request and returns a future
  at once; a producer may have up to ``max_in_flight`` requests queued. Results resolve the
  futures in submission order.
* **At once.** A request naming only locations runs synchronously, before ``submit`` or
  ``execute`` returns (the future comes back resolved), when nothing is queued or running
  in the burst and the device may run the plan inline now (``Driver.can_run_now``: a cheap
  plan, nothing admitted), exactly when ``prepared.execute`` would take its own fast path.
  Same checks, statuses and scheduler accounting as the server; no packet, no channel, no
  task switch; on a ``CpuDevice`` the lean runner of ``_lane.py`` runs it on arguments
  validated once per set of location objects, so it costs less than ``prepared.execute``.
  ``execute`` of plain arrays, on the same conditions, runs at once too, on
  ``prepared.execute``'s own fast path (validated per request: about 1 us more than
  ``prepared.execute`` for the one-ADD model, against 50 us through the server's packets).
  Anything else (a busy device, requests already queued, arrays given to ``submit``, a heavy
  plan) queues for the server task, in order. Like ``execute``'s fast path it does not yield
  to the loop.
* **Worker batches.** For a plan too heavy for the loop, the server runs the requests queued
  at once as a batch on the device's worker, under one scheduler job that yields its unit
  between two requests when a more urgent execution wants it (``_lane.py``).
* **Polling window.** After each request the server polls for the next one for
  ``polling_window`` seconds before parking (NNAPI's sample server: 50 us; 0 when the
  prepared model's preference is LOW_POWER). See ``_channel.py`` and ``benchmarks/burst.py``.
* **Closing.** ``close()`` (or leaving the ``async with``, or cancelling its owner there)
  stops the server task (an execution in progress is cancelled; outputs are never left half
  written) and fails every request not yet answered with **DEAD_OBJECT**: the object they
  were sent to no longer exists, and the request may or may not have run, which is what
  DEAD_OBJECT tells NNAPI clients (GENERAL_FAILURE would claim the execution failed).
  Requests that ran at once were answered before ``submit`` returned: nothing of theirs is
  in flight. Using a closed burst is DEAD_OBJECT too. Slots, views and lanes are dropped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt._aio import Future, Task, create_future, in_trio, shield, spawn, wait_done
from nnrt._log import get_logger, vlog_enabled
from nnrt.burst._channel import Channel, ChannelClosed
from nnrt.burst._packet import Location, ResultPacket, client_args, shaped_outputs
from nnrt.burst._server import BurstServer
from nnrt.burst._slots import ClientSlots
from nnrt.errors import DeadObjectError, GeneralFailureError, InvalidArgumentError, NnrtError, error_for
from nnrt.execution import ExecutionResult
from nnrt.memory import Memory
from nnrt.types import ErrorStatus, ExecutionPreference

if TYPE_CHECKING:
    from nnrt.execution import PreparedModel

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "DEFAULT_POLLING_WINDOW_S", "Burst", "BurstStatistics"]

_log = get_logger("burst")

#: NNAPI's sample burst server polls 50 us before blocking.
DEFAULT_POLLING_WINDOW_S = 50e-6
DEFAULT_MAX_IN_FLIGHT = 64

_NEW, _OPEN, _CLOSED = 0, 1, 2


#: The types of ``outputs`` the client takes without a check (``client_args`` handles the rest).
_LISTS = (list, tuple, type(None))


def _plain(inputs: Any, outputs: Any) -> bool:
    """A request in lists or tuples naming no location (plain arrays, values, ``None``)."""
    return (type(inputs) in (list, tuple) and all(type(x) is not Location for x in inputs)
            and (outputs is None or (type(outputs) in (list, tuple) and all(type(y) is not Location for y in outputs))))


@dataclass(frozen=True, slots=True)
class BurstStatistics:
    """A snapshot of a burst's counters (``Burst.statistics()``): requests ``eager`` (server code
    in the caller's task) and ``inline`` (run at once), ``worker_batches`` run on the device's
    worker, the request channel's ``queued`` and ``max_queue_depth``, and its polling counters."""

    submitted: int
    completed: int
    failed: int
    fallbacks: int
    eager: int
    inline: int
    worker_batches: int
    queued: int
    max_queue_depth: int
    slots: int
    poll_hits: int
    blocking_waits: int
    polling_window: float


class _Pending:
    """A submitted request waiting for its result."""

    __slots__ = ("future", "outputs", "transient")

    def __init__(self, future: Future[ExecutionResult], outputs: list[np.ndarray], transient: tuple[int, ...]) -> None:
        self.future = future
        self.outputs = outputs
        self.transient = transient


class Burst:
    """A burst of executions of one prepared model (made by ``PreparedModel.burst``)."""

    def __init__(
        self,
        prepared: PreparedModel,
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        polling_window: float | None = None,
    ) -> None:
        if type(max_in_flight) is not int or max_in_flight < 1:
            raise InvalidArgumentError(f"burst: max_in_flight must be a positive integer, got {max_in_flight!r}")
        if polling_window is None:
            low_power = prepared.preference is ExecutionPreference.LOW_POWER
            polling_window = 0.0 if low_power else DEFAULT_POLLING_WINDOW_S
        if not isinstance(polling_window, (int, float)) or not 0 <= polling_window < 1:
            raise InvalidArgumentError(f"burst: polling_window must be in [0, 1) seconds, got {polling_window!r}")
        self._prepared = prepared
        self._requests: Channel[Any] = Channel(max_in_flight)
        self._server = BurstServer(prepared, self._requests, self._on_result, float(polling_window))
        self._task: Task | None = None
        self._state = _NEW
        self._pending: deque[_Pending] = deque()
        self._gate: Future[None] | None = None  # held while a fallback execution runs
        self._idle: Future[None] | None = None  # set when nothing is pending
        model = prepared.model
        #: The client half of the slot cache, and requests packed over it (``_slots``).
        self._slots = ClientSlots(self._server, [model.operands[i] for i in model.input_indexes],
                                  [model.operands[i] for i in model.output_indexes])
        self._submitted = self._completed = self._failed = self._fallbacks = self._eagers = self._inline = 0
        #: Run ``execute`` in the caller's task when the server is idle (benchmarks turn it off).
        self._eager = True
        #: Run requests naming locations at once on the device's inline fast path when it may
        #: (benchmarks turn it off to measure the server task).
        self._inline_ok = True
        self._driver = prepared._driver
        self._run_now = self._server.run_now_fn
        self._lanes = self._server.lanes  # read here, written by the server only
        #: The running loop's ``create_future`` (set by configure: the burst is open only after it).
        self._new_future: Callable[[], Future[Any]]

    def __repr__(self) -> str:
        state = ("new", "open", "closed")[self._state]
        return f"<Burst of {self._prepared!r} {state} pending={len(self._pending)} slots={len(self._slots)}>"

    # -- life cycle ----------------------------------------------------------------------------

    @property
    def polling_window(self) -> float:
        """Seconds the server polls for the next request before parking."""
        return self._server.poll_window

    @property
    def server_task(self) -> Task | None:
        """The server task (``None`` before ``configure``); done after ``close``."""
        return self._task

    async def configure(self) -> Burst:
        """Start the server task on the running loop (``async with`` does this)."""
        if self._state != _NEW:
            raise self._dead() if self._state == _CLOSED else InvalidArgumentError("burst: configure called twice")
        # asyncio's own create_future on the at-once path (a burst's per-request cost); trio's
        # future otherwise (``nnrt._aio``).
        self._new_future = create_future if in_trio() else asyncio.get_running_loop().create_future
        self._task = spawn(self._server.run(), f"nnrt-burst-{id(self):x}")
        self._task.add_done_callback(self._server_done)
        self._state = _OPEN
        if vlog_enabled("execution"):
            _log.debug("burst.configured", app=self._prepared.app, polling_window=self.polling_window,
                       max_in_flight=self._requests.capacity)
        return self

    async def close(self) -> None:
        """Stop the server, fail unanswered requests with DEAD_OBJECT, drop every slot."""
        if self._state == _CLOSED:
            return
        self._state = _CLOSED
        self._requests.close()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await wait_done(task)
        self._shut_down("the burst was closed")
        if vlog_enabled("execution"):
            _log.debug("burst.closed", app=self._prepared.app, completed=self._completed, failed=self._failed)

    async def __aenter__(self) -> Burst:
        return await self.configure()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    def _server_done(self, task: Task) -> None:
        if self._state == _OPEN:  # the server ended without close(): its loop is going away
            self._state = _CLOSED
            self._requests.close()
            self._shut_down("the burst's server task ended")

    def _shut_down(self, why: str) -> None:
        self._requests.drain()
        pending, self._pending = self._pending, deque()
        for entry in pending:
            fut = entry.future
            if not fut.done():
                fut.set_exception(DeadObjectError(f"{why} before this request was answered"))
                fut.exception()  # the closer knows; don't log "exception never retrieved"
        for waiter in (self._gate, self._idle):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        self._server.clear()
        self._slots.clear()

    def _dead(self) -> DeadObjectError:
        return DeadObjectError("the burst is closed")

    def _check_open(self) -> None:
        if self._state != _OPEN:
            raise self._dead() if self._state == _CLOSED else InvalidArgumentError("burst: not configured yet")

    # -- slot cache ----------------------------------------------------------------------------

    def register_memory(self, memory: Memory | np.ndarray) -> int:
        """Cache a memory pool on the server; return its slot (the same slot if already cached)."""
        self._check_open()
        if isinstance(memory, np.ndarray):
            memory = Memory(memory)
        if not isinstance(memory, Memory):
            raise InvalidArgumentError(f"register_memory: expected an nnrt.Memory, got {type(memory).__name__}")
        return self._slots.register(memory)

    def release_memory(self, slot: int) -> None:
        """Evict ``slot`` from the cache; requests naming it afterwards fail with INVALID_ARGUMENT."""
        self._check_open()
        if not self._slots.release(slot):
            raise InvalidArgumentError(f"release_memory: slot {slot!r} is not registered")

    def location(
        self, slot: int, offset: int = 0, length: int | None = None, dimensions: Sequence[int] | None = None
    ) -> Location:
        """A ``Location`` in a registered pool; ``length`` defaults to the rest of the pool;
        ``dimensions`` None means "as the model says", ``()`` rank 0 (``Location``)."""
        pool = self._slots.pools.get(slot)
        if pool is None:
            raise InvalidArgumentError(f"location: slot {slot!r} is not registered")
        if length is None:
            length = pool.size - offset
        return Location(slot, offset, length, None if dimensions is None else tuple(int(d) for d in dimensions))

    # -- executions ----------------------------------------------------------------------------

    async def execute(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[Any] | None = None,
        *,
        measure_timing: bool = False,
        deadline: float | None = None,
        loop_timeout: float | None = None,
    ) -> ExecutionResult:
        """Run one request through the burst and wait for its result (see ``submit``).

        When nothing is queued and the server is idle, the request runs in the caller's task:
        at once when it may (see the module docstring; plain arrays too, on
        ``prepared.execute``'s own fast path), else through the server's code without waking
        the server task (same checks, same execution, same result packet); otherwise it
        queues like ``submit``.
        """
        if type(inputs) is not list or type(outputs) not in _LISTS:
            inputs, outputs = client_args(inputs, outputs)
        if self._state == _OPEN and not self._pending and self._gate is None and not self._server.busy:
            if self._inline_ok and _plain(inputs, outputs) and self._driver.can_run_now(self._prepared.plan):
                # Plain arrays: ``prepared.execute``'s own fast path, without packet or future.
                self._submitted += 1
                self._inline += 1
                try:
                    result = self._prepared._execute_now(inputs, outputs, measure_timing, deadline, loop_timeout)
                except NnrtError:
                    self._failed += 1
                    raise
                self._completed += 1
                return result
            done = self._try_at_once(inputs, outputs, measure_timing, deadline, loop_timeout)
            if done is not None:
                return await done
            if self._eager:
                server = self._server
                packed = self._slots.pack(inputs, outputs, measure_timing, deadline, loop_timeout)
                if packed is not None and server.begin_eager():
                    packet, out_arrays, transient = packed
                    self._submitted += 1
                    self._eagers += 1
                    try:
                        result_packet = await server.serve(packet)
                    finally:
                        server.end_eager()
                        self._slots.release_transient(transient)
                    return self._result(result_packet, out_arrays)
                if packed is not None:
                    self._slots.release_transient(packed[2])
        fut = await self.submit(inputs, outputs, measure_timing=measure_timing, deadline=deadline, loop_timeout=loop_timeout)
        return await fut

    async def submit(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[Any] | None = None,
        *,
        measure_timing: bool = False,
        deadline: float | None = None,
        loop_timeout: float | None = None,
    ) -> Future[ExecutionResult]:
        """Queue one request; return a future for its ``ExecutionResult``.

        ``inputs`` (model order) are ``Location``s in registered pools, numpy arrays, or
        ``None`` for omitted optional inputs; ``outputs`` likewise (``None`` entries, or no
        list, are allocated). Waits for room when ``max_in_flight`` requests are queued. The
        future raises the ``NnrtError`` matching the result's status.

        A request naming only locations may run at once, before ``submit`` returns, its
        future already resolved (see the module docstring).
        """
        if type(inputs) is not list or type(outputs) not in _LISTS:
            inputs, outputs = client_args(inputs, outputs)
        if self._state == _OPEN and not self._pending and self._gate is None and not self._server.busy:
            done = self._try_at_once(inputs, outputs, measure_timing, deadline, loop_timeout)
            if done is not None:
                return done
        self._check_open()
        while self._gate is not None:
            await shield(self._gate)
            self._check_open()
        requests = self._requests
        if requests.full() or requests._writers:
            try:
                await requests.wait_for_space()
            except ChannelClosed:
                raise self._dead() from None
            while self._gate is not None:  # a fallback took the turn while we waited
                await shield(self._gate)
                self._check_open()
        packed = self._slots.pack(inputs, outputs, measure_timing, deadline, loop_timeout)
        if packed is None:
            return await self._fallback(inputs, outputs, measure_timing, deadline, loop_timeout)
        packet, out_arrays, transient = packed
        fut: Future[ExecutionResult] = self._new_future()
        requests.send_nowait(packet)
        self._pending.append(_Pending(fut, out_arrays, transient))
        self._submitted += 1
        return fut

    # -- the inline path -----------------------------------------------------------------------

    def _try_at_once(
        self, inputs: Sequence[Any], outputs: Sequence[Any] | None, measure: bool, deadline: Any, loop_timeout: Any
    ) -> Future[ExecutionResult] | None:
        """Run a request of locations at once if it may (the caller checked that the burst is
        open with nothing queued or running); its future comes back resolved. ``None``: queue it."""
        server = self._server
        if not self._inline_ok or not self._driver.can_run_now(self._prepared.plan):
            return None
        # The lane of the same location objects as an earlier request (a cached lane keeps its
        # locations alive, so no other object has their ids meanwhile).
        lane = None if outputs is None else self._lanes.get((*map(id, inputs), *map(id, outputs)))
        if lane is None:
            self._slots.check_counts(inputs, outputs)
            if outputs is None or not all(x is None or type(x) is Location for x in inputs):
                return None
            if not all(type(y) is Location for y in outputs):
                return None
        fut: Future[ExecutionResult] = self._new_future()
        self._submitted += 1
        self._inline += 1
        try:
            if lane is None:
                lane = server.lane(inputs, outputs)  # type: ignore[arg-type]
            result = self._run_now(lane, measure, deadline, loop_timeout)
            if not lane.exact:
                result.outputs = shaped_outputs(result.outputs, result.output_shapes)  # flat regions take the result's shape
        except NnrtError as exc:
            self._failed += 1
            fut.set_exception(exc)
        except Exception as exc:  # a location nobody foresaw: answer, as the server does
            self._failed += 1
            fut.set_exception(GeneralFailureError(f"bad request: {type(exc).__name__}: {exc}"))
        else:
            self._completed += 1
            fut.set_result(result)
        return fut

    def _send_raw(self, item: Any) -> Future[ExecutionResult]:
        """Queue any object as a request packet, unchecked (tests: malformed packets)."""
        self._check_open()
        fut: Future[ExecutionResult] = self._new_future()
        self._requests.send_nowait(item)
        self._pending.append(_Pending(fut, [], ()))
        self._submitted += 1
        return fut

    async def _fallback(
        self, inputs: Sequence[Any], outputs: Sequence[Any] | None, measure: bool, deadline: Any, loop_timeout: Any
    ) -> Future[ExecutionResult]:
        """Run a request the packet cannot express as a normal execution, in its turn."""
        gate = self._gate = create_future()
        fut: Future[ExecutionResult] = create_future()
        try:
            while self._pending:
                idle = self._idle = create_future()
                await shield(idle)
                self._check_open()
            self._fallbacks += 1
            self._submitted += 1
            try:
                result = await self._prepared.execute(
                    inputs, outputs, measure_timing=measure, deadline=deadline, loop_timeout=loop_timeout
                )
            except Exception as exc:
                self._failed += 1
                fut.set_exception(exc)
            else:
                self._completed += 1
                fut.set_result(result)
        finally:
            self._gate = None
            if not gate.done():
                gate.set_result(None)
        return fut

    # -- the result channel --------------------------------------------------------------------

    def _on_result(self, result: ResultPacket) -> None:
        """Read one result packet (called by the server as it writes it) and resolve its future."""
        pending = self._pending
        if not pending:  # closed under the server's feet; nothing is waiting any more
            return
        entry = pending.popleft()
        self._slots.release_transient(entry.transient)
        fut = entry.future
        if not fut.done():
            try:
                fut.set_result(self._result(result, entry.outputs))
            except NnrtError as exc:
                fut.set_exception(exc)
        elif result.status is ErrorStatus.NONE:
            self._completed += 1
        else:
            self._failed += 1
        if not pending and self._idle is not None:
            idle, self._idle = self._idle, None
            if not idle.done():
                idle.set_result(None)

    def _result(self, result: ResultPacket, arrays: list[np.ndarray]) -> ExecutionResult:
        """The ``ExecutionResult`` of a result packet, or raise the error its status names."""
        if result.status is ErrorStatus.NONE:
            self._completed += 1
            return ExecutionResult(shaped_outputs(arrays, result.output_shapes), result.output_shapes, result.timing)
        self._failed += 1
        raise error_for(result.status, result.message or "the burst execution failed", output_shapes=result.output_shapes)

    # -- introspection -------------------------------------------------------------------------

    def statistics(self) -> BurstStatistics:
        """Counters: requests submitted/completed/failed, fallbacks, queue, slots, polling."""
        ch = self._requests
        return BurstStatistics(
            submitted=self._submitted,
            completed=self._completed,
            failed=self._failed,
            fallbacks=self._fallbacks,
            eager=self._eagers,
            inline=self._inline,
            worker_batches=self._server.batches,
            queued=len(ch),
            max_queue_depth=ch.max_depth,
            slots=len(self._slots),
            poll_hits=ch.poll_hits,
            blocking_waits=ch.blocking_waits,
            polling_window=self.polling_window,
        )
