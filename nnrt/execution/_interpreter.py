"""The step interpreter: runs a ``Plan`` as a generator, so an execution can stop and resume.

``run_plan`` is a generator. On the fast path it never yields: it runs every step and returns
the output values (``StopIteration.value``). At each checkpoint (every step boundary, and
before every WHILE condition) it reads ``ctx.interrupt``; when that is set it yields
``INTERRUPTED`` and the driver decides what happens (abort, wait for the device, move to a
worker thread) before resuming it with ``next``. Because the state (next step, intermediate
tensors, loop variables) lives in the generator frames, resuming recomputes nothing. Before a
heavy step it yields ``OFFLOAD`` when it is running on the event loop thread, so the driver
can continue it on the device's worker thread.

Deadlines are checked at every checkpoint against ``ctx.clock``, and once more after the last
step (outputs computed after the deadline are no success, on any path): a passed deadline raises
MISSED_DEADLINE_TRANSIENT; a WHILE loop whose elapsed time exceeds ``ctx.loop_timeout`` after a
true condition does the same. Exceptions that escape a kernel other than ``NnrtError`` become
GENERAL_FAILURE naming the operation.

A DELEGATED step (a partitioned model's step, run on another device) is handed to the driver:
the interpreter puts ``(step, its input values)`` in ``ctx.handoff`` and yields ``DELEGATE``;
the driver runs it and puts the step's outputs (a list) back in ``ctx.handoff`` before
resuming. The interpreter stores them and frees temporaries as for any step.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np

from nnrt.clock import Clock, MonotonicClock, perf_ns
from nnrt.errors import GeneralFailureError, MissedDeadlineError, NnrtError, ResourceExhaustedError
from nnrt.execution._control import while_counts
from nnrt.execution._cost import CostModel
from nnrt.execution._plan import IF, KERNEL, OFFLOAD, SLICE, WHILE, Plan, Step
from nnrt.types import ErrorStatus

__all__ = [
    "DELEGATE", "INTERRUPTED", "OFFLOAD", "SLICE", "ExecContext", "fp_errors_ignored", "fp_errors_restored", "run_kernels",
    "run_plan",
]

INTERRUPTED, DELEGATE = 1, 3  # (OFFLOAD = 2 and SLICE = 4 are the plan's marks)

DEFAULT_LOOP_TIMEOUT_S = 2.0
MAX_LOOP_TIMEOUT_S = 15.0

Yield = Generator[int, None, list[Any]]

# Kernels run with numpy's floating-point warnings off (NNAPI wants IEEE results, not
# warnings). ``np.errstate`` costs ~2 us per use; setting numpy's context variable directly
# costs ~0.1 us, which matters on a 10 us execution. Fall back to errstate if numpy moves it.
try:
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj  # type: ignore[attr-defined]

    _IGNORE_ALL = _make_extobj(all="ignore")

    def fp_errors_ignored() -> Any:
        """Turn numpy floating-point warnings off in this context; returns a token."""
        return _extobj_contextvar.set(_IGNORE_ALL)

    def fp_errors_restored(token: Any) -> None:
        _extobj_contextvar.reset(token)

except ImportError:  # pragma: no cover - other numpy layouts

    def fp_errors_ignored() -> Any:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def fp_errors_restored(token: Any) -> None:
        token.__exit__(None, None, None)


class ExecContext:
    """Per-execution state shared by the interpreter and its driver."""

    __slots__ = ("clock", "cost", "deadline", "handoff", "interrupt", "loop_timeout", "on_loop", "outputs", "profile")

    def __init__(
        self,
        clock: Clock | None = None,
        deadline: float | None = None,
        loop_timeout: float = DEFAULT_LOOP_TIMEOUT_S,
        *,
        on_loop: bool = False,
        profile: dict[int, int] | None = None,
    ) -> None:
        self.clock = clock or MonotonicClock()
        self.deadline = deadline
        self.loop_timeout = loop_timeout
        #: Set (by another task or thread) to make the interpreter yield at the next checkpoint.
        self.interrupt = False
        #: True while the generator runs on the event loop thread (heavy steps yield OFFLOAD).
        self.on_loop = on_loop
        #: When a dict, step id -> nanoseconds spent in it (calibration).
        self.profile = profile
        #: The cost model of this request when not the plan's own (a dynamic plan's shape class).
        self.cost: CostModel | None = None
        #: A DELEGATED step and its inputs on the way to the driver, its outputs on the way back.
        self.handoff: Any = None
        #: The request's output buffers (None entries: allocated), when the caller gave any: a
        #: driver that runs the whole plan elsewhere may write into them in place (it then
        #: returns them as the outputs, and ``PreparedModel._finish`` does not copy them again).
        self.outputs: Any = None


def run_plan(plan: Plan, args: list[Any], ctx: ExecContext) -> Yield:
    """Run ``plan`` on input values ``args``; the generator's return value is the outputs."""
    deadline = ctx.deadline
    now = ctx.clock.now
    profile = ctx.profile
    whole = plan.whole
    if (whole is not None and profile is None and not ctx.interrupt and not (whole.stop and ctx.on_loop)
            and (deadline is None or now() < deadline)):
        # A plan of one kernel step from its inputs (then constants) to its outputs (a model
        # compiled into one program, one operation) with nothing to stop for before it: the
        # step on the arguments themselves, without the slots (1 us of the 15 us step of a
        # keyword spotter). Anything else (a deadline passed, an interrupt, a profile) takes
        # the loop below, which says so.
        return _run_whole(plan, whole, args, now, deadline)
    slots = plan.template.copy()
    for slot, value in zip(plan.inputs, args):
        slots[slot] = value
    for step in plan.steps:
        if ctx.interrupt:
            yield INTERRUPTED
        if deadline is not None and now() >= deadline:
            raise MissedDeadlineError(f"deadline passed before {step.label}", status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
        if step.stop and ctx.on_loop:
            yield step.stop
        # ``_kernel`` and ``_store`` inlined: two calls per step cost 50-90 ns, 10% of a chain
        # of 50 ADDs (measured); ``run_kernels`` calls them.
        if step.kind == KERNEL:
            t0 = perf_ns() if profile is not None else 0
            try:
                result = step.fn(*step.fetch(slots))  # type: ignore[misc]
            except NnrtError:
                raise
            except Exception as exc:
                raise kernel_failure(step.label, exc) from exc
            if profile is not None:
                profile[id(step)] = profile.get(id(step), 0) + perf_ns() - t0
        elif step.kind == IF:
            result = yield from _run_if(step, slots, ctx)
        elif step.kind == WHILE:
            result = yield from _run_while(step, slots, ctx)
        else:
            ctx.handoff = (step, step.fetch(slots))
            yield DELEGATE
            result, ctx.handoff = ctx.handoff, None
            if step.out >= 0:
                result = result[0]
        if step.out >= 0:
            slots[step.out] = result
        else:
            for slot, value in zip(step.outs, result):
                slots[slot] = value
        for slot in step.free:
            slots[slot] = None
    if deadline is not None and now() > deadline:
        raise _finished_late(plan)
    return [slots[i] for i in plan.outputs]


def _finished_late(plan: Plan) -> MissedDeadlineError:
    """The end-of-run check every path passes through: outputs computed after the deadline are
    not a success (the last step may have run across it)."""
    last = plan.steps[-1].label if plan.steps else "the plan"
    return MissedDeadlineError(f"deadline passed during {last}, the last step", status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)


def run_kernels(plan: Plan, args: list[Any], clock: Clock, deadline: float | None) -> list[Any]:
    """``run_plan`` to completion, without a generator, for a plan without control flow run
    where nothing can interrupt it (a burst's lean runner): the same deadline checks before
    each step, the same failures. Floating-point warnings are the caller's to turn off."""
    whole = plan.whole
    if whole is not None and (deadline is None or clock.now() < deadline):
        return _run_whole(plan, whole, args, clock.now, deadline)  # (see ``run_plan``)
    slots = plan.template.copy()
    for slot, value in zip(plan.inputs, args):
        slots[slot] = value
    for step in plan.steps:
        if deadline is not None and clock.now() >= deadline:
            raise MissedDeadlineError(f"deadline passed before {step.label}", status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
        _store(step, slots, _kernel(step, step.fetch(slots)))
    if deadline is not None and clock.now() > deadline:
        raise _finished_late(plan)
    return [slots[i] for i in plan.outputs]


def _run_whole(plan: Plan, whole: Step, args: list[Any], now: Callable[[], float], deadline: float | None) -> list[Any]:
    """``plan``'s one step (``Plan.whole``) on the arguments themselves, then the end-of-run
    deadline check."""
    tail = plan.whole_tail
    result = _kernel(whole, [*args, *tail] if tail else args)
    if deadline is not None and now() > deadline:
        raise _finished_late(plan)
    return [result] if whole.out >= 0 else result if type(result) is list else list(result)


def _kernel(step: Step, args: Sequence[Any]) -> Any:
    """Run a kernel step on its input values; an exception other than ``NnrtError`` is GENERAL_FAILURE."""
    try:
        return step.fn(*args)  # type: ignore[misc]
    except NnrtError:
        raise
    except Exception as exc:
        raise kernel_failure(step.label, exc) from exc


def kernel_failure(label: str, exc: Exception) -> NnrtError:
    """The error for an exception other than ``NnrtError`` escaping a kernel: memory the system
    could not give is RESOURCE_EXHAUSTED_TRANSIENT (results sized only at run time are refused
    before allocating, ``nnrt.ops._common.check_result_size``; this is the last line for the
    rest); anything else is a kernel bug, GENERAL_FAILURE."""
    if isinstance(exc, MemoryError):
        return ResourceExhaustedError(f"{label}: out of memory", status=ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT)
    return GeneralFailureError(f"{label} failed: {type(exc).__name__}: {exc}")


def _store(step: Step, slots: list[Any], result: Any) -> None:
    """Put a step's result(s) in their slots and free the temporaries it read last."""
    if step.out >= 0:
        slots[step.out] = result
    else:
        for slot, value in zip(step.outs, result):
            slots[slot] = value
    for slot in step.free:
        slots[slot] = None


def _truth(value: Any, step: Step) -> bool:
    arr = np.asarray(value)
    if arr.size != 1:
        raise GeneralFailureError(f"{step.label}: the condition has {arr.size} elements; expected 1")
    return bool(arr.reshape(-1)[0])


def _run_if(step: Step, slots: list[Any], ctx: ExecContext) -> Yield:
    args = step.fetch(slots)
    cond, values = args[0], list(args[3:])
    branch = step.branches[0] if _truth(cond, step) else step.branches[1]
    outs = yield from run_plan(branch, values, ctx)
    return outs if len(outs) != 1 or step.out < 0 else outs[0]


def _run_while(step: Step, slots: list[Any], ctx: ExecContext) -> Yield:
    cond_plan, body_plan = step.branches
    values = list(step.fetch(slots)[2:])
    m, k, _n = while_counts(len(step.ins), len(step.outs), body_plan.model)
    now = ctx.clock.now
    start = now()
    while True:
        if ctx.interrupt:
            yield INTERRUPTED
        if ctx.deadline is not None and now() >= ctx.deadline:
            raise MissedDeadlineError(f"deadline passed in {step.label}", status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
        (cond,) = yield from run_plan(cond_plan, values, ctx)
        if not _truth(cond, step):
            break
        if now() - start > ctx.loop_timeout:
            raise MissedDeadlineError(
                f"{step.label}: loop timeout of {ctx.loop_timeout:g} s exceeded",
                status=ErrorStatus.MISSED_DEADLINE_TRANSIENT,
            )
        values[: m + k] = yield from run_plan(body_plan, values, ctx)
    outs = values[:m]
    return outs if m != 1 or step.out < 0 else outs[0]
