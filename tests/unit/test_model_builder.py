"""ModelBuilder: the calls it makes are the Model calls a user would make, with the same checks."""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from nnrt import FuseCode, ModelBuilder, OperandRef, PaddingCode
from nnrt import OperandType as T
from nnrt import OperationType as Op


def test_scalars_constants_and_outputs_become_operands() -> None:
    b = ModelBuilder("t")
    x = b.input(T.TENSOR_FLOAT32, [1, 4, 4, 2])
    w = b.constant(np.ones((3, 1, 1, 2)))  # float64 is stored as float32
    y = b.op(Op.CONV_2D, x, w, np.zeros(3, np.float32), PaddingCode.SAME, 1, 1, FuseCode.RELU, out=[1, 4, 4, 3])
    m = b.finish(outputs=[y])
    assert isinstance(y, OperandRef) and isinstance(y, int) and repr(y) == f"OperandRef({int(y)})"
    conv = m.operations[0]
    types = [m.operands[i].type for i in conv.inputs]
    assert types == [T.TENSOR_FLOAT32] * 3 + [T.INT32] * 4
    assert [m.operands[i].value for i in conv.inputs[3:]] == [1, 1, 1, 1]
    assert m.operands[w].type is T.TENSOR_FLOAT32 and m.operands[w].value.dtype == np.float32
    assert m.input_indexes == (x,) and m.output_indexes == (y,)


def test_float_scalars_follow_a_float16_model_and_none_is_omitted() -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT16, [1, 4])
    y = b.op(Op.SOFTMAX, x, 1.0)
    m = b.model
    beta = m.operands[m.operations[0].inputs[1]]
    assert beta.type is T.FLOAT16 and m.operands[y].type is T.TENSOR_FLOAT16 and m.operands[y].dimensions == ()
    b.op(Op.SOFTMAX, x, np.float32(0.5))  # numpy scalars are scalars too
    assert m.operands[m.operations[1].inputs[1]].value == 0.5
    z = b.op(Op.SQUEEZE, x, None, out=[4])
    assert m.operands[m.operations[2].inputs[1]].lifetime is nnrt.OperandLifeTime.NO_VALUE
    assert m.operands[z].dimensions == (4,)


def test_several_outputs_and_explicit_output_types() -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [2, 5])
    values, indices = b.op(Op.TOPK_V2, x, 2, outs=[[2, 2], (T.TENSOR_INT32, [2, 2])])
    m = b.finish(outputs=[values, indices])
    assert m.operands[indices].type is T.TENSOR_INT32


async def test_the_built_model_runs() -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [1, 3])
    y = b.op(Op.ADD, x, b.constant(np.array([[1, 2, 3]], np.float32)), FuseCode.RELU, out=[1, 3])
    model = b.finish(outputs=[y])
    device = nnrt.CpuDevice()
    try:
        prepared = await device.prepare_model(model)
        result = await prepared.execute([np.array([[-5, 0, 1]], np.float32)])
    finally:
        device.close()
    np.testing.assert_array_equal(result.outputs[0], [[0, 2, 4]])


def test_mistakes_raise_invalid_argument_naming_what_is_wrong() -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [1, 4, 4, 1])
    with pytest.raises(nnrt.InvalidArgumentError, match="CONV_2D takes 7, 8, 10, 11 or 13 inputs"):
        b.op(Op.CONV_2D, x, x, x, out=[1, 4, 4, 1])
    with pytest.raises(nnrt.InvalidArgumentError, match="cannot use 'same' as an operation input"):
        b.op(Op.RELU, "same")
    with pytest.raises(nnrt.InvalidArgumentError, match="give the output's type"):
        b.op(Op.FILL, np.array([2], np.int32), 1.0)
    with pytest.raises(nnrt.InvalidArgumentError, match="needs an explicit operand type"):
        b.constant(np.zeros(2, np.uint8))
