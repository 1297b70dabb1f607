"""``PreparedModel``: a compiled model bound to a device; executions are coroutines on it.

A prepared model is made by ``Device.prepare_model`` (no public constructor). It validates
each request against the model (count, dtype, rank, fixed dimensions: INVALID_ARGUMENT; a
request of plain arrays of the exact dtypes and dimensions in one pass, any other input by
input in ``nnrt.execution._request``),
refuses a deadline already passed (MISSED_DEADLINE_PERSISTENT, no compute spent), runs the
plan through its device's ``Driver`` and turns the plan's outputs into an
``ExecutionResult``: outputs written into caller arrays when given, actual output shapes,
and timing when asked for. Many executions of one prepared model may run concurrently: each
has its own slots; constants are shared and never written.

There is one execution path (``_start``): every entry point validates (or reuses a validated
request), makes the execution context, then either runs the plan at once through the driver's
``run_now`` (a cheap plan on an idle device, or ``execute_sync`` outside the scheduler) or
drives it through the device's scheduler (``drive``), and finishes in ``_finish``. The entry
points differ only in parameters; the device's part is the four ``Driver`` hooks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import operator
from collections.abc import Callable, Coroutine, Generator, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from nnrt._aio import Task
from nnrt._log import get_logger, vlog_enabled
from nnrt.clock import Clock, check_deadline, perf_ns
from nnrt.errors import GeneralFailureError, InvalidArgumentError, MissedDeadlineError, NnrtError, OutputInsufficientSizeError
from nnrt.execution._fenced import execute_fenced
from nnrt.execution._interpreter import DEFAULT_LOOP_TIMEOUT_S, MAX_LOOP_TIMEOUT_S, ExecContext, run_plan
from nnrt.execution._plan import Plan, fresh_outputs
from nnrt.execution._request import ResolvedOutputs, check_request, is_pool_arg
from nnrt.execution._upgrade import Upgradable
from nnrt.model import Model, Operand
from nnrt.types import TIMING_UNAVAILABLE, ErrorStatus, ExecutionPreference, OutputShape, Partition, Priority, Timing

if TYPE_CHECKING:
    from nnrt.burst import Burst

__all__ = ["Driver", "ExecutionResult", "PreparedModel", "resolve_loop_timeout", "set_burst_factory"]

_log = get_logger("execution")


@dataclass(slots=True)
class ExecutionResult:
    """What a successful execution returns."""

    outputs: list[np.ndarray]
    output_shapes: tuple[OutputShape, ...]
    timing: Timing = TIMING_UNAVAILABLE


class Driver(Protocol):
    """What a prepared model needs from its device to run a plan: four hooks behind the one
    execution path (``PreparedModel._start``).

    ``gen`` is the interpreter (``run_plan``) over the request; a driver resumes it until it
    returns the outputs, reacting to what it yields (``OFFLOAD``: continue off the event loop
    thread; ``INTERRUPTED``: ask the scheduler). Both runs return ``(outputs, ns spent
    computing)`` and raise the execution's ``NnrtError``. The interpreter checks the deadline
    before every step and once more after the last one, so no driver returns success after it.
    A partitioned model, or a device in another process, is one more implementation.
    """

    clock: Clock

    def runs_inline(self, plan: Plan) -> bool:
        """True when ``plan`` is cheap enough to run on the event loop thread (fenced
        executions of such plans run eagerly, without a task)."""
        ...

    def can_run_now(self, plan: Plan) -> bool:
        """True when ``plan`` may run at once, synchronously, on the calling thread (cheap,
        and nothing admitted could want its compute unit)."""
        ...

    def run_now(
        self, gen: Generator[int, None, list[Any]], ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority
    ) -> tuple[list[Any], int]:
        """Run the plan to its end on the calling thread: the fast path (after ``can_run_now``)
        and ``execute_sync`` outside the scheduler. Applies the idle-device admission test
        (MISSED_DEADLINE_PERSISTENT when the estimate cannot fit)."""
        ...

    async def drive(
        self, gen: Generator[int, None, list[Any]], ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority
    ) -> tuple[list[Any], int]:
        """Run the plan under the device's scheduler: admission, waiting for a unit,
        preemption at checkpoints, late success reported as MISSED_DEADLINE_TRANSIENT."""
        ...


#: Makes a prepared model's bursts. The burst layer sits above this one: it registers its
#: ``Burst`` here when imported (``set_burst_factory``), so this layer never imports it.
_burst_factory: Callable[..., Burst] | None = None


def set_burst_factory(factory: Callable[..., Burst]) -> None:
    """Register what ``PreparedModel.burst`` makes (called by ``nnrt.burst``)."""
    global _burst_factory
    _burst_factory = factory


def resolve_loop_timeout(loop_timeout: float | None) -> float:
    """NNAPI's loop timeout rule: None means the 2 s default; larger than 15 s is clamped."""
    if loop_timeout is None:
        return DEFAULT_LOOP_TIMEOUT_S
    if not isinstance(loop_timeout, (int, float)) or loop_timeout != loop_timeout or loop_timeout < 0:
        raise InvalidArgumentError(f"loop_timeout must be a non-negative number of seconds, got {loop_timeout!r}")
    return min(float(loop_timeout), MAX_LOOP_TIMEOUT_S)


