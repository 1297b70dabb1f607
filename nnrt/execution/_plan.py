"""Compiling a finished model into a ``Plan``: the flat step list an execution interprets.

Work done once here, so executions do not repeat it: every operation's kernel is prepared
(signature validated, constants decoded), operands become slots in a list (a slot is the
operand's index), constants are pre-filled in a template the execution copies, each step
knows which slots it reads (through a precomputed getter), writes, and may free afterwards
(temporaries are released after their last reader), and every step carries a cost estimate
that decides whether it may run on the event loop thread. IF and WHILE become steps that run
sub-plans, compiled once with their parent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from nnrt.errors import InvalidArgumentError
from nnrt.model import Model, Operand, dims_product
from nnrt.ops import OpCall, prepare_function
from nnrt.ops._registry import Kernel
from nnrt.types import OperandLifeTime, OperandType, OperationType

__all__ = ["DELEGATED", "IF", "KERNEL", "WHILE", "Plan", "Step", "compile_plan"]

#: Step kinds. A DELEGATED step is run by the plan's driver, not by a kernel: the interpreter
#: hands it over at a checkpoint (``nnrt.execution._interpreter``); a partitioned model's plan
#: is made of them, one per device step (``nnrt.framework``).
KERNEL, IF, WHILE, DELEGATED = 0, 1, 2, 3

#: A step whose estimated cost exceeds this runs on the device's worker thread.
DEFAULT_INLINE_LIMIT_NS = 100_000

#: Refusals in a row after which a plan's measured history is stale (``Plan.observe``).
STALE_AFTER_REFUSALS = 10
# Observations after which one outlier is clipped (``Plan.observe``).
_ESTABLISHED = 8


def _fetcher(ins: tuple[int, ...]) -> Callable[[list[Any]], tuple[Any, ...]]:
    if len(ins) == 0:
        return lambda slots: ()
    if len(ins) == 1:
        i = ins[0]
        return lambda slots: (slots[i],)
    return itemgetter(*ins)


@dataclass(slots=True, eq=False)
class Step:
    index: int
    type: OperationType
    label: str
    kind: int
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    fn: Kernel | None = None
    fetch: Callable[[list[Any]], tuple[Any, ...]] = field(default=lambda slots: ())
    #: The single output slot, or -1 when the step has several outputs.
    out: int = -1
    free: tuple[int, ...] = ()
    cost_ns: float = 0.0
    heavy: bool = False
    #: IF: (then, else); WHILE: (condition, body).
    branches: tuple[Plan, ...] = ()
    #: DELEGATED: what the driver runs for the step (opaque to the interpreter).
    target: Any = None


@dataclass(slots=True, eq=False)
class Plan:
    model: Model
    template: list[Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    steps: list[Step]
    has_control_flow: bool = False
    #: Service time of recent executions (exponential averages of the mean and of the absolute
    #: deviation, ns): refines the cost model that admission uses.
    observed_ns: float = 0.0
    observed_dev_ns: float = 0.0
    #: Executions refused on their deadline since the last observation (see ``refused``).
    refusals: int = 0
    #: Executions observed (since the last restart of the history).
    observations: int = 0
    #: Set by ``set_inline_limit``: the whole plan may run on the event loop thread.
    inline: bool = False

    def observe(self, service_ns: float) -> None:
        """Learn one execution's service time (starting from the calibrated cost).

        The first executions are taken as they come: calibration times the kernels alone, and a
        real execution also pays hand-offs, so early samples are what corrects it (a cold first
        run makes admission cautious for a while, the safe side). Once a history is established
        (``_ESTABLISHED`` samples), one outlier (the thread descheduled by the OS, a burst of page
        faults) must not multiply the estimate: a sample counts for at most four spreads above
        the mean, the spread being at least a quarter of the mean. A lasting change still moves
        the estimate by a quarter or more per execution, so it is learned within a few.
        After a long run of refusals the history is stale (see ``refused``): the estimate starts
        again from this sample, with a spread of a quarter of it.
        """
        if self.refusals >= STALE_AFTER_REFUSALS:
            self.observed_ns, self.observed_dev_ns = service_ns, 0.25 * service_ns
            self.observations = 1
            self.refusals = 0
            return
        mean = self.observed_ns or self.cost_ns
        sample = service_ns
        if self.observations >= _ESTABLISHED:
            sample = min(sample, mean + 4.0 * max(self.observed_dev_ns, 0.25 * mean))
        self.observed_dev_ns = 0.75 * self.observed_dev_ns + 0.25 * abs(sample - mean)
        self.observed_ns = 0.8 * mean + 0.2 * sample
        self.observations += 1
        self.refusals = 0

    def refused(self) -> None:
        """Admission refused an execution because this estimate alone does not fit before its
        deadline (MISSED_DEADLINE_PERSISTENT; a refusal for the work queued ahead says nothing
        about the estimate, and under overload decaying on those made admission optimistic).

        Refused executions are never measured, so an estimate pushed above the deadlines would
        refuse every later request and never learn otherwise (lock-in). Each refusal in a row
        shrinks the estimate's excess over the calibrated cost by 15%, until an execution is
        admitted and measured (a probe, in the spirit of TCP's after a timeout); after
        ``STALE_AFTER_REFUSALS`` refusals in a row that measurement replaces the history."""
        self.refusals += 1

    @property
    def admission_cost_ns(self) -> float:
        """What admission assumes an execution will take: the mean plus three mean deviations
        (in the spirit of TCP's retransmission timer), so jitter rarely makes an admitted job
        late. Under overload, larger margins measured better on both on-time throughput and
        misses up to about 4 (misses waste capacity); 6 left the device idle. Never below the
        calibrated cost; refusals decay the excess over it (``refused``)."""
        base = self.cost_ns
        estimate = self.observed_ns + 3.0 * self.observed_dev_ns
        if estimate <= base:
            return base
        if self.refusals:
            estimate = base + (estimate - base) * 0.85 ** min(self.refusals, 400)
        return estimate

    @property
    def output_operands(self) -> list[Operand]:
        return [self.model.operands[i] for i in self.outputs]

    @property
    def cost_ns(self) -> float:
        return sum(s.cost_ns for s in self.steps)

    def step_share(self) -> float:
        """The longest kernel step's share of the plan's cost (0..1): the part of an execution
        that runs without a checkpoint (control-flow steps have checkpoints inside)."""
        total = self.cost_ns
        longest = max((s.cost_ns for s in self.steps if s.kind == KERNEL), default=0.0)
        return 1.0 if total <= 0 else min(1.0, longest / total)

    def set_inline_limit(self, limit_ns: float, _seen: set[int] | None = None) -> None:
        """Decide, from the step costs, what may run on the event loop thread: each step
        (``heavy``), and the whole plan (``inline``: cheap and without control flow).
        Each sub-plan once: IF levels sharing a branch make a DAG with exponentially many paths."""
        seen = set() if _seen is None else _seen
        if id(self) in seen:
            return
        seen.add(id(self))
        self.inline = not self.has_control_flow and self.cost_ns <= limit_ns
        for step in self.steps:
            step.heavy = step.cost_ns > limit_ns
            for sub in step.branches:
                sub.set_inline_limit(limit_ns, seen)


def _estimate_ns(operation_outputs: list[Operand]) -> float:
    """A first guess before calibration: 1 µs plus 1 ns per output element."""
    elems = sum(dims_product(o.dimensions) if o.dimensions else 1 for o in operation_outputs)
    return 1000.0 + elems


def compile_plan(model: Model, *, where: str = "", _cache: dict[int, Plan] | None = None) -> Plan:
    """Compile ``model`` (finished) and every model it references. Raises INVALID_ARGUMENT."""
    if not model.finished:
        raise InvalidArgumentError(f"{where}the model is not finished")
    cache = {} if _cache is None else _cache
    if id(model) in cache:
        return cache[id(model)]
    ops = model.operands
    template: list[Any] = [op.value if op.is_constant else None for op in ops]
    steps: list[Step] = []
    has_cf = False
    for operation in model.operations:
        ins = tuple(operation.inputs)
        outs = tuple(operation.outputs)
        label = f"{where}operation {operation.index} ({operation.type.name})"
        in_ops = tuple(ops[i] for i in ins)
        out_ops = tuple(ops[i] for i in outs)
        if operation.type in (OperationType.IF, OperationType.WHILE):
            from nnrt.execution._control import check_control_flow

            has_cf = True
            kind = IF if operation.type is OperationType.IF else WHILE
            subs = check_control_flow(operation.type, label, in_ops, out_ops)
            branches = tuple(compile_plan(m, where=f"{label} > ", _cache=cache) for m in subs)
            step = Step(operation.index, operation.type, label, kind, ins, outs, branches=branches)
        else:
            prepare = prepare_function(operation.type)
            if prepare is None:
                raise InvalidArgumentError(f"{label}: the operation is not supported by this device")
            call = OpCall(operation.type, operation.index, in_ops, out_ops, model.relaxed, where)
            fn = prepare(call)
            step = Step(operation.index, operation.type, label, KERNEL, ins, outs, fn=fn)
        step.fetch = _fetcher(ins)
        step.out = outs[0] if len(outs) == 1 else -1
        step.cost_ns = _estimate_ns(list(out_ops))
        steps.append(step)
    _assign_frees(model, steps)
    plan = Plan(model, template, tuple(model.input_indexes), tuple(model.output_indexes), steps, has_cf)
    plan.set_inline_limit(DEFAULT_INLINE_LIMIT_NS)
    cache[id(model)] = plan
    return plan


def _assign_frees(model: Model, steps: list[Step]) -> None:
    """Free each temporary after its last reader (or right after its writer if unread)."""
    last: dict[int, int] = {}
    for k, step in enumerate(steps):
        for i in step.outs:
            last.setdefault(i, k)
        for i in step.ins:
            last[i] = k
    keep = set(model.output_indexes)
    frees: dict[int, list[int]] = {}
    for slot, k in last.items():
        op = model.operands[slot]
        if slot in keep or op.lifetime is not OperandLifeTime.TEMPORARY_VARIABLE:
            continue
        frees.setdefault(k, []).append(slot)
    for k, step in enumerate(steps):
        step.free = tuple(frees.get(k, ()))


def subgraph_of(op: Operand) -> Model | None:
    """The model a SUBGRAPH operand refers to."""
    if op.type is OperandType.SUBGRAPH and op.lifetime is OperandLifeTime.SUBGRAPH:
        return op.subgraph
    return None
