"""Issue 16, items 6, 7 and 9: execution requests of the wrong type, run-time exhaustion, and the
nits (burst statuses, check order, burst statistics, status names repeated in messages).

Every request here goes through each execution path (``execute``, ``execute_sync``,
``execute_fenced``, a burst's ``execute`` and ``submit``): the same bad argument must give the
same status on all of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import BufferDesc, BufferRole, ErrorStatus, Model, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op

X = np.ones((1, 4), np.float32)


Path = Callable[[nnrt.PreparedModel, dict[str, Any]], Awaitable[object]]


async def _execute(p: nnrt.PreparedModel, kw: dict[str, Any]) -> object:
    return await p.execute(**kw)


async def _execute_sync(p: nnrt.PreparedModel, kw: dict[str, Any]) -> object:
    return p.execute_sync(**kw)


async def _execute_fenced(p: nnrt.PreparedModel, kw: dict[str, Any]) -> object:
    fence, _ = await p.execute_fenced(**kw)
    return await fence


async def _burst_execute(p: nnrt.PreparedModel, kw: dict[str, Any]) -> object:
    async with p.burst() as burst:
        return await burst.execute(**kw)


async def _burst_submit(p: nnrt.PreparedModel, kw: dict[str, Any]) -> object:
    async with p.burst() as burst:
        return await (await burst.submit(**kw))


PATHS = {"execute": _execute, "execute_sync": _execute_sync, "execute_fenced": _execute_fenced,
         "burst.execute": _burst_execute, "burst.submit": _burst_submit}


@pytest.fixture(scope="module")
def add_prepared(device: nnrt.CpuDevice) -> nnrt.PreparedModel:
    return device.prepare_model_sync(zoo.one_add())


BAD_REQUESTS = {
    "inputs None": dict(inputs=None),
    "inputs 5": dict(inputs=5),
    "inputs iterator": dict(inputs=iter([X, X])),
    "inputs str": dict(inputs="ab"),
    "outputs 5": dict(inputs=[X, X], outputs=5),
    "outputs str": dict(inputs=[X, X], outputs="a"),
    "deadline str": dict(inputs=[X, X], deadline="x"),
    "deadline nan": dict(inputs=[X, X], deadline=float("nan")),
    "loop_timeout str": dict(inputs=[X, X], loop_timeout="x"),
    "required input None": dict(inputs=[X, None]),
    "input object": dict(inputs=[X, object()]),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", BAD_REQUESTS)
async def test_a_bad_request_is_invalid_argument_on_every_path(add_prepared: nnrt.PreparedModel, path: str,
                                                               case: str) -> None:
    """Items 6 and 9: TypeError from ``len(None)``, GENERAL_FAILURE from a kernel given None, and
    GENERAL_FAILURE "malformed packet" from the burst where ``execute`` said INVALID_ARGUMENT."""
    with pytest.raises(nnrt.NnrtError) as info:
        await PATHS[path](add_prepared, dict(BAD_REQUESTS[case]))
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT, str(info.value)


@pytest.mark.parametrize("wait_for", [5, None, "f", [5], [None]], ids=repr)
async def test_wait_for_of_the_wrong_type(add_prepared: nnrt.PreparedModel, wait_for: object) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="wait_for"):
        await add_prepared.execute_fenced([X, X], wait_for=wait_for)  # type: ignore[arg-type]


@pytest.mark.parametrize("deadline", ["x", float("nan"), None], ids=repr)
async def test_prepare_model_checks_its_deadline(device: nnrt.CpuDevice, deadline: object) -> None:
    """Item 9: ``prepare_model(deadline=nan)`` was accepted, ``"x"`` was a TypeError."""
    if deadline is None:
        assert await device.prepare_model(zoo.one_add(), deadline=deadline) is not None  # type: ignore[arg-type]
        return
    with pytest.raises(nnrt.InvalidArgumentError, match="deadline"):
        await device.prepare_model(zoo.one_add(), deadline=deadline)  # type: ignore[arg-type]


@pytest.mark.parametrize("app", [None, 5, ["a"], ""], ids=repr)
def test_prepare_model_checks_its_app(device: nnrt.CpuDevice, app: object) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match="app"):
        device.prepare_model_sync(zoo.one_add(), app=app)  # type: ignore[arg-type]


def test_an_omitted_optional_input_is_still_accepted(device: nnrt.CpuDevice) -> None:
    """The rule for None keeps NNAPI's omitted optional inputs: TRANSPOSE's permutation, given
    at run time as None, means "reverse the axes"."""
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    perm = m.add_operand(T.TENSOR_INT32, [2])
    y = m.add_operand(T.TENSOR_FLOAT32, [4, 1])
    m.add_operation(Op.TRANSPOSE, [x, perm], [y])
    m.identify_inputs_and_outputs([x, perm], [y])
    m.finish()
    prepared = device.prepare_model_sync(m)
    assert prepared.execute_sync([X, None]).outputs[0].shape == (4, 1)
    with pytest.raises(nnrt.InvalidArgumentError, match="input 0"):
        prepared.execute_sync([None, None])


# -- item 7: exhaustion -----------------------------------------------------------------------


def _fill() -> Model:
    m = Model()
    shape = m.add_operand(T.TENSOR_INT32, [2])
    value = m.add_operand(T.FLOAT32)
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 0])
    m.add_operation(Op.FILL, [shape, value], [y])
    m.identify_inputs_and_outputs([shape, value], [y])
    m.finish()
    return m


def _tile() -> Model:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [2, 2])
    reps = m.add_operand(T.TENSOR_INT32, [2])
    y = m.add_operand(T.TENSOR_FLOAT32, [0, 0])
    m.add_operation(Op.TILE, [x, reps], [y])
    m.identify_inputs_and_outputs([x, reps], [y])
    m.finish()
    return m


@pytest.mark.parametrize(
    "build, args",
    [(_fill, [np.array([2**17, 2**17], np.int32), 1.0]),
     (_tile, [np.ones((2, 2), np.float32), np.array([2**20, 2**20], np.int32)])],
    ids=["FILL", "TILE"],
)
def test_a_result_too_large_for_an_operand_is_resource_exhausted(device: nnrt.CpuDevice, build: Callable[[], Model],
                                                                 args: list[Any]) -> None:
    """Item 7: checked before allocating (64 GiB and 16 TiB here), not a MemoryError caught late."""
    prepared = device.prepare_model_sync(build())
    with pytest.raises(nnrt.ResourceExhaustedError) as info:
        prepared.execute_sync(args)
    assert info.value.status is ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
    small = prepared.execute_sync([np.array([2, 3], np.int32), 1.0] if build is _fill
                                  else [np.ones((2, 2), np.float32), np.array([1, 2], np.int32)])
    assert small.outputs[0].shape == ((2, 3) if build is _fill else (2, 4))


def test_memory_the_system_cannot_give_is_resource_exhausted() -> None:
    """The last line behind the checks: a kernel's MemoryError is RESOURCE_EXHAUSTED, not GENERAL_FAILURE."""
    from nnrt.execution._interpreter import kernel_failure

    assert kernel_failure("operation 0 (ADD)", MemoryError()).status is ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    assert kernel_failure("operation 0 (ADD)", ValueError("x")).status is ErrorStatus.GENERAL_FAILURE


