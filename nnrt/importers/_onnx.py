"""The ONNX importer's vocabulary: how one node becomes NNAPI operations.

Each ONNX tensor becomes a ``Value``: its ONNX element type, its shape as far as it is known
(0 = unknown dimension, ``None`` = unknown rank), and either a constant numpy array or the nnrt
operand that holds it. Constants are never turned into operands until an emitted operation
reads them, so shape arithmetic (Shape → Gather → Concat → Reshape ...) folds into numpy at
import time (``_onnx_fold``) and Reshape targets become constants. Constant tensors become
CONSTANT_POOL operands that view the loaded file (``_ArrayPool``): no second copy.

A ``Builder`` emits the operands and operations of one graph (the main graph or an If/Loop
body); a ``NodeCtx`` is one node being converted. Each op type has a mapper registered with
``@mapper`` in its family's module (``_onnx_nn``: conv, pool, dense, batch norm; ``_onnx_norm``:
layer/RMS/instance norms, LRN, Lp; ``_onnx_elem``: elementwise, activations, reductions,
softmax, cast; ``_onnx_quant``: QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul;
``_onnx_rnn``: LSTM, GRU, RNN; ``_onnx_shape``: reshaping and data movement; ``_onnx_flow``:
If/Loop), which emits NNAPI operations through ``Builder.op``. A mapper that meets something
NNAPI cannot express raises ``Reject(reason)``. Walking a whole graph (inputs, nodes in order,
rejections, outputs) lives in ``_onnx_graph``: this module holds what every mapper needs, that
one what only the walk needs.

Layout: the model's inputs and outputs keep the file's layout (NCHW stays NCHW for the
caller). Inside, conv, conv-transpose, pools and resize run NHWC, nnrt's native layout, and a
tensor stays NHWC through elementwise ops and Concat, so a run of spatial ops costs one
TRANSPOSE in and one out (``_onnx_layout``; measured faster than NNAPI's NCHW flag on every op
by ``benchmarks/load_onnx.py``). Depth/space moves, instance norm and 1-D convs use the flag.
Weights are re-laid once at import (OIHW → OHWI, depthwise → [1, H, W, M], Gemm B → [N, K]).

int64 tensors (shapes, indices) become TENSOR_INT32 operands (values must fit), doubles and
strings are refused. Opsets 11 and later of the default domain are read.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from nnrt.importers._onnx_proto import Node
from nnrt.model import Model
from nnrt.types import OperandType, OperationType

__all__ = ["MAPPERS", "Arg", "Builder", "NodeCtx", "Reject", "Value", "mapper"]

Shape = tuple[int, ...] | None
MIN_OPSET = 11

_F32 = np.dtype(np.float32)


class Reject(Exception):
    """A mapper cannot express this node; the message is the reason shown to the user."""


@dataclasses.dataclass
class Value:
    """One ONNX tensor as the importer knows it."""

    dtype: np.dtype
    shape: Shape
    const: np.ndarray | None = None
    index: int | None = None
    quant: tuple[float, int] | None = None
    #: Per-channel symmetric quantization of a constant int8 tensor: (channel dim, scales).
    channel: tuple[int, tuple[float, ...]] | None = None
    #: A TENSOR_INT32 constant's scale (quantized biases).
    int_scale: float = 0.0
    #: Set on values that a rejected node should have produced.
    missing: bool = False
    #: The operand holds this rank-4 tensor transposed to NHWC (``shape`` stays ONNX's NCHW).
    nhwc: bool = False
    #: The same tensor in the other layout, once some consumer needed it (one transpose, shared).
    twin: Value | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def known(self) -> bool:
        return self.shape is not None and all(d > 0 for d in self.shape)

    def need_rank(self, what: str) -> int:
        if self.shape is None:
            raise Reject(f"{what} needs a known rank")
        return len(self.shape)


#: An operation input: a Value, an operand index (scalars), or None (an omitted optional input).
Arg = Value | int | None


class _ArrayPool:
    """A constant's bytes as ``Model.set_operand_value_from_memory`` wants them, without a copy."""

    __slots__ = ("buffer",)

    def __init__(self, arr: np.ndarray) -> None:
        self.buffer = arr.reshape(-1).view(np.uint8)


