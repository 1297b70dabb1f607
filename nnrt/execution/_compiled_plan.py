"""Compiled plan segments: a run of consecutive kernel steps executed as ONE compiled call.

Why: on a small streaming model (a microWakeWord keyword spotter: 33-52 int8 operations on
tensors of a few hundred bytes) each step's kernel is a compiled core that works for about a
microsecond, but calling it from Python costs as much again (numba's argument boxing), and the
interpreter and the state's CONCATENATION / STRIDED_SLICE copies add a few more per step. Here,
at preparation (``compile_plan`` calls ``compile_segments`` after the fusions), every maximal run
of steps that can be lowered becomes one step whose kernel makes one call: the program runner
of ``nnrt.ops._jit_quant`` (compiled once per machine, whatever the model), over a program of
rows naming the cores to call and the copies to make, on one fresh byte arena that holds every
value of the segment at an offset fixed here.

What is lowered (everything static: known dimensions, constant parameters, one output):

* a kernel that declared itself a single core call (``nnrt.ops._jit.set_core_call``) that the
  runner knows: the 8-bit CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED core, QUANTIZE,
  DEQUANTIZE, the 8-bit table lookups (LOGISTIC, TANH, ...);
* an 8-bit data-movement operation (``_MOVES``) with the same quantization in and out: its
  mapping is found by running the step's own kernel on inputs holding element numbers (one run
  per base-256 digit) and checking that every output element is one of them; it becomes byte
  copies (none when it is the identity: a reshape shares the bytes), or a gather when it has
  many pieces.

Anything else ends the segment; a segment of fewer than ``MIN_STEPS`` steps stays as it was.
The results are bit for bit the step plan's: the same cores on the same bytes, and the moves
are what the step's kernel did at preparation. ``--profile`` reports a segment as one step,
labelled ``compiled: operations i-j (n ops: ...)``: its ``type`` is its most frequent operation's,
and ``nnrt bench --profile`` counts it as ``COMPILED_PLAN``. Its results are views of the call's
own arena (``Step.fresh``: handed out without a copy).

Per call, Python does: the inputs joined into one bytes object (``b"".join``: 0.3 us for
seven small arrays), one call of the runner, and the outputs as views of the arena (the fields
of one structured view: 0.7 us for seven). A segment that is the whole model is called by the
interpreter on the request's arguments (``Plan.whole``): its inputs and outputs are put in the
model's order.
``NNRT_PLAN_JIT=0`` turns segments off (the step plan, for comparisons); so does ``NNRT_JIT=0``.
"""

from __future__ import annotations

import math
import operator
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt._log import get_logger, vlog_enabled
from nnrt.errors import GeneralFailureError
from nnrt.model import Model, Operand
from nnrt.ops import _jit_program as _jp
from nnrt.ops import _jit_quant as _jq
from nnrt.ops._jit import Arg, CoreCall, available, core_call_of
from nnrt.types import OperandLifeTime, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["MIN_STEPS", "SEGMENT_LABEL", "SEGMENT_TYPE", "compile_segments", "enabled"]

Op = OperationType

#: A compiled segment's label starts with this; profiles count it under ``SEGMENT_TYPE``.
SEGMENT_LABEL = "compiled:"
SEGMENT_TYPE = "COMPILED_PLAN"
#: Segments shorter than this keep their steps (one compiled call saves nothing over one kernel).
MIN_STEPS = 2
#: A move with more contiguous runs than this becomes a gather through an index map.
_MAX_RUNS = 16
#: Data-movement operations and their data inputs (None: all but the last input).
_MOVES: dict[OperationType, int | None] = {
    Op.RESHAPE: 1, Op.SQUEEZE: 1, Op.EXPAND_DIMS: 1, Op.TRANSPOSE: 1, Op.SLICE: 1, Op.STRIDED_SLICE: 1,
    Op.CAST: 1, Op.CONCATENATION: None,
}  # fmt: skip
#: Segments whose values take more bytes than this keep their steps (small plans are the point).
_MAX_ARENA = 1 << 20

Fetcher = Callable[[tuple[int, ...]], Callable[[list[Any]], tuple[Any, ...]]]


