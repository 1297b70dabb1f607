"""``Model``: the NNAPI NDK model builder (``ANeuralNetworksModel_*``) in Python.

Per-call checks run at the call (an operand index out of range, a value of the wrong size),
graph checks run at ``finish()``: execution order (every operand read by an operation is
written before it, which also rules out cycles), exactly one writer for every temporary and
output, inputs and constants never written, no duplicate inputs or outputs, and no cycle
among referenced subgraphs. ``add_operation`` checks the operation's signature (the number
of inputs and outputs, each operand's type) against ``_signatures.py``, as NNAPI's runtime
does; ranks, shapes and constant parameters are the kernels' checks, at preparation.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Sequence

import numpy as np

from nnrt._log import get_logger, vlog_enabled
from nnrt.errors import InvalidArgumentError
from nnrt.model._operand import (
    ChannelQuant,
    Operand,
    Operation,
    SupportsBuffer,
    as_dims,
    as_float,
    as_int,
    as_int_list,
    check_quant_params,
    dims_product,
)
from nnrt.model._signatures import check_operation
from nnrt.types import OperandLifeTime, OperandType, OperationType

__all__ = ["Model"]

_log = get_logger("model")

_L = OperandLifeTime


def _enum_value(enum_cls: type[OperandType] | type[OperationType], value: object, what: str) -> object:
    try:
        return enum_cls(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"{what}: {value!r} is not a valid {enum_cls.__name__}") from None


class Model:
    """A graph of operands and operations, built with the NNAPI NDK's calls.

    >>> m = Model()
    >>> a = m.add_operand(OperandType.TENSOR_FLOAT32, dimensions=[2])
    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.operands: list[Operand] = []
        self.operations: list[Operation] = []
        self.input_indexes: tuple[int, ...] = ()
        self.output_indexes: tuple[int, ...] = ()
        self.relaxed = False
        self._finished = False
        self._io_identified = False

    # -- building ---------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._finished

    def _check_mutable(self, call: str) -> None:
        if self._finished:
            raise InvalidArgumentError(f"{call}: the model is finished and can no longer change")

    def _operand(self, index: int, call: str) -> Operand:
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or not 0 <= index < len(self.operands):
            raise InvalidArgumentError(f"{call}: operand index {index!r} is out of range [0, {len(self.operands)})")
        return self.operands[int(index)]

    def add_operand(
        self,
        type: OperandType | int,  # noqa: A002 - the NDK's name
        dimensions: Sequence[int] | None = None,
        scale: float = 0.0,
        zero_point: int = 0,
        *,
        name: str = "",
    ) -> int:
        """Add an operand and return its index. A dimension of 0 is unknown; a tensor with no
        dimensions has unknown rank."""
        self._check_mutable("add_operand")
        index = len(self.operands)
        t = _enum_value(OperandType, type, f"add_operand (operand {index})")
        assert isinstance(t, OperandType)
        where = f"add_operand (operand {index})"
        dims = as_dims(dimensions, f"{where}: dimensions")
        fscale, zp = as_float(scale, f"{where}: scale"), as_int(zero_point, f"{where}: zero_point")
        if not isinstance(name, str):
            raise InvalidArgumentError(f"{where}: name {name!r:.60} is not a str")
        check_quant_params(t, dims, fscale, zp, f"operand {index}")
        self.operands.append(Operand(index, t, dims, fscale, zp, name=name))
        return index

    def set_operand_value(self, index: int, value: object) -> None:
        """Give an operand a constant value (copied), or ``None`` for an omitted optional operand."""
        self._check_mutable("set_operand_value")
        op = self._operand(index, "set_operand_value")
        if value is None:
            op.lifetime, op.value = _L.NO_VALUE, None
            return
        op.value = self._coerce_value(op, value, "set_operand_value", copy=True)
        op.lifetime = _L.CONSTANT_COPY

    def set_operand_value_from_memory(self, index: int, memory: SupportsBuffer, offset: int, length: int) -> None:
        """Give an operand a constant value that stays in ``memory`` (CONSTANT_POOL, no copy)."""
        self._check_mutable("set_operand_value_from_memory")
        op = self._operand(index, "set_operand_value_from_memory")
        try:
            buf = memory.buffer
        except AttributeError:
            raise InvalidArgumentError(f"set_operand_value_from_memory: {op.label}: {memory!r} is not a Memory") from None
        offset = as_int(offset, f"set_operand_value_from_memory: {op.label}: offset")
        length = as_int(length, f"set_operand_value_from_memory: {op.label}: length")
        if offset < 0 or length <= 0 or offset + length > buf.nbytes:
            raise InvalidArgumentError(
                f"set_operand_value_from_memory: {op.label}: offset {offset} + length {length} "
                f"is outside the memory of {buf.nbytes} bytes"
            )
        raw = buf[offset : offset + length]
        if op.type.is_scalar:
            op.value = self._coerce_value(op, raw.tobytes(), "set_operand_value_from_memory", copy=False)
        else:
            where = f"set_operand_value_from_memory: {op.label} of type {op.type.name}"
            if not op.fully_specified:
                raise InvalidArgumentError(f"{where}: a constant needs fully specified dimensions, got {list(op.dimensions)}")
            if length != op.byte_size:
                raise InvalidArgumentError(f"{where}: length {length} given, {op.byte_size} bytes expected")
            view = raw.view(op.type.dtype).reshape(op.dimensions)
            view.flags.writeable = False
            op.value = view
        op.lifetime = _L.CONSTANT_POOL

    def set_operand_symm_per_channel_quant_params(self, index: int, channel_dim: int, scales: Sequence[float]) -> None:
        self._check_mutable("set_operand_symm_per_channel_quant_params")
        op = self._operand(index, "set_operand_symm_per_channel_quant_params")
        where = f"set_operand_symm_per_channel_quant_params: {op.label}"
        if op.type is not OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            raise InvalidArgumentError(f"{where}: type {op.type.name} is not TENSOR_QUANT8_SYMM_PER_CHANNEL")
        channel_dim = as_int(channel_dim, f"{where}: channel_dim")
        if not 0 <= channel_dim < len(op.dimensions):
            raise InvalidArgumentError(f"{where}: channel_dim {channel_dim} is out of range for rank {len(op.dimensions)}")
        if isinstance(scales, np.ndarray):
            scales = scales.tolist()
        if not isinstance(scales, (list, tuple)):
            raise InvalidArgumentError(f"{where}: scales {scales!r:.60} is not a list of numbers")
        sc = tuple(as_float(s, f"{where}: scales[{k}]") for k, s in enumerate(scales))
        if op.dimensions[channel_dim] and len(sc) != op.dimensions[channel_dim]:
            raise InvalidArgumentError(
                f"{where}: {len(sc)} scales for dimension {channel_dim} of size {op.dimensions[channel_dim]}"
            )
        if not all(s > 0 and math.isfinite(s) for s in sc):
            raise InvalidArgumentError(f"{where}: every scale must be a positive finite number")
        op.channel_quant = ChannelQuant(channel_dim, sc)

    def set_operand_value_from_model(self, index: int, model: Model) -> None:
        """Make a SUBGRAPH operand refer to ``model`` (a branch or body of IF/WHILE)."""
        self._check_mutable("set_operand_value_from_model")
        op = self._operand(index, "set_operand_value_from_model")
        if op.type is not OperandType.SUBGRAPH:
            raise InvalidArgumentError(f"set_operand_value_from_model: {op.label} has type {op.type.name}, not SUBGRAPH")
        if not isinstance(model, Model) or not model.finished:
            raise InvalidArgumentError(f"set_operand_value_from_model: {op.label}: the referenced model must be finished")
        if model is self:
            raise InvalidArgumentError(f"set_operand_value_from_model: {op.label}: a model cannot reference itself")
        op.subgraph, op.lifetime = model, _L.SUBGRAPH

    def add_operation(self, type: OperationType | int, inputs: Sequence[int], outputs: Sequence[int]) -> int:  # noqa: A002
        """Append an operation; operations must be added in execution order.

        Raises ``InvalidArgumentError`` (INVALID_ARGUMENT) at once when an operand index is
        out of range, or when the operation takes another number of inputs or outputs or an
        operand has a type no form of the operation allows; the message lists the inputs
        expected (see the operation reference). Shapes and parameter values are checked when
        the model is prepared.
        """
        self._check_mutable("add_operation")
        index = len(self.operations)
        t = _enum_value(OperationType, type, f"add_operation (operation {index})")
        assert isinstance(t, OperationType)
        label = f"add_operation: operation {index} ({t.name})"
        ins = tuple(self._operand(i, f"{label} input {k}").index for k, i in enumerate(as_int_list(inputs, f"{label} inputs")))
        outs = tuple(
            self._operand(i, f"{label} output {k}").index for k, i in enumerate(as_int_list(outputs, f"{label} outputs"))
        )
        if not outs and t is not OperationType.IF:
            raise InvalidArgumentError(f"{label}: an operation needs at least one output")
        check_operation(label, t, [self.operands[i] for i in ins], [self.operands[i] for i in outs])
        self.operations.append(Operation(t, ins, outs, index))
        return index

    def identify_inputs_and_outputs(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self._check_mutable("identify_inputs_and_outputs")
        call = "identify_inputs_and_outputs"
        ins = [self._operand(i, f"{call}: input") for i in as_int_list(inputs, f"{call}: inputs")]
        outs = [self._operand(i, f"{call}: output") for i in as_int_list(outputs, f"{call}: outputs")]
        for kind, group in (("input", ins), ("output", outs)):
            seen: set[int] = set()
            for op in group:
                if op.index in seen:
                    raise InvalidArgumentError(f"identify_inputs_and_outputs: {op.label} is listed twice as a model {kind}")
                seen.add(op.index)
                if op.lifetime not in (_L.TEMPORARY_VARIABLE, _L.SUBGRAPH_INPUT, _L.SUBGRAPH_OUTPUT):
                    raise InvalidArgumentError(
                        f"identify_inputs_and_outputs: {op.label} is {op.lifetime.name} and cannot be a model {kind}"
                    )
        both = {o.index for o in ins} & {o.index for o in outs}
        if both:
            raise InvalidArgumentError(f"identify_inputs_and_outputs: operand {min(both)} is both a model input and output")
        for op in self.operands:
            if op.lifetime in (_L.SUBGRAPH_INPUT, _L.SUBGRAPH_OUTPUT):
                op.lifetime = _L.TEMPORARY_VARIABLE
        for op in ins:
            op.lifetime = _L.SUBGRAPH_INPUT
        for op in outs:
            op.lifetime = _L.SUBGRAPH_OUTPUT
        self.input_indexes = tuple(o.index for o in ins)
        self.output_indexes = tuple(o.index for o in outs)
        self._io_identified = True

    def relax_computation_float32_to_float16(self, allow: bool) -> None:
        self._check_mutable("relax_computation_float32_to_float16")
        self.relaxed = bool(allow)

    def finish(self) -> None:
        """Validate the whole graph and freeze the model."""
        self._check_mutable("finish")
        self._validate_graph()
        self._finished = True
        if vlog_enabled("model"):
            _log.debug("model.finished", model=self.name, operands=len(self.operands), operations=len(self.operations),
                       referenced=len(self.referenced_models()), relaxed=self.relaxed)

    # -- queries ----------------------------------------------------------------------------

    def referenced_models(self) -> list[Model]:
        """Every model reachable through SUBGRAPH operands, each once, depth first."""
        seen: dict[int, Model] = {}

        def walk(m: Model) -> None:
            for op in m.operands:
                if op.subgraph is not None and id(op.subgraph) not in seen:
                    seen[id(op.subgraph)] = op.subgraph
                    walk(op.subgraph)

        walk(self)
        return list(seen.values())

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the finished model to ``path`` (format: ``nnrt.model._serialize``)."""
        from nnrt.model._serialize import save_model

        save_model(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Model:
        """Read a model written by ``save``; constant tensors are views of the mapped file."""
        from nnrt.model._serialize import load_model

        return load_model(path)

    def operation_as_model(self, index: int) -> Model:
        """A finished model holding only operation ``index``: its constant and subgraph operands
        kept, its other inputs as model inputs, its outputs as model outputs (for per-operation
        support queries)."""
        return self.operations_as_model((index,), self.operations[index].outputs, name=f"{self.name}#op{index}")

    def operations_as_model(
        self, indexes: Sequence[int], outputs: Sequence[int], *, inputs: Sequence[int] | None = None, name: str = ""
    ) -> Model:
        """A finished model of operations ``indexes`` (in that order, which must respect the
        graph's): constant, omitted and subgraph operands kept (constant values shared, not
        copied), every other operand they read and none of them writes as a model input, in
        order of first use, and ``outputs`` (operand indexes they write) as its outputs. Used
        for support queries and for the steps of a partitioned model (``nnrt.framework``)."""
        sub = Model(name=name)
        sub.relaxed = self.relaxed
        remap: dict[int, int] = {}
        written: set[int] = set()
        found: list[int] = []
        fixed = (_L.CONSTANT_COPY, _L.CONSTANT_POOL, _L.NO_VALUE, _L.SUBGRAPH)
        operands = self.operands
        for k in indexes:
            operation = self.operations[k]
            for i in operation.inputs:
                if i not in remap:
                    remap[i] = len(sub.operands)
                    sub.operands.append(dataclasses.replace(operands[i], index=remap[i]))
                    if i not in written and operands[i].lifetime not in fixed:
                        found.append(i)
            for i in operation.outputs:
                if i not in remap:
                    remap[i] = len(sub.operands)
                    sub.operands.append(dataclasses.replace(operands[i], index=remap[i]))
                written.add(i)
            sub.operations.append(Operation(operation.type, tuple(remap[i] for i in operation.inputs),
                                            tuple(remap[i] for i in operation.outputs), len(sub.operations)))
        sub.input_indexes = tuple(remap[i] for i in (found if inputs is None else inputs))
        sub.output_indexes = tuple(remap[i] for i in outputs)
        for operand in sub.operands:
            if operand.lifetime not in fixed:
                operand.lifetime = _L.TEMPORARY_VARIABLE
        for i in sub.input_indexes:
            sub.operands[i].lifetime = _L.SUBGRAPH_INPUT
        for i in sub.output_indexes:
            sub.operands[i].lifetime = _L.SUBGRAPH_OUTPUT
        sub._io_identified = sub._finished = True
        return sub

    def to_dot(self) -> str:
        """A Graphviz description of the graph (operands as ellipses, operations as boxes)."""
        from nnrt.model._dot import model_to_dot

        return model_to_dot(self)

    def __repr__(self) -> str:
        state = "finished" if self._finished else "building"
        return f"<Model {self.name or hex(id(self))} {len(self.operands)} operands, {len(self.operations)} operations, {state}>"

    # -- internals --------------------------------------------------------------------------

    def _coerce_value(self, op: Operand, value: object, call: str, *, copy: bool) -> np.ndarray | int | float | bool:
        where = f"{call}: {op.label} of type {op.type.name}"
        if op.type is OperandType.SUBGRAPH:
            raise InvalidArgumentError(f"{where}: use set_operand_value_from_model for SUBGRAPH operands")
        dtype = op.type.dtype
        if isinstance(value, (bytes, bytearray, memoryview)):
            if not op.fully_specified:
                raise InvalidArgumentError(f"{where}: a constant needs fully specified dimensions, got {list(op.dimensions)}")
            if len(value) != op.byte_size:
                raise InvalidArgumentError(f"{where}: {len(value)} bytes given, {op.byte_size} expected")
            arr = np.frombuffer(value, dtype=dtype).reshape(op.dimensions)
            arr = arr.copy() if copy else arr
        else:
            try:
                arr = np.array(value, copy=copy) if isinstance(value, np.ndarray) else np.asarray(value)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"{where}: value {value!r} is not an array or scalar") from None
            if arr.dtype != dtype:
                if not np.can_cast(arr.dtype, dtype, casting="same_kind") and not (
                    arr.dtype.kind in "iub" and dtype.kind in "iub"
                ):
                    raise InvalidArgumentError(f"{where}: value of dtype {arr.dtype} cannot hold {dtype}")
                converted = arr.astype(dtype)
                if arr.dtype.kind in "iu" and dtype.kind in "iu" and not np.array_equal(converted, arr):
                    raise InvalidArgumentError(f"{where}: value does not fit in {dtype}")
                arr = converted
            if op.type.is_scalar:
                if arr.size != 1 or arr.ndim > 1:
                    raise InvalidArgumentError(f"{where}: a scalar operand takes one value, got shape {arr.shape}")
                return _py_scalar(arr.reshape(()))
            if not op.dimensions:
                raise InvalidArgumentError(f"{where}: a constant tensor needs its dimensions")
            if 0 in op.dimensions:
                raise InvalidArgumentError(f"{where}: a constant needs fully specified dimensions, got {list(op.dimensions)}")
            if arr.size != dims_product(op.dimensions):
                raise InvalidArgumentError(
                    f"{where}: {arr.size} values given for dimensions {list(op.dimensions)} "
                    f"({dims_product(op.dimensions)} values)"
                )
            arr = arr.reshape(op.dimensions)
        if op.type.is_scalar:
            return _py_scalar(arr.reshape(()))
        arr.flags.writeable = False
        return arr

    def _validate_graph(self) -> None:
        if not self._io_identified:
            raise InvalidArgumentError("finish: identify_inputs_and_outputs was never called")
        n = len(self.operands)
        written = [False] * n
        for op in self.operands:
            if op.lifetime in (_L.SUBGRAPH_INPUT, _L.CONSTANT_COPY, _L.CONSTANT_POOL, _L.NO_VALUE, _L.SUBGRAPH):
                written[op.index] = True
            if op.type is OperandType.SUBGRAPH and op.lifetime is not _L.SUBGRAPH:
                raise InvalidArgumentError(f"finish: {op.label} of type SUBGRAPH has no referenced model")
            if op.type is OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL and op.channel_quant is None:
                raise InvalidArgumentError(f"finish: {op.label} of type {op.type.name} has no per-channel scales")
        writer = [-1] * n
        for operation in self.operations:
            for k, i in enumerate(operation.inputs):
                if not written[i]:
                    later = any(i in o.outputs for o in self.operations)
                    what = "written by a later operation" if later else "never written"
                    raise InvalidArgumentError(
                        f"finish: {operation.label} input {k} reads operand {i}, which is {what} "
                        "(operations must be in execution order; the graph must have no cycle)"
                    )
            for k, i in enumerate(operation.outputs):
                target = self.operands[i]
                if target.lifetime not in (_L.TEMPORARY_VARIABLE, _L.SUBGRAPH_OUTPUT):
                    raise InvalidArgumentError(
                        f"finish: {operation.label} output {k} writes {target.label}, which is {target.lifetime.name}"
                    )
                if writer[i] >= 0:
                    raise InvalidArgumentError(
                        f"finish: {target.label} has a second writer, {operation.label} (first: operation {writer[i]})"
                    )
                writer[i] = operation.index
                written[i] = True
        for op in self.operands:
            if op.lifetime in (_L.TEMPORARY_VARIABLE, _L.SUBGRAPH_OUTPUT) and writer[op.index] < 0:
                raise InvalidArgumentError(f"finish: {op.label} ({op.lifetime.name}) is never written by an operation")
        self._check_subgraph_cycles()

    def _check_subgraph_cycles(self) -> None:
        # Depth first, each model explored once: the referenced models form a DAG in which
        # one model may be reached along exponentially many paths (IF levels whose branches
        # are the same model), so a model already explored without a cycle is not walked again.
        on_path: set[int] = set()
        done: set[int] = set()

        def walk(m: Model) -> None:
            if id(m) in on_path:
                raise InvalidArgumentError(f"finish: referenced models form a cycle through {m!r}")
            if id(m) in done:
                return
            on_path.add(id(m))
            for sub in _subgraphs(m.operands):
                walk(sub)
            on_path.discard(id(m))
            done.add(id(m))

        walk(self)


def _subgraphs(operands: Iterable[Operand]) -> Iterable[Model]:
    return (op.subgraph for op in operands if op.subgraph is not None)


def _py_scalar(arr: np.ndarray) -> int | float | bool:
    value = arr.item()
    assert isinstance(value, (int, float, bool))
    return value
