"""Shape-only steps as views (``nnrt/execution/_views.py``): RESHAPE / SQUEEZE / EXPAND_DIMS with
constant parameters give bit for bit the unrewritten plan's results (the same models compiled
with the rewrite turned off), read their producer's buffer instead of copying it, never hand the
caller a view (of an internal tensor or of the caller's own input), stay correct next to in-place
steps reading the same tensor, and keep every check: bad shapes rejected at preparation when
static and at run time when dynamic, with the kernel's error naming the operand."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import nnrt
import nnrt.execution._fuse as fuse_module
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution._plan import compile_plan
from nnrt.execution._views import view_kernel
from tests.unit.test_fuse import Graph

F32 = np.float32


def _ints(v: list[int]) -> np.ndarray:
    return np.array(v, np.int32)


def _run(device: nnrt.CpuDevice, m: Model, *xs: np.ndarray) -> list[np.ndarray]:
    return list(device.prepare_model_sync(m).execute_sync(list(xs)).outputs)


def _compare(device: nnrt.CpuDevice, build: Callable[[], Model], xs: list[np.ndarray],
             monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """The rewritten and the unrewritten plan of ``build()`` give the same bits; the caller's
    inputs are untouched and no output shares memory with an input or another output."""
    kept = [x.copy() for x in xs]
    got = _run(device, build(), *xs)
    for x, k in zip(xs, kept, strict=True):
        np.testing.assert_array_equal(x, k)
    with monkeypatch.context() as m:
        m.setattr(fuse_module, "view_steps", lambda model, steps, operands, new: steps)
        unrewritten = build()
        assert not any(_is_view(s.fn) for s in compile_plan(unrewritten).steps)
        want = _run(device, unrewritten, *xs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))
        assert g.flags.owndata and g.flags.writeable
        assert not any(np.shares_memory(g, a) for a in [*xs, *(o for o in got if o is not g)])
    return got


def _is_view(fn: object) -> bool:
    return "view_kernel" in getattr(fn, "__qualname__", "")


def _shape_chain(also_outputs: bool = False) -> Callable[[], Model]:
    """x [1,4,1,8] + c -> SQUEEZE axis 2 -> EXPAND_DIMS 0 -> RESHAPE [-1, 8] -> * 2 (and, if
    ``also_outputs``, the reshape and the squeeze, views, as model outputs)."""

    def build() -> Model:
        g = Graph()
        x = g.t([1, 4, 1, 8])
        a = g.op(Op.ADD, [x, g.const(np.arange(8, dtype=F32)), g.act(0)], [1, 4, 1, 8])
        s = g.op(Op.SQUEEZE, [a, g.const(_ints([2]), T.TENSOR_INT32)], [1, 4, 8])
        e = g.op(Op.EXPAND_DIMS, [s, g.const(0, T.INT32)], [1, 1, 4, 8])
        r = g.op(Op.RESHAPE, [e, g.const(_ints([-1, 8]), T.TENSOR_INT32)], [4, 8])
        y = g.op(Op.MUL, [r, g.const(np.array([2.0], F32)), g.act(0)], [4, 8])
        return g.done([x], [y, r, s] if also_outputs else [y])

    return build


def test_shape_steps_become_views_with_the_unrewritten_results(device: nnrt.CpuDevice,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(0).standard_normal((1, 4, 1, 8)).astype(F32)
    x.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf]
    steps = compile_plan(_shape_chain()()).steps
    # The three views, each read by the next alone, are one step (a chain of views: one reshape).
    assert [s.type for s in steps] == [Op.ADD, Op.RESHAPE, Op.MUL]
    assert steps[1].label.count(" + ") == 2 and not _is_view(steps[0].fn) and not _is_view(steps[2].fn)
    (y,) = _compare(device, _shape_chain(), [x], monkeypatch)
    np.testing.assert_array_equal(y, ((x + np.arange(8, dtype=F32)) * 2).reshape(4, 8))
    # With the squeeze a model output too, it is a view step of its own, then the other two one.
    steps = compile_plan(_shape_chain(also_outputs=True)()).steps
    assert [s.type for s in steps] == [Op.ADD, Op.SQUEEZE, Op.RESHAPE, Op.MUL]
    assert _is_view(steps[1].fn) and steps[2].label.count(" + ") == 1
    # The steps read their producer's buffer: a view from the second call on (the first checks).
    a = np.ones((1, 4, 1, 8), F32)
    for step in steps[1:3]:
        assert step.fn is not None
        args = (a, *step.fetch(compile_plan(_shape_chain(also_outputs=True)()).template)[1:])
        first, second = step.fn(*args), step.fn(*args)
        assert not np.shares_memory(first, a) and np.shares_memory(second, a)
        a = second


def test_views_as_model_outputs_are_fresh_arrays(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.arange(32, dtype=F32).reshape(1, 4, 1, 8)
    y, r, s = _compare(device, _shape_chain(also_outputs=True), [x], monkeypatch)
    np.testing.assert_array_equal(y, r * np.float32(2))
    np.testing.assert_array_equal(r, (x + np.arange(8, dtype=F32)).reshape(4, 8))
    np.testing.assert_array_equal(s, r.reshape(1, 4, 8))

    def of_input() -> Model:  # the output is the caller's own input under another shape
        g = Graph()
        i = g.t([2, 3])
        return g.done([i], [g.op(Op.RESHAPE, [i, g.const(_ints([3, 2]), T.TENSOR_INT32)], [3, 2])])

    prepared = device.prepare_model_sync(of_input())
    i = np.arange(6, dtype=F32).reshape(2, 3)
    for _ in range(2):
        (out,) = prepared.execute_sync([i]).outputs
        assert out.flags.owndata and not np.shares_memory(out, i)
    i[0, 0] = 99.0
    assert out[0, 0] == 0.0
    buf = np.full((3, 2), -1.0, F32)  # into the caller's buffer
    (got,) = prepared.execute_sync([i], outputs=[buf]).outputs
    assert got is buf and buf[0, 0] == 99.0 and not np.shares_memory(buf, i)


def test_a_viewed_tensor_read_by_an_in_place_step(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """``a`` (fresh, 8192 elements: big enough for in-place arithmetic) is read by a RESHAPE and
    by an ADD; the view's consumer and a third step with a fresh single-reader operand may run in
    place, but nothing may overwrite ``a`` or its view while the other still reads it."""

    def build() -> Model:
        g = Graph()
        x = g.t([1, 64, 128])
        a = g.op(Op.ADD, [x, g.const(np.ones(128, F32)), g.act(0)], [1, 64, 128])
        r = g.op(Op.RESHAPE, [a, g.const(_ints([64, 128]), T.TENSOR_INT32)], [64, 128])
        t = g.op(Op.MUL, [x, g.const(np.array([3.0], F32)), g.act(0)], [1, 64, 128])
        ts = g.op(Op.RESHAPE, [t, g.const(_ints([64, 128]), T.TENSOR_INT32)], [64, 128])
        u = g.op(Op.ADD, [r, ts, g.act(0)], [64, 128])  # reads the view r (would write into it if it were fresh)
        p = g.op(Op.MUL, [a, g.const(np.array([2.0], F32)), g.act(1)], [1, 64, 128])  # a's second reader
        f = g.op(Op.SUB, [x, g.const(np.array([1.0], F32)), g.act(0)], [1, 64, 128])
        q = g.op(Op.ADD, [f, p, g.act(0)], [1, 64, 128])  # may write into f (fresh, one reader)
        return g.done([x], [u, q])

    x = np.random.default_rng(1).standard_normal((1, 64, 128)).astype(F32)
    u, q = _compare(device, build, [x], monkeypatch)
    a = x + np.float32(1)
    np.testing.assert_array_equal(u, (x * np.float32(3)).reshape(64, 128) + a.reshape(64, 128))
    np.testing.assert_array_equal(q, (x - np.float32(1)) + np.maximum(a * np.float32(2), 0))


def _dynamic(shape: list[int], op: Op, param: np.ndarray | int | None, out: list[int]) -> Callable[[], Model]:
    def build() -> Model:
        g = Graph()
        x = g.t(shape)
        if param is None:
            p = g.m.add_operand(T.TENSOR_INT32, [0])
            g.m.set_operand_value(p, None)
        elif isinstance(param, int):
            p = g.const(param, T.INT32)
        else:
            p = g.const(param, T.TENSOR_INT32)
        y = g.op(op, [x, p], out)
        z = g.op(Op.ADD, [y, g.const(np.array([1.0], F32)), g.act(0)], out)
        return g.done([x], [z])

    return build


@pytest.mark.parametrize(("op", "param", "out", "shapes"), [
    (Op.RESHAPE, _ints([-1, 3]), [0, 3], [(3, 8), (6, 2), (0, 8), (3, 8)]),
    (Op.SQUEEZE, None, [0], [(1, 5), (1, 1), (1, 0)]),
    (Op.SQUEEZE, _ints([0]), [0], [(1, 5), (1, 0)]),
    (Op.EXPAND_DIMS, -1, [0, 0, 1], [(2, 3), (0, 3), (4, 1)]),
])
def test_dynamic_shapes_and_zero_sizes(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch, op: Op,
                                       param: np.ndarray | int | None, out: list[int],
                                       shapes: list[tuple[int, int]]) -> None:
    build = _dynamic([0, 0], op, param, out)
    assert _is_view(compile_plan(build()).steps[0].fn)
    for shape in shapes:
        x = np.random.default_rng(2).standard_normal(shape).astype(F32)
        (z,) = _compare(device, build, [x], monkeypatch)
        assert z.size == x.size


def test_bad_shapes_still_rejected_naming_the_operand(device: nnrt.CpuDevice) -> None:
    prepared = device.prepare_model_sync(_dynamic([0, 0], Op.RESHAPE, _ints([-1, 3]), [0, 3])())
    good = np.ones((3, 2), F32)
    for _ in range(2):
        prepared.execute_sync([good])
        with pytest.raises(nnrt.NnrtError, match=r"RESHAPE.*input 1.*does not fit") as err:
            prepared.execute_sync([np.ones((2, 2), F32)])  # 4 elements: no [-1, 3]
        assert err.value.status is nnrt.ErrorStatus.INVALID_ARGUMENT
    squeeze = device.prepare_model_sync(_dynamic([0, 0], Op.SQUEEZE, _ints([1]), [0])())
    with pytest.raises(nnrt.NnrtError, match=r"SQUEEZE.*input 1.*dimension 1 has size 4") as err:
        squeeze.execute_sync([np.ones((1, 4), F32)])
    assert err.value.status is nnrt.ErrorStatus.INVALID_ARGUMENT
    with pytest.raises(nnrt.NnrtError, match=r"RESHAPE.*input 1.*has 8 elements") as err:  # static: at preparation
        device.prepare_model_sync(_dynamic([2, 3], Op.RESHAPE, _ints([4, 2]), [4, 2])())
    assert err.value.status is nnrt.ErrorStatus.INVALID_ARGUMENT


def test_what_is_not_rewritten() -> None:
    """Parameters given at run time, and a requantizing reshape, keep their kernels."""
    g = Graph()
    x = g.t([2, 3])
    shape = g.m.add_operand(T.TENSOR_INT32, [2])
    y = g.op(Op.RESHAPE, [x, shape], [3, 2])
    q = g.m.add_operand(T.TENSOR_QUANT8_ASYMM, [2, 3], scale=0.5, zero_point=3)
    qo = g.m.add_operand(T.TENSOR_QUANT8_ASYMM, [3, 2], scale=0.25, zero_point=3)
    g.m.add_operation(Op.RESHAPE, [q, g.const(_ints([3, 2]), T.TENSOR_INT32)], [qo])
    steps = compile_plan(g.done([x, shape, q], [y, qo])).steps
    assert [_is_view(s.fn) for s in steps] == [False, False]


def test_view_kernel_falls_back_on_what_it_did_not_see() -> None:
    calls: list[tuple[int, ...]] = []

    def kernel(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        calls.append(x.shape)
        return np.ascontiguousarray(x, np.float32).reshape(tuple(shape.tolist()))

    run = view_kernel(kernel, np.dtype(F32))
    shape = _ints([6])
    x = np.arange(6, dtype=F32).reshape(2, 3)
    run(x, shape)
    assert np.shares_memory(run(x, shape), x) and calls == [(2, 3)]
    strided = np.arange(12, dtype=F32).reshape(2, 6)[:, ::2]  # not contiguous: reshape copies
    np.testing.assert_array_equal(run(strided, shape), strided.reshape(6))
    run(x.astype(np.float64), shape)  # another dtype: the kernel, never remembered
    run(x.astype(np.float64), shape)
    assert calls == [(2, 3), (2, 3), (2, 3)]


def _layout_chain(dims: list[int], also_output: bool = False, second_reader: bool = False) -> Callable[[], Model]:
    """openWakeWord's melspectrogram: conv result [1,1,T,257] -> SQUEEZE 1 -> TRANSPOSE (0,2,1) ->
    EXPAND_DIMS 1 -> TRANSPOSE (0,1,3,2) -> MUL: the four layout steps give back the same order."""

    def build() -> Model:
        g = Graph()
        x = g.t(dims)
        a = g.op(Op.ADD, [x, g.const(np.ones(257, F32)), g.act(0)], dims)
        s = g.op(Op.SQUEEZE, [a, g.const(_ints([1]), T.TENSOR_INT32)], [0, 0, 257])
        t = g.op(Op.TRANSPOSE, [s, g.const(_ints([0, 2, 1]), T.TENSOR_INT32)], [0, 257, 0])
        e = g.op(Op.EXPAND_DIMS, [t, g.const(1, T.INT32)], [0, 1, 257, 0])
        b = g.op(Op.TRANSPOSE, [e, g.const(_ints([0, 1, 3, 2]), T.TENSOR_INT32)], [0, 1, 0, 257])
        y = g.op(Op.MUL, [b, b, g.act(0)], [0, 1, 0, 257])
        outs = [y, t] if also_output else [y]
        if second_reader:
            outs.append(g.op(Op.ADD, [t, t, g.act(0)], [0, 257, 0]))
        return g.done([x], outs)

    return build


@pytest.mark.parametrize("dims", [[1, 1, 5, 257], [0, 1, 0, 257]])
def test_a_layout_chain_keeping_the_order_is_one_view(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch,
                                                      dims: list[int]) -> None:
    build = _layout_chain(dims)
    steps = compile_plan(build()).steps
    assert [s.type for s in steps] == [Op.ADD, Op.TRANSPOSE, Op.MUL]
    assert "SQUEEZE" in steps[1].label and steps[1].ins == steps[0].outs
    for shape in [(1, 1, 5, 257), (2, 1, 3, 257), (1, 1, 5, 257), (1, 1, 0, 257)]:
        x = np.random.default_rng(3).standard_normal(shape).astype(F32)
        if dims[0] and shape != tuple(dims):
            continue
        (y,) = _compare(device, build, [x], monkeypatch)
        np.testing.assert_array_equal(y, np.square(x + np.float32(1)))
    assert steps[1].fn is not None
    a = np.ones((2, 1, 3, 257), F32)
    steps[1].fn(a)
    assert np.shares_memory(steps[1].fn(a), a)  # a view from the second call on that shape


def test_a_layout_chain_changing_the_order_runs_its_links(device: nnrt.CpuDevice,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def build() -> Model:
        g = Graph()
        x = g.t([0, 0])
        r = g.op(Op.RESHAPE, [x, g.const(_ints([-1, 2]), T.TENSOR_INT32)], [0, 2])
        t = g.op(Op.TRANSPOSE, [r, g.const(_ints([1, 0]), T.TENSOR_INT32)], [2, 0])
        return g.done([x], [g.op(Op.ADD, [t, g.const(np.array([0.5], F32)), g.act(0)], [2, 0])])

    assert [s.type for s in compile_plan(build()).steps] == [Op.TRANSPOSE, Op.ADD]
    for shape in [(2, 3), (1, 2), (2, 3), (4, 1)]:  # (1, 2) keeps the order: a view; (2, 3) does not
        x = np.arange(np.prod(shape), dtype=F32).reshape(shape)
        (y,) = _compare(device, build, [x], monkeypatch)
        np.testing.assert_array_equal(y, x.reshape(-1, 2).T + np.float32(0.5))
    prepared = device.prepare_model_sync(build())
    for shape in [(2, 3), (1, 2), (2, 3), (1, 2)]:  # the second call per shape takes the remembered path
        x = np.arange(np.prod(shape), dtype=F32).reshape(shape)
        (y,) = prepared.execute_sync([x]).outputs
        np.testing.assert_array_equal(y, x.reshape(-1, 2).T + np.float32(0.5))
    with pytest.raises(nnrt.NnrtError, match=r"RESHAPE.*input 1.*does not fit") as err:
        prepared.execute_sync([np.ones((1, 3), F32)])
    assert err.value.status is nnrt.ErrorStatus.INVALID_ARGUMENT


def test_layout_chains_stop_at_outputs_and_shared_values(device: nnrt.CpuDevice,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(4).standard_normal((1, 1, 5, 257)).astype(F32)
    t_want = (x + np.float32(1)).reshape(1, 5, 257).transpose(0, 2, 1)
    for build, factor in ((_layout_chain([1, 1, 5, 257], also_output=True), 1),
                          (_layout_chain([1, 1, 5, 257], second_reader=True), 2)):
        steps = compile_plan(build()).steps
        # SQUEEZE + TRANSPOSE merged (t is read outside), EXPAND_DIMS + TRANSPOSE merged
        assert [s.label.count("+") for s in steps if s.type is Op.TRANSPOSE] == [1, 1]
        y, t = _compare(device, build, [x], monkeypatch)
        np.testing.assert_array_equal(t, t_want * np.float32(factor))
        np.testing.assert_array_equal(y, np.square(x + np.float32(1)))


def test_a_chain_of_views_alone_is_one_reshape_on_every_shape(device: nnrt.CpuDevice,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """SQUEEZE then EXPAND_DIMS on an input whose dimensions come with each request (silero
    VAD's wrapping of its 1-D layers): one step, the unrewritten plan's bits on each shape, a
    view of its producer from the second call per shape on."""

    def build() -> Model:
        g = Graph()
        x = g.t([0, 4, 1, 0])
        a = g.op(Op.ADD, [x, g.const(np.ones(1, F32)), g.act(0)], [0, 4, 1, 0])
        s = g.op(Op.SQUEEZE, [a, g.const(_ints([2]), T.TENSOR_INT32)], [0, 4, 0])
        e = g.op(Op.EXPAND_DIMS, [s, g.const(1, T.INT32)], [0, 1, 4, 0])
        return g.done([x], [g.op(Op.MUL, [e, g.const(np.array([2.0], F32)), g.act(0)], [0, 1, 4, 0])])

    steps = compile_plan(build()).steps
    assert [s.type for s in steps] == [Op.ADD, Op.EXPAND_DIMS, Op.MUL] and " + " in steps[1].label
    rng = np.random.default_rng(3)
    for shape in ((1, 4, 1, 3), (2, 4, 1, 5), (1, 4, 1, 3)):
        x = rng.standard_normal(shape).astype(F32)
        x.reshape(-1)[0] = np.nan
        (y,) = _compare(device, build, [x], monkeypatch)
        np.testing.assert_array_equal(y, ((x + 1) * 2).reshape(shape[0], 1, 4, shape[3]))
    a = np.ones((2, 4, 1, 5), F32)
    fn = steps[1].fn
    assert fn is not None
    first, second = fn(a), fn(a)
    assert not np.shares_memory(first, a) and np.shares_memory(second, a)
    np.testing.assert_array_equal(first, second)