def enabled() -> bool:
    """Whether preparation makes compiled segments: compiled kernels in use and ``NNRT_PLAN_JIT`` not 0."""
    off = os.environ.get("NNRT_PLAN_JIT", "1").strip().lower() in ("0", "false", "no", "off")
    return not off and available()


@dataclass(slots=True)
class _Lowered:
    """One step as code: a core call, or a move (``runs``: (input k, source start, dest start, length))."""

    step: Step
    call: CoreCall | None = None
    data: tuple[int, ...] = ()
    runs: list[tuple[int, int, int, int]] = field(default_factory=list)
    gather: np.ndarray | None = None


def _static(op: Operand) -> bool:
    return op.fully_specified and not op.type.is_scalar and bool(op.dimensions)


def _lower(step: Step, ops: tuple[Operand, ...], out: Operand) -> _Lowered | None:
    """``step`` lowered, or None when it cannot be (dynamic shapes, a kernel of its own)."""
    from nnrt.execution._plan import KERNEL

    if step.kind != KERNEL or step.fn is None or len(step.outs) != 1 or not _static(out):
        return None
    for op in ops:
        if not (op.is_constant or op.lifetime is OperandLifeTime.NO_VALUE or _static(op)):
            return None
    args = [op.value if op.is_constant else None if op.lifetime is OperandLifeTime.NO_VALUE
            else np.zeros(op.dimensions, op.type.dtype) for op in ops]
    planner = core_call_of(step.fn)
    try:
        with np.errstate(all="ignore"):
            if planner is not None:
                call = planner(tuple(args))
                if call is None:
                    return None
                dtypes = [(0, ops[a.index].type.dtype) for a in call.args if isinstance(a, Arg)]
                runs = _jp.encode_core_call(call, dtypes, 0, _jp.ProgramConstants()) is not None
                return _Lowered(step, call=call) if runs else None
            if step.type in _MOVES:
                return _lower_move(step, ops, out, args)
    except Exception:  # the kernel refuses this geometry: the step runs as it is, and says why
        return None
    return None


