"""Issue 16, items 3, 4, 5 and 8: model building and loading under hostile values.

Every call here once escaped as a bare Python exception, never finished, or answered with a
silent NaN; each must now give an ``NnrtError`` with the right status, or the documented value.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Model
from nnrt import OperandType as T
from nnrt import OperationType as Op

INVALID = ErrorStatus.INVALID_ARGUMENT


# -- item 3: finish() and preparation over a DAG of subgraphs ---------------------------------


def _if_tower(depth: int) -> Model:
    """``depth`` IF levels; both branches of each level are the same model (2**depth paths)."""
    leaf = Model()
    x = leaf.add_operand(T.TENSOR_FLOAT32, [1])
    y = leaf.add_operand(T.TENSOR_FLOAT32, [1])
    act = leaf.add_operand(T.INT32)
    leaf.set_operand_value(act, 0)
    leaf.add_operation(Op.ADD, [x, x, act], [y])
    leaf.identify_inputs_and_outputs([x], [y])
    leaf.finish()
    sub = leaf
    for _ in range(depth):
        m = Model()
        c = m.add_operand(T.TENSOR_BOOL8, [1])
        x = m.add_operand(T.TENSOR_FLOAT32, [1])
        y = m.add_operand(T.TENSOR_FLOAT32, [1])
        then, other = m.add_operand(T.SUBGRAPH), m.add_operand(T.SUBGRAPH)
        m.set_operand_value_from_model(then, sub)
        m.set_operand_value_from_model(other, sub)
        m.add_operation(Op.IF, [c, then, other, *([x] if sub is leaf else [c, x])], [y])
        m.identify_inputs_and_outputs([c, x], [y])
        m.finish()
        sub = m
    return sub


def _finishes(fn: Callable[[], object], seconds: float = 60) -> object:
    """Run ``fn`` on a thread; fail if it has not returned after ``seconds`` (a hang detector,
    not a speed test: the fixed code needs milliseconds, the old one 2**depth steps)."""
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, f"did not finish within {seconds} s"
    return out[0]


def test_finish_prepare_and_execute_a_dag_of_40_if_levels() -> None:
    """Item 3: depth 34 never finished; each model is now walked once."""
    tower = _finishes(lambda: _if_tower(40))
    assert isinstance(tower, Model)
    dev = nnrt.CpuDevice(calibrate=False)
    try:
        prepared = _finishes(lambda: dev.prepare_model_sync(tower))
        assert isinstance(prepared, nnrt.PreparedModel)
        out = prepared.execute_sync([np.array([True]), np.array([2.0], np.float32)]).outputs[0]
        assert out.tolist() == [4.0]
    finally:
        dev.close()


# -- item 4: TRANSPOSE and SQUEEZE with the optional second input omitted ----------------------


@pytest.mark.parametrize("op, out_dims, want", [(Op.TRANSPOSE, [0, 0], (3, 1)), (Op.SQUEEZE, [0], (3,))])
@pytest.mark.parametrize("omitted", ["absent", "no_value"])
def test_transpose_and_squeeze_without_their_optional_input(op: Op, out_dims: list[int], want: tuple[int, ...],
                                                            omitted: str) -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 3])
    y = m.add_operand(T.TENSOR_FLOAT32, out_dims)
    ins = [x]
    if omitted == "no_value":
        p = m.add_operand(T.TENSOR_INT32, [1])
        m.set_operand_value(p, None)
        ins.append(p)
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    dev = nnrt.CpuDevice(calibrate=False)
    try:
        out = dev.prepare_model_sync(m).execute_sync([np.arange(3, dtype=np.float32).reshape(1, 3)]).outputs[0]
    finally:
        dev.close()
    assert out.shape == want and out.reshape(-1).tolist() == [0.0, 1.0, 2.0]


# -- item 5: bad values -------------------------------------------------------------------------

_INF, _BIG = float("inf"), 10**400


@pytest.mark.parametrize(
    "call",
    [
        lambda: Model().add_operand(T.TENSOR_FLOAT32, [_INF]),
        lambda: Model().add_operand(T.TENSOR_FLOAT32, [1.5]),
        lambda: Model().add_operand(T.TENSOR_FLOAT32, ["2"]),
        lambda: Model().add_operand(T.TENSOR_FLOAT32, 5),
        lambda: Model().add_operand(T.TENSOR_QUANT8_ASYMM, [1], 1.0, _INF),
        lambda: Model().add_operand(T.TENSOR_QUANT8_ASYMM, [1], _BIG, 0),
        lambda: Model().add_operand(T.TENSOR_QUANT8_ASYMM, [1], "1", 0),
        lambda: Model().add_operand(T.TENSOR_FLOAT32, [1], name=5),
        lambda: Model().add_operation(Op.ADD, None, [0]),
        lambda: Model().add_operation(Op.ADD, [0.0], [0]),
        lambda: Model().identify_inputs_and_outputs(None, []),
        lambda: Model().identify_inputs_and_outputs([], 3),
        lambda: nnrt.BufferDesc(dimensions=[_INF]),
        lambda: nnrt.BufferDesc(dimensions=[-1]),
        lambda: nnrt.Memory(np.array([object()])),
        lambda: nnrt.Memory.from_file("/"),
        lambda: nnrt.Memory.from_file(5),
        lambda: nnrt.Memory.from_file("/nonexistent/nnrt"),
        lambda: nnrt.Memory.from_shared_memory(name=5),
        lambda: Model.load("/"),
        lambda: Model.load(None),
        lambda: nnrt.SyncFence().signal_error(99),
        lambda: nnrt.SyncFence().signal_error("GENERAL_FAILURE"),
        lambda: nnrt.SyncFence().signal_error(ErrorStatus.NONE),
        lambda: nnrt.SyncFence().signal_error(ErrorStatus.GENERAL_FAILURE, 5),
        lambda: nnrt.all_of([5]),
        lambda: nnrt.all_of(5),
        lambda: nnrt.any_of([nnrt.SyncFence(), None]),
        lambda: nnrt.from_future(5),
    ],
    ids=lambda c: "",
)
def test_bad_values_are_invalid_argument(call: Callable[[], object]) -> None:
    with pytest.raises(nnrt.NnrtError) as info:
        call()
    assert info.value.status is INVALID


def test_a_shared_memory_segment_larger_than_the_system_is_resource_exhausted() -> None:
    with pytest.raises(nnrt.ResourceExhaustedError) as info:
        nnrt.Memory.from_shared_memory(size=2**50)
    assert info.value.status is ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT


@pytest.mark.parametrize(
    "kwargs",
    [dict(aging_s=0), dict(aging_s=float("nan")), dict(fairness="fifo"), dict(max_queued_per_app=0),
     dict(app_weights={"a": -1}), dict(app_weights=[1]), dict(compute_units=-1), dict(compute_units=0),
     dict(compute_units=1.5), dict(memory_budget=-1), dict(blas_threads=0), dict(inline_limit_ns=float("inf")),
     dict(switch_interval_s=0), dict(name=None)],
    ids=str,
)
def test_cpu_device_options_are_checked(kwargs: dict[str, object]) -> None:
    with pytest.raises(nnrt.InvalidArgumentError):
        nnrt.CpuDevice(**kwargs)  # type: ignore[arg-type]


def _header_file(tmp_path: Path, header: bytes) -> Path:
    path = tmp_path / "m.nnrt"
    path.write_bytes(b"NNRTMDL1" + struct.pack("<Q", len(header)) + header)
    return path


@pytest.mark.parametrize(
    "header",
    [
        b'{"format": 1, "main": 0, "models": [{"name": "", "relaxed": false, "inputs": [], "outputs": [], '
        b'"operands": [{"type": 3, "dims": [Infinity], "scale": 0, "zero_point": 0, "lifetime": 0, "name": ""}], '
        b'"operations": []}]}',
        b'{"format": 1, "main": Infinity, "models": []}',
        b'{"format": NaN}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"format": 1, "main": 0, "models": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
        b'{"format": 1, "main": 0, "models": 5}',
        b'{"format": 1, "main": 0, "models": [{"name": "", "relaxed": false, "inputs": [], "outputs": [], '
        b'"operands": [{"type": 3, "dims": [1], "scale": 0, "zero_point": 0, "lifetime": 2, "name": "", '
        b'"array": {"offset": 1e300, "nbytes": 4}}], "operations": []}]}',
    ],
    ids=["inf-dims", "inf-main", "nan", "deep", "deep-model", "models-int", "float-offset"],
)
def test_a_hostile_model_header_is_invalid_argument(tmp_path: Path, header: bytes) -> None:
    with pytest.raises(nnrt.InvalidArgumentError):
        Model.load(_header_file(tmp_path, header))


# -- item 8: reductions over an empty axis ------------------------------------------------------


def _reduce(op: Op, t: T, quant: tuple[float, int] = (0.0, 0)) -> Model:
    m = Model()
    x = m.add_operand(t, [2, 0], *quant)
    axes = m.add_operand(T.TENSOR_INT32, [1])
    m.set_operand_value(axes, np.array([1], np.int32))
    keep = m.add_operand(T.INT32 if op is Op.MEAN else T.BOOL)
    m.set_operand_value(keep, 0 if op is Op.MEAN else False)
    y = m.add_operand(t, [0], *quant)
    m.add_operation(op, [x, axes, keep], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize(
    "op, t, quant, want",
    [
        (Op.REDUCE_MAX, T.TENSOR_FLOAT32, (0.0, 0), [-np.inf, -np.inf]),
        (Op.REDUCE_MIN, T.TENSOR_FLOAT16, (0.0, 0), [np.inf, np.inf]),
        (Op.REDUCE_MAX, T.TENSOR_QUANT8_ASYMM, (0.5, 3), [0, 0]),
        (Op.REDUCE_MIN, T.TENSOR_QUANT8_ASYMM_SIGNED, (0.5, -3), [127, 127]),
        (Op.REDUCE_SUM, T.TENSOR_FLOAT32, (0.0, 0), [0.0, 0.0]),
        (Op.REDUCE_PROD, T.TENSOR_FLOAT32, (0.0, 0), [1.0, 1.0]),
        (Op.REDUCE_ANY, T.TENSOR_BOOL8, (0.0, 0), [False, False]),
        (Op.REDUCE_ALL, T.TENSOR_BOOL8, (0.0, 0), [True, True]),
    ],
)
def test_a_reduction_over_an_empty_axis_gives_its_identity(op: Op, t: T, quant: tuple[float, int], want: list[object]) -> None:
    dev = nnrt.CpuDevice(calibrate=False)
    try:
        out = dev.prepare_model_sync(_reduce(op, t, quant)).execute_sync([np.zeros((2, 0), t.dtype)]).outputs[0]
    finally:
        dev.close()
    assert out.dtype == t.dtype and out.tolist() == want


def test_the_mean_over_an_empty_axis_is_invalid_argument() -> None:
    dev = nnrt.CpuDevice(calibrate=False)
    try:
        prepared = dev.prepare_model_sync(_reduce(Op.MEAN, T.TENSOR_FLOAT32))
        with pytest.raises(nnrt.InvalidArgumentError, match=r"MEAN.*empty axis"):
            prepared.execute_sync([np.zeros((2, 0), np.float32)])
    finally:
        dev.close()
