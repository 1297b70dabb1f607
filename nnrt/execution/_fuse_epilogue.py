"""Folding a convolution's elementwise successor into the convolution, done once by the plan
compiler (``fuse_steps`` calls ``fold_epilogues`` last).

A float32 CONV_2D over NHWC takes an *epilogue* (``nnrt.ops._epilogue``): a HARD_SWISH, or an ADD
of a residual with its fused activation, done in the convolution's own compiled bias pass block
by block instead of by a later step reading the whole output back and writing another. A float32
DEPTHWISE_CONV_2D over NHWC takes a HARD_SWISH one, done by its compiled loop on each finished
output row (MobileNetV3 and PP-LCNet put one after most depthwise layers). When a step

* is a HARD_SWISH, a chain that computes just a hardswish (``_fuse_chain``: ``x * relu6(x + 3)
  / 6`` as PaddleOCR exports it) with scalar affines ``x * s + b`` before or after it (as
  PP-LCNetV3 exports it), a PRELU with a constant float32 slope (one value, or one per
  channel), or an ADD of the value and a float32 tensor of the same known shape (a residual:
  every input of a step is computed before it; from ``RESIDUAL_MIN_ELEMENTS``) with a constant
  fused activation (and at most one RELU-family step folded into it by ``_fuse``),
* reads a value that a convolution taking that kind of epilogue made, read by this step alone,
  not a model output and a temporary of the plan,

the two become one step at the successor's place (every input of both is ready there; the
convolution's output is never materialised), typed as the convolution and labelled with both
operations.
The epilogue computes the successor's own float32 operations in the same order on each element,
so the outputs are bit for bit the unfused plan's (tested with NaN, infinities, -0.0 and the edge
geometries). A run whose residual does not have the shape, type or layout preparation saw runs
the two kernels one after the other, as the unfused plan would. Which successors are folded is
decided by measurement (``nnrt.ops._epilogue``'s doc: a SiLU or numpy-call epilogues did not pay).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from nnrt.execution._fuse_chain import Affines
from nnrt.model import Model, Operand, dims_product
from nnrt.ops import _epilogue as epilogues
from nnrt.ops._common import ACT_NONE
from nnrt.ops._epilogue import IDENTITY_AFFINES, Epilogue, takes_epilogue
from nnrt.types import OperandLifeTime, OperandType, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["RESIDUAL_MIN_ELEMENTS", "fold_epilogues"]

Op = OperationType
Operands = Callable[[tuple[int, ...]], tuple[Operand, ...]]
NewStep = Callable[..., "Step"]
#: One run's arguments of the successor (its running value None) -> the epilogue, or None when
#: this run does not fit it (the kernels then run one after the other).
Bind = Callable[[list[Any]], Epilogue | None]

#: Output elements from which a residual ADD is folded. Measured (CPU, the convolution and the
#: ADD against the two steps): [1,160,160,32] 0.83, [1,80,80,64] 0.93; from [1,52,52,96] down
#: 0.96-1.04, and +1% on the landmark models, whose residuals are [1,32,32,64] and smaller.
RESIDUAL_MIN_ELEMENTS = 1 << 18

#: The steps that take epilogues (each kernel says which kinds: ``_epilogue.accept_epilogue``).
_PRODUCERS = (Op.CONV_2D, Op.DEPTHWISE_CONV_2D)


def fold_epilogues(model: Model, steps: list[Step], operands: Operands, new: NewStep,
                   forms: dict[int, Affines | None], plain: set[int], acts: dict[int, tuple[int, ...]]) -> list[Step]:
    """``steps`` with each foldable successor (module doc) merged into its convolution. By step
    id: ``forms``, the chain steps made before, with the affines around the hardswish a chain
    computes if that is all it computes (``_fuse_chain._epilogue_form``); ``plain``,
    the steps that compute their own operation (not rewritten into something else); ``acts``,
    fused activations folded into a step after it (``_fuse``: RELU after an ADD), in order."""
    ops = model.operands
    outputs = set(model.output_indexes)
    readers: Counter[int] = Counter(i for s in steps for i in s.ins)
    producer = {s.outs[0]: s for s in steps if len(s.outs) == 1 and s.fn is not None}
    dropped: set[int] = set()
    replaced: dict[int, Step] = {}

    def foldable(x: int, kind: int) -> bool:
        p = producer.get(x)
        return (p is not None and p.type in _PRODUCERS and takes_epilogue(p.fn, kind) and id(p) not in dropped
                and readers[x] == 1 and x not in outputs and ops[x].lifetime is OperandLifeTime.TEMPORARY_VARIABLE
                and ops[x].type is OperandType.TENSOR_FLOAT32)

    for s in steps:
        if s.fn is None or len(s.outs) != 1 or not s.ins:
            continue
        found = next(((x, bind) for x, kind, bind in _successor(s, operands, forms, plain, acts) if foldable(x, kind)),
                     None)
        if found is None:
            continue
        x, bind = found
        p = producer[x]
        k = s.ins.index(x)
        assert p.fn is not None
        fn = _fused(p.fn, len(p.ins), s.fn, k, bind)
        replaced[id(s)] = new(p, f"{p.label} + {s.label}", p.ins + s.ins[:k] + s.ins[k + 1:], s.outs, fn,
                              p.cost_ns + s.cost_ns)
        dropped.add(id(p))
    if not dropped:
        return steps
    return [replaced.get(id(s), s) for s in steps if id(s) not in dropped]


def _fused(conv: Callable[..., Any], n: int, succ: Callable[..., Any], k: int, bind: Bind) -> Callable[..., Any]:
    """The fused step's kernel: the convolution's arguments, then the successor's but its running value."""

    def run(*args: Any) -> Any:
        rest = list(args[n:])
        rest.insert(k, None)
        epilogue = bind(rest)
        if epilogue is not None:
            return conv(*args[:n], epilogue=epilogue)
        rest[k] = conv(*args[:n])
        return succ(*rest)

    return run


