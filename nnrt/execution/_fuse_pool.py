"""A 1x1 convolution whose only reader is a global average pool, computed by the pool's step;
done once by the plan compiler (``fuse_steps`` calls ``fuse_global_pools`` after ``fold_pads``).

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

the pool's step computes both (``_jit_pointwise.BlockMean``): per block of pixels one product
(``_gemm.product``, as the convolution's kernel makes) into a buffer that stays in L2, the
convolution's bias and activation and a float64 sum per channel in one compiled pass. The
convolution's step stays, in its place, and hands its input on unchanged (its output slot
holds the input; the pool's step is its only reader): the plan keeps one step per operation,
which the simulator's per-step costs and partitioning rely on.
Measured (``benchmarks/block_steps.py``): the two steps' 0.56 + 0.12-0.16 ms become 0.47-0.50.

Exact: the unfused steps make the same products in the same blocks
(``_jit_pointwise.pointwise_blocks``) and the unfused global pool the same sums
(``pooling``), so the results are bit for bit the unfused plan's (tested). It needs numba
(the compiled pass); without it (``NNRT_JIT=0``) the steps stay as they are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.model import Model, Operand
from nnrt.ops import OpCall
from nnrt.ops._common import activation_bounds
from nnrt.ops._gemm import product
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import BIAS_ACT_SUM_F32, bias_act_sum_f32
from nnrt.ops._jit_pointwise import BlockMean
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
    """``steps`` with each pointwise CONV_2D + global AVERAGE_POOL_2D pair computed by the
    pool's step, the convolution's passing its input on (module doc); ``new`` makes a step
    (base, label, ins, outs, fn, cost)."""
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
        replaced[id(conv)] = new(conv, f"{conv.label} (in the next step)", conv.ins[:1], conv.outs, _hand_on, 0.0)
        replaced[id(pool)] = new(pool, f"{conv.label} + {pool.label}", pool.ins, pool.outs, fn,
                                 conv.cost_ns + pool.cost_ns)
    return [replaced.get(id(s), s) for s in steps] if replaced else steps


def _hand_on(x: np.ndarray) -> np.ndarray:
    """The convolution's step of a fused pair: its input, for the pool's step to convolve."""
    return x


def _call(model: Model, step: Step, operands: Operands) -> OpCall:
    where = step.label[: step.label.rfind("operation ")]
    return OpCall(step.type, step.index, operands(step.ins), tuple(model.operands[i] for i in step.outs),
                  model.relaxed, where)


def _fused(model: Model, conv: Step, pool: Step, operands: Operands, act_sum: Callable[..., Any]
           ) -> Callable[..., Any] | None:
    """The pool step's kernel (called with the convolution's input, then the pool's
    parameters), or None when the pair does not qualify."""
    parts = pointwise_parts(_call(model, conv, operands))
    act = global_average_act(_call(model, pool, operands))
    if parts is None or act is None:
        return None
    conv_ops = operands(conv.ins)
    shape = tuple(conv_ops[0].dimensions)
    conv_args = tuple(op.value for op in conv_ops[1:])  # constants (``pointwise_parts``)
    fused = BlockMean(parts, act_sum, activation_bounds(act), product())  # the convolution's products
    conv_fn, pool_fn = conv.fn, pool.fn
    assert conv_fn is not None and pool_fn is not None

    def run(x: np.ndarray, *pool_args: Any) -> Any:
        if x.shape == shape and x.dtype == np.float32:
            return fused(x)
        return pool_fn(conv_fn(x, *conv_args), *pool_args)  # the run's kernels report what is wrong

    return run