#: What the common request's check reads of each input (``PreparedModel._validate_request``).
_SIGNATURE = operator.attrgetter("__class__", "dtype", "shape")


class _InputSpec:
    __slots__ = ("dims", "dtype", "k", "operand", "scalar")

    def __init__(self, k: int, operand: Operand) -> None:
        self.k = k
        self.operand = operand
        self.dtype = operand.type.dtype
        self.dims = operand.dimensions
        self.scalar = operand.type.is_scalar


class PreparedModel(Upgradable):
    """A model prepared for one device. Made by ``Device.prepare_model``."""

    def __init__(
        self,
        driver: Driver,
        model: Model,
        plan: Plan,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        app: str = "default",
    ) -> None:
        self._driver = driver
        self.model = model
        self.plan = plan
        self.preference = preference
        self.priority = priority
        self.app = app
        self._inputs = [_InputSpec(k, model.operands[i]) for k, i in enumerate(model.input_indexes)]
        # Per input, what ``_SIGNATURE`` reads of an array of exactly its operand's dtype and
        # dimensions; None when some input is not a tensor of known dimensions: then every
        # request takes ``_validate_request``'s checks one by one.
        exact = [(np.ndarray, s.dtype, s.dims) for s in self._inputs if not s.scalar and s.operand.fully_specified]
        self._exact_inputs = exact if len(exact) == len(self._inputs) else None
        self._outputs = [model.operands[i] for i in model.output_indexes]
        # The OutputShape of an output whose result has exactly the model's dimensions (shared:
        # OutputShape is immutable), so the common case allocates none.
        self._exact_shapes = tuple(OutputShape(op.dimensions, True) for op in self._outputs)
        # Per output: its dtype, and the fewest elements a caller's buffer needs (0: unknown).
        self._out_dtypes = [op.type.dtype for op in self._outputs]
        self._out_min_size = [op.byte_size // op.type.dtype.itemsize if op.fully_specified else 0 for op in self._outputs]
        # What the output checks read, per output, in one tuple each (the hot path's loops).
        self._out_checks = tuple(zip(self._out_dtypes, self._out_min_size))
        self._out_dims = tuple(op.dimensions for op in self._outputs)
        # Per output: made by a step whose results are known fresh (``Step.fresh``): no copy.
        self._fresh_outputs = fresh_outputs(plan)
        self._all_fresh = bool(self._fresh_outputs) and all(self._fresh_outputs)
        self._upgrade = None
        #: Outputs whose size only the run tells (fenced executions need a buffer for them).
        self._unsized_outputs = [j for j, op in enumerate(self._outputs) if not op.fully_specified]
        self._n_executions = 0
        #: The event loop its async executions run on (``execute_sync`` from another thread
        #: goes through the scheduler there).
        self._loop: asyncio.AbstractEventLoop | None = asyncio._get_running_loop()
        #: Set by the framework (``nnrt.prepare``) for a model partitioned across devices.
        self._partitions: tuple[Partition, ...] | None = None
        # Fenced executions run as tasks owned by the prepared model (kept here so they are
        # neither garbage-collected nor lost while running).
        self._tasks: set[Task] = set()

    def __repr__(self) -> str:
        return f"<PreparedModel {self.model.name or hex(id(self.model))} priority={self.priority.name} app={self.app!r}>"

    @property
    def partitions(self) -> tuple[Partition, ...]:
        """The steps this model runs as: each step's device and the model's operations in it
        (one step, the whole model, unless ``nnrt.prepare`` partitioned it)."""
        if self._partitions is None:
            name = str(getattr(self._driver, "name", type(self._driver).__name__))
            self._partitions = (Partition(name, tuple(range(len(self.model.operations)))),)
        return self._partitions

    # -- public execution API ------------------------------------------------------------------

    async def execute(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[np.ndarray | None] | None = None,
        *,
        measure_timing: bool = False,
        deadline: float | None = None,
        loop_timeout: float | None = None,
    ) -> ExecutionResult:
        """Run the model on ``inputs`` (model order; ``None`` for an omitted optional input).

        ``inputs`` are numpy arrays of each input's dtype and shape (or ``MemoryLocation`` /
        ``DeviceBuffer`` views); they are validated at the call and read while the execution
        runs, so do not change them until it returns. ``outputs``, when given, are arrays
        written in place (``None`` entries are allocated) before the call returns; on failure
        their contents are unspecified. ``deadline`` is an absolute time on the device clock
        (``nnrt.deadline_after``); ``loop_timeout`` bounds each WHILE loop (default 2 s,
        at most 15 s); ``measure_timing`` fills ``ExecutionResult.timing``.

        Raises (every one an ``NnrtError`` with ``.status``):

        - ``InvalidArgumentError`` (INVALID_ARGUMENT): wrong number of inputs or outputs, a
          wrong dtype or shape (named by position), a bad deadline or loop timeout; nothing ran.
        - ``OutputInsufficientSizeError`` (OUTPUT_INSUFFICIENT_SIZE): an output buffer too
          small for the result; ``.output_shapes`` gives the sizes needed.
        - ``MissedDeadlineError``: PERSISTENT when the deadline had passed at the call or cannot
          be met even on an idle device (no compute spent); TRANSIENT when refused because of
          work ahead, expired while queued, aborted at an operation boundary, or a WHILE loop
          ran past ``loop_timeout``.
        - ``ResourceExhaustedError`` (RESOURCE_EXHAUSTED_TRANSIENT): the app's queue is full.
        - ``GeneralFailureError`` (GENERAL_FAILURE): a kernel failed at run time, or an input
          device buffer was never written; ``DeadObjectError`` once the device is closed.
        """
        t0 = perf_ns() if measure_timing else 0
        try:
            args, bufs = self._validate_request(inputs, outputs)
            run = self._start(args, bufs, measure_timing, t0, deadline, loop_timeout)
            # A cheap plan on an idle device has finished already: no coroutine to await.
            return run if type(run) is ExecutionResult else await run  # type: ignore[misc]
        except NnrtError as err:
            self._log_failure(err)
            raise

    # -- the one execution path ------------------------------------------------------------------
    #
    # Every entry point (``execute``, ``execute_sync``, a burst's requests, fenced executions)
    # goes through ``_start``, or through its two halves ``_now`` and ``_driven`` when it must
    # choose itself (a fenced stage), and ends in ``_finish``. What differs between them is a
    # parameter (arguments validated already, where to run) or a driver hook; the deadline is
    # checked by the interpreter before each step and after the last one, and again by the
    # scheduler when a driven job completes.

    def _start(
        self, args: list[Any], bufs: Any, measure: bool, t0: int, deadline: float | None, loop_timeout: float | None,
        *, now: bool = False,
    ) -> ExecutionResult | Coroutine[Any, Any, ExecutionResult]:
        """Run a validated request: at once when the driver may (or ``now``: run it here,
        whatever the device is doing), returning the result; otherwise return the coroutine
        that drives it through the device's scheduler."""
        ctx = self._context(deadline, loop_timeout)
        if bufs is not None:
            ctx.outputs = bufs
        driver, plan = self._driver, self.plan
        if plan.dynamic:
            ctx.cost = plan.cost_for(args)
        if now or driver.can_run_now(plan):  # ``_now``, inlined: this is every cheap execution
            results, device_ns = driver.run_now(run_plan(plan, args, ctx), ctx, plan, self.app, self.priority)
            return self._finish(results, bufs, args, measure, t0, device_ns)
        return self._driven(args, bufs, ctx, measure, t0)

    def _now(self, args: list[Any], ctx: ExecContext) -> tuple[list[Any], int]:
        """Run the plan to its end on the calling thread (``Driver.run_now``)."""
        plan = self.plan
        return self._driver.run_now(run_plan(plan, args, ctx), ctx, plan, self.app, self.priority)

    def _drive(self, args: list[Any], ctx: ExecContext) -> Coroutine[Any, Any, tuple[list[Any], int]]:
        """Run the plan under the device's scheduler: ``Driver.drive``'s coroutine, for the caller
        to await at once (a plain function, not a coroutine: no frame of its own per call)."""
        self._loop = asyncio._get_running_loop()  # (None on trio)
        plan = self.plan
        return self._driver.drive(run_plan(plan, args, ctx), ctx, plan, self.app, self.priority)

    async def _driven(self, args: list[Any], bufs: Any, ctx: ExecContext, measure: bool, t0: int) -> ExecutionResult:
        """``_drive``, then finish the request."""
        results, device_ns = await self._drive(args, ctx)
        return self._finish(results, bufs, args, measure, t0, device_ns)

    def _execute_now(
        self, inputs: Sequence[Any], outputs: Sequence[np.ndarray | None] | None, measure_timing: bool,
        deadline: float | None, loop_timeout: float | None,
    ) -> ExecutionResult:
        """``execute`` for a caller that checked ``can_run_now`` (a burst's request of plain
        arrays run at once): the same path, synchronously."""
        t0 = perf_ns() if measure_timing else 0
        try:
            args, bufs = self._validate_request(inputs, outputs)
            return self._start(args, bufs, measure_timing, t0, deadline, loop_timeout, now=True)  # type: ignore[return-value]
        except NnrtError as err:
            self._log_failure(err)
            raise

    async def _execute_validated(
        self, args: list[Any], bufs: Any, measure_timing: bool, deadline: float | None, loop_timeout: float | None
    ) -> ExecutionResult:
        """``execute`` on what ``_validate_request`` returned (bursts cache it per location set)."""
        try:
            run = self._start(args, bufs, measure_timing, perf_ns(), deadline, loop_timeout)
            return run if type(run) is ExecutionResult else await run  # type: ignore[misc]
        except NnrtError as err:
            self._log_failure(err)
            raise

    # ``execute_fenced`` is defined with the rest of fenced execution; bound here as a method
    # directly (no wrapper coroutine: a pipeline calls it once per stage).
    execute_fenced = execute_fenced

    def _track(self, task: Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def burst(self, *, max_in_flight: int = 64, polling_window: float | None = None) -> Burst:
        """A burst of executions of this model: ``async with prepared.burst() as b: await b.execute(...)``.

        A burst runs one execution at a time, in order, and caches memory pools by slot
        (``Burst.register_memory``). ``max_in_flight`` bounds the request channel (a full
        channel makes ``submit`` wait); ``polling_window`` is how long the server polls for
        the next request before parking (default 50 us, 0 for LOW_POWER). Errors are those of
        ``execute``, plus INVALID_ARGUMENT for an unknown or released slot (no shapes, no
        timing) and DEAD_OBJECT for requests still queued when the burst closes.
        """
        if _burst_factory is None:  # ``import nnrt`` always registers it
            raise GeneralFailureError("burst: the burst layer is not loaded (import nnrt.burst)")
        return _burst_factory(self, max_in_flight=max_in_flight, polling_window=polling_window)

    def execute_sync(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[np.ndarray | None] | None = None,
        *,
        measure_timing: bool = False,
        deadline: float | None = None,
        loop_timeout: float | None = None,
    ) -> ExecutionResult:
        """``execute`` for code without an event loop, blocking the calling thread.

        When the prepared model's event loop (the one it was prepared on, or its last driven
        execution ran on) is running in another thread, the execution goes through the
        device's scheduler there (admission, priorities, compute units, preemption) while this
        thread waits. Otherwise (no loop running, or called on a loop's own thread, where
        waiting would deadlock) it runs here, outside the scheduler: only the idle-device
        admission test applies, and it neither waits for nor holds a compute unit. Either way
        the deadline is checked before each operation and after the last one, so it never
        succeeds after its deadline. Arguments, results and errors are those of ``execute``.
        """
        loop = self._loop
        if loop is not None and loop.is_running() and asyncio._get_running_loop() is None:
            return self._execute_on(loop, inputs, outputs, measure_timing, deadline, loop_timeout)
        t0 = perf_ns() if measure_timing else 0
        try:
            args, bufs = self._validate_request(inputs, outputs)
            return self._start(args, bufs, measure_timing, t0, deadline, loop_timeout, now=True)  # type: ignore[return-value]
        except NnrtError as err:
            self._log_failure(err)
            raise

    def _execute_on(
        self, loop: asyncio.AbstractEventLoop, inputs: Sequence[Any], outputs: Sequence[np.ndarray | None] | None,
        measure_timing: bool, deadline: float | None, loop_timeout: float | None,
    ) -> ExecutionResult:
        """``execute`` on ``loop`` (running in another thread), waited for from this one."""
        coro = self.execute(inputs, outputs, measure_timing=measure_timing, deadline=deadline, loop_timeout=loop_timeout)
        try:
            fut = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop closed meanwhile: run here, outside the scheduler
            coro.close()
            self._loop = None
            return self.execute_sync(inputs, outputs, measure_timing=measure_timing, deadline=deadline,
                                     loop_timeout=loop_timeout)
        while True:
            try:
                return fut.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if not loop.is_running():  # the loop stopped under us: nobody will run it
                    fut.cancel()
                    raise GeneralFailureError("execute_sync: the device's event loop stopped before the execution ran") from None

    def _log_failure(self, err: NnrtError) -> None:
        """The summary event of a failed execution (successes log theirs in ``_finish``)."""
        if vlog_enabled("execution"):
            _log.debug("execution.completed", app=self.app, priority=self.priority.name, status=err.status.name,
                       error=str(err))

    # -- request handling -----------------------------------------------------------------------

    def _context(self, deadline: float | None, loop_timeout: float | None) -> ExecContext:
        if deadline is None and loop_timeout is None:
            return ExecContext(self._driver.clock, None, DEFAULT_LOOP_TIMEOUT_S)
        timeout = DEFAULT_LOOP_TIMEOUT_S if loop_timeout is None else resolve_loop_timeout(loop_timeout)
        clock = self._driver.clock
        if deadline is not None and clock.now() >= check_deadline(deadline, "execute"):
            raise MissedDeadlineError(
                "the deadline had passed before the execution started", status=ErrorStatus.MISSED_DEADLINE_PERSISTENT
            )
        return ExecContext(clock, deadline, timeout)

    def _validate_request(
        self, inputs: Sequence[Any], outputs: Sequence[np.ndarray | None] | None
    ) -> tuple[list[Any], Sequence[np.ndarray | None] | None]:
        exact = self._exact_inputs
        if exact is not None and (type(inputs) is list or type(inputs) is tuple):
            # The common request: plain arrays of exactly each operand's dtype and dimensions,
            # read in one pass (``map`` of an attrgetter: 0.9 us for seven inputs where the loop
            # below takes 1.3) and compared with what preparation worked out. Anything else (a
            # subclass, an equal dtype, a pool view, a wrong shape) takes the checks below,
            # which name the input.
            try:
                same = list(map(_SIGNATURE, inputs)) == exact
            except AttributeError:  # not an array: checked below
                same = False
            if same:
                if outputs is None:
                    return list(inputs), None
                if (type(outputs) is list or type(outputs) is tuple) and self._validate_outputs(outputs):
                    return list(inputs), outputs
        return self._check_request(inputs, outputs)

    def _check_request(
        self, inputs: Sequence[Any], outputs: Sequence[np.ndarray | None] | None
    ) -> tuple[list[Any], Sequence[np.ndarray | None] | None]:
        """``_validate_request`` input by input (``nnrt.execution._request.check_request``)."""
        return check_request(self, inputs, outputs)

    def _validate_outputs(self, outputs: Sequence[np.ndarray | None]) -> bool:
        """Check output arrays; False when one is a memory location or device buffer."""
        if isinstance(outputs, np.ndarray) or len(outputs) != len(self._outputs):
            raise InvalidArgumentError(f"the model has {len(self._outputs)} outputs, the request gives {len(outputs)}")
        for j, (buf, (dtype, min_size)) in enumerate(zip(outputs, self._out_checks)):
            if buf is None:
                continue
            if type(buf) is not np.ndarray and not isinstance(buf, np.ndarray):
                if is_pool_arg(buf):
                    return False
                raise InvalidArgumentError(f"output {j} ({self._outputs[j].label}): an output buffer must be a numpy array, "
                                           f"got {type(buf).__name__}")
            flags = buf.flags
            if buf.dtype != dtype or not (flags.writeable and flags.c_contiguous) or buf.size < min_size:
                self._reject_output(j, buf)
        return True

    def _reject_output(self, j: int, buf: np.ndarray) -> None:
        op = self._outputs[j]
        where = f"output {j} ({op.label})"
        if buf.dtype != op.type.dtype:
            raise InvalidArgumentError(f"{where} has dtype {buf.dtype}; the model's {op.type.name} needs {op.type.dtype}")
        if not buf.flags.writeable or not buf.flags.c_contiguous:
            raise InvalidArgumentError(f"{where}: an output buffer must be writeable and C-contiguous")
        raise InvalidArgumentError(f"{where}: a buffer of {buf.size} elements is too small for dimensions {list(op.dimensions)}")

    def _finish(
        self,
        results: list[Any],
        bufs: Sequence[np.ndarray | None] | None,
        args: list[Any],
        measure_timing: bool,
        t0: int,
        device_ns: int,
    ) -> ExecutionResult:
        if not measure_timing:
            if bufs is None:
                return self._finish_fast(results, args)
            if self._fill_into(results, bufs):
                return ExecutionResult(list(bufs), self._exact_shapes)  # type: ignore[arg-type]
        outs: list[np.ndarray] = []
        shapes: list[OutputShape] = []
        short = False
        for j, (op, value) in enumerate(zip(self._outputs, results)):
            arr = self._check_output(j, op, value)
            buf = None if bufs is None else bufs[j]
            if buf is None:
                # Never hand out a constant, a view, or a caller's own input array as an output.
                flags = arr.flags
                if not (flags.owndata and flags.writeable) or any(arr is a for a in args):
                    arr = arr.copy()
                outs.append(arr)
                shapes.append(OutputShape(arr.shape, True))
            elif buf.size < arr.size:
                short = True
                outs.append(buf)
                shapes.append(OutputShape(arr.shape, False))
            else:
                if arr.ctypes.data == buf.ctypes.data:
                    pass  # written in place already (``ExecContext.outputs``)
                elif buf.shape == arr.shape:
                    np.copyto(buf, arr)
                else:
                    buf.reshape(-1)[: arr.size] = arr.reshape(-1)
                outs.append(buf)
                shapes.append(OutputShape(arr.shape, True))
        if short:
            bad = [j for j, s in enumerate(shapes) if not s.is_sufficient]
            raise OutputInsufficientSizeError(f"output buffer(s) {bad} too small for the result", output_shapes=shapes)
        if type(bufs) is ResolvedOutputs:
            bufs.commit(outs, shapes)  # device-buffer outputs adopt their arrays
        timing = TIMING_UNAVAILABLE
        if measure_timing:
            total = perf_ns() - t0
            timing = Timing(min(device_ns, total), total)
        self._n_executions += 1
        if vlog_enabled("execution"):
            _log.debug("execution.completed", app=self.app, priority=self.priority.name, status="NONE", outputs=len(outs))
        return ExecutionResult(outs, tuple(shapes), timing)

    def _fill_into(self, results: list[Any], bufs: Sequence[np.ndarray | None]) -> bool:
        """Finish a request whose outputs all go into caller arrays of exactly the model's shapes
        (the common fenced pipeline): copy, count, log; False, having written nothing, otherwise."""
        if type(bufs) is ResolvedOutputs or not self._fill_exact(results, bufs):
            return False
        self._n_executions += 1
        if vlog_enabled("execution"):
            _log.debug("execution.completed", app=self.app, priority=self.priority.name, status="NONE", outputs=len(bufs))
        return True

    def _fill_exact(self, results: list[Any], bufs: Sequence[np.ndarray | None]) -> bool:
        """Copy results into caller buffers when every output has a buffer of exactly the
        model's shape and a result of that shape (the common fenced pipeline); False otherwise,
        having written nothing."""
        if len(results) == 1:  # most models: no loops
            value, buf, dims = results[0], bufs[0], self._out_dims[0]
            if (buf is None or type(value) is not np.ndarray or value.shape != dims or buf.shape != dims
                    or value.dtype != buf.dtype):
                return False
            if value is not buf:  # else written in place already (``ExecContext.outputs``)
                buf[...] = value
            return True
        for dims, value, buf in zip(self._out_dims, results, bufs):
            if (buf is None or type(value) is not np.ndarray or value.shape != dims or buf.shape != dims
                    or value.dtype != buf.dtype):
                return False
        for value, buf in zip(results, bufs):
            if value is not buf:  # else written in place already (``ExecContext.outputs``)
                buf[...] = value  # type: ignore[index]  # same shape and dtype: a plain copy (cheaper than np.copyto)
        return True

    def _finish_fast(self, results: list[Any], args: list[Any]) -> ExecutionResult:
        """``_finish`` for the common request: no output buffers, no timing."""
        if self._all_fresh:  # a compiled plan's outputs: the results list itself (the interpreter's own)
            self._n_executions += 1
            if vlog_enabled("execution"):
                _log.debug("execution.completed", app=self.app, priority=self.priority.name, status="NONE",
                           outputs=len(results))
            return ExecutionResult(results, self._exact_shapes)
        outs: list[np.ndarray] = []
        shapes: list[OutputShape] = []
        for j, (op, value, exact, fresh) in enumerate(zip(self._outputs, results, self._exact_shapes,
                                                          self._fresh_outputs)):
            if fresh:
                outs.append(value)
                shapes.append(exact)
                continue
            if type(value) is np.ndarray and value.shape == op.dimensions and value.dtype == op.type.dtype:
                arr, shape = value, exact
            else:
                arr = self._check_output(j, op, value)
                shape = OutputShape(arr.shape, True)
            # Never hand out a constant, a view, or a caller's own input array as an output.
            flags = arr.flags
            if not (flags.owndata and flags.writeable):
                arr = arr.copy()
            else:
                for a in args:
                    if a is arr:
                        arr = arr.copy()
                        break
            outs.append(arr)
            shapes.append(shape)
        self._n_executions += 1
        if vlog_enabled("execution"):
            _log.debug("execution.completed", app=self.app, priority=self.priority.name, status="NONE", outputs=len(outs))
        return ExecutionResult(outs, tuple(shapes))

    @staticmethod
    def _check_output(j: int, op: Operand, value: Any) -> np.ndarray:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=op.type.dtype)
        if arr.dtype != op.type.dtype:
            raise GeneralFailureError(f"output {j} ({op.label}): the kernel produced {arr.dtype}, not {op.type.dtype}")
        dims = op.dimensions
        if arr.shape == dims:
            return arr
        if dims and (len(dims) != arr.ndim or any(d and d != s for d, s in zip(dims, arr.shape))):
            raise GeneralFailureError(
                f"output {j} ({op.label}): the result has shape {list(arr.shape)}, the model says {list(dims)}"
            )
        return arr
