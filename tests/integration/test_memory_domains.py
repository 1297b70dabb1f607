"""Memory domains (digest section 5): ``device.allocate``, device buffers as execution inputs and
outputs (by object or token), ``copy_from`` / ``copy_to``, and the statuses of every rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import BufferDesc, BufferRole, BufferToken, ErrorStatus, Memory, Model, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import on_trio_too


def add_model(type_: T = T.TENSOR_FLOAT32, dims: list[int] | None = None, scale: float = 0.0, zp: int = 0,
              scalar_act_input: bool = False) -> Model:
    dims = [1, 4] if dims is None else dims
    m = Model()
    a = m.add_operand(type_, dims, scale, zp)
    b = m.add_operand(type_, dims, scale, zp)
    act = m.add_operand(T.INT32)
    c = m.add_operand(type_, dims, scale, zp)
    if not scalar_act_input:
        m.set_operand_value(act, 0)
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a, b, act] if scalar_act_input else [a, b], [c])
    m.finish()
    return m


def ones() -> np.ndarray:
    return np.ones((1, 4), np.float32)


@pytest.fixture
def prepared(device: nnrt.CpuDevice) -> nnrt.PreparedModel:
    return device.prepare_model_sync(zoo.one_add())


def io_buffer(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> nnrt.DeviceBuffer:
    """A buffer usable as input 0, input 1 and output 0 of ``prepared``."""
    buf, token = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0), BufferRole(0, 1)], [BufferRole(0, 0)])
    assert token == buf.token and token > 0 and isinstance(token, BufferToken)
    return buf


# -- allocation -----------------------------------------------------------------------------------


def test_allocate_combines_dimensions(device: nnrt.CpuDevice) -> None:
    p = device.prepare_model_sync(add_model(dims=[0, 4]))
    buf, _ = device.allocate([3, 0], [p], [BufferRole(0, 0)])
    assert buf.dimensions == (3, 4) and buf.type is T.TENSOR_FLOAT32 and not buf.initialized
    assert buf.nbytes == 48


def test_tokens_are_positive_and_distinct(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    tokens = {int(device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)])[1]) for _ in range(5)}
    assert len(tokens) == 5 and min(tokens) > 0


ALLOCATION_ERRORS: list[tuple[str, Any, Any, Any, str]] = [
    # (case, desc, input roles, output roles, message)
    ("no roles", (), [], [], "no input or output roles"),
    ("model index", (), [BufferRole(1, 0)], [], "model index 1 is out of range"),
    ("negative model index", (), [BufferRole(-1, 0)], [], "model index -1 is out of range"),
    ("io index", (), [BufferRole(0, 2)], [], "input index 2 is out of range"),
    ("output io index", (), [], [BufferRole(0, 1)], "output index 1 is out of range"),
    ("probability 10", (), [BufferRole(0, 0, 10.0)], [], "probability 10.0 is outside"),
    ("probability 0", (), [BufferRole(0, 0, 0.0)], [], "probability 0.0 is outside"),
    ("probability -0.5", (), [BufferRole(0, 0, -0.5)], [], "probability -0.5 is outside"),
    ("probability nan", (), [BufferRole(0, 0, float("nan"))], [], "outside"),
    ("duplicated role", (), [BufferRole(0, 0), BufferRole(0, 0, 0.5)], [], "given twice"),
    ("not a role", (), [(0, 0)], [], "is not a BufferRole"),
    ("incompatible desc", [1, 5], [BufferRole(0, 0)], [], "incompatible"),
    ("desc rank", [4], [BufferRole(0, 0)], [], "incompatible"),
    ("negative desc", [-1, 4], [BufferRole(0, 0)], [], "negative dimension"),
]


@pytest.mark.parametrize(("case", "desc", "ins", "outs", "message"), ALLOCATION_ERRORS, ids=[c[0] for c in ALLOCATION_ERRORS])
def test_allocation_rules(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel, case: str, desc: Any, ins: Any,
                          outs: Any, message: str) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match=message) as info:
        device.allocate(desc, [prepared], ins, outs)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def test_no_models(device: nnrt.CpuDevice) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="no prepared models"):
        device.allocate(BufferDesc(), [], [BufferRole(0, 0)])


def test_duplicated_role_through_a_duplicated_model(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="given twice"):
        device.allocate(BufferDesc(), [prepared, prepared], [BufferRole(0, 0), BufferRole(1, 0)])


def test_model_of_another_device(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    other = nnrt.CpuDevice(name="other")
    try:
        with pytest.raises(nnrt.InvalidArgumentError, match="not a model prepared by this device"):
            other.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)])
        with pytest.raises(nnrt.InvalidArgumentError, match="not a model prepared"):
            device.allocate(BufferDesc(), [None], [BufferRole(0, 0)])
    finally:
        other.close()


def test_roles_of_different_type_or_quantization(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    q1 = device.prepare_model_sync(add_model(T.TENSOR_QUANT8_ASYMM, scale=0.5, zp=0))
    q2 = device.prepare_model_sync(add_model(T.TENSOR_QUANT8_ASYMM, scale=0.25, zp=0))
    q3 = device.prepare_model_sync(add_model(T.TENSOR_QUANT8_ASYMM, scale=0.5, zp=3))
    for other in (q1, q2, q3):
        base = q1 if other is not q1 else prepared
        with pytest.raises(nnrt.InvalidArgumentError, match="differs in type or quantization"):
            device.allocate(BufferDesc(), [base, other], [BufferRole(0, 0), BufferRole(1, 0)])


def test_roles_with_incompatible_dimensions(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    wide = device.prepare_model_sync(add_model(dims=[2, 4]))
    with pytest.raises(nnrt.InvalidArgumentError, match="incompatible"):
        device.allocate(BufferDesc(), [prepared, wide], [BufferRole(0, 0), BufferRole(1, 0)])


def test_scalar_buffer(device: nnrt.CpuDevice) -> None:
    p = device.prepare_model_sync(add_model(scalar_act_input=True))
    with pytest.raises(nnrt.InvalidArgumentError, match="scalar"):
        device.allocate([1], [p], [BufferRole(0, 2)])
    buf, _ = device.allocate(BufferDesc(), [p], [BufferRole(0, 2)])
    with pytest.raises(nnrt.InvalidArgumentError, match="scalar buffer takes no dimensions"):
        buf.copy_from(np.array([1], np.int32), [1])
    buf.copy_from(np.array(1, np.int32))
    x = -ones()
    assert p.execute_sync([x, x, buf]).outputs[0].tolist() == [[0, 0, 0, 0]]  # RELU from the buffer


def test_dynamic_buffers_are_unsupported(device: nnrt.CpuDevice) -> None:
    p = device.prepare_model_sync(add_model(dims=[0, 4]))
    with pytest.raises(nnrt.GeneralFailureError, match="dynamic buffers are unsupported") as info:
        device.allocate(BufferDesc(), [p], [BufferRole(0, 0)])
    assert info.value.status is ErrorStatus.GENERAL_FAILURE


def test_models_of_different_apps(device: nnrt.CpuDevice) -> None:
    a = device.prepare_model_sync(zoo.one_add(), app="a")
    b = device.prepare_model_sync(zoo.one_add(), app="b")
    with pytest.raises(nnrt.InvalidArgumentError, match="different apps"):
        device.allocate(BufferDesc(), [a, b], [BufferRole(0, 0), BufferRole(1, 0)])


# -- copy_from / copy_to ----------------------------------------------------------------------------


def test_copy_round_trip_through_memory(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    buf = io_buffer(device, prepared)
    src = Memory.from_array(np.arange(4, dtype=np.float32))
    buf.copy_from(src, ())
    assert buf.initialized
    src.buffer[:] = 0  # the buffer holds its own copy
    dst = Memory.from_array(np.zeros(4, np.float32))
    buf.copy_to(dst)
    assert dst.buffer.view(np.float32).tolist() == [0, 1, 2, 3]
    out = np.zeros((1, 4), np.float32)
    buf.copy_to(out)
    assert out.tolist() == [[0, 1, 2, 3]]


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_copy_sizes_must_match(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel, factor: float) -> None:
    buf = io_buffer(device, prepared)
    n = int(4 * factor)
    with pytest.raises(nnrt.InvalidArgumentError, match="bytes"):
        buf.copy_from(Memory.from_array(np.zeros(n, np.float32)), ())
    buf.copy_from(ones())
    with pytest.raises(nnrt.InvalidArgumentError, match="bytes"):
        buf.copy_to(Memory.from_array(np.zeros(n, np.float32)))


def test_copy_from_dimension_rules(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    buf = io_buffer(device, prepared)
    buf.copy_from(ones(), [1, 4])
    for dims in ([1, 0], [2, 2], [4]):
        with pytest.raises(nnrt.InvalidArgumentError, match="not fully specified or not compatible"):
            buf.copy_from(ones(), dims)
        assert not buf.initialized  # a failed copy_from leaves it uninitialized
        buf.copy_from(ones())
    with pytest.raises(nnrt.InvalidArgumentError, match="dtype int32"):
        buf.copy_from(np.ones((1, 4), np.int32))
    with pytest.raises(nnrt.InvalidArgumentError, match="neither a Memory"):
        buf.copy_from([1, 2, 3, 4])  # type: ignore[arg-type]


def test_copy_to_uninitialized_is_general_failure(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    buf = io_buffer(device, prepared)
    with pytest.raises(nnrt.GeneralFailureError, match="uninitialized") as info:
        buf.copy_to(np.zeros((1, 4), np.float32))
    assert info.value.status is ErrorStatus.GENERAL_FAILURE
    with pytest.raises(nnrt.InvalidArgumentError, match="read-only"):
        buf.copy_to(Memory(bytes(16)))


# -- buffers in requests ------------------------------------------------------------------------------


def test_output_then_input_without_a_copy(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    """Execution 1 writes the buffer, execution 2 reads it: the kernels' array becomes the
    buffer and the next execution gets a view of it."""
    buf = io_buffer(device, prepared)
    result = prepared.execute_sync([ones(), ones()], [buf])
    assert buf.initialized and result.output_shapes[0].dimensions == (1, 4)
    assert np.shares_memory(result.outputs[0], buf._storage) and not result.outputs[0].flags.writeable
    args, _ = prepared._validate_request([buf, buf.token], None)
    assert np.shares_memory(args[0], buf._storage) and np.shares_memory(args[1], buf._storage)
    out = prepared.execute_sync([buf, buf.token]).outputs[0]
    assert out.tolist() == [[4, 4, 4, 4]]


async def test_chain_across_async_executions(device: nnrt.CpuDevice) -> None:
    p = await device.prepare_model(zoo.one_add())
    state, token = device.allocate(BufferDesc(), [p], [BufferRole(0, 0)], [BufferRole(0, 0)])
    state.copy_from(np.zeros((1, 4), np.float32))
    nxt, _ = device.allocate(BufferDesc(), [p], [BufferRole(0, 0)], [BufferRole(0, 0)])
    for _ in range(3):  # ping-pong: state + 1 -> nxt, nxt + 1 -> state
        await p.execute([token, ones()], [nxt])
        fence, _cb = await p.execute_fenced([nxt, ones()], [state])
        await fence
    out = np.zeros((1, 4), np.float32)
    state.copy_to(out)
    assert out.tolist() == [[6, 6, 6, 6]]


def test_uninitialized_input_is_general_failure(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    buf = io_buffer(device, prepared)
    with pytest.raises(nnrt.GeneralFailureError, match=r"input 0 .*uninitialized") as info:
        prepared.execute_sync([buf, ones()])
    assert info.value.status is ErrorStatus.GENERAL_FAILURE


def test_same_buffer_rules(device: nnrt.CpuDevice) -> None:
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    c = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    d = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    m.add_operation(Op.RELU, [a], [c])
    m.add_operation(Op.RELU6, [a], [d])
    m.identify_inputs_and_outputs([a], [c, d])
    m.finish()
    p = device.prepare_model_sync(m)
    buf, _ = device.allocate(BufferDesc(), [p], [BufferRole(0, 0)], [BufferRole(0, 0), BufferRole(0, 1)])
    buf.copy_from(ones())
    with pytest.raises(nnrt.InvalidArgumentError, match="also an input"):
        p.execute_sync([buf], [buf, None])
    with pytest.raises(nnrt.InvalidArgumentError, match="two outputs"):
        p.execute_sync([ones()], [buf, buf.token])
    assert buf.initialized  # rejected requests do not touch the buffer


def test_role_not_declared(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    buf, _ = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)])
    buf.copy_from(ones())
    with pytest.raises(nnrt.InvalidArgumentError, match="role input 1"):
        prepared.execute_sync([ones(), buf])
    with pytest.raises(nnrt.InvalidArgumentError, match="role output 0"):
        prepared.execute_sync([ones(), ones()], [buf])
    other = device.prepare_model_sync(zoo.one_add())  # same model, another prepared model
    with pytest.raises(nnrt.InvalidArgumentError, match="role input 0"):
        other.execute_sync([buf, ones()])


@pytest.mark.parametrize("token", [0, 100, -2])
def test_unknown_tokens(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel, token: int) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match=f"token {token} names no device buffer") as info:
        prepared.execute_sync([BufferToken(token), ones()])
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(nnrt.InvalidArgumentError, match="names no device buffer"):
        prepared.execute_sync([ones(), ones()], [BufferToken(token)])


async def test_unknown_token_on_every_path(device: nnrt.CpuDevice) -> None:
    p = await device.prepare_model(zoo.one_add())
    with pytest.raises(nnrt.InvalidArgumentError):
        await p.execute([BufferToken(0), ones()])
    with pytest.raises(nnrt.InvalidArgumentError):
        await p.execute_fenced([BufferToken(0), ones()])


def test_one_apps_token_is_useless_to_another(device: nnrt.CpuDevice) -> None:
    mine = device.prepare_model_sync(zoo.one_add(), app="mine")
    theirs = device.prepare_model_sync(zoo.one_add(), app="theirs")
    buf, token = device.allocate(BufferDesc(), [mine], [BufferRole(0, 0)])
    buf.copy_from(ones())
    assert mine.execute_sync([token, ones()]).outputs[0].tolist() == [[2, 2, 2, 2]]
    with pytest.raises(nnrt.InvalidArgumentError, match="names no device buffer of app 'theirs'"):
        theirs.execute_sync([token, ones()])
    with pytest.raises(nnrt.InvalidArgumentError, match="another device or app"):
        theirs.execute_sync([buf, ones()])


def test_tokens_are_per_device(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    other = nnrt.CpuDevice(name="other")
    try:
        p2 = other.prepare_model_sync(zoo.one_add())
        buf, token = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)])
        buf.copy_from(ones())
        with pytest.raises(nnrt.InvalidArgumentError):
            p2.execute_sync([token, ones()])
    finally:
        other.close()


def test_freed_buffer_token_is_unknown(device: nnrt.CpuDevice, prepared: nnrt.PreparedModel) -> None:
    buf = io_buffer(device, prepared)
    buf.copy_from(ones())
    token = buf.token
    buf.free()
    with pytest.raises(nnrt.InvalidArgumentError, match="names no device buffer"):
        prepared.execute_sync([token, ones()])
    buf2 = io_buffer(device, prepared)
    token2 = buf2.token
    del buf2  # collected: its token is forgotten
    with pytest.raises(nnrt.InvalidArgumentError, match="names no device buffer"):
        prepared.execute_sync([token2, ones()])


def test_failed_execution_leaves_the_output_uninitialized(prepared: nnrt.PreparedModel) -> None:
    clock = nnrt.VirtualClock()
    dev = nnrt.CpuDevice(name="late", clock=clock)
    try:
        p = dev.prepare_model_sync(zoo.mlp())
        buf, _ = dev.allocate(BufferDesc(), [p], [], [BufferRole(0, 0)])
        x = zoo.example_inputs(zoo.mlp())
        p.execute_sync(x, [buf])
        assert buf.initialized

        class Late:
            def __init__(self) -> None:
                self.t = 0.0

            def now(self) -> float:
                self.t += 1.0
                return self.t

        p._driver.clock = Late()  # type: ignore[misc]  # every checkpoint is a second later
        with pytest.raises(nnrt.MissedDeadlineError):
            p.execute_sync(x, [buf], deadline=1.5)
        assert not buf.initialized
    finally:
        dev.close()


def test_wrong_result_shape_is_general_failure(device: nnrt.CpuDevice) -> None:
    """A buffer whose shape the result turns out not to fit: GENERAL_FAILURE (found at run time)."""
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    c = m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    m.add_operation(Op.RELU, [a], [c])
    m.identify_inputs_and_outputs([a], [c])
    m.finish()
    p = device.prepare_model_sync(m)
    buf, _ = device.allocate([1, 4], [p], [], [BufferRole(0, 0)])
    with pytest.raises(nnrt.GeneralFailureError, match="holds") as info:
        p.execute_sync([np.ones((2, 4), np.float32)], [buf])
    assert info.value.status is ErrorStatus.GENERAL_FAILURE and not buf.initialized
    p.execute_sync([np.ones((1, 4), np.float32)], [buf])
    assert buf.initialized


def test_device_without_memory_domains() -> None:
    class Bare(nnrt.Device):
        name, version, feature_level = "bare", "0", 7

        @property
        def capabilities(self) -> nnrt.Capabilities:
            raise NotImplementedError

        def supported_operations(self, model: Model) -> list[bool]:
            return []

        async def prepare_model(self, model: Model, **kw: Any) -> nnrt.PreparedModel:
            raise NotImplementedError

    with pytest.raises(nnrt.GeneralFailureError, match="does not support memory domains"):
        Bare().allocate(BufferDesc(), [], [])


on_trio_too(globals())
