"""A 1x1 convolution whose only reader is a global average pool, run as one step; done once by
the plan compiler (``fuse_steps`` calls ``fuse_global_pools`` after ``fold_pads``).

The head of MobileNet-style classifiers: ``CONV_2D 1x1 -> AVERAGE_POOL_2D`` over the whole
image. Unfused, the convolution writes its full output (3.2 MB for [1,112,112,64] in
``zoo.mobilenet_block``), far beyond L2, and the pool reads it back from memory to make 64
numbers. When

* the CONV_2D is float32, plain pointwise (``conv.pointwise_parts``: constant 1x1 filter and
  bias, known input shape, no stride or padding, NHWC),
* its output is a temporary of the plan read by nothing but one AVERAGE_POOL_2D, not a model
  output, and
* that pool is float32 with constant parameters and one window over the whole unpadded image
  (``pooling.global_average_act``),

the two steps become one (``_jit_conv.PointwiseMean``): per block of pixels one BLAS product
into a buffer that stays in L2, the convolution's bias and activation and a float64 sum per
channel in one compiled pass. Measured (``benchmarks/block_steps.py``): the two steps' 0.56 +
0.12-0.16 ms become 0.47-0.50 ms.

Not exact like the other fusions: the means add the convolution's very float32 values, but in
float64 and in another order than the pool's float32 BLAS product, so they differ by rounding
(tested against the unfused plan within the CTS's float32 tolerance). It needs numba (the
compiled pass); without it (``NNRT_JIT=0``) the steps stay as they are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.model import Model, Operand
from nnrt.ops import OpCall
from nnrt.ops._common import activation_bounds
from nnrt.ops._jit import compiled
from nnrt.ops._jit_conv import PointwiseMean
from nnrt.ops._jit_float import BIAS_ACT_SUM_F32, bias_act_sum_f32
from nnrt.ops.conv import pointwise_parts
from nnrt.ops.pooling import global_average_act
from nnrt.types import OperandLifeTime, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["fuse_global_pools"]

Op = OperationType
Operands = Callable[[tuple[int, ...]], tuple[Operand, ...]]
NewStep = Callable[..., "Step"]


def fuse_global_pools(model: Model, steps: list[Step], operands: Operands, new: NewStep) -> list[Step]:
    """``steps`` with each pointwise CONV_2D + global AVERAGE_POOL_2D pair as one step (module
    doc); ``new`` makes a step (base, label, ins, outs, fn, cost)."""
    pools = [s for s in steps if s.type is Op.AVERAGE_POOL_2D and s.fn is not None and len(s.outs) == 1 and s.ins]
    if not pools:
        return steps
    act_sum = compiled(bias_act_sum_f32, BIAS_ACT_SUM_F32)
    if act_sum is None:
        return steps
    ops = model.operands
    readers: Counter[int] = Counter(i for s in steps for i in s.ins)
    outputs = set(model.output_indexes)
    producer = {s.outs[0]: s for s in steps if s.type is Op.CONV_2D and s.fn is not None and len(s.outs) == 1}
    dropped: set[int] = set()
    replaced: dict[int, Step] = {}
    for pool in pools:
        x = pool.ins[0]
        conv = producer.get(x)
        if (conv is None or readers[x] != 1 or x in outputs
                or ops[x].lifetime is not OperandLifeTime.TEMPORARY_VARIABLE):
            continue
        fn = _fused(model, conv, pool, operands, act_sum)
        if fn is None:
            continue
        replaced[id(pool)] = new(pool, f"{conv.label} + {pool.label}", (*conv.ins, *pool.ins[1:]), pool.outs, fn,
                                 conv.cost_ns + pool.cost_ns)
        dropped.add(id(conv))
    if not dropped:
        return steps
    return [replaced.get(id(s), s) for s in steps if id(s) not in dropped]


def _call(model: Model, step: Step, operands: Operands) -> OpCall:
    where = step.label[: step.label.rfind("operation ")]
    return OpCall(step.type, step.index, operands(step.ins), tuple(model.operands[i] for i in step.outs),
                  model.relaxed, where)


def _fused(model: Model, conv: Step, pool: Step, operands: Operands, act_sum: Callable[..., Any]
           ) -> Callable[..., Any] | None:
    """The fused kernel (called with the convolution's inputs, then the pool's parameters), or
    None when the pair does not qualify."""
    parts = pointwise_parts(_call(model, conv, operands))
    act = global_average_act(_call(model, pool, operands))
    if parts is None or act is None:
        return None
    shape = tuple(operands(conv.ins[:1])[0].dimensions)
    fused = PointwiseMean(parts, act_sum, activation_bounds(act))
    conv_fn, pool_fn, split = conv.fn, pool.fn, len(conv.ins)
    assert conv_fn is not None and pool_fn is not None

    def run(x: np.ndarray, *rest: Any) -> Any:
        if x.shape == shape and x.dtype == np.float32:
            return fused(x)
        return pool_fn(conv_fn(x, *rest[: split - 1]), *rest[split - 1 :])  # the run's kernels report it

    return run
