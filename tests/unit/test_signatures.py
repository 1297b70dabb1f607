"""Operation signatures: every operation has one, add_operation checks them, the reference page is theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.model._signatures import SIGNATURES, signature
from nnrt.ops import registered_operations
from nnrt.ops._reference import render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_every_operation_type_has_a_signature_and_a_kernel_or_the_executor() -> None:
    assert set(SIGNATURES) == set(Op)
    assert registered_operations() | {Op.IF, Op.WHILE} == set(SIGNATURES)
    for sig in SIGNATURES.values():
        assert sig.summary and sig.variants
        for v in sig.variants:
            for a in (*v.inputs, *v.outputs):
                assert a.types, (sig.op.name, a.name)
                assert a.doc, f"{sig.op.name} {a.name}: no meaning written"


def test_the_committed_reference_page_is_the_rendering_of_the_tables() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), "run: python -m nnrt.ops._reference docs/operations.md"
    for op in Op:
        assert f"\n## {op.name}\n" in PAGE.read_text(encoding="utf-8")


def _conv_model(n_inputs: int, explicit: bool = False) -> tuple[nnrt.Model, list[int], int]:
    m = nnrt.Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 4, 4, 1])
    w = m.add_operand(T.TENSOR_FLOAT32, [1, 1, 1, 1])
    b = m.add_operand(T.TENSOR_FLOAT32, [1])
    out = m.add_operand(T.TENSOR_FLOAT32, [1, 4, 4, 1])
    ints = [m.add_operand(T.INT32) for _ in range(n_inputs - 3)]
    args = [x, w, b, *ints]
    if not explicit and n_inputs >= 8:
        args[7] = m.add_operand(T.BOOL)
    if explicit and n_inputs >= 11:
        args[10] = m.add_operand(T.BOOL)
    return m, args, out


@pytest.mark.parametrize(("n", "explicit"), [(7, False), (8, False), (10, False), (10, True), (11, True), (13, True)])
def test_every_form_of_conv_2d_is_accepted(n: int, explicit: bool) -> None:
    m, args, out = _conv_model(n, explicit)
    m.add_operation(Op.CONV_2D, args, [out])


def test_a_wrong_input_count_names_the_inputs_expected() -> None:
    m, args, out = _conv_model(7)
    with pytest.raises(nnrt.InvalidArgumentError) as err:
        m.add_operation(Op.CONV_2D, args[:3], [out])
    assert err.value.status is nnrt.ErrorStatus.INVALID_ARGUMENT
    text = str(err.value)
    assert "CONV_2D takes 7, 8, 10, 11 or 13 inputs" in text
    assert "input, filter, bias, padding, stride_w, stride_h, fuse" in text and text.endswith("got 3")


def test_a_wrong_operand_type_names_the_input_and_the_types_allowed() -> None:
    m, args, out = _conv_model(7)
    args[6] = args[0]  # a tensor where the fused activation code goes
    expected = r"input 6 \(fuse, operand 0\) has type TENSOR_FLOAT32; CONV_2D expects INT32"
    with pytest.raises(nnrt.InvalidArgumentError, match=expected):
        m.add_operation(Op.CONV_2D, args, [out])


def test_output_counts_and_types_are_checked_too() -> None:
    m = nnrt.Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [2])
    c = m.add_operand(T.TENSOR_FLOAT32, [2])
    with pytest.raises(nnrt.InvalidArgumentError, match="EQUAL expects TENSOR_BOOL8"):
        m.add_operation(Op.EQUAL, [a, a], [c])
    with pytest.raises(nnrt.InvalidArgumentError, match="takes 1 output"):
        m.add_operation(Op.RELU, [a], [c, a])


def test_variadic_operations_accept_any_count_within_their_bounds() -> None:
    m = nnrt.Model()
    xs = [m.add_operand(T.TENSOR_FLOAT32, [2]) for _ in range(5)]
    axis = m.add_operand(T.INT32)
    out = m.add_operand(T.TENSOR_FLOAT32, [10])
    m.add_operation(Op.CONCATENATION, [*xs, axis], [out])
    with pytest.raises(nnrt.InvalidArgumentError, match="CONCATENATION takes 2 or more inputs"):
        m.add_operation(Op.CONCATENATION, [], [out])
    assert signature(Op.SPLIT).count_text("outputs") == "1 or more"
