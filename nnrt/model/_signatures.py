"""The operation signature of every ``OperationType``, and the check ``Model.add_operation`` runs.

NNAPI's runtime checks each operation's signature when it is added (``validateOperation``):
the number of inputs and outputs and each operand's type against the forms the operation
allows. nnrt does the same, from the tables in ``_sig_nn.py`` and ``_sig_tensor.py``, so that
a CONV_2D with three inputs fails at ``add_operation`` with the list of inputs expected
instead of at preparation. The check is deliberately no stricter than NNAPI: ranks, shapes,
constant values and the agreement of types between operands stay the kernels' checks at
preparation (``nnrt/ops``), which know the full picture. The same tables render the
operation reference (``nnrt.ops.reference``).
"""

from __future__ import annotations

from collections.abc import Sequence

from nnrt.errors import InvalidArgumentError
from nnrt.model._operand import Operand
from nnrt.model._sig_nn import SIGNATURES as _NN
from nnrt.model._sig_tensor import SIGNATURES as _TENSOR
from nnrt.model._sigspec import Arg, Signature, Variant, describe_types
from nnrt.types import OperationType

__all__ = ["SIGNATURES", "check_operation", "signature"]

SIGNATURES: dict[OperationType, Signature] = {s.op: s for s in (*_NN, *_TENSOR)}


def signature(op: OperationType) -> Signature:
    """The signature of ``op`` (every ``OperationType`` has one)."""
    return SIGNATURES[op]


def _expected(sig: Signature, side: str) -> str:
    if len(sig.variants) == 1:
        return sig.variants[0].render(side)
    return "; ".join(f"{v.label}: {v.render(side)}" for v in sig.variants)


def _type_mismatch(v: Variant, side: str, operands: Sequence[Operand]) -> tuple[int, Operand, Arg] | None:
    for k, (operand, arg) in enumerate(zip(operands, v.layout(side, len(operands)), strict=True)):
        if operand.type not in arg.types:
            return k, operand, arg
    return None


def check_operation(label: str, op: OperationType, inputs: Sequence[Operand], outputs: Sequence[Operand]) -> None:
    """Raise INVALID_ARGUMENT (prefixed with ``label``) when no form of ``op`` has this many
    inputs and outputs of these types; the message names what was expected."""
    sig = SIGNATURES[op]
    for side, have in (("inputs", inputs), ("outputs", outputs)):
        if not any(v.accepts_count(side, len(have)) for v in sig.variants):
            raise InvalidArgumentError(
                f"{label}: {op.name} takes {sig.takes(side)}: {_expected(sig, side)}; got {len(have)}"
            )
    candidates = [
        v for v in sig.variants if v.accepts_count("inputs", len(inputs)) and v.accepts_count("outputs", len(outputs))
    ]
    if not candidates:
        forms = "; ".join(f"{v.label}: {v.render('inputs')} -> {v.render('outputs')}" for v in sig.variants)
        counts = f"{len(inputs)} inputs and {len(outputs)} outputs"
        raise InvalidArgumentError(f"{label}: {op.name} has no form with {counts} ({forms})")
    first: tuple[str, tuple[int, Operand, Arg]] | None = None
    for v in candidates:
        miss, where = _type_mismatch(v, "inputs", inputs), "input"
        if miss is None:
            miss, where = _type_mismatch(v, "outputs", outputs), "output"
        if miss is None:
            return
        first = first or (where, miss)
    assert first is not None
    where, (k, operand, arg) = first
    raise InvalidArgumentError(
        f"{label}: {where} {k} ({arg.name}, {operand.label}) has type {operand.type.name}; "
        f"{op.name} expects {describe_types(arg.types)}"
    )