# -- item 9: the nits -------------------------------------------------------------------------


def test_invalid_argument_is_reported_before_an_uninitialized_buffer(device: nnrt.CpuDevice) -> None:
    """Input 0 is an uninitialized device buffer (GENERAL_FAILURE), output 0 a buffer without
    that role (INVALID_ARGUMENT): the request is invalid, whatever the buffers hold."""
    prepared = device.prepare_model_sync(zoo.one_add())
    fresh, _ = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)])
    other, _ = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 1)])
    with pytest.raises(nnrt.InvalidArgumentError, match="role output 0"):
        prepared.execute_sync([fresh, X], [other])
    with pytest.raises(nnrt.InvalidArgumentError, match="input 1"):
        prepared.execute_sync([fresh, np.ones((2, 2), np.float32)])
    with pytest.raises(nnrt.GeneralFailureError, match="uninitialized"):
        prepared.execute_sync([fresh, X])


async def test_burst_statistics_count_fallback_requests(add_prepared: nnrt.PreparedModel) -> None:
    async with add_prepared.burst() as burst:
        await burst.execute([[[1.0, 2.0, 3.0, 4.0]], X])  # a nested list: not expressible as a packet
        await (await burst.submit([[[1.0, 2.0, 3.0, 4.0]], X]))
        stats = burst.statistics()
    assert stats.fallbacks >= 1
    assert stats.submitted == stats.completed + stats.failed == 2


