"""Convolution epilogues (``nnrt/execution/_fuse_epilogue.py``, ``nnrt/ops/_epilogue.py``): a
HARD_SWISH, a chain computing a hardswish, a PRELU or an ADD of a residual folded into the CONV_2D that
is its only reader gives the unfused plan's bits on every kernel path (pointwise, 1x1 with
stride, blocked im2col, channel-major planes, Winograd, the numpy paths) and the edge
geometries; it is not folded where NNAPI's semantics or the measurements say no."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import nnrt
import nnrt.execution._fuse_epilogue as fuse_epilogue
from nnrt import Model
from nnrt import OperationType as Op
from nnrt.execution._plan import compile_plan
from nnrt.ops import _jit, _jit_pointwise
from nnrt.ops._epilogue import add, bias_add_f32, bias_hard_swish_f32, bias_prelu_f32, silu
from nnrt.ops._jit_float import bias_act_f32, hard_swish_f32, prelu_f32
from nnrt.ops._jit_logistic import compiled_logistic
from tests.unit.test_fuse import Graph
from tests.unit.test_fuse_chain import _compare, _scalar, _values

F32 = np.float32

#: (input shape, filter KxK, output channels, stride, dilation, padding): the kernel paths and edges.
GEOMETRIES = {  # outputs of MIN_ELEMENTS or more, so that the decomposed hardswish is a chain
    "pointwise": ((1, 13, 14, 16), 1, 24, 1, 1, 0),
    "pointwise blocks, batch 2": ((2, 40, 40, 8), 1, 24, 1, 1, 0),  # 4 blocks per image (fixture)
    "1x1 stride 3 > kernel": ((1, 46, 40, 8), 1, 24, 3, 1, 0),
    "im2col 3x3": ((2, 12, 12, 8), 3, 16, 1, 1, 1),
    "planes Cin 3": ((1, 40, 44, 3), 3, 16, 2, 1, 1),
    "winograd": ((1, 10, 12, 48), 3, 48, 1, 1, 1),
    "one row": ((1, 1, 300, 8), 3, 16, 1, 1, 1),
    "one column": ((1, 300, 1, 8), 3, 16, 1, 1, 1),
    "2x2 stride 3": ((1, 50, 47, 6), 2, 16, 3, 1, 0),
    "dilation 2": ((1, 12, 12, 8), 3, 32, 1, 2, 2),
    "large": ((1, 96, 96, 8), 3, 16, 1, 1, 1),
}


def _conv(g: Graph, x: int, shape: tuple[int, ...], k: int, cout: int, stride: int, dil: int, pad: int,
          act: int = 0) -> tuple[int, list[int]]:
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((cout, k, k, shape[3])) * 0.3).astype(F32)
    b = rng.standard_normal(cout).astype(F32)
    eff = (k - 1) * dil + 1
    oh, ow = (shape[1] + 2 * pad - eff) // stride + 1, (shape[2] + 2 * pad - eff) // stride + 1
    out = [shape[0], oh, ow, cout]
    params = [g.act(pad)] * 4 + [g.act(stride), g.act(stride), g.act(act), g.const(False, nnrt.OperandType.BOOL),
                                   g.act(dil), g.act(dil)]
    return g.op(Op.CONV_2D, [x, g.const(w), g.const(b), *params], out), out


def _successor(kind: str, g: Graph, c: int, out: list[int], r: int | None) -> int:
    if kind == "hard_swish":
        return g.op(Op.HARD_SWISH, [c], out)
    if kind == "chain":  # x * relu6(x + 3) / 6, as PaddleOCR exports hardswish
        t = g.op(Op.ADD, [c, _scalar(g, 3.0), g.act(3)], out)
        p = g.op(Op.MUL, [c, t, g.act(0)], out)
        return g.op(Op.DIV, [p, _scalar(g, 6.0), g.act(0)], out)
    if kind == "affine chain":  # PP-LCNetV3: x * s + b, hardswish, * s + b
        a = g.op(Op.MUL, [_scalar(g, 0.94), c, g.act(0)], out)
        v = g.op(Op.ADD, [a, _scalar(g, 0.5), g.act(0)], out)
        t = g.op(Op.ADD, [v, _scalar(g, 3.0), g.act(0)], out)
        r = g.op(Op.RELU6, [t], out)
        d = g.op(Op.DIV, [g.op(Op.MUL, [v, r, g.act(0)], out), _scalar(g, 6.0), g.act(0)], out)
        e = g.op(Op.MUL, [_scalar(g, 0.47), d, g.act(0)], out)
        return g.op(Op.ADD, [e, _scalar(g, -0.007), g.act(0)], out)
    if kind == "prelu":  # one slope per channel, some of them 0, 1 and above 1
        slope = np.linspace(-0.5, 1.5, out[3], dtype=F32)
        slope[0] = 0
        return g.op(Op.PRELU, [c, g.const(slope.reshape(1, 1, out[3]))], out)
    if kind == "prelu, one slope":
        return g.op(Op.PRELU, [c, g.const(np.array([0.25], F32))], out)
    assert r is not None
    if kind == "residual":
        return g.op(Op.ADD, [c, r, g.act(0)], out)
    if kind == "residual first, relu6":
        return g.op(Op.ADD, [r, c, g.act(3)], out)
    assert kind == "residual, then RELU"
    return g.op(Op.RELU, [g.op(Op.ADD, [c, r, g.act(0)], out)], out)


@pytest.fixture(autouse=True)
def _small_residuals_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The geometries here are small: fold their residuals too (``test_small_residuals_keep_their_add``)."""
    monkeypatch.setattr(fuse_epilogue, "RESIDUAL_MIN_ELEMENTS", 0)
    # pointwise_blocks in blocks of 512 pixels: an epilogue's rows are placed per block and image
    monkeypatch.setattr(_jit_pointwise, "MEAN_ROWS", 512)
    monkeypatch.setattr(_jit_pointwise, "MEAN_BLOCK_FLOATS", 0)


