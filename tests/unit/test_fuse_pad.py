"""Zero PAD folded into the convolution that reads it (``nnrt/execution/_fuse_pad.py``): the
folded plan has one step fewer and gives bit for bit the results of the unfused plan (the same
model with the PAD's output also a model output, which nothing folds), on edge shapes
(one-row and one-column inputs, dilation, stride larger than the kernel, padding larger than
the kernel, NCHW, depth multiplier, quantized with per-channel filters); PADs that are not a
real zero on the spatial axes, or whose output is read elsewhere, stay."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution._plan import compile_plan

F32 = T.TENSOR_FLOAT32
Q8 = T.TENSOR_QUANT8_ASYMM
QS8 = T.TENSOR_QUANT8_ASYMM_SIGNED


@dataclass
class Case:
    """PAD(x) then a convolution; ``params`` are the convolution's inputs after input, filter, bias."""

    op: Op = Op.CONV_2D
    shape: tuple[int, ...] = (1, 7, 6, 3)
    pads: Sequence[Sequence[int]] = ((0, 0), (1, 1), (1, 1), (0, 0))
    kernel: tuple[int, int] = (3, 3)
    cout: int = 4
    params: Sequence[int | bool] = (2, 1, 1, 0)  # implicit VALID, strides 1, no activation
    nchw: bool = False
    pad_op: Op = Op.PAD
    pad_value: float | int | None = None
    dtype: T = F32
    per_channel: bool = False
    extra_outputs: list[str] = field(default_factory=list)


def _model(c: Case, unfused: bool = False) -> Model:
    m = Model()
    q = c.dtype is not F32
    scale, zp = (0.5, 3 if c.dtype is Q8 else -2) if q else (0.0, 0)
    x = m.add_operand(c.dtype, list(c.shape), scale, zp)
    amounts = m.add_operand(T.TENSOR_INT32, [4, 2])
    m.set_operand_value(amounts, np.array(c.pads, np.int32))
    ins = [x, amounts]
    if c.pad_op is Op.PAD_V2:
        v = m.add_operand(T.INT32 if q else T.FLOAT32)
        m.set_operand_value(v, c.pad_value)
        ins.append(v)
    padded_shape = [d + lo + hi for d, (lo, hi) in zip(c.shape, c.pads, strict=True)]
    padded = m.add_operand(c.dtype, padded_shape, scale, zp)
    m.add_operation(c.pad_op, ins, [padded])
    cin = padded_shape[1] if c.nchw else padded_shape[3]
    rng = np.random.default_rng(len(c.shape) + sum(map(sum, c.pads)))
    kh, kw = c.kernel
    wshape = [1, kh, kw, c.cout] if c.op is Op.DEPTHWISE_CONV_2D else [c.cout, kh, kw, cin]
    if not q:
        w = m.add_operand(F32, wshape)
        m.set_operand_value(w, rng.standard_normal(wshape).astype(np.float32))
        b = m.add_operand(F32, [c.cout])
        m.set_operand_value(b, rng.standard_normal(c.cout).astype(np.float32))
    elif c.per_channel:
        w = m.add_operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, wshape)
        dim = 3 if c.op is Op.DEPTHWISE_CONV_2D else 0
        scales = [0.01 * (k + 1) for k in range(c.cout)]
        m.set_operand_symm_per_channel_quant_params(w, dim, scales)
        m.set_operand_value(w, rng.integers(-127, 128, wshape).astype(np.int8))
        b = m.add_operand(T.TENSOR_INT32, [c.cout], 0.0)
        m.set_operand_value(b, rng.integers(-50, 50, c.cout).astype(np.int32))
    else:
        w = m.add_operand(c.dtype, wshape, 0.02, 1)
        lo, hi = (0, 256) if c.dtype is Q8 else (-128, 128)
        m.set_operand_value(w, rng.integers(lo, hi, wshape).astype(c.dtype.dtype))
        b = m.add_operand(T.TENSOR_INT32, [c.cout], 0.5 * 0.02)
        m.set_operand_value(b, rng.integers(-50, 50, c.cout).astype(np.int32))
    scalars = []
    for v in c.params:
        s = m.add_operand(T.BOOL if isinstance(v, bool) else T.INT32)
        m.set_operand_value(s, v)
        scalars.append(s)
    out = m.add_operand(c.dtype, [], 0.25 if q else 0.0, zp)
    m.add_operation(c.op, [padded, w, b, *scalars], [out])
    m.identify_inputs_and_outputs([x], [out, padded] if unfused else [out])
    m.finish()
    return m


