"""Small model builders, array helpers and checks that several test modules share."""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import ErrorStatus, Model
from nnrt import OperandType as T
from nnrt import OperationType as Op

__all__ = [
    "Started", "all_outputs", "first_output", "gather", "on_trio_too", "ones", "rejected", "single_op_model", "start",
    "unknown_shape_add", "wait_all",
]

Quant = tuple[float, int]


def ones(*shape: int) -> np.ndarray:
    """A float32 array of ones."""
    return np.ones(shape, np.float32)


def unknown_shape_add() -> Model:
    """ADD of two float32 [?, 2] inputs into an output of unknown shape [?, ?]."""
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [0, 2])
    b = m.add_operand(T.TENSOR_FLOAT32, [0, 2])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    c = m.add_operand(T.TENSOR_FLOAT32, [0, 0])
    m.add_operation(Op.ADD, [a, b, act], [c])
    m.identify_inputs_and_outputs([a, b], [c])
    m.finish()
    return m


def single_op_model(op: Op, t: T, dims: list[int], params: Sequence[tuple[T, object]] = (), *,
                    in_q: Quant = (0.0, 0), out_q: Quant = (0.0, 0)) -> Model:
    """``op`` on one input tensor and constant scalar ``params``, into an output of the input's type and shape."""
    m = Model()
    x = m.add_operand(t, dims, *in_q)
    ins = [x]
    for pt, value in params:
        i = m.add_operand(pt)
        m.set_operand_value(i, value)
        ins.append(i)
    y = m.add_operand(t, dims, *out_q)
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def all_outputs(device: nnrt.CpuDevice, m: Model, *xs: object) -> list[np.ndarray]:
    """Prepare ``m`` and execute it once (synchronously) on ``xs``."""
    return list(device.prepare_model_sync(m).execute_sync(list(xs)).outputs)


def first_output(device: nnrt.CpuDevice, m: Model, *xs: object) -> np.ndarray:
    """The first output of one synchronous execution of ``m`` on ``xs``."""
    out: np.ndarray = all_outputs(device, m, *xs)[0]
    return out


def rejected(device: nnrt.CpuDevice, m: Model | Callable[[], Model], match: str) -> None:
    """Building (when ``m`` is a callable that builds it) or preparing ``m`` fails with
    INVALID_ARGUMENT and a message matching ``match``: a wrong operand count or type fails at
    ``add_operation``, everything else at preparation."""
    with pytest.raises(nnrt.InvalidArgumentError, match=match) as info:
        device.prepare_model_sync(m() if callable(m) else m)
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def on_trio_too(namespace: dict[str, Any], *, skip: Collection[str] = ()) -> None:
    """Run every ``async def test_*`` of a test module on trio as well (pytest-asyncio runs them
    on asyncio and uvloop): each gets a ``<name>_on_trio`` twin, a plain test that runs it with
    ``trio.run``, with the same fixtures and marks. For modules whose tests use only nnrt's API
    and backend-neutral calls (``anyio.sleep``); ``skip`` names the others."""
    for name, fn in list(namespace.items()):
        if name.startswith("test_") and inspect.iscoroutinefunction(fn) and name not in skip:
            namespace[f"{name}_on_trio"] = _on_trio(fn)


def _on_trio(fn: Callable[..., Any]) -> Callable[..., None]:
    import trio

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        trio.run(functools.partial(fn, *args, **kwargs))

    return run


class Started:
    """A coroutine running as its own task on asyncio or trio (``start``): ``done``,
    ``result``, ``cancel`` and ``await``, as an ``asyncio.Task`` offers them."""

    def __init__(self, coro: Any) -> None:
        from nnrt._aio import create_future, spawn

        self._outcome = create_future()
        self._task = spawn(self._run(coro), "test")

    async def _run(self, coro: Any) -> None:
        try:
            result = await coro
        except BaseException as exc:
            self._outcome.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            self._outcome.set_result(result)

    def done(self) -> bool:
        return self._outcome.done()

    def result(self) -> Any:
        return self._outcome.result()

    def cancel(self) -> bool:
        return self._task.cancel()

    def add_done_callback(self, callback: Callable[[Started], object]) -> None:
        self._outcome.add_done_callback(lambda _f: callback(self))

    def __await__(self) -> Any:
        return self._outcome.__await__()


def start(coro: Any) -> Started:
    """Run ``coro`` as a task of the running loop (asyncio or trio)."""
    return Started(coro)


async def gather(*aws: Any) -> list[Any]:
    """The results of awaitables, in order, coroutines run concurrently as tasks; raises the
    first failure (``asyncio.gather`` for tests that also run on trio)."""
    running = [start(aw) if inspect.iscoroutine(aw) else aw for aw in aws]
    results = [await aw for aw in running]
    await _settled()
    return results


async def wait_all(aws: Collection[Any]) -> None:
    """Wait until every awaitable already running has ended, whatever its outcome (``asyncio.wait``)."""
    for aw in aws:
        with contextlib.suppress(Exception):  # the outcome is read by the caller
            await aw
    await _settled()


async def _settled() -> None:
    """Let the done-callbacks scheduled by the futures just awaited run (asyncio calls them
    soon, not at once), as they have when ``asyncio.gather`` or ``asyncio.wait`` return."""
    from nnrt._aio import checkpoint

    await checkpoint()


def wait_until(pred: Callable[[], object], timeout: float = 10.0) -> None:
    """Poll ``pred`` until it is true: a hang guard, not a timing assertion."""
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.005)
