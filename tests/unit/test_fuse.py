"""Preparation-time fusions (``nnrt/execution/_fuse.py``): each fused plan gives exactly the
unfused operations' results, fuses only what it may (single-reader temporaries made fresh by
their kernel, not model outputs), and never writes into inputs or constants."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution._fuse import ConstantFolder
from nnrt.execution._plan import KERNEL, Step, compile_plan
from nnrt.ops import _jit

F32 = T.TENSOR_FLOAT32


class Graph:
    def __init__(self) -> None:
        self.m = Model()

    def t(self, dims: Sequence[int]) -> int:
        return self.m.add_operand(F32, list(dims))

    def const(self, value: np.ndarray | int, t: T = F32) -> int:
        i = self.m.add_operand(t, list(np.shape(value)) if np.ndim(value) else None)
        self.m.set_operand_value(i, value)
        return i

    def op(self, op: Op, ins: Sequence[int], dims: Sequence[int]) -> int:
        out = self.t(dims)
        self.m.add_operation(op, list(ins), [out])
        return out

    def act(self, v: int) -> int:
        return self.const(v, T.INT32)

    def done(self, ins: Sequence[int], outs: Sequence[int]) -> Model:
        self.m.identify_inputs_and_outputs(list(ins), list(outs))
        self.m.finish()
        return self.m


def _silu_model(also_output: bool = False, swapped: bool = False, act: int = 0) -> Model:
    g = Graph()
    x = g.t([2, 50])
    s = g.op(Op.LOGISTIC, [x], [2, 50])
    y = g.op(Op.MUL, [s, x, g.act(act)] if swapped else [x, s, g.act(act)], [2, 50])
    return g.done([x], [y, s] if also_output else [y])


def _run(device: nnrt.CpuDevice, m: Model, *xs: np.ndarray) -> list[np.ndarray]:
    return list(device.prepare_model_sync(m).execute_sync(list(xs)).outputs)


@pytest.mark.parametrize("jit", [True, False])
def test_silu_is_one_step_with_the_unfused_results(device: nnrt.CpuDevice, jit: bool) -> None:
    """Bit for bit the LOGISTIC and MUL steps' results, in each mode (the LOGISTIC kernel is
    ``_jit_logistic``'s with numba, numpy's formula without)."""
    x = np.linspace(-90, 90, 100, dtype=np.float32).reshape(2, 50)
    with np.errstate(over="ignore"):
        sig = np.float32(1) / (np.float32(1) + np.exp(-x))
    with _jit.forced(jit):
        m = _silu_model(also_output=True)  # the sigmoid is an output: nothing to fuse
        assert len(compile_plan(m).steps) == 2
        y, s = _run(device, m, x)
        np.testing.assert_allclose(s, sig, rtol=3e-7, atol=0)
        if not jit:
            np.testing.assert_array_equal(s, sig)
        np.testing.assert_array_equal(y, x * s)
        for swapped in (False, True):
            for act, (lo, hi) in ((0, (-np.inf, np.inf)), (3, (0, 6))):
                m = _silu_model(swapped=swapped, act=act)
                assert [st.type for st in compile_plan(m).steps] == [Op.MUL]
                np.testing.assert_array_equal(_run(device, m, x)[0].view(np.uint32), np.clip(y, lo, hi).view(np.uint32))


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("n", [100, (1 << 18) + 5])
@pytest.mark.parametrize("act", [0, 3])
def test_silu_into_its_fresh_input_gives_the_same_bits(device: nnrt.CpuDevice, jit: bool, n: int, act: int) -> None:
    """x = a + b read by the LOGISTIC and the MUL alone: the SiLU overwrites x (one pass with
    numba, at any size); with x also a model output it makes a fresh array. Same bits; the
    caller's arrays untouched."""
    a = np.linspace(-40, 40, n, dtype=np.float32)
    b = np.float32(0.25) * np.cos(a)

    def model(x_is_output: bool) -> Model:
        g = Graph()
        ia, ib = g.t([n]), g.t([n])
        x = g.op(Op.ADD, [ia, ib, g.act(0)], [n])
        s = g.op(Op.LOGISTIC, [x], [n])
        y = g.op(Op.MUL, [x, s, g.act(act)], [n])
        return g.done([ia, ib], [y, x] if x_is_output else [y])

    with _jit.forced(jit):
        own, fresh = _run(device, model(False), a, b)[0], _run(device, model(True), a, b)[0]
    np.testing.assert_array_equal(own.view(np.uint32), fresh.view(np.uint32))
    np.testing.assert_array_equal(a, np.linspace(-40, 40, n, dtype=np.float32))
    x = a + b
    with np.errstate(over="ignore"):
        want = np.clip(x / (np.float32(1) + np.exp(-x)), *((0, 6) if act else (-np.inf, np.inf)))
    np.testing.assert_allclose(own, want, rtol=1e-6, atol=1e-6)