def _input(c: Case) -> np.ndarray:
    rng = np.random.default_rng(7)
    if c.dtype is F32:
        return rng.standard_normal(c.shape).astype(np.float32)
    lo, hi = (0, 256) if c.dtype is Q8 else (-128, 128)
    return rng.integers(lo, hi, c.shape).astype(c.dtype.dtype)


def _check(device: nnrt.CpuDevice, c: Case, folded: bool = True) -> None:
    m, ref = _model(c), _model(c, unfused=True)
    steps = compile_plan(m).steps
    assert len(steps) == (1 if folded else 2)
    assert len(compile_plan(ref).steps) == 2
    if folded:
        assert steps[0].type is c.op and "(PAD" in steps[0].label and f"({c.op.name})" in steps[0].label
    x = _input(c)
    got = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    want = device.prepare_model_sync(ref).execute_sync([x]).outputs[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


_DW = Op.DEPTHWISE_CONV_2D
FOLDED = {
    "valid": Case(),
    "same": Case(params=(1, 1, 1, 0)),
    "same stride 2": Case(params=(1, 2, 2, 0), shape=(1, 8, 9, 3)),
    "explicit + own padding, relu6": Case(params=(1, 0, 2, 1, 1, 2, 3)),
    "stride larger than kernel": Case(kernel=(2, 2), params=(0, 0, 0, 0, 3, 3, 0)),
    "padding larger than kernel": Case(pads=((0, 0), (3, 0), (0, 4), (0, 0)), kernel=(2, 2)),
    "one row": Case(shape=(1, 1, 9, 3), pads=((0, 0), (0, 0), (2, 1), (0, 0)), kernel=(1, 3)),
    "one column": Case(shape=(2, 9, 1, 3), pads=((0, 0), (1, 1), (0, 0), (0, 0)), kernel=(3, 1)),
    "dilation": Case(shape=(1, 9, 9, 2), params=(0, 0, 0, 0, 1, 1, 0, False, 2, 2)),
    "same, dilation": Case(shape=(1, 9, 9, 2), params=(1, 2, 1, 0, False, 2, 3)),
    "nchw": Case(shape=(1, 3, 7, 6), pads=((0, 0), (0, 0), (1, 2), (2, 1)), params=(1, 1, 1, 0, True), nchw=True),
    "pad_v2 0.0": Case(pad_op=Op.PAD_V2, pad_value=0.0),
    "depthwise valid s2": Case(op=_DW, shape=(1, 8, 8, 4), params=(2, 2, 2, 1, 0)),
    "depthwise multiplier 2, same": Case(op=_DW, cout=6, params=(1, 1, 1, 2, 1)),
    "depthwise explicit dilation": Case(op=_DW, shape=(1, 9, 8, 4), params=(1, 0, 0, 1, 1, 1, 1, 0, False, 2, 1)),
    "quant8": Case(dtype=Q8, params=(1, 2, 2, 0)),
    "quant8 pad_v2 zero point": Case(dtype=Q8, pad_op=Op.PAD_V2, pad_value=3),
    "quant8 signed per-channel": Case(dtype=QS8, per_channel=True, params=(0, 0, 0, 0, 2, 1, 1)),
    "quant8 signed depthwise per-channel": Case(op=_DW, shape=(1, 7, 6, 4), dtype=QS8, per_channel=True,
                                                 params=(2, 2, 2, 1, 3)),
}


@pytest.mark.parametrize("name", list(FOLDED))
def test_zero_pad_folds_into_the_convolution_exactly(device: nnrt.CpuDevice, name: str) -> None:
    _check(device, FOLDED[name])


NOT_FOLDED = {
    "channel padding": Case(pads=((0, 0), (1, 1), (0, 0), (0, 2))),
    "batch padding": Case(pads=((1, 0), (1, 1), (0, 0), (0, 0))),
    "pad_v2 1.0": Case(pad_op=Op.PAD_V2, pad_value=1.0),
    "pad_v2 -0.0": Case(pad_op=Op.PAD_V2, pad_value=-0.0),
    "quant8 pad_v2 not the zero point": Case(dtype=Q8, pad_op=Op.PAD_V2, pad_value=0),
}


@pytest.mark.parametrize("name", list(NOT_FOLDED))
def test_pads_that_are_not_a_spatial_zero_stay(device: nnrt.CpuDevice, name: str) -> None:
    _check(device, NOT_FOLDED[name], folded=False)


def test_a_pad_read_twice_or_into_a_pool_stays(device: nnrt.CpuDevice) -> None:
    m = Model()
    x = m.add_operand(F32, [1, 4, 4, 2])
    amounts = m.add_operand(T.TENSOR_INT32, [4, 2])
    m.set_operand_value(amounts, np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    padded = m.add_operand(F32, [1, 6, 6, 2])
    m.add_operation(Op.PAD, [x, amounts], [padded])
    scalars = []
    for v in (2, 1, 1, 2, 2, 0):  # VALID, strides 1, 2x2 filter, no activation
        s = m.add_operand(T.INT32)
        m.set_operand_value(s, v)
        scalars.append(s)
    outs = []
    for op in (Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D):
        outs.append(m.add_operand(F32, [1, 5, 5, 2]))
        m.add_operation(op, [padded, *scalars], [outs[-1]])
    m.identify_inputs_and_outputs([x], outs)
    m.finish()
    assert [s.type for s in compile_plan(m).steps] == [Op.PAD, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D]
    xv = -np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2)
    avg, mx = device.prepare_model_sync(m).execute_sync([xv]).outputs
    p = np.pad(xv, ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_array_equal(mx[0, 0, 0], np.maximum(p[0, :2, :2].max(axis=(0, 1)), 0))  # the PAD's zeros count
    np.testing.assert_allclose(avg[0, 0, 0], p[0, :2, :2].mean(axis=(0, 1)), rtol=1e-6)


def test_pad_copy_matches_numpy_pad() -> None:
    from nnrt.ops.layout import pad_copy

    rng = np.random.default_rng(1)
    for shape, pads, fill in (((1, 5, 4, 3), ((0, 0), (0, 0), (0, 0), (0, 5)), 0.0),
                              ((2, 3), ((1, 2), (0, 3)), -1.5), ((4,), ((0, 0),), 0.0),
                              ((1, 0, 2, 1), ((0, 0), (1, 1), (0, 0), (0, 0)), 2.0),
                              ((3, 2, 2), ((2, 0), (0, 1), (1, 1)), 7)):
        x = rng.standard_normal(shape).astype(np.float32) if isinstance(fill, float) else np.ones(shape, np.uint8)
        want = np.pad(x, pads, mode="constant", constant_values=fill)
        got = pad_copy(x, pads, fill)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_a_channel_pad_is_written_into_by_its_add(device: nnrt.CpuDevice) -> None:
    """BlazeFace's residual: ADD(x, PAD(y) on channels). The PAD's array is fresh and read once,
    so the ADD writes into it; the result is the unfused one."""
    m = Model()
    x, y = m.add_operand(F32, [1, 16, 16, 24]), m.add_operand(F32, [1, 16, 16, 16])
    amounts = m.add_operand(T.TENSOR_INT32, [4, 2])
    m.set_operand_value(amounts, np.array([[0, 0], [0, 0], [0, 0], [0, 8]], np.int32))
    padded = m.add_operand(F32, [1, 16, 16, 24])
    m.add_operation(Op.PAD, [y, amounts], [padded])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    out = m.add_operand(F32, [1, 16, 16, 24])
    m.add_operation(Op.ADD, [x, padded, act], [out])
    m.identify_inputs_and_outputs([x, y], [out])
    m.finish()
    steps = compile_plan(m).steps
    assert steps[1].fn is not None and steps[1].fn.__name__ == "run_in_place"
    rng = np.random.default_rng(2)
    xv, yv = rng.standard_normal((1, 16, 16, 24)).astype(np.float32), rng.standard_normal((1, 16, 16, 16)).astype(np.float32)
    keep = xv.copy(), yv.copy()
    got = device.prepare_model_sync(m).execute_sync([xv, yv]).outputs[0]
    np.testing.assert_array_equal(got, xv + np.pad(yv, ((0, 0), (0, 0), (0, 0), (0, 8))))
    np.testing.assert_array_equal(xv, keep[0])
    np.testing.assert_array_equal(yv, keep[1])