def nnrt_type(dtype: np.dtype, quant: tuple[float, int] | None, what: str) -> OperandType:
    if quant is not None:
        if dtype == np.uint8:
            return OperandType.TENSOR_QUANT8_ASYMM
        if dtype == np.int8:
            return OperandType.TENSOR_QUANT8_ASYMM_SIGNED
        raise Reject(f"{what}: quantized {dtype} tensors are not supported (uint8 and int8 are)")
    t = _TENSOR_TYPES.get(dtype.str.lstrip("<|="))
    if t is None:
        raise Reject(f"{what}: element type {dtype} has no nnrt tensor type")
    return t


_TENSOR_TYPES = {
    "f4": OperandType.TENSOR_FLOAT32,
    "f2": OperandType.TENSOR_FLOAT16,
    "i4": OperandType.TENSOR_INT32,
    "i8": OperandType.TENSOR_INT32,
    "b1": OperandType.TENSOR_BOOL8,
}


class Builder:
    """Emits nnrt operands and operations for one ONNX graph (the main graph or a body)."""

    def __init__(self, model: Model, opset: int, parent: Builder | None = None) -> None:
        self.model = model
        self.opset = opset
        self.parent = parent
        self.values: dict[str, Value] = {}
        #: Values of an enclosing graph this body reads (If/Loop), in first-use order.
        self.captured: dict[str, Value] = {}
        self.scalars: dict[tuple[OperandType, object], int] = {}
        #: Readers of each tensor name and the graph's outputs (for fusing a node into the next).
        self.consumers: dict[str, list[Node]] = {}
        self.graph_outputs: set[str] = set()
        #: Nodes already folded into an earlier one (BatchNormalization or Relu after a Conv).
        self.absorbed: set[int] = set()
        #: The node that computes each tensor of this graph (to name what a value depends on).
        self.producers: dict[str, Node] = {}
        #: Readers of each tensor name over the whole model (nested graphs and graph outputs
        #: too), shared by the builders of one load: a constant read once may be re-laid in place.
        self.reads: Counter[str] = parent.reads if parent is not None else Counter()
        #: Tensors stored in the file (initializers and Constant nodes, nested graphs' too): only
        #: their bytes may be re-laid in place (a folded tensor may view bytes another name reads).
        self.stored: set[str] = parent.stored if parent is not None else set()

    # -- values -----------------------------------------------------------------------------

    def lookup(self, name: str) -> Value | None:
        if name in self.values:
            return self.values[name]
        if self.parent is not None:
            outer = self.parent.lookup(name)
            if outer is None:
                return None
            outer = self.parent.logical(outer)
            if outer.const is not None or outer.missing:
                # A fresh Value: the outer one may already hold an operand index of the outer model.
                copy = Value(outer.dtype, outer.shape, const=outer.const, quant=outer.quant, channel=outer.channel,
                             int_scale=outer.int_scale, missing=outer.missing)
                self.values[name] = copy
                return copy
            # An outer tensor becomes an explicit input of this body (NNAPI bodies see no outer scope).
            inner = Value(outer.dtype, outer.shape, quant=outer.quant)
            inner.index = self.add(outer.dtype, outer.shape, outer.quant, name)
            self.captured[name] = outer
            self.values[name] = inner
            return inner
        return None

    def relaid(self, name: str, arr: np.ndarray) -> np.ndarray:
        """``arr``, the stored tensor ``name`` (an initializer or a Constant node's value)
        re-laid or folded for its one reader, as a contiguous array.

        When nothing else reads the tensor, ``arr`` is written over the tensor's own bytes in
        the loaded file, so the file's layout is not kept beside the re-laid one (a model whose
        weights are all re-laid would otherwise hold them twice). The tensor is then
        unavailable under its name. Otherwise ``arr`` is copied.
        """
        holders = []
        b: Builder | None = self
        while b is not None:
            if name in b.values:
                holders.append(b)
            b = b.parent
        src = holders[-1].values[name] if holders else None
        old = None if src is None else src.const
        if (src is None or old is None or name not in self.stored or self.reads[name] != 1
                or src.index is not None or src.twin is not None
                or old.dtype != arr.dtype or old.nbytes != arr.nbytes or not old.flags.c_contiguous):
            return np.ascontiguousarray(arr)
        flat = old.reshape(-1).view()
        try:
            flat.flags.writeable = True  # the load's own buffer (not an external file's bytes)
        except ValueError:
            return np.ascontiguousarray(arr)
        flat[...] = np.ascontiguousarray(arr).reshape(-1)  # a temporary when ``arr`` views ``old``
        out = flat.reshape(arr.shape)
        out.flags.writeable = False
        for b in holders:
            b.values[name] = Value(old.dtype, src.shape, missing=True)
        return out

    def add(self, dtype: np.dtype, shape: Shape, quant: tuple[float, int] | None, name: str = "") -> int:
        t = nnrt_type(dtype, quant, name or "tensor")
        scale, zp = quant if quant is not None else (0.0, 0)
        return self.model.add_operand(t, list(shape) if shape is not None else None, scale, zp, name=name)

    # -- layout (see _onnx_layout) --------------------------------------------------------

    def logical(self, v: Value) -> Value:
        """``v`` as ONNX lays it out (NCHW): NHWC values are transposed back once, on first need."""
        if not v.nhwc:
            return v
        if v.twin is None:
            t = self.op1(OperationType.TRANSPOSE, [v, self.ints([0, 3, 1, 2])], v.dtype, v.shape, v.quant)
            v.twin, t.twin = t, v
        return v.twin

    def nhwc(self, v: Value) -> Value:
        """A rank-4 NCHW ``v`` held as NHWC (constants re-laid, tensors transposed once, on first need)."""
        if v.nhwc:
            return v
        if v.twin is not None:
            return v.twin
        assert v.shape is not None and len(v.shape) == 4
        if v.const is not None:
            arr = np.ascontiguousarray(v.const.transpose(0, 2, 3, 1))
            t = Value(v.dtype, v.shape, const=arr, quant=v.quant, nhwc=True)
        else:
            t = self.op1(OperationType.TRANSPOSE, [v, self.ints([0, 2, 3, 1])], v.dtype, to_nhwc(v.shape), v.quant)
            t.shape, t.nhwc = v.shape, True
        v.twin, t.twin = t, v
        return t

    def op_nhwc(self, op_type: OperationType, inputs: Sequence[Arg], dtype: np.dtype, shape: tuple[int, ...],
                quant: tuple[float, int] | None = None, name: str = "") -> Value:
        """Emit an operation whose output is NHWC; ``shape`` is the output's logical NCHW shape."""
        v = self.op(op_type, inputs, [(dtype, to_nhwc(shape), quant)], [name])[0]
        v.shape, v.nhwc = shape, True
        return v

    def operand(self, v: Value, what: str = "input") -> int:
        """The operand index holding ``v`` (constants become CONSTANT_POOL operands on first use)."""
        if v.index is not None:
            return v.index
        if v.const is None:
            raise Reject(f"{what} is not available")
        arr = v.const
        if arr.dtype == np.int64:
            if arr.size and (arr.min() < -(2**31) or arr.max() > 2**31 - 1):
                raise Reject(f"{what}: int64 constant does not fit in int32")
            arr = arr.astype(np.int32)
        elif arr.dtype == np.float64:
            raise Reject(f"{what}: double tensors are not supported")
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.size == 0:
            raise Reject(f"{what}: empty constant tensors are not supported")
        if v.channel is not None:
            t = OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL
        else:
            t = nnrt_type(arr.dtype, v.quant, what)
        scale, zp = v.quant if v.quant is not None else (v.int_scale, 0)
        idx = self.model.add_operand(t, list(arr.shape), scale, zp)
        if v.channel is not None:
            self.model.set_operand_symm_per_channel_quant_params(idx, *v.channel)
        arr = np.ascontiguousarray(arr)
        self.model.set_operand_value_from_memory(idx, _ArrayPool(arr), 0, arr.nbytes)
        v.index = idx
        return idx

    def scalar(self, t: OperandType, value: object) -> int:
        key = (t, value)
        if key not in self.scalars:
            idx = self.model.add_operand(t)
            self.model.set_operand_value(idx, value)
            self.scalars[key] = idx
        return self.scalars[key]

    def i32(self, value: int) -> int:
        return self.scalar(OperandType.INT32, int(value))

    def f32(self, value: float, like: Value | None = None) -> int:
        if like is not None and like.dtype == np.float16:
            return self.scalar(OperandType.FLOAT16, float(value))
        return self.scalar(OperandType.FLOAT32, float(value))

    def bool(self, value: bool) -> int:
        return self.scalar(OperandType.BOOL, bool(value))

    def ints(self, values: Iterable[int]) -> int:
        """A constant TENSOR_INT32 operand."""
        return self.operand(Value(np.dtype(np.int32), None, const=np.asarray(list(values), dtype=np.int32)))

    def op(
        self,
        op_type: OperationType,
        inputs: Sequence[Arg],
        outputs: Sequence[tuple[np.dtype, Shape] | tuple[np.dtype, Shape, tuple[float, int] | None]],
        names: Sequence[str] = (),
    ) -> list[Value]:
        """Emit one operation; ``inputs`` are Values, operand indexes, or None (omitted)."""
        ins: list[int] = []
        for k, a in enumerate(inputs):
            if a is None:
                idx = self.model.add_operand(OperandType.TENSOR_FLOAT32, [1])
                self.model.set_operand_value(idx, None)
                ins.append(idx)
            elif isinstance(a, Value):
                ins.append(self.operand(a, f"{op_type.name} input {k}"))
            else:
                ins.append(a)
        outs: list[Value] = []
        for k, spec in enumerate(outputs):
            dtype, shape = spec[0], spec[1]
            quant = spec[2] if len(spec) > 2 else None
            v = Value(dtype, shape, quant=quant)
            v.index = self.add(dtype, shape, quant, names[k] if k < len(names) else "")
            outs.append(v)
        self.model.add_operation(op_type, ins, [v.index for v in outs if v.index is not None])
        return outs

    def op1(self, op_type: OperationType, inputs: Sequence[Arg], dtype: np.dtype, shape: Shape,
            quant: tuple[float, int] | None = None) -> Value:
        return self.op(op_type, inputs, [(dtype, shape, quant)])[0]

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        known = tuple(int(d) if d > 0 else 0 for d in shape)
        return self.op1(OperationType.RESHAPE, [x, self.ints(shape)], x.dtype, known, x.quant)

    def copy(self, x: Value) -> Value:
        """A fresh operand with ``x``'s value (graph outputs must be written by an operation)."""
        if x.dtype == np.bool_ and x.const is None:
            return self.op1(OperationType.LOGICAL_AND, [x, x], x.dtype, x.shape)
        if x.shape is None:
            raise Reject("an output of unknown rank that is not computed by an operation")
        if x.rank == 0 or (x.const is not None and x.const.ndim == 0):
            return self.reshape(x, [1])
        dims = [d if d > 0 else -1 for d in (x.shape or ())]
        if dims.count(-1) > 1:
            return self.op1(OperationType.TRANSPOSE, [x, self.ints(range(len(dims)))], x.dtype, x.shape, x.quant)
        return self.reshape(x, dims)


