"""Elementwise chains run as one blocked step (``nnrt/execution/_fuse_chain.py``): the fused plan
gives bit for bit the unfused plan's results (the same models compiled without fusions) on
special values (NaN, infinities, -0.0, huge), on tensors of one block and of several blocks
with a partial last one, with per-channel constants; works in place only on a fresh temporary
it alone reads (never on a caller's input); stops where a value is read outside the chain; and
falls back to the links' own kernels on an input it does not fit."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import nnrt
import nnrt.execution._fuse as fuse_module
import nnrt.execution._plan as plan_module
from nnrt import Model, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution._fuse_chain import BLOCK, MAX_LINKS, MIN_ELEMENTS, SINGLE_MIN_ELEMENTS
from nnrt.execution._plan import compile_plan
from tests.unit.test_fuse import Graph

F32 = np.float32


def _values(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    x = (np.random.default_rng(seed).standard_normal(shape) * 5).astype(F32)
    flat = x.reshape(-1)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3e38, -3e38, -3.0, 3.0, 1e-40], F32)
    flat[: min(flat.size, special.size)] = special[: flat.size]
    return x


def _compare(device: nnrt.CpuDevice, build: Callable[[], Model], xs: list[np.ndarray], steps: int,
             monkeypatch: pytest.MonkeyPatch) -> list[nnrt.execution._plan.Step]:
    """Run the fused and the unfused plan of ``build()``; both give the same bits. Returns the fused steps."""
    fused_model = build()
    plan = compile_plan(fused_model)
    assert len(plan.steps) == steps, [s.label for s in plan.steps]
    kept = [x.copy() for x in xs]
    got = device.prepare_model_sync(fused_model).execute_sync(xs).outputs
    for x, k in zip(xs, kept, strict=True):
        np.testing.assert_array_equal(x, k)  # a caller's input is never written into
    with monkeypatch.context() as m:
        m.setattr(plan_module, "fuse_steps", lambda model, s, fetcher, operands: s)
        unfused_model = build()
        assert len(compile_plan(unfused_model).steps) >= steps
        want = device.prepare_model_sync(unfused_model).execute_sync(xs).outputs
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))  # the same bits (NaN, -0.0)
    return plan.steps


def _conv(g: Graph, x: int, shape: list[int], cout: int) -> int:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((cout, 1, 1, shape[3])).astype(F32)
    b = rng.standard_normal(cout).astype(F32)
    return g.op(Op.CONV_2D, [x, g.const(w), g.const(b), g.act(2), g.act(1), g.act(1), g.act(0)], [*shape[:3], cout])


def _scalar(g: Graph, v: float) -> int:
    return g.const(np.array([v], F32))


def _paddle_hardswish(shape: list[int], also_output: bool = False) -> Callable[[], Model]:
    """conv -> affine (MUL c, ADD c) -> x * relu6(x + 3) / 6 -> affine, as PP-LCNetV3 exports it."""

    def build() -> Model:
        g = Graph()
        x = g.t(shape)
        c = _conv(g, x, shape, 8)
        out = [*shape[:3], 8]
        a = g.op(Op.MUL, [_scalar(g, 0.94), c, g.act(0)], out)
        v = g.op(Op.ADD, [a, _scalar(g, 0.5), g.act(0)], out)
        t = g.op(Op.ADD, [v, _scalar(g, 3.0), g.act(0)], out)
        r = g.op(Op.RELU6, [t], out)
        p = g.op(Op.MUL, [v, r, g.act(0)], out)
        d = g.op(Op.DIV, [p, _scalar(g, 6.0), g.act(0)], out)
        e = g.op(Op.MUL, [_scalar(g, 0.47), d, g.act(0)], out)
        y = g.op(Op.ADD, [e, _scalar(g, -0.007), g.act(0)], out)
        return g.done([x], [y, d] if also_output else [y])

    return build


@pytest.mark.parametrize("shape", [[1, 24, 30, 3], [1, 97, 101, 3]])
def test_paddle_hardswish_chain_is_one_step_with_the_same_bits(device: nnrt.CpuDevice, shape: list[int],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert shape[1] * shape[2] * 8 >= MIN_ELEMENTS
    assert shape[1] * shape[2] * 8 % BLOCK != 0 or shape[2] < 100  # the last shape spans blocks, one partly filled
    monkeypatch.setattr(fuse_module, "fold_epilogues", lambda model, steps, *rest: steps)  # the chain alone
    steps = _compare(device, _paddle_hardswish(shape), [_values(tuple(shape))], 2, monkeypatch)
    assert steps[1].label.count(" + ") == 7 and steps[1].type is Op.MUL


def test_small_tensors_keep_their_steps() -> None:
    """Below MIN_ELEMENTS the steps stay (``zoo.add_chain``, the overhead benchmark's plan, too)."""
    assert len(compile_plan(_paddle_hardswish([1, 4, 5, 3])()).steps) > 2
    assert len(compile_plan(zoo.add_chain(20)).steps) == 20


def test_a_long_chain_is_cut_every_max_links(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain longer than MAX_LINKS becomes ceil(n / MAX_LINKS) steps, each the same bits (the
    cap keeps preparation linear: every step no longer starts a walk to the chain's end)."""
    n = 2 * MAX_LINKS + 5
    steps = _compare(device, lambda: zoo.add_chain(n, MIN_ELEMENTS), [_values((1, MIN_ELEMENTS))], 3, monkeypatch)
    assert [s.label.count("(ADD)") for s in steps] == [MAX_LINKS, MAX_LINKS, 5]


def test_a_value_read_outside_ends_the_chain(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    # d (after the DIV) is also a model output: the chain stops there, the affine after it is another chain.
    shape = (1, 26, 27, 3)
    monkeypatch.setattr(fuse_module, "fold_epilogues", lambda model, steps, *rest: steps)  # the chain alone
    steps = _compare(device, _paddle_hardswish(list(shape), also_output=True), [_values(shape)], 3, monkeypatch)
    assert "(DIV)" in steps[1].label and steps[1].label.endswith("(DIV)")


def test_hard_sigmoid_with_a_per_channel_bias(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """squeeze-excite's gate: ADD bias (per channel), MUL 0.2, ADD 0.5, MAXIMUM 0, MINIMUM 1; then
    the gate scales a bigger tensor (a broadcast: not a link)."""
    # per-channel rows tiled k = 4, 64 (over several blocks) and 1 (an odd count) times; a tiny gate
    for gate_shape, y_shape in (([1, 1, 1, 16], [1, 5, 5, 16]), ([1, 300, 16], [2, 1, 300, 16]),
                                ([1, 128, 128, 16], [1, 128, 128, 16]), ([1, 97, 101, 16], [1, 97, 101, 16])):

        def build(gate_shape: list[int] = gate_shape, y_shape: list[int] = y_shape) -> Model:
            g = Graph()
            s, y = g.t(gate_shape), g.t(y_shape)
            bias = g.const(np.linspace(-2, 2, 16, dtype=F32).reshape([1] * (len(gate_shape) - 3) + [16]))
            a = g.op(Op.ADD, [s, bias, g.act(0)], gate_shape)
            m = g.op(Op.MUL, [a, _scalar(g, 0.2), g.act(0)], gate_shape)
            h = g.op(Op.ADD, [m, _scalar(g, 0.5), g.act(0)], gate_shape)
            lo = g.op(Op.MAXIMUM, [h, _scalar(g, 0.0)], gate_shape)
            gate = g.op(Op.MINIMUM, [_scalar(g, 1.0), lo], gate_shape)
            out = g.op(Op.MUL, [y, gate, g.act(0)], y_shape)
            return g.done([s, y], [out])

        small = int(np.prod(gate_shape)) < MIN_ELEMENTS  # 16 values: the steps stay
        steps = _compare(device, build, [_values(tuple(gate_shape)), _values(tuple(y_shape), 1)], 6 if small else 2,
                         monkeypatch)
        if not small:
            assert [s.type for s in steps] == [Op.ADD, Op.MUL]


def test_every_link_kind_keeps_its_operand_order(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """Constants first and second in SUB, DIV, MAXIMUM, MINIMUM; fused activations; RELU, RELU1;
    HARD_SWISH; a link reading the chain's input and an earlier value."""
    shape = [3, 70000]

    def build() -> Model:
        g = Graph()
        x = g.t(shape)
        v = g.op(Op.SUB, [_scalar(g, 1.5), x, g.act(0)], shape)
        v = g.op(Op.DIV, [_scalar(g, 2.0), v, g.act(2)], shape)
        v = g.op(Op.SUB, [v, x, g.act(1)], shape)  # the chain's input again
        keep = v
        v = g.op(Op.MAXIMUM, [v, _scalar(g, 0.25)], shape)
        v = g.op(Op.MINIMUM, [_scalar(g, 0.75), v], shape)
        v = g.op(Op.RELU1, [v], shape)
        v = g.op(Op.HARD_SWISH, [v], shape)
        v = g.op(Op.DIV, [v, keep, g.act(3)], shape)  # an earlier value of the chain
        v = g.op(Op.RELU, [v], shape)
        v = g.op(Op.MUL, [v, v, g.act(0)], shape)
        return g.done([x], [v])

    steps = _compare(device, build, [_values(tuple(shape))], 1, monkeypatch)
    assert steps[0].type is Op.HARD_SWISH and steps[0].label.count(" + ") == 9


def test_hard_swish_after_a_conv_runs_in_its_buffer(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuse_module, "fold_epilogues", lambda model, steps, *rest: steps)  # the chain alone

    def build(hw: int, twice: bool = False) -> Callable[[], Model]:
        def make() -> Model:
            g = Graph()
            x = g.t([1, hw, hw, 4])
            c = _conv(g, x, [1, hw, hw, 4], 8)
            h = g.op(Op.HARD_SWISH, [c], [1, hw, hw, 8])
            # twice: the conv's result is also a model output: the HARD_SWISH keeps its own array
            return g.done([x], [h, c] if twice else [h])

        return make

    hw = 256
    assert hw * hw * 8 >= SINGLE_MIN_ELEMENTS
    steps = _compare(device, build(hw), [_values((1, hw, hw, 4))], 2, monkeypatch)
    assert "operation 1 (HARD_SWISH)" in steps[1].label and "_chain_fn" in steps[1].fn.__qualname__
    for size, twice in ((40, False), (hw, True)):  # too small to pay; not its buffer
        steps = _compare(device, build(size, twice), [_values((1, size, size, 4))], 2, monkeypatch)
        assert "_chain_fn" not in steps[1].fn.__qualname__  # the HARD_SWISH kernel itself


def test_a_chain_on_a_caller_input_writes_a_new_array(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    def build() -> Model:
        g = Graph()
        x = g.t([2, 50000])
        v = g.op(Op.ADD, [x, _scalar(g, 3.0), g.act(3)], [2, 50000])
        return g.done([x], [g.op(Op.MUL, [v, x, g.act(0)], [2, 50000])])

    _compare(device, build, [_values((2, 50000))], 1, monkeypatch)


def test_an_input_the_chain_does_not_fit_runs_the_kernels() -> None:
    g = Graph()
    x = g.t([700, 6])
    v = g.op(Op.ADD, [x, g.const(np.arange(6, dtype=F32)), g.act(0)], [700, 6])
    y = g.op(Op.MUL, [v, _scalar(g, 2.0), g.act(1)], [700, 6])
    step = compile_plan(g.done([x], [y])).steps[0]
    assert "_chain_fn" in step.fn.__qualname__
    base = _values((700, 12))
    for arg in (base[:, ::2], base[:, :6].copy()):  # not C-contiguous; then the fitting form
        with np.errstate(over="ignore"):  # as executions run kernels
            want = np.maximum((arg + np.arange(6, dtype=F32)) * F32(2), 0)
            got = step.fn(arg)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_quantized_and_mixed_chains_are_not_fused() -> None:
    m = Model()
    x = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 8], 0.5, 3)
    c = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1], 0.5, 3)
    m.set_operand_value(c, np.array([7], np.uint8))
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    a = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 8], 0.5, 3)
    m.add_operation(Op.ADD, [x, c, act], [a])
    b = m.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 8], 0.5, 3)
    m.add_operation(Op.ADD, [a, c, act], [b])
    m.identify_inputs_and_outputs([x], [b])
    m.finish()
    assert len(compile_plan(m).steps) == 2