def _lower_move(step: Step, ops: tuple[Operand, ...], out: Operand, args: list[Any]) -> _Lowered | None:
    """A data-movement step as runs of copies, found by running its kernel on element identities:
    each data element's number (its input's first number plus its position) written in base 256,
    one kernel run per digit, in the operands' own type (a byte viewed as it); the output's digits
    read back must name elements that exist."""
    n = _MOVES[step.type]
    data = tuple(range(len(ops) - 1 if n is None else n))
    if any(not _same_quant(ops[k], out) or ops[k].lifetime is OperandLifeTime.NO_VALUE for k in data):
        return None
    dtype = out.type.dtype
    if dtype.itemsize != 1 or any(ops[k].type.dtype != dtype for k in data):
        return None
    sizes = [math.prod(ops[k].dimensions) for k in data]
    first = np.cumsum([0, *sizes])
    total = int(first[-1])
    codes = np.zeros(math.prod(out.dimensions), np.int64)
    for digit in range(max(1, -(-int(total - 1).bit_length() // 8))):
        for j, k in enumerate(data):
            ids = np.arange(first[j], first[j + 1], dtype=np.int64)
            args[k] = ((ids >> (8 * digit)) & 255).astype(np.uint8).view(dtype).reshape(ops[k].dimensions)
        result = step.fn(*args)  # type: ignore[misc]
        if not isinstance(result, np.ndarray) or result.dtype != dtype or result.shape != tuple(out.dimensions):
            return None
        codes |= result.reshape(-1).view(np.uint8).astype(np.int64) << (8 * digit)
    if codes.size == 0 or codes.max() >= total:
        return None
    src = np.searchsorted(first, codes, side="right") - 1
    pos = codes - first[src]
    breaks = np.flatnonzero((np.diff(src) != 0) | (np.diff(pos) != 1)) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [codes.size]])
    runs = [(int(src[a]), int(pos[a]), int(a), int(b - a)) for a, b in zip(starts, ends)]
    lowered = _Lowered(step, data=data, runs=runs)
    if len(runs) > _MAX_RUNS:
        if len(data) != 1:
            return None
        lowered.gather = pos
    return lowered


def _same_quant(a: Operand, b: Operand) -> bool:
    return (a.type is b.type and a.scale == b.scale and a.zero_point == b.zero_point
            and a.channel_quant == b.channel_quant)


def compile_segments(model: Model, steps: list[Step], fetcher: Fetcher,
                     operands: Callable[[tuple[int, ...]], tuple[Operand, ...]]) -> list[Step]:
    """``steps`` with each maximal run of ``MIN_STEPS`` or more lowerable steps replaced by one
    compiled step (a new list), or ``steps`` itself when compiled segments are off or none applies."""
    if not enabled():
        return steps
    lowered = [_lower(s, operands(s.ins), operands(s.outs)[0]) if s.fn is not None else None for s in steps]
    run = longest = 0
    for low in lowered:
        run = run + 1 if low is not None else 0
        longest = max(longest, run)
    # The program's cores are asked for only now: a plan with no segment needs none compiled.
    if longest < MIN_STEPS or _jq.program_runner() is None:
        return steps
    readers: dict[int, int] = {}  # slot -> index of its last reading step
    for k, s in enumerate(steps):
        for i in s.ins:
            readers[i] = k
    result: list[Step] = []
    k = 0
    while k < len(steps):
        j = k
        while j < len(steps) and lowered[j] is not None:
            j += 1
        if j - k >= MIN_STEPS:
            seg = [low for low in lowered[k:j] if low is not None]
            step = _segment_step(model, seg, readers, j, fetcher, operands)
            result.extend([step] if step is not None else steps[k:j])
            k = j
        else:
            result.extend(steps[k:max(j, k + 1)])
            k = max(j, k + 1)
    if len(result) != len(steps) and vlog_enabled("compilation"):
        uncovered = Counter(s.type.name for s, low in zip(steps, lowered) if low is None)
        get_logger("compilation").debug("plan.compiled_segments", steps=len(steps), now=len(result),
                                        not_lowered=dict(uncovered))
    return result


def _segment_step(model: Model, seg: list[_Lowered], readers: dict[int, int], end: int, fetcher: Fetcher,
                  operands: Callable[[tuple[int, ...]], tuple[Operand, ...]]) -> Step | None:
    """One step running ``seg`` as a program, or None when it cannot (the steps stay)."""
    from nnrt.execution._plan import KERNEL, Step

    produced = {low.step.outs[0] for low in seg}
    keep = set(model.output_indexes)
    ins: list[int] = []
    for low in seg:
        for i, op in zip(low.step.ins, operands(low.step.ins)):
            if not op.is_constant and op.lifetime is not OperandLifeTime.NO_VALUE and i not in produced and i not in ins:
                ins.append(i)
    outs = tuple(i for i in dict.fromkeys(low.step.outs[0] for low in seg) if i in keep or readers.get(i, -1) >= end)
    # The model's inputs and outputs first, in its order (a segment that is the whole model is
    # then a ``Plan.whole`` step, run on the request's arguments), the others as first met.
    ins.sort(key=_model_order(model.input_indexes))
    outs = tuple(sorted(outs, key=_model_order(model.output_indexes)))
    runner = _jq.program_runner()
    if not outs or runner is None:
        return None
    try:
        layout, buffers = _Program(model, operands).build(seg, ins, outs)
    except _NotLowered as exc:
        if vlog_enabled("compilation"):
            get_logger("compilation").debug("plan.segment_not_lowered", operations=len(seg), reason=str(exc))
        return None
    first, types = seg[0].step, Counter(low.step.type for low in seg)
    label = (f"{SEGMENT_LABEL} operations {first.index}-{seg[-1].step.index} ({len(seg)} ops: "
             + ", ".join(f"{t.name} x{c}" for t, c in types.most_common()) + ")")
    run = _runner(runner, layout, buffers, label)
    run(*[np.zeros(model.operands[i].dimensions, model.operands[i].type.dtype) for i in ins])  # compiles or loads, once
    step = Step(first.index, types.most_common(1)[0][0], label, KERNEL, tuple(ins), outs, fn=run)
    step.fetch, step.out = fetcher(tuple(ins)), outs[0] if len(outs) == 1 else -1
    step.cost_ns = sum(low.step.cost_ns for low in seg)
    step.fresh = True  # views of the call's own arena, shared bytes copied (``_Layout.copies``)
    return step


def _model_order(indexes: tuple[int, ...]) -> Callable[[int], int]:
    """A sort key putting the slots in ``indexes`` first, in that order (the sort is stable)."""
    position = {slot: k for k, slot in enumerate(indexes)}
    return lambda slot: position.get(slot, len(position))


def _runner(runner: Any, layout: _Layout, buffers: tuple[np.ndarray, ...], label: str) -> Callable[..., Any]:
    """The step's kernel: the segment's inputs joined, the program run, the outputs viewed."""
    prog, kb, ki16, ki64, kf64 = buffers
    size, outs, expected = layout.size, layout.outputs, layout.input_bytes
    new = np.ndarray
    # Several outputs: the arena seen as one structured value whose fields are the outputs
    # (subarrays of their dtypes and dimensions at their offsets), each field a view: 0.1 us an
    # output where an ndarray made on the arena per output costs 0.2 (seven outputs: 1.5 us).
    names = [f"o{k}" for k in range(len(outs))]
    record = np.dtype({"names": names, "formats": [(t, d) for d, t, _ in outs], "offsets": [at for _, _, at in outs],
                       "itemsize": size})
    fields = operator.itemgetter(*names)
    one = outs[0] if len(outs) == 1 else None

    def run(*args: Any) -> Any:
        try:
            data = b"".join(args) if layout.plain else b""
        except (BufferError, TypeError):  # a strided input: the checked path
            data = b""
        if len(data) != expected:  # padded inputs, a strided one, or what the program cannot take
            data = _joined(args, layout, label)
        arena = runner(prog, data, size, kb, ki16, ki64, kf64)
        if one is not None:
            return new(one[0], one[1], arena, one[2])
        return list(fields(new((), record, arena)))

    return _with_copies(run, layout)


def _joined(args: tuple[Any, ...], layout: _Layout, label: str) -> bytes:
    """The inputs' bytes, each checked (type and size) and padded as the layout says."""
    parts: list[bytes] = []
    for a, (slot, dtype, nbytes), pad in zip(args, layout.inputs, layout.pads, strict=True):
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.nbytes != nbytes:
            got = f"{a.dtype} {list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
            raise GeneralFailureError(f"{label}: operand {slot} is {got}; {dtype} of {nbytes} bytes expected")
        parts.append(np.ascontiguousarray(a).tobytes())
        parts.append(pad)
    return b"".join(parts)


def _with_copies(run: Callable[..., Any], layout: _Layout) -> Callable[..., Any]:
    """``run``, copying the outputs that share bytes with an earlier one (an identity move)."""
    if not layout.copies:
        return run
    copies = layout.copies

    def run_copying(*args: Any) -> Any:
        res = run(*args)
        for k in copies:
            res[k] = res[k].copy()
        return res

    return run_copying


@dataclass(slots=True)
class _Layout:
    """Where a segment's values are: the arena's size, each output (dims, dtype, offset), each
    input (slot, dtype, bytes) and the padding after it (so values stay aligned), the bytes the
    inputs take with their padding, whether there is none, the outputs to copy."""

    size: int
    outputs: list[tuple[tuple[int, ...], np.dtype[Any], int]]
    inputs: list[tuple[int, np.dtype[Any], int]]
    pads: list[bytes]
    input_bytes: int
    plain: bool
    copies: list[int]


class _NotLowered(Exception):
    """A step of the segment turned out not to fit a program (the segment keeps its steps)."""


class _Program:
    """A segment as a program (``nnrt.ops._jit_quant``'s rows over one byte arena) and the
    source of its entry function: copy the inputs in, run the program, return views of the
    outputs (the arena is fresh at each call, so the outputs are the caller's own)."""

    def __init__(self, model: Model, operands: Callable[[tuple[int, ...]], tuple[Operand, ...]]) -> None:
        self.model, self.operands = model, operands
        self.rows: list[list[int]] = []
        self.consts = _jp.ProgramConstants()
        self.at: dict[int, int] = {}  # slot -> its value's arena offset (aliases share one)
        self.size = 0

    def _alloc(self, slot: int) -> int:
        op = self.model.operands[slot]
        at = self.at[slot] = self.size
        self.size += -(-math.prod(op.dimensions) * op.type.dtype.itemsize // 16) * 16
        return at

    def _nbytes(self, slot: int) -> int:
        op = self.model.operands[slot]
        return math.prod(op.dimensions) * int(op.type.dtype.itemsize)

    def _value(self, slot: int, op: Operand) -> int:
        """The arena offset of a step input (a constant is copied in first)."""
        if slot not in self.at:
            if not op.is_constant:
                raise _NotLowered(f"operand {slot} has no value")
            at = self._alloc(slot)
            self.rows.append([_jq.OP_COPY_CONST, at, self.consts.add(op.value, "uint8"), self._nbytes(slot)])
        return self.at[slot]

    def build(self, seg: list[_Lowered], ins: list[int], outs: tuple[int, ...]
              ) -> tuple[_Layout, tuple[np.ndarray, ...]]:
        """The segment's layout and buffers (program, then the constants); raises ``_NotLowered``."""
        wide = any(self.model.operands[i].type.dtype.itemsize > 1 for i in ins)
        pads, inputs = [], []
        for i in ins:  # the inputs first, back to back (each 16-aligned when some is wider than a byte)
            self.at[i] = self.size
            self.size += self._nbytes(i)
            pad = -self.size % 16 if wide else 0
            pads.append(bytes(pad))
            inputs.append((i, self.model.operands[i].type.dtype, self._nbytes(i)))
            self.size += pad
        input_bytes = self.size
        self.size += -self.size % 16
        for low in seg:
            ops = self.operands(low.step.ins)
            if low.call is not None:
                self._core(low, ops)
            else:
                self._move(low, ops)
        if self.size > _MAX_ARENA:
            raise _NotLowered(f"the values take {self.size} bytes")
        outputs, copies, seen = [], [], set()
        for k, i in enumerate(outs):
            op = self.model.operands[i]
            outputs.append((tuple(op.dimensions), op.type.dtype, self.at[i]))
            if self.at[i] in seen:
                copies.append(k)
            seen.add(self.at[i])
        prog = np.zeros((len(self.rows), _jq.PROGRAM_WIDTH), np.int64)
        for r, row in enumerate(self.rows):
            prog[r, :len(row)] = row
        layout = _Layout(max(self.size, 16), outputs, inputs, pads, input_bytes, not wide, copies)
        return layout, (prog, *self.consts.buffers())

    def _core(self, low: _Lowered, ops: tuple[Operand, ...]) -> None:
        call = low.call
        assert call is not None
        args = []
        for a in call.args:
            if isinstance(a, Arg):
                slot = low.step.ins[a.index]
                if math.prod(a.shape) != math.prod(ops[a.index].dimensions):
                    raise _NotLowered("reshaped argument of another size")
                args.append((self._value(slot, ops[a.index]), ops[a.index].type.dtype))
        out = low.step.outs[0]
        row = _jp.encode_core_call(call, args, self._alloc(out), self.consts)
        if row is None:
            raise _NotLowered(f"{low.step.label}: its core is not run by programs")
        self.rows.append(row)

    def _move(self, low: _Lowered, ops: tuple[Operand, ...]) -> None:
        out = low.step.outs[0]
        srcs = [low.step.ins[k] for k in low.data]
        (k0, p0, _, n0), count = low.runs[0], len(low.runs)
        if count == 1 and p0 == 0 and n0 == math.prod(ops[low.data[k0]].dimensions):
            self.at[out] = self._value(srcs[k0], ops[low.data[k0]])
            return  # the identity (a reshape): the same bytes
        item = int(self.model.operands[out].type.dtype.itemsize)
        if low.gather is not None:
            src = self._value(srcs[0], ops[low.data[0]])
            self.rows.append([_jq.OP_GATHER, self._alloc(out), src, item, low.gather.size,
                              self.consts.add(low.gather, "int64")])
            return
        dst = self._alloc(out)
        for k, p, d, n in low.runs:
            op = ops[low.data[k]]
            if srcs[k] not in self.at and op.is_constant:
                start = self.consts.add(op.value, "uint8")
                self.rows.append([_jq.OP_COPY_CONST, dst + d * item, start + p * item, n * item])
            else:
                self.rows.append([_jq.OP_COPY, dst + d * item, self._value(srcs[k], op) + p * item, n * item])
