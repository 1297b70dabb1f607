"""A plain 1x1 CONV_2D read only by a global AVERAGE_POOL_2D, computed by the pool's step
(``nnrt/execution/_fuse_pool.py``, ``_jit_pointwise.BlockMean``, ``_jit_float.bias_act_sum_f32``):
the fused plan keeps one step per operation (the convolution's hands its input on) and gives
bit for bit the unfused plan's results (the same model with the convolution's output also a
model output, which nothing fuses), within 1e-6 of a float64 numpy reference, on edge shapes
(one pixel, one row, one column, odd sizes, pixels not a multiple of the four-row pass, of
``SUM_ROWS`` or of ``MEAN_ROWS``, batches, every activation on either side, explicit and
implicit pool padding, NaN and inf); pairs that do not qualify stay unfused, and
``NNRT_JIT=0`` fuses nothing. The global pool alone is checked against numpy too."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution._plan import compile_plan
from nnrt.ops import _jit
from nnrt.ops._jit_float import SUM_ROWS, bias_act_sum_f32
from nnrt.ops._jit_pointwise import MEAN_ROWS

numba = pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def _compiled() -> Iterator[None]:
    """The fusion needs the compiled pass: on here whatever ``NNRT_JIT`` says (the CI runs the
    suite both ways); ``test_nnrt_jit_0_fuses_nothing`` turns it off inside."""
    with _jit.forced(True):
        yield


@pytest.fixture(autouse=True)
def _both_blas(_compiled: None, blas: str) -> str:
    """Every test with numpy's products and with MKL's (``_gemm``): fused and unfused agree bit
    for bit under each."""
    return blas


F32 = T.TENSOR_FLOAT32
RELU, RELU1, RELU6 = 1, 2, 3


@dataclass
class Case:
    shape: tuple[int, int, int, int] = (1, 7, 5, 3)
    cout: int = 4
    conv_act: int = RELU6
    #: The conv's parameters after input, filter, bias and before its activation.
    conv_params: tuple[int, ...] = (1, 1, 1)  # implicit SAME, strides 1
    kernel: int = 1
    #: The pool's parameters after its input (activation last); None: global, VALID.
    pool_params: tuple[int, ...] | None = None
    pool_out: tuple[int, int] = (1, 1)
    pool_act: int = 0


def _scalar(m: Model, v: int) -> int:
    s = m.add_operand(T.INT32)
    m.set_operand_value(s, v)
    return s


def _model(c: Case, unfused: bool = False, twice: bool = False) -> Model:
    n, h, w, cin = c.shape
    m = Model()
    x = m.add_operand(F32, list(c.shape))
    rng = np.random.default_rng(sum(c.shape) + c.cout)
    wt = m.add_operand(F32, [c.cout, c.kernel, c.kernel, cin])
    m.set_operand_value(wt, rng.standard_normal((c.cout, c.kernel, c.kernel, cin)).astype(np.float32))
    b = m.add_operand(F32, [c.cout])
    m.set_operand_value(b, rng.standard_normal(c.cout).astype(np.float32))
    conv_out = m.add_operand(F32, [n, h, w, c.cout])
    m.add_operation(Op.CONV_2D, [x, wt, b, *(_scalar(m, v) for v in (*c.conv_params, c.conv_act))], [conv_out])
    params = c.pool_params if c.pool_params is not None else (2, 1, 1, w, h)  # VALID, strides 1, whole image
    pooled = m.add_operand(F32, [n, *c.pool_out, c.cout])
    m.add_operation(Op.AVERAGE_POOL_2D, [conv_out, *(_scalar(m, v) for v in (*params, c.pool_act))], [pooled])
    outs = [pooled]
    if twice:  # a second reader of the convolution's output
        other = m.add_operand(F32, [n, h, w, c.cout])
        m.add_operation(Op.RELU, [conv_out], [other])
        outs.append(other)
    m.identify_inputs_and_outputs([x], [*outs, conv_out] if unfused else outs)
    m.finish()
    return m


def _reference(c: Case, m: Model, x: np.ndarray) -> np.ndarray:
    """The pair in float64 numpy (from the model's own constants)."""
    w = np.asarray(m.operands[1].value, np.float64)[:, 0, 0, :]
    b = np.asarray(m.operands[2].value, np.float64)
    conv = _act(np.asarray(x, np.float64) @ w.T + b, c.conv_act)
    return _act(conv.mean(axis=(1, 2), keepdims=True), c.pool_act)


def _act(v: np.ndarray, act: int) -> np.ndarray:
    bounds = {RELU: (0.0, np.inf), RELU1: (-1.0, 1.0), RELU6: (0.0, 6.0)}.get(act)
    return v if bounds is None else np.clip(v, *bounds)


def _check(device: nnrt.CpuDevice, c: Case, x: np.ndarray | None = None) -> None:
    m, ref = _model(c), _model(c, unfused=True)
    steps = compile_plan(m).steps
    assert [s.type for s in steps] == [Op.CONV_2D, Op.AVERAGE_POOL_2D]
    assert steps[0].label.endswith("(in the next step)") and steps[0].ins == (0,)
    assert "(CONV_2D) +" in steps[1].label and "(AVERAGE_POOL_2D)" in steps[1].label
    assert [s.label for s in compile_plan(ref).steps] == ["operation 0 (CONV_2D)", "operation 1 (AVERAGE_POOL_2D)"]
    if x is None:
        x = np.random.default_rng(3).standard_normal(c.shape).astype(np.float32) * 3
    got = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    want = device.prepare_model_sync(ref).execute_sync([x]).outputs[0]
    assert got.dtype == np.float32 and got.shape == want.shape == (c.shape[0], 1, 1, c.cout)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, _reference(c, m, x), rtol=1e-6, atol=1e-6)