def test_activation_folds_into_a_fresh_producer_only(device: nnrt.CpuDevice) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    for act_op, (lo, hi) in ((Op.RELU, (0, np.inf)), (Op.RELU1, (-1, 1)), (Op.RELU6, (0, 6))):
        g = Graph()
        x = g.t([1, 5, 5, 2])
        c = g.op(Op.CONV_2D, [x, g.const(w), g.const(b), g.act(1), g.act(1), g.act(1), g.act(0)], [1, 5, 5, 4])
        y = g.op(act_op, [c], [1, 5, 5, 4])
        m = g.done([x], [y])
        assert len(compile_plan(m).steps) == 1
        xv = rng.standard_normal((1, 5, 5, 2)).astype(np.float32) * 4
        fused = _run(device, m, xv)[0]
        g2 = Graph()  # the same conv with the activation as its own fused parameter
        x2 = g2.t([1, 5, 5, 2])
        code = {Op.RELU: 1, Op.RELU1: 2, Op.RELU6: 3}[act_op]
        y2 = g2.op(Op.CONV_2D, [x2, g2.const(w), g2.const(b), g2.act(1), g2.act(1), g2.act(1), g2.act(code)],
                   [1, 5, 5, 4])
        np.testing.assert_array_equal(fused, _run(device, g2.done([x2], [y2]), xv)[0])
        assert fused.min() >= lo and fused.max() <= hi
    # RESHAPE may return a view of its input: RELU after it must not write into the caller's array.
    g = Graph()
    x = g.t([2, 3])
    r = g.op(Op.RESHAPE, [x, g.const(np.array([3, 2], np.int32), T.TENSOR_INT32)], [3, 2])
    y = g.op(Op.RELU, [r], [3, 2])
    m = g.done([x], [y])
    assert len(compile_plan(m).steps) == 2
    xv = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    before = xv.copy()
    np.testing.assert_array_equal(_run(device, m, xv)[0], np.maximum(before.reshape(3, 2), 0))
    np.testing.assert_array_equal(xv, before)


def test_binary_arithmetic_writes_into_its_fresh_temporary(device: nnrt.CpuDevice) -> None:
    """ADD/SUB/MUL/DIV of a fresh temporary and an input: same results, the input untouched,
    and operands of different shapes (broadcasting) fall back to a fresh array."""
    rng = np.random.default_rng(1)
    for op, ufunc in ((Op.ADD, np.add), (Op.SUB, np.subtract), (Op.MUL, np.multiply), (Op.DIV, np.divide)):
        for t_dims, other_dims in (([64, 80], [64, 80]), ([64, 80], [80]), ([80], [64, 80])):
            g = Graph()
            x, other = g.t(t_dims), g.t(other_dims)
            tmp = g.op(Op.TANH, [x], t_dims)
            out_dims = [64, 80]
            y = g.op(op, [other, tmp, g.act(1)], out_dims)
            m = g.done([x, other], [y])
            assert compile_plan(m).steps[1].fn.__name__ == "run_in_place"
            xv = rng.standard_normal(t_dims).astype(np.float32)
            ov = rng.standard_normal(other_dims).astype(np.float32)
            keep = ov.copy()
            got = _run(device, m, xv, ov)[0]
            np.testing.assert_array_equal(got, np.maximum(ufunc(keep, np.tanh(xv)), 0))
            np.testing.assert_array_equal(ov, keep)
    # An operand read twice (here by the ADD itself) is never overwritten.
    g = Graph()
    x = g.t([5000])
    tmp = g.op(Op.TANH, [x], [5000])
    y = g.op(Op.ADD, [tmp, tmp, g.act(0)], [5000])
    xv = rng.standard_normal(5000).astype(np.float32)
    np.testing.assert_array_equal(_run(device, g.done([x], [y]), xv)[0], np.tanh(xv) * 2)


