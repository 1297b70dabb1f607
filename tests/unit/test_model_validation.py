"""NNAPI's model validation checklist (VTS ValidateModel, digest section 7): every mutation is
rejected with INVALID_ARGUMENT, at the call, at ``finish()`` or at preparation, as NNAPI does."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Model
from nnrt import OperandType as T
from nnrt import OperationType as Op


def invalid(fn: Callable[[], object], match: str = "") -> nnrt.NnrtError:
    with pytest.raises(nnrt.NnrtError, match=match) as info:
        fn()
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    assert isinstance(info.value, nnrt.InvalidArgumentError)
    return info.value


def add_model(finish: bool = True) -> tuple[Model, list[int]]:
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [2])
    b = m.add_operand(T.TENSOR_FLOAT32, [2])
    act = m.add_operand(T.INT32)
    c = m.add_operand(T.TENSOR_FLOAT32, [2])
    m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a, b], [c])
    if finish:
        m.finish()
    return m, [a, b, act, c]


def test_valid_model_finishes_and_runs(device: nnrt.CpuDevice) -> None:
    m, _ = add_model()
    prepared = device.prepare_model_sync(m)
    out = prepared.execute_sync([np.ones(2, np.float32), np.ones(2, np.float32)])
    assert out.outputs[0].tolist() == [2.0, 2.0]


# 1. bad execution order, and a cycle
def test_reader_before_writer() -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [2])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    t = m.add_operand(T.TENSOR_FLOAT32, [2])
    y = m.add_operand(T.TENSOR_FLOAT32, [2])
    m.add_operation(Op.ADD, [t, x, act], [y])  # reads t before it is written
    m.add_operation(Op.ADD, [x, x, act], [t])
    m.identify_inputs_and_outputs([x], [y])
    invalid(m.finish, "operand 2, which is written by a later operation")


def test_cycle() -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [2])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    t1 = m.add_operand(T.TENSOR_FLOAT32, [2])
    t2 = m.add_operand(T.TENSOR_FLOAT32, [2])
    m.add_operation(Op.ADD, [x, t2, act], [t1])
    m.add_operation(Op.ADD, [x, t1, act], [t2])
    m.identify_inputs_and_outputs([x], [t2])
    invalid(m.finish, "no cycle")


# 2. operand type out of range
@pytest.mark.parametrize("bad", [-1, 16, 10000])
def test_operand_type_out_of_range(bad: int) -> None:
    invalid(lambda: Model().add_operand(bad, [1]), "not a valid OperandType")


# 3. scalar of rank 1
@pytest.mark.parametrize("t", [T.INT32, T.FLOAT32, T.BOOL, T.FLOAT16, T.UINT32])
def test_scalar_with_rank(t: T) -> None:
    invalid(lambda: Model().add_operand(t, [1]), "a scalar must have rank 0")


# 4. bad scale
@pytest.mark.parametrize(
    ("t", "scale"),
    [
        (T.TENSOR_FLOAT32, 1.0),
        (T.FLOAT32, 0.5),
        (T.TENSOR_BOOL8, 1.0),
        (T.TENSOR_INT32, -1.0),
        (T.TENSOR_QUANT8_ASYMM, 0.0),
        (T.TENSOR_QUANT8_ASYMM_SIGNED, 0.0),
        (T.TENSOR_QUANT16_SYMM, 0.0),
        (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 1.0),
        (T.TENSOR_QUANT8_ASYMM, float("nan")),
    ],
)
def test_bad_scale(t: T, scale: float) -> None:
    dims = [] if t.is_scalar else [2]
    invalid(lambda: Model().add_operand(t, dims, scale=scale), "scale")


# 5. bad zero point
@pytest.mark.parametrize(
    ("t", "zp"),
    [
        (T.TENSOR_FLOAT32, 1),
        (T.INT32, 1),
        (T.TENSOR_QUANT8_ASYMM, -1),
        (T.TENSOR_QUANT8_ASYMM, 256),
        (T.TENSOR_QUANT8_SYMM, -129),
        (T.TENSOR_QUANT8_SYMM, -1),
        (T.TENSOR_QUANT8_SYMM, 1),
        (T.TENSOR_QUANT8_SYMM, 128),
        (T.TENSOR_QUANT16_ASYMM, -1),
        (T.TENSOR_QUANT16_ASYMM, 65536),
        (T.TENSOR_QUANT16_SYMM, -32769),
        (T.TENSOR_QUANT16_SYMM, -1),
        (T.TENSOR_QUANT16_SYMM, 1),
        (T.TENSOR_QUANT16_SYMM, 32768),
        (T.TENSOR_QUANT8_ASYMM_SIGNED, 128),
    ],
)
def test_bad_zero_point(t: T, zp: int) -> None:
    scale = 0.0 if t in (T.TENSOR_FLOAT32, T.INT32) else 0.5
    dims = [] if t is T.INT32 else [2]
    invalid(lambda: Model().add_operand(t, dims, scale=scale, zero_point=zp), "zero point")


# 6. lifetime swap breaking the writer rules: a constant written by an operation
def test_constant_written_by_operation() -> None:
    m, (_a, _b, _act, c) = add_model(finish=False)
    m.set_operand_value(c, np.zeros(2, np.float32))
    m.identify_inputs_and_outputs([0, 1], [])
    invalid(m.finish, "CONSTANT_COPY")


# 7. lifetime swap moving an operand into or out of the model inputs/outputs
def test_written_operand_as_model_input() -> None:
    m, (a, b, _act, c) = add_model(finish=False)
    m.identify_inputs_and_outputs([a, b, c], [])
    invalid(m.finish, "SUBGRAPH_INPUT")


def test_constant_as_model_input() -> None:
    m, (a, _b, act, c) = add_model(finish=False)
    invalid(lambda: m.identify_inputs_and_outputs([a, act], [c]), "CONSTANT_COPY and cannot be a model input")


def test_duplicate_model_inputs() -> None:
    m, (a, _b, _act, c) = add_model(finish=False)
    invalid(lambda: m.identify_inputs_and_outputs([a, a], [c]), "listed twice")


# 8. a second writer
def test_second_writer() -> None:
    m, (a, b, act, c) = add_model(finish=False)
    m.add_operation(Op.ADD, [a, b, act], [c])
    invalid(m.finish, "second writer")


# 10. an operation's operand set to another type (ADD is not polymorphic in these ways): a type
# no form of ADD allows fails at add_operation, one ADD allows but not beside float32 at preparation
@pytest.mark.parametrize("t", [T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_BOOL8, T.FLOAT32, T.TENSOR_FLOAT16])
def test_operation_operand_wrong_type(t: T, device: nnrt.CpuDevice) -> None:
    m = Model()
    scale = 0.5 if t is T.TENSOR_QUANT8_ASYMM else 0.0
    a = m.add_operand(T.TENSOR_FLOAT32, [2])
    b = m.add_operand(t, [] if t is T.FLOAT32 else [2], scale=scale)
    act = m.add_operand(T.INT32)
    c = m.add_operand(T.TENSOR_FLOAT32, [2])
    m.set_operand_value(act, 0)
    if t in (T.TENSOR_BOOL8, T.FLOAT32):
        invalid(lambda: m.add_operation(Op.ADD, [a, b, act], [c]), rf"input 1 \(input2, operand 1\) has type {t.name}")
        return
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a, b], [c])
    m.finish()
    assert device.supported_operations(m) == [False]
    invalid(lambda: device.prepare_model_sync(m), r"operation 0 \(ADD\)")


# 11. operation type out of range
@pytest.mark.parametrize("bad", [-1, 106, 10000])
def test_operation_type_out_of_range(bad: int) -> None:
    m, (a, b, act, c) = add_model(finish=False)
    invalid(lambda: m.add_operation(bad, [a, b, act], [c]), "not a valid OperationType")


# 12. operation input or output index = operand count
def test_operation_index_out_of_range() -> None:
    m, (a, b, act, c) = add_model(finish=False)
    n = len(m.operands)
    invalid(lambda: m.add_operation(Op.ADD, [a, b, n], [c]), "out of range")
    invalid(lambda: m.add_operation(Op.ADD, [a, b, act], [n]), "out of range")


# 13/15. a write removed / an operation removed: the output is never written
def test_output_never_written() -> None:
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [2])
    c = m.add_operand(T.TENSOR_FLOAT32, [2])
    m.identify_inputs_and_outputs([a], [c])
    invalid(m.finish, "never written")


# 14. a used operand removed: an index that does not exist
def test_used_operand_missing() -> None:
    m = Model()
    invalid(lambda: m.set_operand_value(3, 1), "out of range")


# 16/17. an operation input removed, an extra input or output
@pytest.mark.parametrize(("n_in", "n_out"), [(2, 1), (4, 1), (3, 2)])
def test_operation_arity(n_in: int, n_out: int, device: nnrt.CpuDevice) -> None:
    m = Model()
    ins = [m.add_operand(T.TENSOR_FLOAT32, [2]) for _ in range(2)]
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    extra = m.add_operand(T.INT32)
    m.set_operand_value(extra, 0)
    outs = [m.add_operand(T.TENSOR_FLOAT32, [2]) for _ in range(n_out)]
    invalid(lambda: m.add_operation(Op.ADD, [*ins, act, extra][:n_in], outs), "ADD takes 3 inputs|ADD takes 1 output")


# 18. preference or priority out of range
@pytest.mark.parametrize(("pref", "prio"), [(-1, 1), (3, 1), (1, -1), (1, 3)])
async def test_bad_preference_or_priority(pref: int, prio: int, device: nnrt.CpuDevice) -> None:
    m, _ = add_model()
    with pytest.raises(nnrt.InvalidArgumentError):
        await device.prepare_model(m, preference=pref, priority=prio)  # type: ignore[arg-type]


# Further canonical checks
def test_dimension_overflow() -> None:
    invalid(lambda: Model().add_operand(T.TENSOR_FLOAT32, [2**20, 2**20]), "overflow")


def test_value_size_mismatch() -> None:
    m = Model()
    i = m.add_operand(T.TENSOR_FLOAT32, [2, 2])
    invalid(lambda: m.set_operand_value(i, np.zeros(3, np.float32)), "3 values given")
    invalid(lambda: m.set_operand_value(i, b"\x00" * 15), "15 bytes given, 16 expected")


def test_per_channel_params() -> None:
    m = Model()
    i = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [3, 2])
    invalid(lambda: m.set_operand_symm_per_channel_quant_params(i, 2, [1.0]), "channel_dim 2")
    invalid(lambda: m.set_operand_symm_per_channel_quant_params(i, 0, [1.0, 1.0]), "2 scales")
    invalid(lambda: m.set_operand_symm_per_channel_quant_params(i, 0, [1.0, 0.0, 1.0]), "positive")
    f = m.add_operand(T.TENSOR_FLOAT32, [3])
    invalid(lambda: m.set_operand_symm_per_channel_quant_params(f, 0, [1.0, 1.0, 1.0]), "is not TENSOR_QUANT8_SYMM")


def test_per_channel_without_params() -> None:
    m = Model()
    i = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [3])
    o = m.add_operand(T.TENSOR_FLOAT32, [3])
    m.add_operation(Op.DEQUANTIZE, [i], [o])
    m.identify_inputs_and_outputs([i], [o])
    invalid(m.finish, "per-channel scales")


def test_finished_model_is_frozen() -> None:
    m, _ = add_model()
    invalid(lambda: m.add_operand(T.INT32), "finished")
    invalid(m.finish, "finished")


def test_subgraph_reference_rules() -> None:
    m = Model()
    s = m.add_operand(T.SUBGRAPH)
    unfinished = Model()
    invalid(lambda: m.set_operand_value_from_model(s, unfinished), "must be finished")
    f = m.add_operand(T.TENSOR_FLOAT32, [1])
    sub, _ = add_model()
    invalid(lambda: m.set_operand_value_from_model(f, sub), "not SUBGRAPH")
    invalid(lambda: m.set_operand_value(s, 1), "set_operand_value_from_model")


def test_unprepared_model_is_rejected(device: nnrt.CpuDevice) -> None:
    m, _ = add_model(finish=False)
    invalid(lambda: device.prepare_model_sync(m), "not finished")
    invalid(lambda: device.supported_operations(m), "finished")


def test_to_dot_names_everything() -> None:
    m, _ = add_model()
    dot = m.to_dot()
    assert dot.startswith("digraph model {")
    assert '"n0" [shape=box, label="ADD"]' in dot
    assert dot.count("->") == 4