# pixels: at 256 channels or more, a partial last block, a partial last float32 sum, a 1-row tail
_ODD = MEAN_ROWS + SUM_ROWS + 5
FUSED = {
    "odd sizes, relu6": Case(),
    "one pixel": Case(shape=(1, 1, 1, 5)),
    "one row": Case(shape=(1, 1, 9, 3)),
    "one column": Case(shape=(1, 9, 1, 3), conv_act=0),
    "three pixels (below one four-row pass)": Case(shape=(1, 1, 3, 2), conv_act=RELU1),
    "batch of 3, relu": Case(shape=(3, 5, 6, 4), cout=7, conv_act=RELU),
    "partial blocks": Case(shape=(1, 1, _ODD, 8), cout=256),
    "64 channels": Case(shape=(2, 45, 50, 32), cout=64),
    "several blocks, 256 channels": Case(shape=(2, 40, 60, 8), cout=256),  # blocks of 1024 pixels
    "several blocks of a rounded size, 96 channels": Case(shape=(1, 61, 97, 5), cout=96),  # 2720 pixels
    "pool activation relu6 after no conv activation": Case(conv_act=0, pool_act=RELU6),
    "pool activation relu1": Case(pool_act=RELU1),
    "explicit zero padding, explicit pool": Case(conv_params=(0, 0, 0, 0, 1, 1), pool_params=(0, 0, 0, 0, 1, 1, 5, 7)),
    "pool SAME with stride over the whole image": Case(pool_params=(1, 5, 7, 5, 7)),
    "pool VALID with stride larger than the window": Case(pool_params=(2, 9, 9, 5, 7)),
}


@pytest.mark.parametrize("name", list(FUSED))
def test_pointwise_conv_into_global_average_pool(device: nnrt.CpuDevice, name: str) -> None:
    _check(device, FUSED[name])