# -- constant folding ---------------------------------------------------------------------------


def test_constant_subgraphs_are_folded_and_consumers_see_constants(device: nnrt.CpuDevice) -> None:
    """DEQUANTIZE of a stored 8-bit filter runs once at compilation: the plan keeps only the
    convolution (prepared with a constant filter) and gives the unfolded result."""
    rng = np.random.default_rng(2)
    w8 = rng.integers(0, 256, (3, 3, 3, 2)).astype(np.uint8)
    b = rng.standard_normal(3).astype(np.float32)
    g = Graph()
    x = g.t([1, 6, 6, 2])
    wq = g.m.add_operand(T.TENSOR_QUANT8_ASYMM, [3, 3, 3, 2], 0.125, 128)
    g.m.set_operand_value(wq, w8)
    w = g.op(Op.DEQUANTIZE, [wq], [3, 3, 3, 2])
    y = g.op(Op.CONV_2D, [x, w, g.const(b), g.act(1), g.act(1), g.act(1), g.act(0)], [1, 6, 6, 3])
    m = g.done([x], [y])
    assert [s.type for s in compile_plan(m).steps] == [Op.CONV_2D]
    xv = rng.standard_normal((1, 6, 6, 2)).astype(np.float32)
    g2 = Graph()  # the same convolution with the filter given in float32
    x2 = g2.t([1, 6, 6, 2])
    w_real = (w8.astype(np.float32) - 128) * np.float32(0.125)
    y2 = g2.op(Op.CONV_2D, [x2, g2.const(w_real), g2.const(b), g2.act(1), g2.act(1), g2.act(1), g2.act(0)],
               [1, 6, 6, 3])
    np.testing.assert_array_equal(_run(device, m, xv)[0], _run(device, g2.done([x2], [y2]), xv)[0])


def test_folding_leaves_outputs_and_failures_alone(device: nnrt.CpuDevice) -> None:
    """A model output computed from constants is still computed per execution (a fresh, writable
    array each time); an operation that fails on its constants still fails at execution."""
    g = Graph()
    x = g.t([2])
    c = g.op(Op.ADD, [g.const(np.ones(2, np.float32)), g.const(np.ones(2, np.float32)), g.act(0)], [2])
    y = g.op(Op.ADD, [x, c, g.act(0)], [2])
    m = g.done([x], [y, c])
    assert len(compile_plan(m).steps) == 2
    p = device.prepare_model_sync(m)
    first = p.execute_sync([np.zeros(2, np.float32)]).outputs[1]
    first += 1
    np.testing.assert_array_equal(p.execute_sync([np.zeros(2, np.float32)]).outputs[1], [2, 2])
    # A kernel that fails on its constants is left in the plan, to fail at execution as before.
    g = Graph()
    x = g.t([2])
    c = g.op(Op.ADD, [g.const(np.ones(2, np.float32)), g.const(np.ones(2, np.float32)), g.act(0)], [2])
    y = g.op(Op.ADD, [x, c, g.act(0)], [2])
    m = g.done([x], [y])
    assert len(compile_plan(m).steps) == 1  # the constant ADD is folded

    def failing(*args: object) -> np.ndarray:
        raise nnrt.InvalidArgumentError("fails at execution")

    folder = ConstantFolder(m, [None] * len(m.operands))
    ins = tuple(m.operations[0].inputs)
    assert not folder.fold(Step(0, Op.ADD, "operation 0 (ADD)", KERNEL, ins, (c,), fn=failing), folder.operands(ins))
    def adding(a: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
        return a + b

    assert folder.fold(Step(0, Op.ADD, "operation 0 (ADD)", KERNEL, ins, (c,), fn=adding), folder.operands(ins))
