"""``ModelBuilder``: write a model by hand without the NDK's bookkeeping.

``Model`` mirrors the NNAPI NDK call for call: every scalar parameter (a stride, a fused
activation code) is an operand that must be added and given a value, and every output needs
its operand first. ``ModelBuilder`` does that bookkeeping and nothing else: each call below
turns into the ``Model`` calls a user would make by hand, so every check (``add_operation``'s
signature check included) applies unchanged, and ``builder.model`` stays available for
anything the builder does not cover.

Operands made by the builder are ``OperandRef`` values: operand indexes (an ``int``
subclass, usable wherever ``Model`` takes an index) that ``op()`` can tell apart from a plain
``int``, which it turns into an INT32 scalar constant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias, overload

import numpy as np

from nnrt.errors import InvalidArgumentError
from nnrt.model._model import Model
from nnrt.model._signatures import signature
from nnrt.types import OperandType, OperationType

__all__ = ["ModelBuilder", "OperandRef", "OutputSpec"]

T = OperandType

#: An output's description: its dimensions (type and quantization copied from the operation's
#: first tensor input), or ``(type, dimensions)``, or ``(type, dimensions, scale, zero_point)``.
#: A dimension of 0 is unknown until the model runs.
OutputSpec: TypeAlias = Sequence[int] | tuple[OperandType, Sequence[int]] | tuple[OperandType, Sequence[int], float, int]

_DTYPE_TYPES: dict[np.dtype[Any], OperandType] = {
    np.dtype(np.float32): T.TENSOR_FLOAT32,
    np.dtype(np.float64): T.TENSOR_FLOAT32,
    np.dtype(np.float16): T.TENSOR_FLOAT16,
    np.dtype(np.int32): T.TENSOR_INT32,
    np.dtype(np.int64): T.TENSOR_INT32,
    np.dtype(np.bool_): T.TENSOR_BOOL8,
}


class OperandRef(int):
    """An operand index made by a ``ModelBuilder``: an ``int`` that ``op()`` treats as an operand."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"OperandRef({int(self)})"