def test_nan_and_inf_propagate_as_unfused(device: nnrt.CpuDevice) -> None:
    c = Case(shape=(2, 6, 7, 3), conv_act=0)
    x = np.random.default_rng(5).standard_normal(c.shape).astype(np.float32)
    x[0, 2, 3, 1] = np.nan
    x[1, 0, 0, 0] = np.inf
    m, ref = _model(c), _model(c, unfused=True)
    got = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    want = device.prepare_model_sync(ref).execute_sync([x]).outputs[0]
    assert np.isnan(got[0]).all()  # every output channel mixes the NaN input channel
    np.testing.assert_array_equal(got, want)


def test_another_input_shape_runs_the_two_kernels() -> None:
    """The fused step decides on the shape known at preparation; given another (a caller of
    the kernel directly), it runs the convolution's and the pool's own kernels."""
    c = Case(shape=(1, 4, 5, 3))
    m, ref = _model(c), _model(c, unfused=True)
    fused, plain = compile_plan(m).steps[1], compile_plan(ref).steps
    assert fused.fn is not None and plain[0].fn is not None and plain[1].fn is not None
    values = [m.operands[i].value for i in range(len(m.operands))]
    conv_args = [values[i] for i in plain[0].ins[1:]]
    pool_args = [values[i] for i in fused.ins[1:]]
    x = np.random.default_rng(9).standard_normal((1, 4, 6, 3)).astype(np.float32)  # one column more
    got = fused.fn(x, *pool_args)
    want = plain[1].fn(plain[0].fn(x, *conv_args), *pool_args)
    assert got.shape == (1, 1, 2, c.cout)
    np.testing.assert_array_equal(got, want)


NOT_FUSED = {
    "3x3 conv": Case(kernel=3),
    "conv stride 2": Case(conv_params=(1, 2, 2), shape=(1, 1, 1, 3)),
    "pool not global": Case(pool_params=(2, 1, 1, 2, 2), pool_out=(6, 4)),
    "pool padding": Case(pool_params=(1, 0, 0, 0, 1, 1, 6, 7)),
}


@pytest.mark.parametrize("name", list(NOT_FUSED))
def test_pairs_that_do_not_qualify_stay(name: str) -> None:
    steps = compile_plan(_model(NOT_FUSED[name])).steps
    assert [s.label for s in steps] == ["operation 0 (CONV_2D)", "operation 1 (AVERAGE_POOL_2D)"]


def test_a_padded_pointwise_conv_stays() -> None:
    c = Case(conv_params=(1, 0, 0, 0, 1, 1), shape=(1, 7, 4, 3))  # explicit left padding 1: 5 columns out
    steps = compile_plan(_padded_model(c)).steps
    assert [s.label for s in steps] == ["operation 0 (CONV_2D)", "operation 1 (AVERAGE_POOL_2D)"]


def _padded_model(c: Case) -> Model:
    """``_model`` with the convolution's output one column wider (its explicit right padding)."""
    n, h, w, cin = c.shape
    m = Model()
    x = m.add_operand(F32, list(c.shape))
    wt = m.add_operand(F32, [c.cout, 1, 1, cin])
    m.set_operand_value(wt, np.ones((c.cout, 1, 1, cin), np.float32))
    b = m.add_operand(F32, [c.cout])
    m.set_operand_value(b, np.zeros(c.cout, np.float32))
    conv_out = m.add_operand(F32, [n, h, w + 1, c.cout])
    m.add_operation(Op.CONV_2D, [x, wt, b, *(_scalar(m, v) for v in (*c.conv_params, 0))], [conv_out])
    pooled = m.add_operand(F32, [n, 1, 1, c.cout])
    m.add_operation(Op.AVERAGE_POOL_2D, [conv_out, *(_scalar(m, v) for v in (2, 1, 1, w + 1, h, 0))], [pooled])
    m.identify_inputs_and_outputs([x], [pooled])
    m.finish()
    return m


