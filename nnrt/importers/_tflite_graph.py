"""Building one nnrt ``Model`` from one TFLite subgraph: tensors to operands, and the op registry.

``Graph`` owns the tensor → operand map of one subgraph. A tensor gets its operand when it is
first read (constants: a zero-copy view of the file through ``set_operand_value_from_memory``)
or written (an op's output). Op mappers, one function per TFLite builtin in the
``_tflite_ops_*`` modules, register with ``@mapper(CODE, ...)`` and add NNAPI operations
through the small helpers here (``scalar``, ``const``, ``temp``, ``op``, ``fused``). A mapper
that meets something NNAPI cannot express raises ``Unsupported(reason)``; the walk records it
and goes on, so one load reports every offending node.

Type rules (the NNAPI delegate's): float32 → TENSOR_FLOAT32, float16 → TENSOR_FLOAT16,
uint8 → TENSOR_QUANT8_ASYMM, int8 → TENSOR_QUANT8_ASYMM_SIGNED (several scales:
TENSOR_QUANT8_SYMM_PER_CHANNEL along ``quantized_dimension``), int16 → TENSOR_QUANT16_SYMM,
int32 → TENSOR_INT32, bool → TENSOR_BOOL8; int64 only as constants that fit in int32. A scale
of 0 on a quantized tensor becomes 1 (as the delegate does). Rank-0 tensors become ``[1]``
(NNAPI has no rank-0 tensors); a -1 in ``shape_signature`` is an unknown dimension (0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from nnrt.importers._tflite_schema import TT, TflOp, TflSubgraph, TflTensor
from nnrt.model import Model
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

if TYPE_CHECKING:
    from nnrt.importers._tflite_control import State

__all__ = ["MAPPERS", "Graph", "Unsupported", "mapper"]


class Unsupported(Exception):
    """Raised by a mapper: this node cannot be expressed in NNAPI (the message says why)."""


MapperFn = Callable[["Graph", TflOp], None]
#: TFLite builtin code → mapper.
MAPPERS: dict[int, MapperFn] = {}


def mapper(*codes: int) -> Callable[[MapperFn], MapperFn]:
    def register(fn: MapperFn) -> MapperFn:
        for c in codes:
            MAPPERS[c] = fn
        return fn

    return register


class _Pool:
    """A ``SupportsBuffer`` over an array's bytes, so constants are set without a copy."""

    __slots__ = ("buffer",)

    def __init__(self, arr: np.ndarray) -> None:
        self.buffer = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


_ACT_OPS = {1: Op.RELU, 2: Op.RELU1, 3: Op.RELU6}
_ACT_NAMES = {4: "TANH", 5: "SIGN_BIT"}