class ModelBuilder:
    """Builds a ``Model`` with one call per tensor, constant and operation.

    >>> import numpy as np, nnrt
    >>> from nnrt import OperandType as T, OperationType as Op, FuseCode
    >>> b = nnrt.ModelBuilder("add")
    >>> x = b.input(T.TENSOR_FLOAT32, [1, 2])
    >>> y = b.op(Op.ADD, x, b.constant(np.ones((1, 2), np.float32)), FuseCode.NONE, out=[1, 2])
    >>> model = b.finish(outputs=[y])
    >>> len(model.operations)
    1

    In ``op()``'s inputs an ``OperandRef`` is an operand; a Python ``bool`` becomes a BOOL
    scalar, an ``int`` (or an ``IntEnum`` such as ``FuseCode.RELU``) an INT32 scalar, a
    ``float`` a FLOAT32 scalar (FLOAT16 when the operation's first input is a float16 tensor),
    a numpy array a constant tensor, and ``None`` an omitted optional input. Every mistake
    raises ``InvalidArgumentError`` (INVALID_ARGUMENT) from the ``Model`` call it makes.
    """

    def __init__(self, name: str = "") -> None:
        self._model = Model(name=name)
        self._inputs: list[OperandRef] = []

    @property
    def model(self) -> Model:
        """The ``Model`` being built, for calls the builder does not wrap."""
        return self._model

    # -- operands ----------------------------------------------------------------------------

    def input(
        self, type: OperandType, dimensions: Sequence[int], scale: float = 0.0, zero_point: int = 0, *, name: str = ""  # noqa: A002
    ) -> OperandRef:
        """A model input, in the order of calls (``finish`` declares them)."""
        ref = self.tensor(type, dimensions, scale, zero_point, name=name)
        self._inputs.append(ref)
        return ref

    def tensor(
        self, type: OperandType, dimensions: Sequence[int] | None, scale: float = 0.0, zero_point: int = 0, *, name: str = ""  # noqa: A002
    ) -> OperandRef:
        """A plain operand (an operation's output, or a model input declared by hand)."""
        return OperandRef(self._model.add_operand(type, dimensions, scale, zero_point, name=name))

    def constant(
        self,
        value: Any,
        type: OperandType | None = None,  # noqa: A002
        scale: float = 0.0,
        zero_point: int = 0,
        *,
        channel_quant: tuple[int, Sequence[float]] | None = None,
        name: str = "",
    ) -> OperandRef:
        """A constant tensor. The type follows the array's dtype (float32/float64 → TENSOR_FLOAT32,
        float16, int32/int64 → TENSOR_INT32, bool → TENSOR_BOOL8) unless given; quantized
        constants need ``type`` (and ``channel_quant=(dim, scales)`` for per-channel ones)."""
        arr = np.asarray(value)
        if type is None:
            if arr.dtype not in _DTYPE_TYPES:
                raise InvalidArgumentError(f"constant: dtype {arr.dtype} needs an explicit operand type")
            type = _DTYPE_TYPES[arr.dtype]  # noqa: A001
        ref = self.tensor(type, list(arr.shape), scale, zero_point, name=name)
        if channel_quant is not None:
            self._model.set_operand_symm_per_channel_quant_params(ref, channel_quant[0], channel_quant[1])
        self._model.set_operand_value(ref, arr.astype(type.dtype, copy=False))
        return ref

    def scalar(self, value: bool | int | float, type: OperandType | None = None, *, name: str = "") -> OperandRef:  # noqa: A002
        """A constant scalar: BOOL for ``bool``, INT32 for ``int``, FLOAT32 for ``float``, unless ``type`` says."""
        if type is None:
            type = T.BOOL if isinstance(value, bool | np.bool_) else T.INT32 if isinstance(value, int | np.integer) else T.FLOAT32  # noqa: A001
        ref = self.tensor(type, None, name=name)
        self._model.set_operand_value(ref, value)
        return ref

    def omitted(self, type: OperandType = T.TENSOR_FLOAT32) -> OperandRef:  # noqa: A002
        """An optional input left out (NNAPI's NO_VALUE)."""
        ref = self.tensor(type, None)
        self._model.set_operand_value(ref, None)
        return ref

    # -- operations --------------------------------------------------------------------------

    @overload
    def op(self, op: OperationType, *inputs: Any, out: OutputSpec | None = None) -> OperandRef: ...

    @overload
    def op(self, op: OperationType, *inputs: Any, outs: Sequence[OutputSpec]) -> tuple[OperandRef, ...]: ...

    def op(
        self,
        op: OperationType,
        *inputs: Any,
        out: OutputSpec | None = None,
        outs: Sequence[OutputSpec] | None = None,
    ) -> OperandRef | tuple[OperandRef, ...]:
        """Add ``op`` and return its output (``out``, default: the first input's type, shape
        unknown) or, when ``outs`` is given, a tuple of its outputs."""
        operands = self._model.operands
        first = next((operands[i] for i in inputs if isinstance(i, OperandRef) and operands[i].type.is_tensor), None)
        half = first is not None and first.type is T.TENSOR_FLOAT16
        n = len(inputs)
        refs = [self._input(v, half) if v is not None else self._omitted_input(op, k, n, first) for k, v in enumerate(inputs)]
        specs: Sequence[OutputSpec | None] = [out] if outs is None else outs
        results = tuple(self._output(spec, first) for spec in specs)
        self._model.add_operation(op, refs, list(results))
        return results if outs is not None else results[0]

    def _omitted_input(self, op: OperationType, k: int, n: int, first: Any) -> OperandRef:
        """An omitted input of the type the operation's signature wants at position ``k``."""
        forms = [v for v in signature(op).variants if v.accepts_count("inputs", n)]
        if not forms:
            return self.omitted()  # add_operation reports the count
        types = forms[0].layout("inputs", n)[k].types
        return self.omitted(first.type if first is not None and first.type in types else types[0])

    def _input(self, value: Any, half: bool) -> OperandRef:
        if isinstance(value, OperandRef):
            return value
        if isinstance(value, float | np.floating):
            return self.scalar(float(value), T.FLOAT16 if half else T.FLOAT32)
        if isinstance(value, bool | int | np.integer | np.bool_):
            return self.scalar(value.item() if isinstance(value, np.generic) else value)
        if isinstance(value, np.ndarray):
            return self.constant(value)
        raise InvalidArgumentError(f"op: cannot use {value!r} as an operation input (an OperandRef, scalar, array or None)")

    def _output(self, spec: OutputSpec | None, first: Any) -> OperandRef:
        parts: list[Any] = list(spec) if spec is not None else []
        if not parts or not isinstance(parts[0], OperandType):
            if first is None:
                raise InvalidArgumentError("op: give the output's type, e.g. out=(OperandType.TENSOR_FLOAT32, [1, 4])")
            return self.tensor(first.type, parts if spec is not None else None, first.scale, first.zero_point)
        t, dims, *quant = parts
        scale, zero_point = (float(quant[0]), int(quant[1])) if quant else (0.0, 0)
        return self.tensor(t, list(dims), scale, zero_point)

    def finish(self, outputs: Sequence[int], inputs: Sequence[int] | None = None) -> Model:
        """Declare the model's inputs (default: every ``input()``, in order) and outputs, and
        ``Model.finish()`` it (the graph checks run here)."""
        self._model.identify_inputs_and_outputs(list(self._inputs if inputs is None else inputs), list(outputs))
        self._model.finish()
        return self._model