@pytest.mark.parametrize("hw", [24, 97])
def test_hardswish_reading_the_conv_twice(device: nnrt.CpuDevice, hw: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """ppocr cls's hardswish right after a conv, x * relu6(x + 3) / 6 reading the conv's result
    twice: in its buffer (a block's input kept aside) beyond one block, a new array within one."""
    assert (hw * hw * 8 > BLOCK) == (hw > 90)
    monkeypatch.setattr(fuse_module, "fold_epilogues", lambda model, steps, *rest: steps)  # the chain alone

    def build() -> Model:
        g = Graph()
        x = g.t([1, hw, hw, 3])
        c = _conv(g, x, [1, hw, hw, 3], 8)
        out = [1, hw, hw, 8]
        r = g.op(Op.ADD, [c, _scalar(g, 3.0), g.act(3)], out)
        p = g.op(Op.MUL, [c, r, g.act(0)], out)
        return g.done([x], [g.op(Op.DIV, [p, _scalar(g, 6.0), g.act(0)], out)])

    steps = _compare(device, build, [_values((1, hw, hw, 3))], 2, monkeypatch)
    assert steps[1].label.count(" + ") == 2


@pytest.mark.parametrize(("source", "act"), [("conv", 0), ("conv", 3), ("input", 0)])
def test_large_silu_runs_in_blocks_with_the_same_bits(device: nnrt.CpuDevice, source: str, act: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """x * sigmoid(x) over [1,129,131,16] (several blocks, a partial last one): into the conv's
    buffer when only the LOGISTIC and the MUL read it, a new array for a caller's input."""
    shape = [1, 129, 131, 16]

    def build() -> Model:
        g = Graph()
        x = g.t(shape if source == "input" else [*shape[:3], 3])
        v = x if source == "input" else _conv(g, x, [*shape[:3], 3], 16)
        s = g.op(Op.LOGISTIC, [v], shape)
        return g.done([x], [g.op(Op.MUL, [s, v, g.act(act)], shape)])

    xs = [_values(tuple(shape) if source == "input" else (*shape[:3], 3))]
    steps = _compare(device, build, xs, 1 if source == "input" else 2, monkeypatch)
    assert "(LOGISTIC) + " in steps[-1].label


def _entry(op: Op, args: tuple[tuple[object, ...], ...], act: int, v: int) -> tuple[object, ...]:
    from nnrt.execution._fuse_chain import _BINARY

    return (_BINARY.get(op), op, args, act, v)


def test_decomposed_hardswish_spans_become_one_entry() -> None:
    from nnrt.execution._fuse_chain import _hard_swish_spans

    c = {v: ("c", np.array(v, F32)) for v in (0.5, 3.0, 5.0, 6.0)}
    t = ("t",)
    affine = _entry(Op.ADD, (t, c[0.5]), 0, 1)
    fused_act = [affine, _entry(Op.ADD, (t, c[3.0]), 3, 2), _entry(Op.MUL, (("r", 1), t), 0, 3),
                 _entry(Op.DIV, (t, c[6.0]), 0, 4), _entry(Op.MUL, (t, c[0.5]), 0, 5)]
    got = _hard_swish_spans(fused_act)
    assert [e[1] for e in got] == [Op.ADD, Op.HARD_SWISH, Op.MUL] and got[1][4] == 4
    separate = [_entry(Op.ADD, (c[3.0], t), 0, 1), _entry(Op.RELU6, (t,), 0, 2), _entry(Op.MUL, (t, ("r", 0)), 0, 3),
                _entry(Op.DIV, (t, c[6.0]), 0, 4)]
    assert [e[1] for e in _hard_swish_spans(separate)] == [Op.HARD_SWISH]
    not_spans = [
        [*separate[:3], _entry(Op.DIV, (t, c[5.0]), 0, 4)],  # not / 6
        [*separate[:2], _entry(Op.MUL, (t, ("r", 1)), 0, 3), separate[3]],  # x * (x + 3), not x * relu6(x + 3)
        [*separate, _entry(Op.ADD, (t, ("r", 2)), 0, 5)],  # relu6(x + 3) read again later
        [_entry(Op.ADD, (t, c[3.0]), 1, 1), *separate[2:]],  # RELU, not RELU6
        [affine, _entry(Op.ADD, (t, c[3.0]), 3, 2), _entry(Op.MUL, (("r", 0), t), 0, 3),  # y * relu6(x + 3)
         _entry(Op.DIV, (t, c[6.0]), 0, 4)],
    ]
    for program in not_spans:
        assert len(_hard_swish_spans(program)) == len(program)


@pytest.mark.parametrize("jit", ["1", "0"])
def test_paddle_chain_with_and_without_compiled_kernels(device: nnrt.CpuDevice, jit: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from nnrt.ops import _jit

    monkeypatch.setenv("NNRT_JIT", jit)
    monkeypatch.setattr(fuse_module, "fold_epilogues", lambda model, steps, *rest: steps)  # the chain alone
    _jit.reset_for_tests()
    try:
        steps = _compare(device, _paddle_hardswish([1, 40, 41, 3]), [_values((1, 40, 41, 3))], 2, monkeypatch)
        assert steps[1].label.count(" + ") == 7
    finally:
        monkeypatch.undo()
        _jit.reset_for_tests()


def test_compiled_affine_rounds_like_numpy() -> None:
    """``x * s + b`` compiled: the product rounded to float32, then the sum (no fused multiply-add,
    which would differ in the last bit on a large share of these values)."""
    from nnrt.execution._fuse_chain import AFFINE_F32, affine_f32
    from nnrt.ops._jit import compiled

    fn = compiled(affine_f32, AFFINE_F32)
    if fn is None:
        pytest.skip("numba is not in use (NNRT_JIT=0 or the fast extra missing): the numpy links run")
    x = _values((1 << 20,), 5)
    for s, b in ((F32(0.94316906), F32(0.5042972)), (F32(1.9), F32(-0.54658866)), (F32(-3e-5), F32(1e30))):
        out = np.empty_like(x)
        fn(x, out, s, b)
        with np.errstate(all="ignore"):
            want = np.add(np.multiply(x, s), b)
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


def test_affine_pairs_keep_the_add_activation_and_shared_products(device: nnrt.CpuDevice,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    shape = [1, 50, 60, 8]

    def build() -> Model:
        g = Graph()
        x = g.t([*shape[:3], 3])
        c = _conv(g, x, [*shape[:3], 3], 8)
        a = g.op(Op.MUL, [c, _scalar(g, 0.75), g.act(0)], shape)
        v = g.op(Op.ADD, [_scalar(g, 0.25), a, g.act(2)], shape)  # affine + RELU1
        p = g.op(Op.MUL, [_scalar(g, 3.0), v, g.act(0)], shape)  # a product read again: no affine entry
        q = g.op(Op.ADD, [p, _scalar(g, -1.0), g.act(0)], shape)
        return g.done([x], [g.op(Op.SUB, [q, p, g.act(0)], shape)])

    steps = _compare(device, build, [_values((*shape[:3], 3))], 2, monkeypatch)
    assert steps[1].label.count(" + ") == 4