def _empty_mean() -> Model:
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [2, 0])
    axes = m.add_operand(T.TENSOR_INT32, [1])
    m.set_operand_value(axes, np.array([1], np.int32))
    keep = m.add_operand(T.INT32)
    m.set_operand_value(keep, 0)
    y = m.add_operand(T.TENSOR_FLOAT32, [2])
    m.add_operation(Op.MEAN, [x, axes, keep], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


@pytest.mark.parametrize("upstream", ["none", "pending"])
async def test_a_failed_fenced_execution_names_its_status_once(device: nnrt.CpuDevice, upstream: str) -> None:
    """The fence kept ``str(err)`` (status included) as its message, and awaiting it prefixed
    the status again: "GENERAL_FAILURE: GENERAL_FAILURE: ...". Here the execution itself fails."""
    prepared = device.prepare_model_sync(_empty_mean())
    wait_for = [nnrt.SyncFence()] if upstream == "pending" else []
    fence, _ = await prepared.execute_fenced([np.zeros((2, 0), np.float32)], [np.empty(2, np.float32)], wait_for=wait_for)
    for f in wait_for:
        f.signal()
    with pytest.raises(nnrt.NnrtError) as info:
        await fence
    text = str(info.value)
    assert all(text.count(f"{status.name}:") <= 1 for status in ErrorStatus), text
    assert fence.message == info.value.message and not fence.message.startswith(fence.status.name if fence.status else "?")


async def test_a_failed_wait_for_fence_names_each_status_once(add_prepared: nnrt.PreparedModel) -> None:
    upstream = nnrt.SyncFence()
    fence, _ = await add_prepared.execute_fenced([X, X], wait_for=[upstream])
    upstream.signal_error(ErrorStatus.DEAD_OBJECT, "the camera went away")
    with pytest.raises(nnrt.NnrtError) as info:
        await fence
    text = str(info.value)
    assert all(text.count(f"{status.name}:") <= 1 for status in ErrorStatus), text


# -- found by the suite ---------------------------------------------------------------------


def test_inputs_of_unknown_shape_that_do_not_broadcast_are_invalid_argument(device: nnrt.CpuDevice) -> None:
    """The stateful test found ADD of inputs declared [0] given shapes [2] and [0]: numpy's
    broadcasting ValueError inside the kernel, reported as GENERAL_FAILURE."""
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [0])
    b = m.add_operand(T.TENSOR_FLOAT32, [0])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    c = m.add_operand(T.TENSOR_FLOAT32, [0])
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a, b], [c])
    m.finish()
    prepared = device.prepare_model_sync(m)
    assert prepared.execute_sync([np.ones(2, np.float32), np.ones(1, np.float32)]).outputs[0].tolist() == [2.0, 2.0]
    with pytest.raises(nnrt.InvalidArgumentError, match="do not broadcast"):
        prepared.execute_sync([np.ones(2, np.float32), np.ones(0, np.float32)])
