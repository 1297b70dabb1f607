"""Compiling a finished model into a ``Plan``: the flat step list an execution interprets.

Work done once here, so executions do not repeat it: every operation's kernel is prepared
(signature validated, constants decoded), operands become slots in a list (a slot is the
operand's index), constants are pre-filled in a template the execution copies, each step
knows which slots it reads (through a precomputed getter), writes, and may free afterwards
(temporaries are released after their last reader), and every step carries a cost estimate
that decides whether it may run on the event loop thread. IF and WHILE become steps that run
sub-plans, compiled once with their parent. After the fusions, runs of steps that compiled
cores can do are merged into one compiled step each (``_compiled_plan``).

Where a plan runs is settled from those costs once, after calibration (``set_inline_limit``):
a plan within the inline limit runs whole on the loop thread; a larger plan without control
flow is *sliced*: its steps are cut into segments of at most the loop slice (``LOOP_SLICE_NS``),
each step that starts a segment marked ``SLICE``. When nothing else is admitted on the device,
its driver runs such a plan on the loop thread too, at once if it fits one slice
(``idle_inline``), else letting the loop serve its other work at each ``SLICE`` mark, instead of
paying two thread hand-offs (``nnrt.devices._cpu``). A step costlier than the slice is marked
``OFFLOAD``: the rest of the plan runs on a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from nnrt.errors import InvalidArgumentError
from nnrt.execution._compiled_plan import compile_segments
from nnrt.execution._concat_in_place import concat_in_place
from nnrt.execution._cost import ESTABLISHED, CostModel
from nnrt.execution._fuse import ConstantFolder, fuse_steps
from nnrt.model import Model, Operand, dims_product
from nnrt.ops import OpCall, prepare_function
from nnrt.ops._registry import Kernel
from nnrt.types import OperandLifeTime, OperandType, OperationType

__all__ = [
    "DELEGATED", "FAST_SAMPLE_EVERY", "IF", "KERNEL", "LOOP_SLICE_NS", "OFFLOAD", "SLICE", "WHILE", "Plan", "Step",
    "compile_plan",
]

#: Step kinds. A DELEGATED step is run by the plan's driver, not by a kernel: the interpreter
#: hands it over at a checkpoint (``nnrt.execution._interpreter``); a partitioned model's plan
#: is made of them, one per device step (``nnrt.framework``).
KERNEL, IF, WHILE, DELEGATED = 0, 1, 2, 3

#: A step whose estimated cost exceeds this runs on the device's worker thread.
DEFAULT_INLINE_LIMIT_NS = 100_000

#: The loop slice, unless given (``Plan.set_inline_limit``): the longest an event loop thread
#: with nothing else admitted runs a plan's kernels between two visits to its other work (a
#: thread hand-off there and back costs 0.15-0.3 ms on the reference machine). It applies when
#: the inline limit lies between 0 and it: a limit of 0 keeps every kernel off the loop thread.
LOOP_SLICE_NS = 1_000_000

#: What the interpreter yields before a step marked so (``Step.stop``) when it runs on the event
#: loop thread: OFFLOAD, continue on a worker thread; SLICE, a segment boundary of a sliced plan,
#: where the driver lets the loop run its other work (or moves the plan to a worker).
OFFLOAD, SLICE = 2, 4

#: The fast path measures one execution in this many (``Plan.sample_fast``): learning costs
#: about 0.2 us, too much for every 5 us execution, and a few samples suffice.
FAST_SAMPLE_EVERY = 16


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
    #: What the interpreter yields before this step on the loop thread: 0, OFFLOAD or SLICE.
    stop: int = 0
    #: IF: (then, else); WHILE: (condition, body).
    branches: tuple[Plan, ...] = ()
    #: DELEGATED: what the driver runs for the step (opaque to the interpreter).
    target: Any = None
    #: The kernel's results are arrays nothing else holds, none sharing memory with another
    #: (a compiled segment's, ``_compiled_plan``): handed out as outputs without a copy.
    fresh: bool = False

    @property
    def heavy(self) -> bool:
        """Too costly for the event loop thread: the plan continues on a worker before it."""
        return self.stop == OFFLOAD


@dataclass(slots=True, eq=False)
class Plan:
    model: Model
    template: list[Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    steps: list[Step]
    has_control_flow: bool = False
    #: A WHILE somewhere in the plan or its sub-plans: its cost has no bound.
    has_loop: bool = False
    #: Set by ``set_inline_limit``: the whole plan may run on the event loop thread.
    inline: bool = False
    #: Set by ``set_inline_limit``: the plan is cut into loop slices (``SLICE`` marks), so an
    #: idle device may run it on the event loop thread, segment by segment.
    sliced: bool = False
    #: Set by ``set_inline_limit``: the whole plan may run on the event loop thread when nothing
    #: else is admitted on the device (``inline``, or a sliced plan within one slice).
    idle_inline: bool = False
    #: Some input has unknown dimensions: the cost depends on the request (one cost model per
    #: shape class, ``cost_for``); the plan is never sliced, and runs on the event loop thread
    #: only at once, for a shape class measured within a slice (``CpuDevice._at_once_ns``).
    dynamic: bool = False
    #: Kernels this plan runs on numpy because their compiled cores were not in numba's disk
    #: cache at preparation (qualified names; empty: none). The device compiles them in the
    #: background and swaps in the compiled plan (``nnrt.devices._tier``).
    provisional: tuple[str, ...] = ()
    #: The cost model of the plan's executions (made at first use, from the calibrated cost).
    _cost: CostModel | None = None
    #: Shape class -> its cost model (dynamic plans).
    _classes: dict[int, CostModel] = field(default_factory=dict)
    #: Fast-path executions to go before the next one is measured (``observe_fast``).
    fast_countdown: int = 0
    _step_share: float = -1.0
    #: The plan's one step when it is a kernel from the plan's inputs (in their order, then
    #: constants: ``whole_tail``) to its outputs, in their order (a model compiled into one
    #: program, ``_compiled_plan``, or a one-operation model): the interpreter then calls it on
    #: the request's arguments, without slots (``run_plan``).
    whole: Step | None = field(init=False, default=None)
    #: The constant values (or None, omitted) ``whole`` reads after the plan's inputs.
    whole_tail: list[Any] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if len(self.steps) == 1:
            step, n = self.steps[0], len(self.inputs)
            if (step.kind == KERNEL and step.fn is not None and step.ins[:n] == self.inputs
                    and not set(step.ins[n:]) & set(self.inputs) and step.outs == self.outputs):
                self.whole = step
                self.whole_tail = [self.template[i] for i in step.ins[n:]]

    @property
    def cost(self) -> CostModel:
        """The cost model admission uses for this plan (``nnrt.execution._cost``)."""
        model = self._cost
        if model is None:
            model = self._cost = CostModel(self.cost_ns)
        elif not model.observations:
            model.prior_ns = self.cost_ns  # until measured, the (re)calibrated step costs
        return model

    def cost_for(self, args: list[Any]) -> CostModel:
        """The cost model of a request on ``args``: the plan's own, or, for a dynamic plan, its
        shape class's (the inputs' total elements by power of two). A class not measured yet
        starts from the largest cost measured for a smaller one, scaled by size: unknown sizes
        are not assumed cheap."""
        if not self.dynamic:
            return self.cost
        key = sum(int(getattr(a, "size", 1)) for a in args).bit_length()
        model = self._classes.get(key)
        if model is None:
            known = [m.estimate_ns * 2.0 ** (key - k) for k, m in self._classes.items() if m.observations and k <= key]
            model = self._classes[key] = CostModel(max(known, default=self.cost_ns))
        return model

    def observe_fast(self, service_ns: float) -> None:
        """Learn a fast-path execution's service time when ``fast_countdown`` is 0 (callers
        count it down otherwise): one in ``FAST_SAMPLE_EVERY`` is measured, and every one until
        the cost model has a history."""
        cost = self.cost
        cost.observe(service_ns)
        self.fast_countdown = FAST_SAMPLE_EVERY - 1 if cost.observations >= ESTABLISHED else 0

    def observe(self, service_ns: float) -> None:
        """Learn one execution's service time (``CostModel.observe``)."""
        self.cost.observe(service_ns)

    def refused(self) -> None:
        """An execution was refused because the estimate alone did not fit (``CostModel.refused``)."""
        self.cost.refused()

    @property
    def admission_cost_ns(self) -> float:
        """What admission assumes an execution will take (``CostModel.estimate_ns``)."""
        return self.cost.estimate_ns

    @property
    def output_operands(self) -> list[Operand]:
        return [self.model.operands[i] for i in self.outputs]

    @property
    def cost_ns(self) -> float:
        return sum(s.cost_ns for s in self.steps)

    def step_share(self) -> float:
        """The share of the plan's cost (0..1) that runs without a checkpoint another execution
        could act at: the longest kernel step (on a worker, control-flow steps have checkpoints
        inside), or for a sliced plan the longest segment (on the loop thread, an arrival is
        admitted only at a ``SLICE`` mark). Worked out once per ``set_inline_limit``."""
        share = self._step_share
        if share < 0:
            total = self.cost_ns
            longest = max((s.cost_ns for s in self.steps if s.kind == KERNEL), default=0.0)
            if self.sliced:
                longest = max(longest, max(_segments(self.steps), default=0.0))
            share = self._step_share = 1.0 if total <= 0 else min(1.0, longest / total)
        return share

    def set_inline_limit(
        self, limit_ns: float, _seen: dict[int, bool] | None = None, *, slice_ns: float | None = None
    ) -> None:
        """Decide, from the step costs, what may run on the event loop thread: the whole plan
        (``inline``: cheap and without control flow), or else, without control flow, its
        segments of at most ``slice_ns`` (``sliced``, when the limit is positive and below the
        slice, default ``LOOP_SLICE_NS``; ``idle_inline`` when the plan fits one segment); and
        before which steps the interpreter stops on the loop thread (``Step.stop``: OFFLOAD
        before a step above the limit, or above the slice in a sliced plan; SLICE where a
        segment begins). Nothing of a dynamic plan runs there: its costs are unknown until a
        request tells its sizes. Each sub-plan is visited once per value of its ``dynamic``
        flag: IF levels sharing a branch make a DAG with exponentially many paths."""
        seen: dict[int, bool] = {} if _seen is None else _seen
        if seen.get(id(self)) is self.dynamic:
            return
        seen[id(self)] = self.dynamic
        slice_ns = LOOP_SLICE_NS if slice_ns is None else slice_ns
        self.inline = not self.has_control_flow and not self.dynamic and self.cost_ns <= limit_ns
        self.sliced = not (self.inline or self.has_control_flow or self.dynamic) and 0 < limit_ns < slice_ns
        self.idle_inline = self.inline or (self.sliced and self.cost_ns <= slice_ns)
        self._step_share = -1.0
        run = 0.0  # the cost of the segment so far (sliced plans)
        for step in self.steps:
            cost = step.cost_ns
            if not self.sliced:
                step.stop = OFFLOAD if self.dynamic or cost > limit_ns else 0
            elif cost > slice_ns:
                step.stop, run = OFFLOAD, 0.0
            elif run and run + cost > slice_ns:
                step.stop, run = SLICE, cost
            else:
                step.stop, run = 0, run + cost
            for sub in step.branches:
                sub.dynamic = sub.dynamic or self.dynamic
                sub.set_inline_limit(limit_ns, seen, slice_ns=slice_ns)