def to_nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[2], shape[3], shape[1])


class NodeCtx:
    """One node being converted: its inputs as Values, its attributes, its outputs."""

    def __init__(self, b: Builder, node: Node, inputs: list[Value | None]) -> None:
        self.b = b
        self.node = node
        self.inputs = inputs
        self.outputs: list[Value | None] = [None] * len(node.outputs)

    @property
    def opset(self) -> int:
        return self.b.opset

    def raw(self, i: int) -> Value:
        """Input ``i`` as stored, possibly NHWC (for layout-aware mappers)."""
        v = self.inputs[i] if i < len(self.inputs) else None
        if v is None:
            raise Reject(f"input {i} is required")
        return v

    def inp(self, i: int) -> Value:
        """Input ``i`` in ONNX's layout."""
        return self.b.logical(self.raw(i))

    def opt(self, i: int) -> Value | None:
        v = self.inputs[i] if i < len(self.inputs) else None
        return None if v is None else self.b.logical(v)

    def all_inputs(self) -> list[Value]:
        """The present inputs, in ONNX's layout."""
        return [self.b.logical(v) for v in self.inputs if v is not None]

    def const(self, i: int, what: str) -> np.ndarray | None:
        v = self.opt(i)
        if v is None:
            return None
        if v.const is None:
            raise Reject(f"{what} (input {i}) must be a constant")
        return v.const

    def has(self, name: str) -> bool:
        return name in self.node.attrs

    def attr(self, name: str, default: object = None) -> object:
        a = self.node.attrs.get(name)
        return default if a is None else a.value()

    def i(self, name: str, default: int) -> int:
        v = self.attr(name, default)
        return int(v) if isinstance(v, (int, np.integer)) else default

    def f(self, name: str, default: float) -> float:
        v = self.attr(name, default)
        return float(v) if isinstance(v, (int, float)) else default

    def s(self, name: str, default: str) -> str:
        v = self.attr(name, None)
        return v.decode() if isinstance(v, bytes) else default

    def ints(self, name: str, default: Sequence[int] | None = None) -> list[int] | None:
        v = self.attr(name, None)
        if v is None:
            return None if default is None else list(default)
        return [int(x) for x in v] if isinstance(v, list) else None

    def strings(self, name: str) -> list[str]:
        v = self.attr(name, None)
        return [x.decode() if isinstance(x, bytes) else str(x) for x in v] if isinstance(v, list) else []

    def floats(self, name: str) -> list[float] | None:
        v = self.attr(name, None)
        return [float(x) for x in v] if isinstance(v, list) else None

    def out(self, i: int = 0) -> str:
        return self.node.outputs[i] if i < len(self.node.outputs) else ""

    def set(self, i: int, v: Value) -> None:
        if i < len(self.outputs):
            self.outputs[i] = v

    def emit(self, op_type: OperationType, inputs: Sequence[Arg], dtype: np.dtype, shape: Shape,
             quant: tuple[float, int] | None = None, i: int = 0) -> Value:
        """Emit an operation whose single output is this node's output ``i``."""
        v = self.b.op(op_type, inputs, [(dtype, shape, quant)], [self.out(i)])[0]
        self.set(i, v)
        return v


Mapper = Callable[[NodeCtx], None]
MAPPERS: dict[str, Mapper] = {}


def mapper(*op_types: str) -> Callable[[Mapper], Mapper]:
    def register(fn: Mapper) -> Mapper:
        for t in op_types:
            MAPPERS[t] = fn
        return fn

    return register


def _load_mappers() -> None:
    from nnrt.importers import _onnx_elem, _onnx_flow, _onnx_nn, _onnx_norm, _onnx_quant, _onnx_rnn, _onnx_shape  # noqa: F401
