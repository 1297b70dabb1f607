"""HARD_SWISH epilogues of DEPTHWISE_CONV_2D (``nnrt/execution/_fuse_epilogue.py``,
``nnrt/ops/depthwise.py``, the compiled loops of ``nnrt/ops/_jit_depthwise.py`` and
``_jit_float.py``): a HARD_SWISH, or a chain computing one, that alone reads a float32 depthwise
convolution's output becomes one step giving the unfused plan's bits on the compiled loops (rows
at column stride 1, with the 3x3 nine-tap pass; four pixels per pass for 5x5 filters over many
channels; one pass per pixel for 3x3 filters over 32 channels or more at column stride 2; pixels
otherwise), the edge geometries and the numpy paths; other successors stay
steps of their own."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import nnrt
from nnrt import Model
from nnrt import OperationType as Op
from nnrt.execution._plan import compile_plan
from nnrt.ops import _jit
from tests.unit.test_fuse import Graph
from tests.unit.test_fuse_chain import _compare, _values
from tests.unit.test_fuse_epilogue import _successor

F32 = np.float32

#: (input shape, filter (KH, KW), stride (W, H), dilation, padding (left, right, top, bottom)).
GEOMETRIES = {  # outputs of 4096 values or more, so that the decomposed hardswish is a chain
    "3x3, nine-tap pairs": ((1, 20, 22, 16), (3, 3), (1, 1), 1, (1, 1, 1, 1)),
    "5x5 on 3 rows (ppocr cls)": ((1, 3, 96, 88), (5, 5), (1, 1), 1, (2, 2, 2, 2)),  # depthwise_quads_f32
    "5x5, batch 2": ((2, 14, 14, 96), (5, 5), (1, 1), 1, (2, 2, 2, 2)),
    "5x5, few channels": ((1, 3, 96, 24), (5, 5), (1, 1), 1, (2, 2, 2, 2)),  # the row loop
    "row stride 2, column stride 1": ((1, 24, 96, 8), (3, 3), (1, 2), 1, (1, 1, 1, 1)),
    "stride 2 (pixel loop)": ((1, 36, 37, 16), (3, 3), (2, 2), 1, (0, 1, 0, 1)),
    "stride 2, 32 channels": ((1, 26, 27, 32), (3, 3), (2, 2), 1, (1, 1, 1, 1)),  # depthwise_nine_f32
    "2x2 stride 3 > kernel": ((1, 50, 47, 16), (2, 2), (3, 3), 1, (0, 0, 0, 0)),
    "one row": ((1, 1, 300, 16), (3, 3), (1, 1), 1, (1, 1, 1, 1)),
    "one column": ((1, 300, 1, 16), (3, 3), (1, 1), 1, (1, 1, 1, 1)),
    "dilation 2": ((1, 20, 20, 16), (3, 3), (1, 1), 2, (2, 2, 2, 2)),
    "odd channels": ((1, 17, 19, 13), (3, 3), (1, 1), 1, (1, 1, 1, 1)),
}


def _depthwise(g: Graph, x: int, geometry: str, act: int = 0) -> tuple[int, list[int]]:
    shape, (kh, kw), (sw, sh), dil, (left, right, top, bottom) = GEOMETRIES[geometry]
    rng = np.random.default_rng(11)
    c = shape[3]
    w = (rng.standard_normal((1, kh, kw, c)) * 0.4).astype(F32)
    b = rng.standard_normal(c).astype(F32)
    oh = (shape[1] + top + bottom - ((kh - 1) * dil + 1)) // sh + 1
    ow = (shape[2] + left + right - ((kw - 1) * dil + 1)) // sw + 1
    out = [shape[0], oh, ow, c]
    params = [g.act(p) for p in (left, right, top, bottom, sw, sh, 1, act)]
    params += [g.const(False, nnrt.OperandType.BOOL), g.act(dil), g.act(dil)]
    return g.op(Op.DEPTHWISE_CONV_2D, [x, g.const(w), g.const(b), *params], out), out


def _model(geometry: str, kind: str, act: int = 0) -> Callable[[], Model]:
    def build() -> Model:
        g = Graph()
        x = g.t(GEOMETRIES[geometry][0])
        c, out = _depthwise(g, x, geometry, act)
        return g.done([x], [_successor(kind, g, c, out, None)])

    return build


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("kind", ["hard_swish", "chain", "affine chain"])
def test_depthwise_epilogue_gives_the_unfused_bits(device: nnrt.CpuDevice, geometry: str, kind: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    xs = [_values(GEOMETRIES[geometry][0], 1)]
    steps = _compare(device, _model(geometry, kind), xs, 1, monkeypatch)
    assert steps[0].type is Op.DEPTHWISE_CONV_2D and "(DEPTHWISE_CONV_2D) + " in steps[0].label


@pytest.mark.parametrize("geometry", ["3x3, nine-tap pairs", "5x5 on 3 rows (ppocr cls)", "stride 2 (pixel loop)"])
@pytest.mark.parametrize("kind", ["hard_swish", "chain"])
def test_after_relu6_and_without_numba(device: nnrt.CpuDevice, geometry: str, kind: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer's own RELU6 first; the numpy paths (``NNRT_JIT=0``) run the successor's kernel."""
    xs = [_values(GEOMETRIES[geometry][0], 2)]
    _compare(device, _model(geometry, kind, act=3), xs, 1, monkeypatch)
    with _jit.forced(False):
        steps = _compare(device, _model(geometry, kind, act=3), xs, 1, monkeypatch)
    assert "(DEPTHWISE_CONV_2D) + " in steps[0].label


@pytest.mark.parametrize("kind", ["prelu", "residual"])
def test_other_successors_stay_steps(kind: str) -> None:
    """A depthwise layer takes HARD_SWISH epilogues only (PRELU and ADD stay steps)."""
    geometry = "3x3, nine-tap pairs"
    g = Graph()
    x = g.t(GEOMETRIES[geometry][0])
    c, out = _depthwise(g, x, geometry)
    r = g.t(out) if kind == "residual" else None
    y = _successor(kind, g, c, out, r)
    steps = compile_plan(g.done([x, r] if r is not None else [x], [y])).steps
    assert [s.type for s in steps] == [Op.DEPTHWISE_CONV_2D, Op.PRELU if kind == "prelu" else Op.ADD]


def test_not_folded_where_the_output_is_needed() -> None:
    geometry = "3x3, nine-tap pairs"
    g = Graph()
    x = g.t(GEOMETRIES[geometry][0])
    c, out = _depthwise(g, x, geometry)
    steps = compile_plan(g.done([x], [g.op(Op.HARD_SWISH, [c], out), c])).steps
    assert [s.type for s in steps] == [Op.DEPTHWISE_CONV_2D, Op.HARD_SWISH]