def _segments(steps: list[Step]) -> list[float]:
    """The cost of each segment a sliced plan's steps run in on the loop thread (``SLICE`` and
    ``OFFLOAD`` marks end one)."""
    costs = [0.0]
    for step in steps:
        if step.stop:
            costs.append(0.0)
        if step.stop != OFFLOAD:
            costs[-1] += step.cost_ns
    return costs


def estimate_ns(operation_outputs: list[Operand]) -> float:
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
    folder = ConstantFolder(model, template)
    for operation in model.operations:
        ins = tuple(operation.inputs)
        outs = tuple(operation.outputs)
        label = f"{where}operation {operation.index} ({operation.type.name})"
        in_ops = folder.operands(ins)
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
        step.cost_ns = estimate_ns(list(out_ops))
        if step.kind == KERNEL and folder.fold(step, in_ops):
            continue
        steps.append(step)
    steps = fuse_steps(model, steps, _fetcher, folder.operands)
    steps = concat_in_place(model, steps, folder.operands, _like)
    steps = compile_segments(model, steps, _fetcher, folder.operands)
    _assign_frees(model, steps)
    plan = Plan(model, template, tuple(model.input_indexes), tuple(model.output_indexes), steps, has_cf)
    plan.has_loop = any(s.kind == WHILE or any(b.has_loop for b in s.branches) for s in steps)
    plan.dynamic = not all(ops[i].fully_specified for i in model.input_indexes)
    plan.set_inline_limit(DEFAULT_INLINE_LIMIT_NS)
    cache[id(model)] = plan
    return plan


def _like(base: Step, label: str, ins: tuple[int, ...], outs: tuple[int, ...], fn: Kernel) -> Step:
    """A step in ``base``'s place (its operation, kind and cost) running ``fn`` on ``ins``."""
    step = Step(base.index, base.type, label, base.kind, ins, outs, fn=fn)
    step.fetch, step.out, step.cost_ns = _fetcher(ins), outs[0] if len(outs) == 1 else -1, base.cost_ns
    return step


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


def fresh_outputs(plan: Plan) -> tuple[bool, ...]:
    """Per model output: made by a step whose results are known fresh (``Step.fresh``), and
    neither a model input nor listed twice: handed out without a copy."""
    model = plan.model
    last = {i: s for s in plan.steps for i in s.outs}
    return tuple(i in last and last[i].fresh and i not in model.input_indexes and model.output_indexes.count(i) == 1
                 for i in model.output_indexes)