def test_a_conv_output_read_twice_or_returned_stays(device: nnrt.CpuDevice) -> None:
    c = Case()
    labels = [s.label for s in compile_plan(_model(c, twice=True)).steps]
    assert labels == ["operation 0 (CONV_2D)", "operation 1 (AVERAGE_POOL_2D)", "operation 2 (RELU)"]
    labels = [s.label for s in compile_plan(_model(c, unfused=True)).steps]
    assert labels == ["operation 0 (CONV_2D)", "operation 1 (AVERAGE_POOL_2D)"]


def test_nnrt_jit_0_fuses_nothing(device: nnrt.CpuDevice) -> None:
    c = Case()
    x = np.random.default_rng(2).standard_normal(c.shape).astype(np.float32)
    with _jit.forced(False):
        m = _model(c)
        assert [s.label for s in compile_plan(m).steps] == ["operation 0 (CONV_2D)", "operation 1 (AVERAGE_POOL_2D)"]
        got = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    np.testing.assert_allclose(got, _reference(c, m, x), rtol=1e-6, atol=1e-6)


def test_the_block_runs_fused(device: nnrt.CpuDevice) -> None:
    from nnrt import zoo

    m = zoo.mobilenet_block()
    labels = [s.label for s in compile_plan(m).steps]
    assert labels[2:4] == ["operation 2 (CONV_2D) (in the next step)", "operation 2 (CONV_2D) + operation 3 (AVERAGE_POOL_2D)"]
    assert len(labels) == len(m.operations)


@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (2, 7, 5, 6), (1, 1, _ODD, 256), (1, 45, 50, 64)])
@pytest.mark.parametrize("act", [0, RELU, RELU6])
def test_global_average_pool_alone(device: nnrt.CpuDevice, shape: tuple[int, int, int, int], act: int) -> None:
    """The global pool's compiled sums (what the fused step adds) against numpy's mean and the
    numpy kernel (``NNRT_JIT=0``); NCHW too."""
    from tests.unit.test_ops_conv import build

    n, h, w, c = shape
    x = (np.random.default_rng(h * w).standard_normal(shape) * 3).astype(np.float32)
    want = _act(x.astype(np.float64).mean(axis=(1, 2), keepdims=True), act)
    for nchw in (False, True):
        m = build(Op.AVERAGE_POOL_2D, [n, c, h, w] if nchw else list(shape), [], [2, 1, 1, w, h, act, nchw])
        xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
        got = device.prepare_model_sync(m).execute_sync([xin]).outputs[0]
        with _jit.forced(False):
            numpy_only = device.prepare_model_sync(m).execute_sync([xin]).outputs[0]
        if nchw:
            got, numpy_only = got.transpose(0, 2, 3, 1), numpy_only.transpose(0, 2, 3, 1)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got, numpy_only, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [0, 1, 3, 4, 5, SUM_ROWS, SUM_ROWS + 7, 3 * SUM_ROWS + 2])
@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-1.0, 1.0), (1.0, 0.0)])
def test_bias_act_sum_compiled_and_python_match_float64(rows: int, bounds: tuple[float, float]) -> None:
    fast = _jit.compiled(bias_act_sum_f32, "void(Array(float32, 2, 'C', readonly=True), "
                         "Array(float32, 1, 'C', readonly=True), float32, float32, float64[::1])")
    assert fast is not None
    rng = np.random.default_rng(rows)
    block = (rng.standard_normal((rows, 13)) * 4).astype(np.float32)
    bias = rng.standard_normal(13).astype(np.float32)
    lo, hi = np.float32(bounds[0]), np.float32(bounds[1])
    vals = block + bias
    if lo <= hi:
        vals = np.clip(vals, lo, hi)
    want = 2.5 + vals.astype(np.float64).sum(axis=0)
    for fn in (fast, bias_act_sum_f32):
        acc = np.full(13, 2.5)
        fn(block, bias, lo, hi, acc)
        np.testing.assert_array_less(np.abs(acc - want), 1e-7 * (np.abs(vals).sum(axis=0) + 1))
