"""CONCATENATION inputs written in place by their producers (``nnrt/execution/_concat_in_place.py``)
and the ``into`` protocol (``nnrt/ops/_into.py``): the planned plan gives the unplanned plan's
results bit for bit in both kernel modes, and only eligible producers (a temporary the
CONCATENATION alone reads, not a model output, a kernel that declared an ``into``) are rewritten."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import nnrt
import nnrt.execution._plan as plan_module
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution._plan import compile_plan
from nnrt.ops import _jit
from nnrt.ops._into import into_of, row_span, rows, write
from tests.unit.test_fuse import Graph

RNG = np.random.default_rng(11)


def _with_and_without(device: nnrt.CpuDevice, m: Model, xs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    planned = list(device.prepare_model_sync(m).execute_sync(list(xs)).outputs)
    original = plan_module.concat_in_place
    plan_module.concat_in_place = lambda model, steps, operands, new: steps
    try:
        reference = list(device.prepare_model_sync(m).execute_sync(list(xs)).outputs)
    finally:
        plan_module.concat_in_place = original
    return planned, reference


def _same_bits(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype and g.flags.c_contiguous
        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))


def _silu(g: Graph, t: int, dims: Sequence[int]) -> int:
    s = g.op(Op.LOGISTIC, [t], dims)
    return g.op(Op.MUL, [t, s, g.act(0)], dims)


def _mixed_model(axis: int) -> tuple[Model, list[np.ndarray]]:
    """A CONCATENATION of [2, 4, 4, C] pieces along ``axis`` made every way: a plain ADD, a
    nearest 2x resize and a SiLU (all three eligible), a model input, a constant, an ADD with a
    second reader and an ADD that is a model output (not eligible)."""
    base = [2, 4, 4, 3]
    g = Graph()
    x, y = g.t(base), g.t(base)
    z = g.t([2, 2, 2, 3])
    add = g.op(Op.ADD, [x, y, g.act(0)], base)
    resized = g.op(Op.RESIZE_NEAREST_NEIGHBOR, [z, g.act(4), g.act(4), g.const(False, T.BOOL)], base)
    t = g.op(Op.SUB, [x, y, g.act(0)], base)
    silu = _silu(g, t, base)
    other = g.op(Op.MUL, [t, y, g.act(0)], base)  # t read twice: the SiLU makes a fresh result
    shared = g.op(Op.ADD, [y, y, g.act(1)], base)
    also_read = g.op(Op.ADD, [shared, x, g.act(0)], base)
    as_output = g.op(Op.DIV, [x, y, g.act(0)], base)
    const = g.const(RNG.standard_normal(base).astype(np.float32))
    pieces = [add, resized, silu, x, const, shared, as_output]
    out_dims = list(base)
    out_dims[axis] *= len(pieces)
    cat = g.op(Op.CONCATENATION, [*pieces, g.act(axis)], out_dims)
    m = g.done([x, y, z], [cat, other, also_read, as_output])
    xs = [RNG.standard_normal(base).astype(np.float32) * 4, RNG.standard_normal(base).astype(np.float32) + 3,
          RNG.standard_normal((2, 2, 2, 3)).astype(np.float32)]
    return m, xs


@pytest.mark.parametrize("axis", [3, 0, 1, 2])
@pytest.mark.parametrize("jit", [True, False])
def test_eligible_producers_write_their_slice(device: nnrt.CpuDevice, axis: int, jit: bool) -> None:
    with _jit.forced(jit):
        m, xs = _mixed_model(axis)
        labels = [s.label for s in compile_plan(m).steps]
        planned, reference = _with_and_without(device, m, xs)
    into = [label.split(" (into")[0] for label in labels if "(into operation" in label]
    assert len(into) == 3, labels
    assert any("(ADD)" in label for label in into) and any("RESIZE" in label for label in into)
    assert any("LOGISTIC" in label for label in into)
    _same_bits(planned, reference)
    x, y = xs[0], xs[1]
    np.testing.assert_array_equal(np.split(planned[0], 7, axis=axis)[0], x + y)  # the first slice, checked by hand
    np.testing.assert_array_equal(np.split(planned[0], 7, axis=axis)[3], x)


def test_negative_axis_and_a_first_producer_after_others(device: nnrt.CpuDevice) -> None:
    """Axis -1; the slices' producers run in another order than the CONCATENATION's inputs."""
    g = Graph()
    x = g.t([1, 3, 5])
    first = g.op(Op.MUL, [x, x, g.act(0)], [1, 3, 5])
    second = g.op(Op.ADD, [x, x, g.act(3)], [1, 3, 5])
    cat = g.op(Op.CONCATENATION, [second, x, first, g.act(-1)], [1, 3, 15])
    m = g.done([x], [cat])
    xv = RNG.standard_normal((1, 3, 5)).astype(np.float32) * 5
    steps = compile_plan(m).steps
    assert sum("(into operation" in s.label for s in steps) == 2
    planned, reference = _with_and_without(device, m, [xv])
    _same_bits(planned, reference)
    np.testing.assert_array_equal(planned[0], np.concatenate([np.clip(xv + xv, 0, 6), xv, xv * xv], axis=-1))


def test_unknown_dimensions_are_left_to_the_concatenation(device: nnrt.CpuDevice) -> None:
    g = Graph()
    x = g.m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    a = g.m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    g.m.add_operation(Op.ADD, [x, x, g.act(0)], [a])
    b = g.m.add_operand(T.TENSOR_FLOAT32, [0, 4])
    g.m.add_operation(Op.MUL, [x, x, g.act(0)], [b])
    cat = g.m.add_operand(T.TENSOR_FLOAT32, [0, 8])
    g.m.add_operation(Op.CONCATENATION, [a, b, g.act(1)], [cat])
    m = g.done([x], [cat])
    assert not any("(into operation" in s.label for s in compile_plan(m).steps)
    for n in (1, 3):
        xv = RNG.standard_normal((n, 4)).astype(np.float32)
        out = device.prepare_model_sync(m).execute_sync([xv]).outputs[0]
        np.testing.assert_array_equal(out, np.concatenate([xv + xv, xv * xv], axis=1))


def test_the_result_is_fresh_each_execution(device: nnrt.CpuDevice) -> None:
    """Two executions give two arrays: the output buffer is made per execution, not kept."""
    g = Graph()
    x = g.t([2, 3])
    cat = g.op(Op.CONCATENATION, [g.op(Op.ADD, [x, x, g.act(0)], [2, 3]), g.op(Op.SUB, [x, x, g.act(0)], [2, 3]),
                                  g.act(0)], [4, 3])
    prepared = device.prepare_model_sync(g.done([x], [cat]))
    xv = np.ones((2, 3), np.float32)
    first = prepared.execute_sync([xv]).outputs[0]
    second = prepared.execute_sync([xv * 2]).outputs[0]
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, np.concatenate([xv * 2, xv * 0]))
    np.testing.assert_array_equal(second, np.concatenate([xv * 4, xv * 0]))


# -- the into protocol -------------------------------------------------------------------------


def test_rows_and_row_span_of_slices() -> None:
    buf = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    for where, shape in [((Ellipsis, slice(2, 5)), (24, 3)), ((slice(None), slice(1, 3)), (2, 48)),
                         ((slice(1, 2),), (1, 72)), ((slice(None), slice(None), slice(1, 2)), (6, 6))]:
        view = buf[where]
        r = rows(view)
        assert r is not None and r.shape == shape and np.shares_memory(r, buf)
        np.testing.assert_array_equal(r, view.reshape(shape))
        span = row_span(view)
        assert span is not None
        full, off = span
        assert full.flags.c_contiguous and np.shares_memory(full, buf)
        np.testing.assert_array_equal(full[:, off:off + shape[1]], view.reshape(shape))
    assert rows(buf[..., ::2]).shape == (72, 1)  # type: ignore[union-attr]  # every other value: rows of one
    assert rows(buf.transpose(0, 1, 3, 2)) is None  # no stride walks the rows in order
    assert rows(buf[:, :, ::2]).shape == (12, 6)  # type: ignore[union-attr]  # every other row: rows at one stride
    assert row_span(np.arange(12, dtype=np.float32).reshape(3, 4).T) is None


def test_write_refuses_a_result_of_another_shape() -> None:
    out = np.zeros((2, 3), np.float32)
    with pytest.raises(nnrt.InvalidArgumentError, match=r"SiLU: the result has shape \[1, 3\]"):
        write(out, np.ones((1, 3), np.float32), "SiLU")  # numpy would broadcast it
    assert not out.any()


@pytest.mark.parametrize("jit", [True, False])
def test_kernel_intos_give_the_kernels_results(jit: bool) -> None:
    """Each declared ``into``, on a strided slice, against its kernel's own result; arguments
    its fast way does not take go through the kernel (an activation given at run time, a
    broadcast, NCHW, a resize by other factors)."""
    from nnrt.model import Operand
    from nnrt.ops import OpCall, prepare_function
    from nnrt.types import OperandLifeTime

    def kernel(op: Op, dims: list[list[int]], out: list[int], consts: dict[int, object]) -> object:
        ins = []
        for k, d in enumerate(dims):
            t = T.INT32 if d == [] else T.BOOL if d == [-1] else T.TENSOR_INT32 if d == [4] else T.TENSOR_FLOAT32
            value = consts.get(k)
            ins.append(Operand(k, t, tuple(d) if d and d != [-1] else (), lifetime=OperandLifeTime.CONSTANT_COPY
                               if value is not None else OperandLifeTime.SUBGRAPH_INPUT, value=value))
        outs = (Operand(len(dims), T.TENSOR_FLOAT32, tuple(out)),)
        prepare = prepare_function(op)
        assert prepare is not None
        return prepare(OpCall(op, 0, tuple(ins), outs, False, ""))

    x = RNG.standard_normal((1, 4, 4, 3)).astype(np.float32)
    y = RNG.standard_normal((1, 4, 4, 3)).astype(np.float32)
    with _jit.forced(jit):
        add = kernel(Op.ADD, [[1, 4, 4, 3], [1, 4, 4, 3], []], [1, 4, 4, 3], {2: 1})
        resize = kernel(Op.RESIZE_NEAREST_NEIGHBOR, [[1, 4, 4, 3], [], [], [-1]], [1, 8, 8, 3], {})
        ints = [np.array(v, np.int32) for v in ([0, 1, 0, 0], [1, 4, 4, 3], [1, 2, 1, 1])]
        strided = kernel(Op.STRIDED_SLICE, [[1, 4, 4, 3], [4], [4], [4], [], [], []], [1, 2, 4, 3],
                         {1: ints[0], 2: ints[1], 3: ints[2], 4: 0, 5: 0, 6: 0})
        cases = [(add, (x, y, 1)), (add, (x, y, 0)), (add, (x, y[:, :1], 1)),
                 (resize, (x, 8, 8, False)), (resize, (x, 6, 8, False)), (resize, (x.transpose(0, 3, 1, 2), 8, 8, True)),
                 (strided, (x, *ints, 0, 0, 0))]
        for fn, args in cases:
            want = fn(*args)  # type: ignore[operator]
            buf = np.full((*want.shape[:-1], want.shape[-1] + 5), np.float32(9))
            into = into_of(fn)  # type: ignore[arg-type]
            assert into is not None
            into(buf[..., 2:2 + want.shape[-1]], *args)
            np.testing.assert_array_equal(buf[..., 2:2 + want.shape[-1]].view(np.uint32), want.view(np.uint32))
            assert (buf[..., :2] == 9).all() and (buf[..., 2 + want.shape[-1]:] == 9).all()