class Graph:
    """One TFLite subgraph being turned into one nnrt ``Model``."""

    def __init__(self, sub: TflSubgraph, model: Model, subgraph_model: Callable[[int], Model],
                 state: State | None, input_shapes: dict[str, tuple[int, ...]],
                 inline: Callable[[Graph, int, list[int]], list[int]] | None = None) -> None:
        self.sub = sub
        self.model = model
        #: The finished model of another subgraph (IF branches, WHILE bodies).
        self.subgraph_model = subgraph_model
        #: Map another subgraph's operators into this model, its inputs bound to the given
        #: operands; returns the operands of its outputs (CALL, STABLEHLO_COMPOSITE).
        self.inline = inline
        self.state = state
        self.input_shapes = input_shapes
        self.operand: dict[int, int] = {}
        #: ``input_shapes`` changed a dimension the file has as fixed: every computed tensor's
        #: dimensions become unknown (kept rank), for preparation to infer.
        self.resized = any(
            len(fixed) == len(t.signature) and any(d >= 0 and d != f for d, f in zip(t.signature, fixed))
            for t in (sub.tensors[i] for i in sub.inputs)
            if (fixed := input_shapes.get(t.name)) is not None
        )
        self._pending: list[tuple[Op, list[int], list[int]]] = []
        self._scalars: dict[tuple[T, object], int] = {}

    # -- tensors ---------------------------------------------------------------------------

    def tensor(self, ti: int) -> TflTensor:
        return self.sub.tensors[ti]

    def dims(self, t: TflTensor) -> tuple[int, ...]:
        if t.data is not None:
            return t.shape or (1,)
        fixed = self.input_shapes.get(t.name) if t.index in self.sub.inputs else None
        if fixed is not None:
            return fixed or (1,)
        if self.resized and not t.is_variable:
            return tuple(0 for _ in t.signature) or (1,)  # the file's shapes no longer hold: inferred
        return tuple(0 if d < 0 else d for d in t.signature) or (1,)

    def nn_type(self, t: TflTensor) -> tuple[T, float, int]:
        """(operand type, scale, zero point) of a tensor by the delegate's rules."""
        scale = t.scale or 1.0
        if t.type == TT.FLOAT32:
            return T.TENSOR_FLOAT32, 0.0, 0
        if t.type == TT.FLOAT16:
            return T.TENSOR_FLOAT16, 0.0, 0
        if t.type == TT.INT32:
            return T.TENSOR_INT32, t.scale, t.zero_point
        if t.type == TT.BOOL:
            return T.TENSOR_BOOL8, 0.0, 0
        if t.type == TT.UINT8:
            return T.TENSOR_QUANT8_ASYMM, scale, t.zero_point
        if t.type == TT.INT8:
            if t.per_channel:
                return T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 0.0, 0
            return T.TENSOR_QUANT8_ASYMM_SIGNED, scale, t.zero_point
        if t.type == TT.INT16:
            if t.zero_point != 0:
                raise Unsupported(f"{t.label()}: int16 with zero point {t.zero_point} (NNAPI's QUANT16_SYMM needs 0)")
            return T.TENSOR_QUANT16_SYMM, scale, 0
        raise Unsupported(f"{t.label()} has type {t.type_name}, which NNAPI has no operand type for")

    def _add(self, t: TflTensor, typ: T, scale: float, zp: int, dims: tuple[int, ...]) -> int:
        idx = self.model.add_operand(typ, dims, scale, zp, name=t.name)
        if typ is T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            assert t.scales is not None
            qd = t.quantized_dimension
            if not 0 <= qd < len(dims) or dims[qd] != t.scales.size:
                raise Unsupported(f"{t.label()}: {t.scales.size} scales along dimension {qd} of {list(dims)}")
            if t.zero_points is not None and np.any(t.zero_points != 0):
                raise Unsupported(f"{t.label()}: per-channel int8 with non-zero zero points")
            self.model.set_operand_symm_per_channel_quant_params(idx, qd, [float(s) for s in t.scales])
        return idx

    def input(self, ti: int) -> int:
        """The operand holding tensor ``ti`` as an op reads it (constants created here)."""
        got = self.operand.get(ti)
        if got is not None:
            return got
        t = self.tensor(ti)
        if t.is_variable and self.state is not None:
            idx = self.state.read_variable_tensor(self, t)
        elif t.data is not None:
            if t.type == TT.INT64:
                return self.const(self.int32_values(t), T.TENSOR_INT32, name=t.name, key=ti)
            typ, scale, zp = self.nn_type(t)
            idx = self._add(t, typ, scale, zp, t.shape or (1,))
            data = t.data.reshape(t.shape or (1,))
            self.model.set_operand_value_from_memory(idx, _Pool(data), 0, data.nbytes)
        elif t.sparsity is not None:
            raise Unsupported(f"{t.label()} is a sparse constant read by an op other than DENSIFY")
        else:
            raise Unsupported(f"{t.label()} is read but no op writes it and it is not a constant or an input")
        self.operand[ti] = idx
        return idx

    def per_channel_const(self, t: TflTensor, dims: tuple[int, ...]) -> int:
        """Per-channel int8 constant ``t`` viewed with ``dims`` (same channel count on axis 0)."""
        assert t.data is not None
        idx = self._add(dataclasses.replace(t, shape=dims, quantized_dimension=0), T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
                        0.0, 0, dims)
        data = t.data.reshape(dims)
        self.model.set_operand_value_from_memory(idx, _Pool(data), 0, data.nbytes)
        return idx

    def has_input(self, op: TflOp, k: int) -> bool:
        return k < len(op.inputs) and op.inputs[k] >= 0

    def out(self, ti: int, typ: T | None = None) -> int:
        """A new operand for output tensor ``ti`` (``typ`` overrides the mapped type)."""
        if ti in self.operand:
            raise Unsupported(f"{self.tensor(ti).label()} is written twice")
        t = self.tensor(ti)
        if typ is None:
            typ, scale, zp = self.nn_type(t)
        else:
            scale, zp = (t.scale or 1.0, t.zero_point) if typ.is_quantized else (0.0, 0)
        idx = self._add(t, typ, scale, zp, self.dims(t))
        self.operand[ti] = idx
        return idx

    def alias(self, ti: int, operand: int) -> None:
        """Let tensor ``ti`` be ``operand`` (an op that is an identity in NNAPI terms)."""
        if ti in self.operand:
            raise Unsupported(f"{self.tensor(ti).label()} is written twice")
        self.operand[ti] = operand

    def const_value(self, ti: int) -> np.ndarray | None:
        """The constant data of tensor ``ti`` (``None`` when it is computed)."""
        t = self.tensor(ti)
        return None if t.is_variable else t.data

    def const_ints(self, op: TflOp, k: int, what: str) -> list[int]:
        """Input ``k`` of ``op`` as a list of ints; it must be a constant (NNAPI needs it so)."""
        if not self.has_input(op, k):
            raise Unsupported(f"{what} (input {k}) is missing")
        t = self.tensor(op.inputs[k])
        if t.data is None or t.is_variable or t.type not in (TT.INT32, TT.INT64):
            raise Unsupported(f"{what} ({t.label()}) must be a constant int32/int64 tensor")
        return [int(v) for v in t.data.reshape(-1)]

    def int32_values(self, t: TflTensor) -> np.ndarray:
        assert t.data is not None
        v = t.data.reshape(t.shape or (1,))
        if v.size and (v.min() < -(2**31) or v.max() >= 2**31):
            raise Unsupported(f"{t.label()}: int64 values do not fit in int32")
        return v.astype(np.int32)

    def type_of(self, operand: int) -> T:
        return self.model.operands[operand].type

    # -- making operands and operations ----------------------------------------------------

    def scalar(self, typ: T, value: object) -> int:
        key = (typ, value)
        got = self._scalars.get(key)
        if got is None:
            got = self.model.add_operand(typ)
            self.model.set_operand_value(got, value)
            self._scalars[key] = got
        return got

    def i32(self, value: int) -> int:
        return self.scalar(T.INT32, int(value))

    def f32(self, value: float) -> int:
        return self.scalar(T.FLOAT32, float(np.float32(value)))

    def flag(self, value: bool) -> int:
        return self.scalar(T.BOOL, bool(value))

    def const(self, arr: np.ndarray, typ: T, scale: float = 0.0, zp: int = 0, *, name: str = "",
              key: int | None = None) -> int:
        """A constant tensor holding ``arr`` (no copy: the operand keeps a view of ``arr``)."""
        arr = np.ascontiguousarray(arr, dtype=typ.dtype)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        idx = self.model.add_operand(typ, arr.shape, scale, zp, name=name)
        self.model.set_operand_value_from_memory(idx, _Pool(arr), 0, arr.nbytes)
        if key is not None:
            self.operand[key] = idx
        return idx

    def ints(self, values: Sequence[int]) -> int:
        return self.const(np.asarray(values, np.int32).reshape(-1), T.TENSOR_INT32)

    def temp(self, like: int, dims: Sequence[int] | None = None, typ: T | None = None,
             quant: tuple[float, int] | None = None) -> int:
        """A new temporary shaped like operand ``like`` (or ``dims``), of its type (or ``typ``)."""
        src = self.model.operands[like]
        t = typ or src.type
        scale, zp = quant if quant is not None else ((src.scale, src.zero_point) if t is src.type else (0.0, 0))
        return self.model.add_operand(t, tuple(src.dimensions if dims is None else dims), scale, zp)

    def op(self, typ: Op, ins: Sequence[int], outs: Sequence[int]) -> None:
        self.model.add_operation(typ, list(ins), list(outs))

    def identity(self, operand: int, name: str = "") -> int:
        """A copy of ``operand`` in a new operand named ``name`` (CAST to the same type)."""
        o = self.model.operands[operand]
        dst = self.model.add_operand(o.type, o.dimensions, o.scale, o.zero_point, name=name)
        self.op(Op.CAST, [operand], [dst])
        return dst

    # -- fused activations -----------------------------------------------------------------

    def fused(self, code: int, out_ti: int) -> tuple[int, int]:
        """(NNAPI fuse code operand, output operand) for TFLite fused activation ``code``.

        NONE, RELU, RELU_N1_TO_1 and RELU6 have NNAPI fuse codes of the same values. TANH and
        SIGN_BIT have none, and LiteRT's kernels for these ops do not apply them either (its
        activation range for them is unbounded), so neither a TANH op nor dropping them would
        be faithful: the node is rejected, as the delegate does.
        """
        if code not in (0, 1, 2, 3):
            raise Unsupported(f"fused activation {_ACT_NAMES.get(code, code)} has no NNAPI fuse code")
        return self.i32(code), self.out(out_ti)

    def after_activation(self, code: int, out_ti: int) -> int:
        """The operand an op without a fused activation writes; the activation follows it."""
        if code == 0:
            return self.out(out_ti)
        if code not in _ACT_OPS:
            raise Unsupported(f"fused activation {_ACT_NAMES.get(code, code)} has no NNAPI equivalent")
        final = self.out(out_ti)
        target = self.temp(final)
        self._pending.append((_ACT_OPS[code], [target], [final]))
        return target

    def flush(self) -> None:
        """Emit the operations a mapper left to follow its own (separate activations)."""
        for typ, ins, outs in self._pending:
            self.op(typ, ins, outs)
        self._pending.clear()

    def discard(self) -> None:
        self._pending.clear()