def _successor(s: Step, operands: Operands, forms: dict[int, Affines | None], plain: set[int],
               acts: dict[int, tuple[int, ...]]) -> list[tuple[int, int, Bind]]:
    """The values ``s`` may take as its running value, each with its epilogue's kind and maker."""
    out = operands(s.outs)[0]
    if out.type is not OperandType.TENSOR_FLOAT32 or len(out.dimensions) != 4 or s.fn is None:
        return []
    extra = acts.get(id(s), ())
    affines = forms.get(id(s)) if id(s) in forms else IDENTITY_AFFINES if id(s) in plain and s.type is Op.HARD_SWISH else None
    if affines is not None and len(s.ins) == 1:
        epi = epilogues.hard_swish(affines, cast(Callable[[np.ndarray], np.ndarray], s.fn))
        return [] if extra else [(s.ins[0], epilogues.HARD_SWISH, lambda args: epi)]
    if id(s) in plain and s.type is Op.PRELU and len(s.ins) == 2 and not extra:
        return _prelu(s, s.fn, operands(s.ins[1:])[0], out.dimensions[3])
    if id(s) not in plain or s.type is not Op.ADD or len(s.ins) != 3 or s.ins[0] == s.ins[1]:
        return []
    ins = operands(s.ins)
    act = ins[2].value if ins[2].is_constant else None
    if not isinstance(act, int) or act not in (0, 1, 2, 3) or len(extra) > (act == ACT_NONE):
        return []
    found: list[tuple[int, int, Bind]] = []
    for k in (0, 1):
        x, other = ins[k], ins[1 - k]
        dims = tuple(x.dimensions)
        if (not x.is_constant and not other.is_constant and other.type is OperandType.TENSOR_FLOAT32
                and len(dims) == 4 and all(dims) and tuple(other.dimensions) == dims
                and dims_product(dims) >= RESIDUAL_MIN_ELEMENTS):
            found.append((s.ins[k], epilogues.ADD, _residual(k, act, extra[0] if extra else act, dims)))
    return found


def _residual(k: int, act: int, effective: int, dims: tuple[int, ...]) -> Bind:
    """An ADD (of the convolution's output, operand ``k``) with its activation ``act`` (as
    prepared; ``effective`` with a RELU-family step folded after it), whose other operand is
    a tensor: the ``_epilogue.ADD`` kind when this run's operand fits (the sum commutes)."""

    make = epilogues.add(effective)

    def bind(args: list[Any]) -> Epilogue | None:
        r = args[1 - k]
        if (args[2] != act or not isinstance(r, np.ndarray) or r.shape != dims or r.dtype != np.float32
                or not r.flags.c_contiguous):
            return None
        return make(r.reshape(-1, dims[3]))

    return bind


def _prelu(s: Step, kernel: Callable[..., Any], slope: Operand, channels: int) -> list[tuple[int, int, Bind]]:
    """A PRELU with a constant float32 slope of one value or one per channel (the slopes its
    kernel runs compiled: ``activations._prelu_const``)."""
    a = slope.value if slope.is_constant else None
    if (not isinstance(a, np.ndarray) or a.dtype != np.float32 or not channels or a.ndim > 4
            or a.size not in (1, channels) or a.shape[-1] != a.size or s.ins[0] == s.ins[1]):
        return []
    row = np.ascontiguousarray(np.broadcast_to(a.reshape(-1), (channels,)), dtype=np.float32)
    epi = epilogues.prelu(row, lambda x: kernel(x, a))
    return [(s.ins[0], epilogues.PRELU, lambda args: epi)]
