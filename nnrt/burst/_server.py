"""The device side of a burst: the memory slot cache and the server task.

A ``BurstServer`` owns the pools its client registered, by slot (NNAPI's ``IBurstContext``
memory cache), and one task, ``run``, that reads request packets from the request channel,
executes them one at a time through the prepared model's normal execution (so validation,
deadlines, loop timeouts and the device's scheduling apply to a burst execution exactly as
to any other), and writes one result packet per request, in order, to the result channel.

Requests name their data by slot. The server resolves each ``Location`` to a zero-copy numpy
view of its pool (input views are read-only) and caches the views per location object, so a
stream that reuses its locations pays for slicing once: the analogue of NNAPI mapping each
pool once rather than per request. ``free_memory(slot)`` drops the pool and its views.

Failure rules (digest section 4): a packet whose form is wrong is GENERAL_FAILURE; a slot
that is unknown or released, or a range outside its pool, is INVALID_ARGUMENT with no shapes
and no timing; an execution failure keeps its own status (and its shapes, for
OUTPUT_INSUFFICIENT_SIZE). Nothing a client sends can end the server: every exception other
than cancellation becomes a result packet.

Lanes: the validated arguments of one set of location objects (input views, output views)
are a ``Lane`` (``_lane.py``), cached per set and indexed by slot (freeing a slot drops the
lanes naming it), so a stream that reuses its locations is resolved and validated once.
``run_now(lane, ...)`` runs a lane synchronously on the device's inline fast path: through the
lean runner on a ``CpuDevice``, else through ``Driver.run_now`` exactly as
``PreparedModel.execute`` does; no packet, no task switch, the outputs copied straight into
their pools. ``Burst`` uses it when nothing is queued or running and ``can_run_now`` holds.

Worker batches: for a plan too heavy for the loop (it runs on the device's worker), the task
takes the request it woke for and those queued behind it (up to ``MAX_BATCH``), checks them on
the loop, and runs them back to back on the worker under one scheduler job
(``LeanRunner.run_on_worker``): one hand-off per batch instead of two per request. Each
request keeps its own deadline inside the batch, and its result is written as it ends (in
order), not when the batch ends; requests the batch did not reach because the scheduler
wanted the unit are served next, before anything still in the channel.

Eager requests: when the server is idle and its channel empty, ``Burst.execute`` may also run a
request that cannot run at once in the caller's task (``begin_eager`` / ``serve`` /
``end_eager``) instead of waking the server task and waiting for it, which saves two task
switches per request; ``busy`` keeps the one-at-a-time rule across both paths (the server
task waits for an eager request to end).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt._aio import Future, create_future
from nnrt._log import get_logger
from nnrt.burst._channel import Channel, ChannelClosed
from nnrt.burst._lane import Lane, LeanRunner, Request
from nnrt.burst._packet import Location, RequestPacket, ResultPacket, check_header, check_location, decode_request
from nnrt.clock import perf_ns
from nnrt.errors import InvalidArgumentError, NnrtError
from nnrt.execution import ExecutionResult, run_plan
from nnrt.memory import Memory
from nnrt.types import ErrorStatus

if TYPE_CHECKING:
    from nnrt.execution import PreparedModel

__all__ = ["BurstServer"]

_log = get_logger("burst")

#: Cached views per slot before the slot's cache is cleared (a client making a new Location
#: per request would otherwise grow it without bound).
_MAX_VIEWS_PER_SLOT = 256


#: Requests a worker batch takes at most: enough to keep the worker busy while the client
#: reads the previous batch's results, few enough that results come back often.
MAX_BATCH = 16


def _refusal(exc: Exception) -> ResultPacket:
    """The result packet of a request refused before it ran: its status, no shapes, no timing."""
    if isinstance(exc, NnrtError):
        return ResultPacket(exc.status, message=str(exc.args[0]))
    return ResultPacket(ErrorStatus.GENERAL_FAILURE, message=f"bad request packet: {type(exc).__name__}: {exc}")


class BurstServer:
    """Executes a burst's request packets; made by ``Burst.configure``."""

    def __init__(
        self,
        prepared: PreparedModel,
        requests: Channel[Any],
        write_result: Callable[[ResultPacket], None],
        poll_window: float,
    ) -> None:
        self._prepared = prepared
        self._requests = requests
        self._write_result = write_result
        self.poll_window = poll_window
        self._pools: dict[int, Memory] = {}
        # slot -> {(direction, operand index, id(location)): (location, view)}; keeping the
        # location alive keeps its id from being reused while the entry exists.
        self._views: dict[int, dict[tuple[int, int, int], tuple[Location, np.ndarray]]] = {}
        model = prepared.model
        self._in_ops = [model.operands[i] for i in model.input_indexes]
        self._out_ops = [model.operands[i] for i in model.output_indexes]
        #: id(location) per input and output -> its lane (see ``lane``); the dict is never
        #: replaced, so a client may keep a reference to read it.
        self.lanes: dict[tuple[int, ...], Lane] = {}
        self._lanes_of: dict[int, list[tuple[int, ...]]] = {}  # slot -> keys of the lanes naming it
        self._cacheable = not any(op.type.is_scalar for op in self._in_ops)
        self._lean = LeanRunner.for_model(prepared)
        # Requests taken from the channel for a worker batch but not run (the unit was wanted
        # elsewhere): served next, before anything still in the channel.
        self._carry: deque[Any] = deque()
        self.served = 0
        #: Batches run on the device's worker (plans too heavy for the loop; see ``_serve_batch``).
        self.batches = 0
        #: True while a request is executing (in the server task or eagerly in a client's).
        self.busy = False
        self._eager_done: Future[None] | None = None

    # -- slot cache ----------------------------------------------------------------------------

    def add_memory(self, slot: int, memory: Memory) -> None:
        """Cache ``memory`` under ``slot`` (replacing whatever the slot held)."""
        if slot in self._pools:
            self._drop_lanes(slot)
        self._pools[slot] = memory
        self._views.pop(slot, None)

    def free_memory(self, slot: int) -> None:
        """Evict ``slot``; later requests naming it fail with INVALID_ARGUMENT."""
        self._pools.pop(slot, None)
        self._views.pop(slot, None)
        self._drop_lanes(slot)

    def _drop_lanes(self, slot: int) -> None:
        """Forget the lanes that name ``slot`` (their views belong to the old pool)."""
        lanes = self.lanes
        for key in self._lanes_of.pop(slot, ()):
            lanes.pop(key, None)

    @property
    def slots(self) -> int:
        return len(self._pools)

    def clear(self) -> None:
        self._pools.clear()
        self._views.clear()
        self.lanes.clear()
        self._lanes_of.clear()
        self._carry.clear()

    # -- the task ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve requests until the request channel is closed (or the task is cancelled)."""
        receive = self._requests.receive
        serve = self.serve
        write = self._write_result
        carry = self._carry
        requests = self._requests
        while True:
            if requests.closed:
                # Closing: stop before serving another request (on trio a cancellation waits
                # for a checkpoint, and a queued request is served without one); the burst
                # fails what is left with DEAD_OBJECT.
                return
            if carry:
                item = carry.popleft()
            else:
                try:
                    item = await receive(self.poll_window)
                except ChannelClosed:
                    return
            while self.busy:  # a client is running an eager request (``Burst.execute``)
                self._eager_done = create_future()
                await self._eager_done
            self.busy = True
            try:
                if self._lean is not None and not self._prepared.plan.inline:
                    await self._serve_batch(item)
                    continue
                result = await serve(item)
            finally:
                self.busy = False
            self.served += 1
            write(result)

    async def _serve_batch(self, first: Any) -> None:
        """Serve ``first`` and the requests queued behind it (up to ``MAX_BATCH``) in one run on
        the device's worker (``LeanRunner.run_on_worker``), and write their results in order.
        Requests the run did not reach (the scheduler wanted the unit) are served next."""
        items = [first]
        carry, channel = self._carry, self._requests
        while len(items) < MAX_BATCH and (carry or len(channel)):
            items.append(carry.popleft() if carry else channel.receive_nowait())
        lean = self._lean
        assert lean is not None
        results: list[ResultPacket | None] = [None] * len(items)
        batch: list[Request] = []
        where: list[int] = []
        for k, item in enumerate(items):
            try:
                packet = check_header(item) if type(item) is RequestPacket else decode_request(item)
                lane = self.lane(packet.inputs, packet.outputs)
            except Exception as exc:  # a packet nobody foresaw: answer, don't die
                results[k] = _refusal(exc)
                continue
            t0 = perf_ns()
            try:
                lean.admit(packet.deadline, packet.loop_timeout)
            except NnrtError as exc:
                self._prepared._log_failure(exc)
                results[k] = ResultPacket(exc.status, exc.output_shapes, message=str(exc.args[0]))
                continue
            batch.append((lane, packet.measure_timing, packet.deadline, t0))
            where.append(k)
        write = self._write_result
        written = 0
        live = True

        def flush() -> None:  # write the results ready, in order
            nonlocal written
            while live and written < len(items) and results[written] is not None:
                self.served += 1
                write(results[written])  # type: ignore[arg-type]
                written += 1

        def deliver(j: int, outcome: ExecutionResult | NnrtError) -> None:  # as each request ends
            if isinstance(outcome, NnrtError):
                results[where[j]] = ResultPacket(outcome.status, outcome.output_shapes, message=str(outcome.args[0]))
            else:
                results[where[j]] = ResultPacket(ErrorStatus.NONE, outcome.output_shapes, outcome.timing)
            flush()

        flush()  # refusals ahead of the first request to run
        if batch:
            self.batches += 1
            try:
                await lean.run_on_worker(batch, deliver)
            finally:
                live = False  # (a cancelled batch's late deliveries find the burst closed)
        flush_to = written
        for k in range(flush_to, len(items)):
            result = results[k]
            if result is None:  # not reached: it and those behind it go first next time
                carry.extendleft(reversed(items[k:]))
                return
            self.served += 1
            write(result)

    def begin_eager(self) -> bool:
        """Claim the server for a request run in the caller's task; False if it is busy."""
        if self.busy or len(self._requests) or self._carry:
            return False
        self.busy = True
        return True

    def end_eager(self) -> None:
        self.busy = False
        done, self._eager_done = self._eager_done, None
        if done is not None and not done.done():
            done.set_result(None)

    async def serve(self, item: Any) -> ResultPacket:
        """Execute one request (a ``RequestPacket`` or its flat datum form); never raises but cancellation."""
        try:
            packet = check_header(item) if type(item) is RequestPacket else decode_request(item)
            lane = self.lane(packet.inputs, packet.outputs)
        except Exception as exc:  # a packet nobody foresaw: answer, don't die
            return _refusal(exc)
        try:
            result = await self._prepared._execute_validated(
                lane.args, lane.bufs, packet.measure_timing, packet.deadline, packet.loop_timeout
            )
        except NnrtError as exc:
            return ResultPacket(exc.status, exc.output_shapes, message=str(exc.args[0]))
        except Exception as exc:
            _log.warning("burst.execution_failed", error=f"{type(exc).__name__}: {exc}")
            return ResultPacket(ErrorStatus.GENERAL_FAILURE, message=f"{type(exc).__name__}: {exc}")
        return ResultPacket(ErrorStatus.NONE, result.output_shapes, result.timing)

    # -- slot resolution -----------------------------------------------------------------------

    def lane(self, inputs: Sequence[Location | None], outputs: Sequence[Location]) -> Lane:
        """The validated arguments for these locations, cached per set of location objects.

        A stream that reuses its ``Location`` objects is validated against the model once
        (by the prepared model's own ``_validate_request``); later requests only look it up.
        Scalar inputs are read from their pool at validation, so requests with them are
        never cached. Raises the request's ``NnrtError`` (INVALID_ARGUMENT, or
        GENERAL_FAILURE for a malformed location).
        """
        locs = (*inputs, *outputs)
        key = tuple(map(id, locs))
        hit = self.lanes.get(key)
        if hit is not None:  # it keeps its locations alive: their ids are theirs
            return hit
        views_in, views_out = self._resolve(inputs, outputs)
        args, bufs = self._prepared._validate_request(views_in, views_out)
        exact = all(op.fully_specified and v.shape == op.dimensions for op, v in zip(self._out_ops, views_out))
        lane = Lane(locs, args, bufs, exact)
        if self._cacheable:
            if len(self.lanes) >= _MAX_VIEWS_PER_SLOT:
                self.lanes.clear()
                self._lanes_of.clear()
            self.lanes[key] = lane
            for loc in locs:
                if loc is not None:
                    self._lanes_of.setdefault(loc.slot, []).append(key)
        return lane

    @property
    def run_now_fn(self) -> Callable[[Lane, bool, float | None, float | None], ExecutionResult]:
        """``run_now``, or the lean runner's ``run`` that it would call (one layer fewer)."""
        return self.run_now if self._lean is None else self._lean.run

    def run_now(self, lane: Lane, measure: bool, deadline: float | None, loop_timeout: float | None) -> ExecutionResult:
        """Run ``lane`` synchronously on the device's inline fast path; the caller checked
        ``Driver.can_run_now`` (the device is idle and the plan cheap). Raises the
        execution's ``NnrtError``. On a ``CpuDevice`` the lean runner does it (``_lane.py``);
        otherwise this is ``PreparedModel.execute``'s fast path: same context, same driver
        call, same ``_finish`` (which writes the outputs into their pools only once every
        output is computed)."""
        if self._lean is not None:
            return self._lean.run(lane, measure, deadline, loop_timeout)
        prepared = self._prepared
        t0 = perf_ns()
        try:
            ctx = prepared._context(deadline, loop_timeout)
            plan = prepared.plan
            results, device_ns = prepared._driver.run_now(
                run_plan(plan, lane.args, ctx), ctx, plan, prepared.app, prepared.priority
            )
            result = prepared._finish(results, lane.bufs, lane.args, measure, t0, device_ns)
        except NnrtError as err:
            prepared._log_failure(err)
            raise
        return result

    def _resolve(
        self, inputs: Sequence[Location | None], outputs: Sequence[Location]
    ) -> tuple[list[np.ndarray | None], list[np.ndarray]]:
        if len(inputs) != len(self._in_ops) or len(outputs) != len(self._out_ops):
            raise InvalidArgumentError(
                f"the model has {len(self._in_ops)} inputs and {len(self._out_ops)} outputs; "
                f"the request gives {len(inputs)} and {len(outputs)}"
            )
        views_in: list[np.ndarray | None] = [None if loc is None else self._view(0, k, loc) for k, loc in enumerate(inputs)]
        views_out = [self._view(1, j, loc) for j, loc in enumerate(outputs)]
        return views_in, views_out

    def _view(self, direction: int, k: int, loc: Location) -> np.ndarray:
        views = self._views.get(loc.slot)
        if views is not None:
            hit = views.get((direction, k, id(loc)))
            if hit is not None and hit[0] is loc:
                return hit[1]
        view = self._make_view(direction, k, loc)
        views = self._views.setdefault(loc.slot, {})
        if len(views) >= _MAX_VIEWS_PER_SLOT:
            views.clear()
        views[direction, k, id(loc)] = (loc, view)
        return view

    def _make_view(self, direction: int, k: int, loc: Location) -> np.ndarray:
        op = (self._out_ops if direction else self._in_ops)[k]
        where = f"{'output' if direction else 'input'} {k} ({op.label})"
        check_location(where, loc)
        pool = self._pools.get(loc.slot)
        if pool is None:
            raise InvalidArgumentError(f"{where}: memory slot {loc.slot} is not registered (unknown or released)")
        offset, length = loc.offset, loc.length
        if offset < 0 or length < 0 or offset + length > pool.size:
            raise InvalidArgumentError(
                f"{where}: bytes [{offset}, {offset + length}) are outside the {pool.size}-byte pool in slot {loc.slot}"
            )
        dtype = op.type.dtype
        itemsize = dtype.itemsize
        if length % itemsize:
            raise InvalidArgumentError(f"{where}: a length of {length} bytes is not a whole number of {dtype} elements")
        raw = pool.buffer[offset : offset + length].view(dtype)
        given = loc.dimensions  # None: as the model says; a tuple, even (): this request's shape
        dims = op.dimensions if given is None else given
        if direction == 0:
            if op.type.is_scalar:
                dims = ()
            elif (given is None and not dims) or 0 in dims:
                raise InvalidArgumentError(f"{where}: dimensions {list(dims)} are not fully specified; give them in the location")
            need = math.prod(dims) * itemsize
            if need != length:
                raise InvalidArgumentError(f"{where}: dimensions {list(dims)} need {need} bytes, not {length}")
            view = raw.reshape(dims)
            view.flags.writeable = False
            return view
        if loc.dimensions:
            if math.prod(dims) * itemsize > length:
                raise InvalidArgumentError(f"{where}: dimensions {list(dims)} do not fit in {length} bytes")
            return raw[: math.prod(dims)].reshape(dims)
        if dims and 0 not in dims and math.prod(dims) * itemsize == length:
            return raw.reshape(dims)
        return raw
