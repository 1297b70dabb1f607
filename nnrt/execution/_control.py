"""IF and WHILE: signature checks at preparation (the sub-plans are compiled by ``_plan``).

NNAPI's rules (digest section 10): IF takes ``[cond BOOL8[1], then, else, inputs...]`` and
both branches take exactly the outer inputs and produce exactly the outer outputs, matching
in type, rank, dimensions and quantization. WHILE takes ``[cond, body, m in/out, k state,
n input-only]``, returns the m values; the condition model maps all m+k+n values to one
BOOL8[1], the body maps them to the next m+k.
"""

from __future__ import annotations

from collections.abc import Sequence

from nnrt.errors import InvalidArgumentError
from nnrt.model import Model, Operand
from nnrt.types import OperandLifeTime, OperandType, OperationType

__all__ = ["check_control_flow", "while_counts"]


def _fail(label: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{label}: {message}")


def _compatible(outer: Operand, inner: Operand) -> bool:
    if outer.type is not inner.type or outer.scale != inner.scale or outer.zero_point != inner.zero_point:
        return False
    if outer.channel_quant != inner.channel_quant:
        return False
    if not outer.dimensions or not inner.dimensions:
        return True
    if len(outer.dimensions) != len(inner.dimensions):
        return False
    return all(a == b or a == 0 or b == 0 for a, b in zip(outer.dimensions, inner.dimensions))


def _model_ref(label: str, op: Operand, k: int) -> Model:
    if op.type is not OperandType.SUBGRAPH or op.lifetime is not OperandLifeTime.SUBGRAPH or op.subgraph is None:
        raise _fail(label, f"input {k} ({op.label}) must be a SUBGRAPH reference, got {op.type.name} {op.lifetime.name}")
    return op.subgraph


def _match(label: str, what: str, outer: Sequence[Operand], inner_model: Model, inner_idx: Sequence[int]) -> None:
    if len(outer) != len(inner_idx):
        raise _fail(label, f"{what}: the referenced model has {len(inner_idx)} operands, {len(outer)} expected")
    for k, (o, i) in enumerate(zip(outer, inner_idx)):
        inner = inner_model.operands[i]
        if o.lifetime is OperandLifeTime.NO_VALUE:
            raise _fail(label, f"{what} {k} ({o.label}) has no value; control flow operands cannot be omitted")
        if not _compatible(o, inner):
            raise _fail(
                label,
                f"{what} {k}: {o.label} ({o.type.name} {list(o.dimensions)}) does not match the referenced "
                f"model's {inner.label} ({inner.type.name} {list(inner.dimensions)})",
            )


def _check_bool_cond(label: str, op: Operand, what: str) -> None:
    if op.lifetime is OperandLifeTime.NO_VALUE:
        raise _fail(label, f"{what} has no value")
    if op.type is not OperandType.TENSOR_BOOL8:
        raise _fail(label, f"{what} has type {op.type.name}; expected TENSOR_BOOL8")
    if op.dimensions and any(d not in (0, 1) for d in op.dimensions):
        raise _fail(label, f"{what} has dimensions {list(op.dimensions)}; expected one element")


def while_counts(n_inputs: int, n_outputs: int, body: Model) -> tuple[int, int, int]:
    """(m, k, n): in/out values, state-only values, input-only values of a WHILE."""
    m = n_outputs
    k = len(body.output_indexes) - m
    n = n_inputs - 2 - m - k
    return m, k, n


def check_control_flow(
    type_: OperationType, label: str, ins: Sequence[Operand], outs: Sequence[Operand]
) -> tuple[Model, ...]:
    """Validate an IF or WHILE operation and return its referenced models in branch order."""
    if type_ is OperationType.IF:
        if len(ins) < 3:
            raise _fail(label, f"takes at least 3 inputs, got {len(ins)}")
        _check_bool_cond(label, ins[0], "input 0 (the condition)")
        then_m, else_m = _model_ref(label, ins[1], 1), _model_ref(label, ins[2], 2)
        for name, branch in (("then", then_m), ("else", else_m)):
            _match(label, f"{name} branch input", ins[3:], branch, branch.input_indexes)
            _match(label, f"{name} branch output", outs, branch, branch.output_indexes)
        return then_m, else_m
    if len(ins) < 3 or not outs:
        raise _fail(label, f"takes at least 3 inputs and 1 output, got {len(ins)} and {len(outs)}")
    cond_m, body_m = _model_ref(label, ins[0], 0), _model_ref(label, ins[1], 1)
    m, k, n = while_counts(len(ins), len(outs), body_m)
    if k < 0 or n < 0:
        raise _fail(label, f"the body has {len(body_m.output_indexes)} outputs, inconsistent with {len(outs)} outputs")
    values = ins[2:]
    _match(label, "condition input", values, cond_m, cond_m.input_indexes)
    if len(cond_m.output_indexes) != 1:
        raise _fail(label, f"the condition model has {len(cond_m.output_indexes)} outputs; expected 1")
    _check_bool_cond(label, cond_m.operands[cond_m.output_indexes[0]], "the condition model's output")
    _match(label, "body input", values, body_m, body_m.input_indexes)
    _match(label, "body output", values[: m + k], body_m, body_m.output_indexes)
    _match(label, "output", outs, body_m, body_m.output_indexes[:m])
    return cond_m, body_m
