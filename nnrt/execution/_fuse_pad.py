"""Folding a zero PAD into the convolution that reads it, done once by the plan compiler
(``fuse_steps`` calls ``fold_pads`` first).

MobileNet-style networks exported from TensorFlow pad explicitly before every stride-2
convolution (``PAD [[0,0],[1,1],[1,1],[0,0]]`` then a VALID depthwise): one full copy of the
activation per block, which the convolution then copies again with its own padding. When

* the PAD pads with a real zero (PAD; PAD_V2 with the value 0.0, or the zero point of a
  quantized tensor whose PAD keeps scale and zero point), on the spatial axes only,
* its output is a temporary of the plan read by nothing but the input of one CONV_2D or
  DEPTHWISE_CONV_2D, and
* that convolution's scalar parameters (padding, strides, activation, layout, dilation, depth
  multiplier) are constants, with known padded sizes and filter size for an implicit scheme,

the two steps become one: the convolution prepared again in NNAPI's explicit-padding form with
the PAD's amounts added to its own (an implicit scheme first turned into the amounts it stands
for on the padded size). The convolution's padding is the same real zero, so the result is
identical (bit for bit: the same kernel over the same values; tested against the unfused plan).

Not folded: pooling. AVERAGE_POOL_2D's count leaves padding out (NNAPI) where a PAD's zeros
are counted, and MAX_POOL_2D's padding never wins where a PAD's zeros can: neither is exact.
A PAD that stays is one copy (``nnrt.ops.layout.pad_copy``), and its fresh output lets the
in-place arithmetic of ``_fuse`` write into it (a channel PAD before a residual ADD).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.errors import NnrtError
from nnrt.model import Model, Operand
from nnrt.ops import OpCall, prepare_function
from nnrt.ops._common import implicit_padding, same_quant
from nnrt.ops._epilogue import accept_epilogue, takes_epilogue
from nnrt.ops.conv import conv_signature
from nnrt.types import OperandLifeTime, OperandType, OperationType

if TYPE_CHECKING:
    from nnrt.execution._plan import Step

__all__ = ["fold_pads"]

Op = OperationType
Operands = Callable[[tuple[int, ...]], tuple[Operand, ...]]
NewStep = Callable[..., "Step"]

#: Readers a zero PAD folds into (value: whether the signature has a depth multiplier).
_FOLDS_INTO = {Op.CONV_2D: False, Op.DEPTHWISE_CONV_2D: True}


def fold_pads(model: Model, steps: list[Step], operands: Operands, new: NewStep) -> list[Step]:
    """``steps`` with each foldable PAD merged into its convolution (module doc); ``new`` makes
    a step (base, label, ins, outs, fn, cost)."""
    ops = model.operands
    readers: Counter[int] = Counter(i for s in steps for i in s.ins)
    outputs = set(model.output_indexes)
    pads = {s.outs[0]: s for s in steps if s.type in (Op.PAD, Op.PAD_V2) and s.fn is not None and len(s.outs) == 1}
    if not pads:
        return steps
    dropped: set[int] = set()
    replaced: dict[int, Step] = {}
    for s in steps:
        if s.type not in _FOLDS_INTO or s.fn is None or not s.ins:
            continue
        x = s.ins[0]
        p = pads.get(x)
        if (p is None or readers[x] != 1 or x in outputs
                or ops[x].lifetime is not OperandLifeTime.TEMPORARY_VARIABLE):
            continue
        fn = _folded_conv(model, p, s, operands)
        if fn is None:
            continue
        replaced[id(s)] = new(s, f"{p.label} + {s.label}", (p.ins[0], *s.ins[1:3]), s.outs, fn, p.cost_ns + s.cost_ns)
        dropped.add(id(p))
    if not dropped:
        return steps
    return [replaced.get(id(s), s) for s in steps if id(s) not in dropped]


def _zero_spatial_pads(model: Model, pad: Step, operands: Operands, nchw: bool) -> tuple[Any, ...] | None:
    """((top, bottom), (left, right)) of a PAD that pads only the spatial axes of a rank-4
    tensor with a real zero, else None."""
    pad_ops = operands(pad.ins)
    src, dst = pad_ops[0], model.operands[pad.outs[0]]
    if not pad_ops[1].is_constant or not same_quant(src, dst):
        return None
    amounts = np.asarray(pad_ops[1].value)
    if amounts.shape != (4, 2) or (amounts < 0).any():
        return None
    if pad.type is Op.PAD_V2:
        if len(pad_ops) < 3 or not pad_ops[2].is_constant:
            return None
        value = pad_ops[2].value
        zero = dst.zero_point if dst.type.is_quantized else 0.0
        if value != zero or np.signbit(np.float64(value)):
            return None
    h, w = (2, 3) if nchw else (1, 2)
    if any(amounts[a].any() for a in range(4) if a not in (h, w)):
        return None
    return tuple(int(v) for v in amounts[h]), tuple(int(v) for v in amounts[w])


def _int32(value: int) -> Operand:
    return Operand(-1, OperandType.INT32, (), lifetime=OperandLifeTime.CONSTANT_COPY, value=value, name="folded padding")


def _folded_conv(model: Model, pad: Step, conv: Step, operands: Operands) -> Callable[..., Any] | None:
    """The kernel of ``conv`` prepared on the PAD's input with the PAD's amounts added to its
    padding (called with input, filter and bias), or None when the fold does not apply."""
    conv_ops = operands(conv.ins)
    out_ops = tuple(model.operands[i] for i in conv.outs)
    where = conv.label[: conv.label.rfind("operation ")]
    try:
        sig = conv_signature(OpCall(conv.type, conv.index, conv_ops, out_ops, model.relaxed, where), 3,
                             extra=_FOLDS_INTO[conv.type], layout_required=False, dilation=True)
    except NnrtError:
        return None
    params = conv_ops[sig.pad:]
    if not all(op.is_constant or op.lifetime is OperandLifeTime.NO_VALUE for op in params):
        return None
    value: list[Any] = [op.value for op in conv_ops]
    nchw = bool(value[sig.layout]) if sig.layout is not None else False
    spatial = _zero_spatial_pads(model, pad, operands, nchw)
    if spatial is None:
        return None
    (top, bottom), (left, right) = spatial
    if sig.explicit:
        own = [int(v) for v in value[sig.pad:sig.pad + 4]]  # left, right, top, bottom
    else:
        padded, fdims = model.operands[pad.outs[0]].dimensions, conv_ops[1].dimensions
        if len(padded) != 4 or len(fdims) != 4:
            return None
        size_h, size_w = (padded[2], padded[3]) if nchw else (padded[1], padded[2])
        if not (size_h and size_w and fdims[1] and fdims[2]):
            return None  # the scheme's amounts depend on sizes known only at run time
        dw = dh = 1
        if sig.dilation is not None and value[sig.dilation] is not None:
            dw, dh = int(value[sig.dilation]), int(value[sig.dilation + 1])
        stride_w, stride_h, scheme = int(value[sig.stride]), int(value[sig.stride + 1]), int(value[sig.pad])
        own = [*implicit_padding(scheme, size_w, stride_w, fdims[2], dw),
               *implicit_padding(scheme, size_h, stride_h, fdims[1], dh)]
    total = (own[0] + left, own[1] + right, own[2] + top, own[3] + bottom)
    src = operands(pad.ins[:1])[0]
    ins = (src, conv_ops[1], conv_ops[2], *(_int32(v) for v in total), *conv_ops[sig.stride:])
    prepare = prepare_function(conv.type)
    assert prepare is not None  # the convolution was prepared once already
    try:
        kern = prepare(OpCall(conv.type, conv.index, ins, out_ops, model.relaxed, where))
    except NnrtError:
        return None
    rest = tuple(op.value for op in ins[3:])

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, **epilogue: Any) -> Any:
        return kern(x, w, b, *rest, **epilogue)

    if takes_epilogue(kern):
        accept_epilogue(run)
    return run
