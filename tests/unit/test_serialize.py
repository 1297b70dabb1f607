"""``model.save`` / ``Model.load``: every zoo model round-trips to identical outputs; constants
are mapped, not copied; malformed files are INVALID_ARGUMENT."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

import nnrt
from nnrt import Memory, Model, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.types import OperandLifeTime


@pytest.mark.parametrize("name", ["one_add", "add_chain", "mlp", "small_cnn"])
def test_round_trip(tmp_path: Path, device: nnrt.CpuDevice, name: str) -> None:
    model = getattr(zoo, name)()
    model.save(tmp_path / "m.nnrt")
    loaded = Model.load(tmp_path / "m.nnrt")
    assert [(o.type, o.dimensions, o.lifetime) for o in loaded.operands] == [
        (o.type, o.dimensions, o.lifetime) for o in model.operands
    ]
    ins = zoo.example_inputs(model)
    a = device.prepare_model_sync(model).execute_sync(ins).outputs
    b = device.prepare_model_sync(loaded).execute_sync(ins).outputs
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_constants_are_read_only_views_of_the_file(tmp_path: Path) -> None:
    zoo.mlp().save(tmp_path / "m.nnrt")
    loaded = Model.load(tmp_path / "m.nnrt")
    arrays = [o.value for o in loaded.operands if isinstance(o.value, np.ndarray)]
    assert arrays and all(not a.flags.writeable and not a.flags.owndata for a in arrays)


def test_quantization_pool_constants_and_subgraphs(tmp_path: Path, device: nnrt.CpuDevice) -> None:
    body = Model("branch")
    x = body.add_operand(T.TENSOR_FLOAT32, [2])
    y = body.add_operand(T.TENSOR_FLOAT32, [2])
    body.add_operation(Op.RELU, [x], [y])
    body.identify_inputs_and_outputs([x], [y])
    body.finish()
    m = Model("cf")
    cond = m.add_operand(T.TENSOR_BOOL8, [1])
    a = m.add_operand(T.TENSOR_FLOAT32, [2])
    then = m.add_operand(T.SUBGRAPH)
    other = m.add_operand(T.SUBGRAPH)
    q = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [2, 1])
    pool_const = m.add_operand(T.TENSOR_FLOAT32, [2])
    out = m.add_operand(T.TENSOR_FLOAT32, [2])
    m.set_operand_value_from_model(then, body)
    m.set_operand_value_from_model(other, body)
    m.set_operand_symm_per_channel_quant_params(q, 0, [0.5, 0.25])
    m.set_operand_value(q, np.array([[1], [2]], np.int8))
    m.set_operand_value_from_memory(pool_const, Memory.from_array(np.array([1, 2], np.float32)), 0, 8)
    m.add_operation(Op.IF, [cond, then, other, a], [out])
    m.identify_inputs_and_outputs([cond, a], [out])
    m.finish()
    m.save(tmp_path / "cf.nnrt")
    loaded = Model.load(tmp_path / "cf.nnrt")
    assert loaded.operands[q].channel_quant == m.operands[q].channel_quant
    assert loaded.operands[pool_const].lifetime is OperandLifeTime.CONSTANT_POOL
    assert loaded.operands[then].subgraph is loaded.operands[other].subgraph  # shared once
    out_v = device.prepare_model_sync(loaded).execute_sync([np.array([True]), np.array([-1, 2], np.float32)]).outputs[0]
    assert out_v.tolist() == [0, 2]


def test_unfinished_model_cannot_be_saved(tmp_path: Path) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="not finished"):
        Model().save(tmp_path / "x")


def _write(path: Path, header: object, data: bytes = b"") -> None:
    raw = json.dumps(header).encode()
    blob = b"NNRTMDL1" + struct.pack("<Q", len(raw)) + raw
    path.write_bytes(blob + b"\0" * (-len(blob) % 64) + data)


def test_malformed_files(tmp_path: Path) -> None:
    p = tmp_path / "bad"
    zoo.one_add().save(p)
    good = p.read_bytes()
    cases = {
        "magic": b"XXXXXXXX" + good[8:],
        "truncated header": good[:40],
        "json": good[:16] + b"{" * (len(good) - 16),
    }
    for what, blob in cases.items():
        p.write_bytes(blob)
        with pytest.raises(nnrt.InvalidArgumentError, match=r"Model\.load"):
            Model.load(p)
        del what
    _write(p, {"format": 99, "main": 0, "models": []})
    with pytest.raises(nnrt.InvalidArgumentError, match="format version 99"):
        Model.load(p)
    _write(p, {"format": 1, "main": 0, "models": [{"name": "x"}]})
    with pytest.raises(nnrt.InvalidArgumentError, match="malformed"):
        Model.load(p)
    operand = {"type": 3, "dims": [4], "scale": 0.0, "zero_point": 0, "lifetime": 3, "name": "",
               "array": {"offset": 0, "nbytes": 16}}
    _write(p, {"format": 1, "main": 0, "models": [{"name": "x", "relaxed": False, "inputs": [], "outputs": [],
                                                    "operands": [operand], "operations": []}]}, b"\0" * 8)
    with pytest.raises(nnrt.InvalidArgumentError, match="does not fit"):
        Model.load(p)
    operand["type"] = 77
    _write(p, {"format": 1, "main": 0, "models": [{"name": "x", "relaxed": False, "inputs": [], "outputs": [],
                                                    "operands": [operand], "operations": []}]}, b"\0" * 16)
    with pytest.raises(nnrt.InvalidArgumentError, match="not a valid OperandType"):
        Model.load(p)
