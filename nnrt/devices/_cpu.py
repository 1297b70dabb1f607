"""``CpuDevice``: the reference device, running numpy kernels on the CPU.

Kernels never stall the event loop: a plan whose calibrated cost is small (or a tiny step of
a larger plan) runs inline on the loop thread, where a thread hop would cost more than the
work (about 60-100 µs on the reference machine); anything heavier, and every plan with
control flow (whose cost is unbounded), continues on the device's worker threads, one per
compute unit. Preparation compiles the plan in a thread, then calibrates it: one run on zero
inputs measures each step, and those measurements replace the first estimates.

When nothing else is admitted on the device, larger plans without control flow
(``Plan.sliced``) also run on the loop thread, saving two thread hand-offs that gain nobody
anything: at once when the whole plan fits one loop slice (1 ms of estimated kernel time,
``LOOP_SLICE_NS``), the loop getting a turn first when such executions back to back would hold
it for longer than a slice; otherwise admitted as usual and run one slice at a time, letting
the loop serve its other tasks, timers and I/O at each slice boundary. That boundary is a
checkpoint: an execution that arrived meanwhile is admitted there, and preempts or aborts the
running one as on a worker. A step longer than the slice sends the rest of the plan to a
worker, so the loop never stalls for longer than one slice. A plan whose cost calibration
cannot know (inputs of unknown dimensions, IF; never WHILE) runs there (at once, on an idle
device) only once its measured compute time, per shape class, is within the inline limit or
one slice (``_at_once_ns``). On the reference
machine, waking a worker and then the loop again cost 0.15-0.3 ms per execution
(``benchmarks/latency.py``), a tenth of a 2 ms model; on a loaded machine, milliseconds.

NNAPI priority can also reach the operating system (``low_priority_nice``, off by default,
Linux): LOW executions then run on worker threads of their own with a lower OS priority. It
is a trade-off, measured on the reference machine (2 vCPUs under KVM, two compute units;
``benchmarks/qos.py`` (e)). A LOW execution running *beside* a HIGH one no longer takes the
CPU the event loop thread needs to wake up for the HIGH work: the p99 of a HIGH model run on
the loop thread fell to 0.22-0.59x (4.1 -> 0.9 ms in one run), of one run on a worker to
0.85-1.04x. But a HIGH execution waiting *behind* LOW ones (every unit held by LOW work) waits
longer, since the niced LOW executions run slower (priority inversion; unprivileged threads
cannot raise their priority back): HIGH p50 1.01-1.19x, p99 up to 1.29x.

Process-wide settings are opt-in (``tune_process=True``, or each one on its own), because
they change the whole process, not just nnrt: BLAS pinned to one thread (``blas_threads``;
oversubscribing the cores with BLAS threads beside nnrt's workers ruins latency), the
interpreter's GIL switch interval shortened to 0.5 ms (``switch_interval_s``; while a worker
runs Python-level kernel code the event loop thread otherwise waits up to 5 ms for the GIL),
and glibc asked to keep freed multi-MB blocks mapped (``tune_malloc``; each execution
re-allocates its intermediates, and page faults on fresh mmaps cost a quarter of a
convolution network's time). ``benchmarks/settings.py`` measures what each one buys. nnrt's
own commands (``nnrt demo``, the simulator's real runs and calibration) opt in.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
from collections.abc import Generator, Hashable, Mapping, Sequence
from typing import Any, Literal

from nnrt._aio import checkpoint, wait_future
from nnrt._log import get_logger, vlog_enabled
from nnrt.clock import Clock, default_clock, perf_ns
from nnrt.devices._budget import MemoryLedger
from nnrt.devices._cpu_prepare import CpuPreparation
from nnrt.devices._device import (
    Device,
    DeviceType,
    OperationSupport,
    Restrictions,
    feature_level_reason,
)
from nnrt.devices._options import check_cpu_options
from nnrt.devices._tier import stop_upgrades
from nnrt.devices._tuning import init_low_worker, init_worker, pin_blas, tune_allocator
from nnrt.errors import InvalidArgumentError, MissedDeadlineError, NnrtError, error_for
from nnrt.execution import OFFLOAD, SLICE, ExecContext, Plan, PreparedModel, compile_plan
from nnrt.execution._cost import ESTABLISHED, CostModel
from nnrt.execution._interpreter import fp_errors_ignored, fp_errors_restored
from nnrt.execution._plan import DEFAULT_INLINE_LIMIT_NS, LOOP_SLICE_NS
from nnrt.memory import BufferDesc, BufferRole, BufferToken, DeviceBuffer, allocate_buffer
from nnrt.model import Model
from nnrt.ops import _jit
from nnrt.sched import Action, Job, Scheduler, SchedulerStatistics
from nnrt.types import Capabilities, ErrorStatus, Priority

__all__ = ["CpuDevice"]

_log = get_logger("driver")
_Gen = Generator[int, None, list[Any]]

#: nnrt's version string, reported as the device version.
VERSION = "0.1.0"
#: The GIL switch interval ``tune_process=True`` sets (the interpreter's default is 5 ms).
LATENCY_SWITCH_INTERVAL_S = 0.0005


def _resume(gen: _Gen) -> tuple[bool, Any, int]:
    """Run the interpreter in a worker thread until it finishes or yields."""
    t = perf_ns()
    try:
        reason = next(gen)
    except StopIteration as stop:
        return True, stop.value, perf_ns() - t
    return False, reason, perf_ns() - t


class CpuDevice(CpuPreparation, Device):
    """The reference CPU device (numpy kernels); ``nnrt.get_devices()`` makes one with the defaults."""

    #: What the device accepts, when it stands for a driver with limits (``RestrictedDevice``,
    #: a simulated device); None: every operation it has a kernel for (the reference device).
    restrictions: Restrictions | None = None

    def __init__(
        self,
        name: str = "nnrt-cpu",
        *,
        clock: Clock | None = None,
        compute_units: int | None = None,
        blas_threads: int | None = None,
        inline_limit_ns: float = DEFAULT_INLINE_LIMIT_NS,
        loop_slice_ns: float = LOOP_SLICE_NS,
        calibrate: bool = True,
        fairness: Literal["round_robin", "weighted"] = "weighted",
        app_weights: Mapping[Hashable, float] | None = None,
        aging: bool = True,
        aging_s: float = 0.25,
        max_queued_per_app: int = 256,
        memory_budget: int | None = None,
        app_memory_limit: int | None = None,
        switch_interval_s: float | None = None,
        tune_malloc: bool = False,
        low_priority_nice: int | None = None,
        tune_process: bool = False,
    ) -> None:
        """Create a CPU device; it starts its worker threads on first use (``close()`` stops them).

        ``compute_units`` (default: CPUs - 1, 1 to 4) bounds concurrent executions;
        ``inline_limit_ns`` is the estimated cost up to which a plan runs on the event loop
        thread, ``loop_slice_ns`` the longest the loop thread runs a larger plan's kernels at a
        time when nothing else is admitted (see the module docstring; 0 or at most the inline
        limit: never);
        ``fairness``/``app_weights`` share the device across apps; ``aging_s`` is how long a
        waiting class takes to climb one priority level; ``max_queued_per_app`` bounds each
        app's queue (RESOURCE_EXHAUSTED_TRANSIENT beyond); ``memory_budget`` and
        ``app_memory_limit`` bound what prepared models hold, in bytes; ``low_priority_nice``
        runs LOW executions on threads of lower OS priority (Linux; see the module docstring).

        Process-wide settings, all off unless asked for: ``blas_threads`` (limit BLAS to that
        many threads), ``switch_interval_s`` (shorten ``sys.setswitchinterval`` to it),
        ``tune_malloc`` (glibc keeps large freed blocks mapped). ``tune_process=True`` applies
        the recommended latency settings for those not given: one BLAS thread, 0.5 ms, malloc
        tuned. Each is applied once per process and never undone. Bad values raise
        ``InvalidArgumentError``.
        """
        check_cpu_options(name=name, compute_units=compute_units, blas_threads=blas_threads, inline_limit_ns=inline_limit_ns,
                          loop_slice_ns=loop_slice_ns, fairness=fairness, app_weights=app_weights, aging_s=aging_s,
                          max_queued_per_app=max_queued_per_app, memory_budget=memory_budget,
                          app_memory_limit=app_memory_limit, switch_interval_s=switch_interval_s)
        if tune_process:
            blas_threads = 1 if blas_threads is None else blas_threads
            switch_interval_s = LATENCY_SWITCH_INTERVAL_S if switch_interval_s is None else switch_interval_s
            tune_malloc = True
        self.name = name
        self.type = DeviceType.CPU
        self.version = VERSION
        self.feature_level = 7
        self.clock: Clock = clock or default_clock()
        cpus = os.cpu_count() or 1
        self.compute_units = compute_units or max(1, min(cpus - 1, 4))
        self.inline_limit_ns = inline_limit_ns
        #: The loop slice (``nnrt.execution._plan.LOOP_SLICE_NS``; 0: plans above the inline
        #: limit always run on a worker).
        self.loop_slice_ns = loop_slice_ns
        # Estimated compute time run at once on the loop thread since its last turn there.
        self._loop_debt_ns = 0.0
        self.calibrate = calibrate
        if low_priority_nice is not None and (
            isinstance(low_priority_nice, bool) or not isinstance(low_priority_nice, int) or not 0 <= low_priority_nice <= 19
        ):
            raise InvalidArgumentError(f"low_priority_nice: must be an int in [0, 19] or None, not {low_priority_nice!r}")
        #: OS niceness added to the threads running LOW executions (None or 0, the default: no
        #: separate threads; only on Linux, where a thread's priority can be set alone; see the
        #: module docstring for the trade-off).
        self.low_priority_nice = low_priority_nice if low_priority_nice and sys.platform.startswith("linux") else None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._low_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._capabilities: Capabilities | None = None
        #: The QoS scheduler every execution of this device goes through.
        self.scheduler = Scheduler(
            self.clock,
            self.compute_units,
            fairness=fairness,
            app_weights=app_weights,
            aging=aging,
            aging_s=aging_s,
            max_queued_per_app=max_queued_per_app,
        )
        #: Memory reserved by prepared models (RESOURCE_EXHAUSTED_* when over a limit).
        self.memory = MemoryLedger(memory_budget, app_memory_limit)
        if blas_threads is not None:
            pin_blas(blas_threads)
        if tune_malloc:
            tune_allocator()
        if switch_interval_s is not None and sys.getswitchinterval() > switch_interval_s:
            # While a worker runs Python-level kernel code, the event loop thread waits for the
            # GIL up to the switch interval (5 ms by default): too long for timers, hand-offs
            # and preemption. Process-wide, hence opt-in.
            sys.setswitchinterval(switch_interval_s)

    def statistics(self) -> SchedulerStatistics:
        """Per app and priority: queued, running, completed, preemptions, failures by status."""
        return self.scheduler.statistics()

    # -- workers ------------------------------------------------------------------------------

    @property
    def _workers(self) -> concurrent.futures.ThreadPoolExecutor:
        """The worker threads of every execution (but LOW ones when ``low_priority_nice`` is set)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.compute_units, thread_name_prefix=f"{self.name}-worker", initializer=init_worker
                )
            return self._pool

    def workers_for(self, priority: Priority) -> concurrent.futures.ThreadPoolExecutor:
        """The worker threads an execution of ``priority`` runs on: LOW ones on threads with a
        lower OS priority (``low_priority_nice``), the others on ``_workers``. The scheduler,
        not the pools, bounds how many run at once (``compute_units``)."""
        nice = self.low_priority_nice
        if priority is not Priority.LOW or nice is None:
            return self._workers
        with self._pool_lock:
            if self._low_pool is None:
                self._low_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.compute_units, thread_name_prefix=f"{self.name}-low",
                    initializer=init_low_worker, initargs=(nice,),
                )
            return self._low_pool

    def close(self) -> None:
        """Stop the worker threads (they are started again on demand) and the background
        compilation of this device's provisional plans (``nnrt.devices._tier``: they keep
        their numpy kernels)."""
        stop_upgrades(self)
        with self._pool_lock:
            pools, self._pool, self._low_pool = (self._pool, self._low_pool), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)

    def runs_lean(self) -> bool:
        """True when a burst may run this device's kernel-only plans with its lean runner
        (``nnrt.burst._lane``, which does what ``run_now`` does without the generator): only
        while neither ``run_now`` nor ``can_run_now`` is a subclass's own."""
        cls = type(self)
        return (cls.run_now, cls.can_run_now) == (CpuDevice.run_now, CpuDevice.can_run_now)

    # -- Device contract ----------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            from nnrt.devices._capabilities import measure_capabilities

            self._capabilities = measure_capabilities()
        return self._capabilities

    def supported_operations(self, model: Model) -> list[bool]:
        return [s.supported for s in self.operation_support(model)]

    def operation_support(self, model: Model) -> list[OperationSupport]:
        """Per operation: its feature level (and its operand types') within the device's, and
        its kernel accepting its signature (each operation compiled alone)."""
        if not isinstance(model, Model) or not model.finished:
            raise InvalidArgumentError("supported_operations: the model must be a finished Model")
        if self.restrictions is not None:
            return self.restrictions.support(model, self.name)
        result = []
        for operation in model.operations:
            reason = feature_level_reason(model, operation, self.feature_level)
            if not reason:
                try:
                    # (numba's cache lacking a kernel: its numpy twin, which accepts the same, answers)
                    with _jit.deferring(_jit.background()):
                        compile_plan(model.operation_as_model(operation.index))
                except NnrtError as err:
                    reason = f"its kernel rejects it: {err}"
            result.append(OperationSupport(operation.index, operation.type, not reason, reason))
        return result

    def allocate(
        self,
        desc: BufferDesc | Sequence[int],
        prepared_models: Sequence[PreparedModel],
        input_roles: Sequence[BufferRole] = (),
        output_roles: Sequence[BufferRole] = (),
    ) -> tuple[DeviceBuffer, BufferToken]:
        """A device buffer in host memory (memory domains; rules in ``nnrt.memory._domain``)."""
        return allocate_buffer(self, desc, prepared_models, input_roles, output_roles)

    # -- Driver protocol ----------------------------------------------------------------------

    def runs_inline(self, plan: Plan) -> bool:
        return plan.inline

    def runs_sliced(self, plan: Plan, job: Job) -> bool:
        """True when ``job``, just granted a unit, runs its sliced plan on the loop thread (see
        the module docstring): no other execution is admitted, and it is not a LOW execution
        meant for the niced threads (``low_priority_nice``)."""
        return (plan.sliced and self.scheduler.alone()
                and (job.priority is not Priority.LOW or self.low_priority_nice is None))

    def _at_once_ns(self, plan: Plan, cost: CostModel | None) -> float | None:
        """The compute time a request would hold the loop thread for, when it may run there at
        once on an idle device (else None): a plan within one loop slice (``Plan.idle_inline``),
        or, for a plan without WHILE whose cost calibration cannot know (inputs of unknown
        dimensions: per shape class; IF), a compute time measured on this machine
        (``CostModel.work_ns``, over ``ESTABLISHED`` executions or more) within the inline
        limit or one slice. Not admission's estimate, which counts the hand-offs and their
        jitter: on a loaded machine silero VAD's 0.5 ms step had a service time of 1.4-2.2 ms
        on the worker (estimates of 4-8 ms), which would have kept it there. (An IF branch
        never measured may take longer than those that were.)"""
        if plan.idle_inline:
            return plan.cost_ns
        if plan.has_loop or not (plan.dynamic or plan.has_control_flow):
            return None
        cost = cost or plan.cost
        if cost.observations < ESTABLISHED:
            return None
        return cost.work_ns if cost.work_ns <= self._loop_bound_ns() else None

    def _loop_bound_ns(self) -> float:
        """The longest the loop thread runs kernels between two turns of the loop."""
        limit = self.inline_limit_ns
        return self.loop_slice_ns if 0 < limit < self.loop_slice_ns else limit

    def can_run_now(self, plan: Plan) -> bool:
        """True when ``plan`` may run inline right now, bypassing the queue (the device is idle)."""
        return plan.inline and self.scheduler.idle()

    def run_now(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable = "default", priority: Priority = Priority.MEDIUM
    ) -> tuple[list[Any], int]:
        """The fast path, when ``can_run_now(plan)``: nothing is admitted, so a cheap plan runs to
        completion on the loop thread, where nothing can arrive to preempt it. Only the
        idle-device admission test applies (MISSED_DEADLINE_PERSISTENT if it cannot fit)."""
        if ctx.deadline is not None:
            try:
                self.refuse_if_late(ctx.cost or plan.cost, ctx.deadline)
            except MissedDeadlineError:
                gen.close()
                raise
        results = self._run_to_end(gen)
        self.scheduler.ran_fast(app, priority)
        # The cost model learns here too (nothing else ran meanwhile: the run is the service time).
        if ctx.cost is not None:
            ctx.cost.observe(results[1])
        elif plan.fast_countdown:
            plan.fast_countdown -= 1
        else:
            plan.observe_fast(results[1])
        return results

    def refuse_if_late(self, cost: CostModel, deadline: float) -> None:
        """The idle-device admission test: MISSED_DEADLINE_PERSISTENT when the estimate of
        ``cost`` (a plan's cost model) does not fit before ``deadline`` (and it learns of the
        refusal)."""
        cost_s = cost.estimate_ns / 1e9
        left = deadline - self.clock.now()
        if left <= 0:  # it passed since the call (a fenced execution waiting for its fences)
            raise MissedDeadlineError("the deadline passed before the execution could start",
                                      status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
        if cost_s > left:
            cost.refused()
            raise MissedDeadlineError(
                f"the execution needs about {cost_s * 1e3:.3f} ms, more than is left before its deadline",
                status=ErrorStatus.MISSED_DEADLINE_PERSISTENT,
            )

    async def drive(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable = "default", priority: Priority = Priority.MEDIUM
    ) -> tuple[list[Any], int]:
        sched = self.scheduler
        if self.can_run_now(plan):
            return self.run_now(gen, ctx, plan, app, priority)
        if sched.idle() and (at_once := self._at_once_ns(plan, ctx.cost)) is not None:
            # Within one loop slice: at once, as the fast path. An execution there never
            # suspends, so the loop gets a turn first when the ones run back to back since its
            # last turn here would hold it for longer than a slice (estimated, as the slices).
            if self._loop_debt_ns + at_once > self._loop_bound_ns():
                self._loop_debt_ns = 0.0
                await checkpoint()
            if sched.idle():  # (else something arrived meanwhile: through the scheduler)
                self._loop_debt_ns += at_once
                return self.run_now(gen, ctx, plan, app, priority)
        cost = ctx.cost or plan.cost
        cost_s = cost.estimate_ns / 1e9
        # On the loop thread nothing can interrupt it; on a worker it yields between steps.
        step_s = cost_s if self.runs_inline(plan) else cost_s * plan.step_share()
        job = Job(app, priority, cost=cost_s, deadline=ctx.deadline, step=step_s)
        try:
            sched.admit(job, ctx)  # raises the refusal (MISSED_DEADLINE_*, RESOURCE_EXHAUSTED_*)
        except MissedDeadlineError as err:
            if err.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT:  # the estimate alone is too long
                cost.refused()
            raise
        try:
            granted = await sched.wait_turn(job)
            results, device_ns, held_ns = await self._run_admitted(gen, ctx, plan, job, granted)
        except NnrtError as err:
            gen.close()
            sched.finish(job, err.status)
            raise
        except BaseException:
            sched.withdraw(job)
            raise
        status = sched.finish(job)
        if status is not ErrorStatus.NONE:
            raise error_for(status, "the execution completed after its deadline")
        # The cost model learns the service time (holding a unit, hand-offs included), which is
        # what admission must predict; kernel time alone underestimates it.
        cost.observe(held_ns, device_ns)
        return results, device_ns

    async def _run_admitted(
        self, gen: _Gen, ctx: ExecContext, plan: Plan, job: Job, granted: int
    ) -> tuple[list[Any], int, int]:
        """Run a job that holds a unit: inline or on a worker, stopping where the scheduler says.
        Returns (outputs, ns computing, ns holding the unit)."""
        sched = self.scheduler
        device_ns = held_ns = 0
        on_loop = self.runs_inline(plan) or self.runs_sliced(plan, job)
        if vlog_enabled("cpuexe"):
            where = ("slices" if plan.sliced else "loop") if on_loop else "worker"
            _log.debug("cpuexe.start", device=self.name, job=job.id, app=job.app, where=where, cost_us=job.cost * 1e6)
        while True:
            if on_loop:
                ctx.on_loop = True
                t = perf_ns()
                token = fp_errors_ignored()
                try:
                    reason = next(gen)
                except StopIteration as stop:
                    end = perf_ns()
                    if plan.sliced:  # its last slice counts towards the next at-once run's
                        self._loop_debt_ns = self._loop_bound_ns()
                    return stop.value, device_ns + end - t, held_ns + end - granted
                finally:
                    fp_errors_restored(token)
                device_ns += perf_ns() - t
            else:
                ctx.on_loop = False
                cf = self.workers_for(job.priority).submit(_resume, gen)
                try:
                    done, value, ns = await wait_future(cf)
                except BaseException:  # cancelled (asyncio or trio)
                    # The worker may still be inside a kernel: ask the interpreter to stop at
                    # the next checkpoint and close it once the worker lets go of it.
                    ctx.interrupt = True
                    cf.add_done_callback(lambda _f: gen.close())
                    raise
                device_ns += ns
                if done:
                    return value, device_ns, held_ns + perf_ns() - granted
                reason = value
            if reason == SLICE:
                # A loop slice ended: the loop serves its other work (an arrival is admitted
                # there), then the plan goes on here, unless that raised its interrupt flag.
                try:
                    await checkpoint()
                except BaseException:  # cancelled
                    gen.close()
                    raise
                if not ctx.interrupt:
                    continue
            elif reason == OFFLOAD:
                on_loop = False
                if vlog_enabled("cpuexe"):
                    _log.debug("cpuexe.offload", device=self.name, job=job.id, app=job.app)
                continue
            # INTERRUPTED: the scheduler raised the flag; ask it what to do here.
            remaining = max(0.0, job.cost - device_ns / 1e9)
            decision = sched.checkpoint(job, remaining)
            if decision.action is Action.ABORT:
                raise MissedDeadlineError("aborted at a checkpoint: the deadline cannot be met", status=decision.status)
            if decision.action is Action.YIELD:
                held_ns += perf_ns() - granted
                granted = await sched.wait_turn(job)

    def _run_to_end(self, gen: _Gen) -> tuple[list[Any], int]:
        """Resume the interpreter on the calling thread until it returns (its yields ignored)."""
        t = perf_ns()
        token = fp_errors_ignored()
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            return stop.value, perf_ns() - t
        finally:
            fp_errors_restored(token)