@pytest.fixture(autouse=True)
def _both_blas(blas: str) -> str:
    """Every test with numpy's products and with MKL's (``_gemm``): fused and unfused agree bit
    for bit under each."""
    return blas


KINDS = ["hard_swish", "chain", "affine chain", "prelu", "prelu, one slope", "residual", "residual first, relu6",
         "residual, then RELU"]


def _model(geometry: str, kind: str, act: int = 0) -> tuple[Callable[[], Model], list[np.ndarray]]:
    shape, k, cout, stride, dil, pad = GEOMETRIES[geometry]
    residual = kind.startswith("residual")

    def build() -> Model:
        g = Graph()
        x = g.t(shape)
        c, out = _conv(g, x, shape, k, cout, stride, dil, pad, act)
        r = g.t(out) if residual else None
        y = _successor(kind, g, c, out, r)
        return g.done([x, r] if r is not None else [x], [y])

    xs = [_values(shape, 1)]
    if residual:
        xs.append(_values(tuple(build().operands[-1].dimensions), 2))
    return build, xs


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("kind", KINDS)
def test_epilogue_gives_the_unfused_bits(device: nnrt.CpuDevice, geometry: str, kind: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    build, xs = _model(geometry, kind)
    steps = _compare(device, build, xs, 1, monkeypatch)
    assert steps[0].type is Op.CONV_2D and "(CONV_2D) + " in steps[0].label


@pytest.mark.parametrize("kind", ["hard_swish", "affine chain", "prelu", "residual, then RELU"])
@pytest.mark.parametrize("geometry", ["pointwise", "im2col 3x3", "winograd"])
def test_after_a_fused_activation_and_without_numba(device: nnrt.CpuDevice, geometry: str, kind: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The convolution's own RELU6 comes first; the numpy paths (``NNRT_JIT=0``) apply the same epilogue."""
    build, xs = _model(geometry, kind, act=3)
    _compare(device, build, xs, 1, monkeypatch)
    with _jit.forced(False):
        steps = _compare(device, build, xs, 1, monkeypatch)
    assert "(CONV_2D) + " in steps[0].label


def test_winograd_inputs_in_its_domain(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finite inputs: Winograd's own blocks carry the epilogue (special values take im2col)."""
    build, _ = _model("winograd", "residual")
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((1, 10, 12, 48)).astype(F32), rng.standard_normal((1, 10, 12, 48)).astype(F32)]
    _compare(device, build, xs, 1, monkeypatch)


def test_not_folded_where_the_output_is_needed_or_the_work_does_not_pay() -> None:
    shape = (1, 9, 11, 16)

    def plan(kind: str) -> list[str]:
        g = Graph()
        x = g.t(shape)
        c, out = _conv(g, x, shape, 1, 8, 1, 1, 0)
        if kind == "output":  # the convolution's result is a model output
            return [s.label for s in compile_plan(g.done([x], [g.op(Op.HARD_SWISH, [c], out), c])).steps]
        if kind == "two readers":
            h = g.op(Op.HARD_SWISH, [c], out)
            return [s.label for s in compile_plan(g.done([x], [g.op(Op.ADD, [h, c, g.act(0)], out)])).steps]
        if kind == "broadcast residual":
            r = g.t([1, 1, 1, 8])
            return [s.label for s in compile_plan(g.done([x, r], [g.op(Op.ADD, [c, r, g.act(0)], out)])).steps]
        if kind == "full slope":  # a PRELU slope of the whole shape: not one per channel
            y = g.op(Op.PRELU, [c, g.const(np.full(out, 0.5, F32))], out)
            return [s.label for s in compile_plan(g.done([x], [y])).steps]
        if kind == "constant":  # a per-channel constant: numpy calls per block measured no gain
            y = g.op(Op.ADD, [c, g.const(np.arange(8, dtype=F32)), g.act(0)], out)
            return [s.label for s in compile_plan(g.done([x], [y])).steps]
        assert kind == "silu"  # the exponential is the cost, in cache or not: measured no gain
        s = g.op(Op.LOGISTIC, [c], out)
        return [s.label for s in compile_plan(g.done([x], [g.op(Op.MUL, [c, s, g.act(0)], out)])).steps]

    for kind in ("output", "two readers", "broadcast residual", "full slope", "constant", "silu"):
        labels = plan(kind)
        assert len(labels) >= 2 and labels[0].endswith("(CONV_2D)"), (kind, labels)


def test_a_residual_the_epilogue_does_not_fit_runs_both_kernels() -> None:
    build, xs = _model("pointwise", "residual")
    model = build()
    plan = compile_plan(model)
    step = plan.steps[0]
    assert step.fn is not None and "(ADD)" in step.label
    wide = _values((1, 13, 14, 48), 3)
    results = []
    for r in (np.ascontiguousarray(wide[..., ::2]), wide[..., ::2]):  # the epilogue; not C-contiguous: both kernels
        slots = list(plan.template)
        for i, v in zip(plan.inputs, (xs[0], r), strict=True):
            slots[i] = v
        with np.errstate(all="ignore"):
            results.append(step.fn(*step.fetch(slots)))
    np.testing.assert_array_equal(results[0].view(np.uint32), results[1].view(np.uint32))


_SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3e38, -3e38, -3.0, 3.0, 1e-40, -88.8, 89.0], F32)


def _rows(shape: tuple[int, int], seed: int) -> np.ndarray:
    x = (np.random.default_rng(seed).standard_normal(shape) * 6).astype(F32)
    x.reshape(-1)[: _SPECIAL.size] = _SPECIAL
    return x


@pytest.mark.parametrize("bounds", [(1.0, 0.0), (0.0, 6.0), (-1.0, 1.0), (0.0, np.inf)])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflow to inf, as the kernels run (IEEE results)
def test_fused_bias_passes_are_the_two_kernels(bounds: tuple[float, float]) -> None:
    """The compiled passes (run here as plain Python, and compiled when numba is in use) against
    ``bias_act_f32`` then the successor's own float32 operations."""
    lo, hi = F32(bounds[0]), F32(bounds[1])
    out, res = _rows((37, 24), 0), _rows((37, 24), 1)
    bias = _rows((1, 24), 2).reshape(-1)
    want = out.copy()
    bias_act_f32(want, bias, lo, hi)
    hs = np.empty_like(want)
    hard_swish_f32(want.reshape(-1), hs.reshape(-1))
    with np.errstate(all="ignore"):
        added = np.clip(want + res, F32(0), F32(6))
    slopes = np.empty_like(want)
    prelu_f32(want, res[1], slopes)
    for fns in ((bias_hard_swish_f32, bias_add_f32, bias_prelu_f32),  # as plain Python, then compiled
                tuple(_jit.compiled(f) for f in (bias_hard_swish_f32, bias_add_f32, bias_prelu_f32))):
        if None in fns:
            continue
        got = out.copy()
        fns[0](got, bias, lo, hi, F32(1), F32(-0.0), F32(1), F32(-0.0))  # affines that change nothing
        np.testing.assert_array_equal(got.view(np.uint32), hs.view(np.uint32))
        got = out.copy()
        fns[1](got, bias, lo, hi, res, F32(0), F32(6))
        np.testing.assert_array_equal(got.view(np.uint32), added.view(np.uint32))
        got = out.copy()
        fns[2](got, bias, lo, hi, res[1])
        np.testing.assert_array_equal(got.view(np.uint32), slopes.view(np.uint32))
    got = want.copy()
    add(3)(res).after(got)
    np.testing.assert_array_equal(got.view(np.uint32), added.view(np.uint32))


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("n", [1, 7, 1000, 65536 + 3])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_silu_is_logistic_then_mul(jit: bool, n: int) -> None:
    """In each mode, the LOGISTIC kernel's float32 operations then MUL's: numpy's formula
    without numba, ``logistic_f32`` with it."""
    x = _rows((1, n), 4).reshape(-1) if n >= _SPECIAL.size else _SPECIAL[:n].copy()
    with np.errstate(all="ignore"), _jit.forced(jit):
        fast = compiled_logistic()
        assert (fast is not None) == (jit and _jit.available())
        if fast is None:
            want = x * np.reciprocal(np.exp(np.negative(x)) + F32(1))
        else:
            sig = np.empty_like(x)
            fast(x.reshape(1, -1), sig.reshape(1, -1), 0, False)
            want = x * sig
        into = np.empty_like(x)
        silu(x, into, None, fast)
        same = x.copy()
        silu(same, same, np.empty_like(x), fast)
    np.testing.assert_array_equal(into.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(same.view(np.uint32), want.view(np.uint32))


def test_after_a_folded_pad(device: nnrt.CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """PAD -> CONV_2D -> HARD_SWISH: the PAD folded into the convolution (``_fuse_pad``), the
    HARD_SWISH its epilogue; one step, the unfused bits."""
    shape = (1, 20, 22, 8)

    def build() -> Model:
        g = Graph()
        x = g.t(shape)
        pads = g.const(np.array([[0, 0], [1, 1], [2, 0], [0, 0]], np.int32), nnrt.OperandType.TENSOR_INT32)
        p = g.op(Op.PAD, [x, pads], [1, 22, 24, 8])
        c, out = _conv(g, p, (1, 22, 24, 8), 3, 16, 1, 1, 0)
        return g.done([x], [g.op(Op.HARD_SWISH, [c], out)])

    steps = _compare(device, build, [_values(shape, 6)], 1, monkeypatch)
    assert "(PAD) + " in steps[0].label and "(HARD_SWISH)" in steps[0].label


def test_small_residuals_keep_their_add(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``RESIDUAL_MIN_ELEMENTS`` a residual ADD stays a step (it measured no gain there)."""
    monkeypatch.undo()
    assert fuse_epilogue.RESIDUAL_MIN_ELEMENTS == 1 << 18
    for shape, steps in (((1, 13, 14, 16), 2), ((1, 128, 128, 16), 1)):  # 4,368 and 393,216 outputs of 24 channels
        g = Graph()
        x = g.t(shape)
        c, out = _conv(g, x, shape, 1, 24, 1, 1, 0)
        r = g.t(out)
        assert len(compile_plan(g.done([x, r], [g.op(Op.ADD, [c, r, g.act(0)], out)])).steps) == steps
