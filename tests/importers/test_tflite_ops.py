"""TFLite element-wise, shape and reduction ops through nnrt.load, against LiteRT."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution._plan import compile_plan
from nnrt.importers import UnsupportedModelError
from tests.importers.tflite_builder import BO, OPT, S, TflModel, compare, load_bytes, opts

RNG = np.random.default_rng(7)


def _one_op(code: int, in_shapes: list[list[int]], out_shapes: list[list[int]], opt_type: int = 0, option: Any = None,
            consts: list[Any] = (), dtype: Any = np.float32) -> bytes:  # type: ignore[assignment]
    """A model of one op: float inputs (graph inputs), then constant inputs, into the outputs."""
    m = TflModel()
    g = m.main
    xs = [g.tensor(s, dtype, name=f"in{i}") for i, s in enumerate(in_shapes)]
    cs = [c if isinstance(c, int) else g.const(c[0], c[1]) for c in consts]
    ys = [g.tensor(s, dtype, name=f"out{i}") for i, s in enumerate(out_shapes)]
    g.op(code, [*xs, *cs], ys, opt_type, option)
    g.io(xs, ys)
    return m.build()


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(("code", "opt_type", "option"), [
    (BO.ADD, OPT.AddOptions, opts(S.AddOptionsT, fusedActivationFunction=S.ActivationFunctionType.RELU)),
    (BO.SUB, OPT.SubOptions, opts(S.SubOptionsT, fusedActivationFunction=S.ActivationFunctionType.RELU6)),
    (BO.MUL, OPT.MulOptions, opts(S.MulOptionsT, fusedActivationFunction=S.ActivationFunctionType.RELU_N1_TO_1)),
    (BO.DIV, OPT.DivOptions, opts(S.DivOptionsT)),
    (BO.MAXIMUM, 0, None), (BO.MINIMUM, 0, None), (BO.SQUARED_DIFFERENCE, 0, None),
])
def test_binary_broadcast(device: nnrt.CpuDevice, code: int, opt_type: int, option: Any) -> None:
    data = _one_op(code, [[2, 3, 4], [4]], [[2, 3, 4]], opt_type, option)
    b = _f(4) + (3.0 if code == BO.DIV else 0.0)
    compare(device, data, [_f(2, 3, 4), b])


@pytest.mark.parametrize("code", [BO.LESS, BO.GREATER_EQUAL, BO.EQUAL, BO.NOT_EQUAL])
def test_comparison(device: nnrt.CpuDevice, code: int) -> None:
    m = TflModel()
    g = m.main
    a, b = g.tensor([2, 3], name="a"), g.tensor([2, 3], name="b")
    y = g.tensor([2, 3], np.bool_, name="y")
    g.op(code, [a, b], [y])
    g.io([a, b], [y])
    x = _f(2, 3)
    compare(device, m.build(), [x, np.where(RNG.random((2, 3)) > 0.5, x, _f(2, 3))])


@pytest.mark.parametrize("code", [BO.RELU, BO.RELU6, BO.RELU_N1_TO_1, BO.LOGISTIC, BO.TANH, BO.HARD_SWISH, BO.ABS,
                                  BO.EXP, BO.NEG, BO.FLOOR, BO.SIN, BO.ELU, BO.SQUARE])
def test_unary(device: nnrt.CpuDevice, code: int) -> None:
    compare(device, _one_op(code, [[3, 5]], [[3, 5]]), [_f(3, 5) * 3])


def test_unary_positive_inputs(device: nnrt.CpuDevice) -> None:
    for code in (BO.LOG, BO.SQRT, BO.RSQRT):
        compare(device, _one_op(code, [[4]], [[4]]), [np.abs(_f(4)) + 0.5])


def test_leaky_relu_and_prelu(device: nnrt.CpuDevice) -> None:
    compare(device, _one_op(BO.LEAKY_RELU, [[2, 4]], [[2, 4]], OPT.LeakyReluOptions,
                            opts(S.LeakyReluOptionsT, alpha=0.3)), [_f(2, 4)])
    compare(device, _one_op(BO.PRELU, [[2, 4]], [[2, 4]], consts=[(_f(4), np.float32)]), [_f(2, 4)])


def test_quantized_leaky_relu(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 8], np.int8, name="x", scale=0.05, zp=1)
    y = g.tensor([1, 8], np.int8, name="y", scale=0.04, zp=-2)
    g.op(BO.LEAKY_RELU, [x], [y], OPT.LeakyReluOptions, opts(S.LeakyReluOptionsT, alpha=0.2))
    g.io([x], [y])
    compare(device, m.build(), [RNG.integers(-128, 128, (1, 8)).astype(np.int8)])


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_softmax_and_log_softmax(device: nnrt.CpuDevice, beta: float) -> None:
    compare(device, _one_op(BO.SOFTMAX, [[2, 5]], [[2, 5]], OPT.SoftmaxOptions, opts(S.SoftmaxOptionsT, beta=beta)),
            [_f(2, 5)])
    compare(device, _one_op(BO.LOG_SOFTMAX, [[2, 5]], [[2, 5]]), [_f(2, 5)])


def test_quantized_softmax_quantize_dequantize(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 10], name="x")
    q = g.tensor([1, 10], np.int8, name="q", scale=0.1, zp=0)
    g.op(BO.QUANTIZE, [x], [q])
    s = g.tensor([1, 10], np.int8, name="s", scale=1 / 256, zp=-128)
    g.op(BO.SOFTMAX, [q], [s], OPT.SoftmaxOptions, opts(S.SoftmaxOptionsT, beta=1.0))
    r = g.tensor([1, 10], np.uint8, name="r", scale=1 / 128, zp=0)
    g.op(BO.QUANTIZE, [s], [r])
    y = g.tensor([1, 10], name="y")
    g.op(BO.DEQUANTIZE, [r], [y])
    g.io([x], [y, s])
    out = compare(device, m.build(), [_f(1, 10)])
    assert out[1].dtype == np.int8


def test_reshape_forms(device: nnrt.CpuDevice) -> None:
    compare(device, _one_op(BO.RESHAPE, [[2, 6]], [[3, 4]], consts=[([3, -1], np.int32)]), [_f(2, 6)])
    compare(device, _one_op(BO.RESHAPE, [[2, 6]], [[4, 3]], OPT.ReshapeOptions, opts(S.ReshapeOptionsT, newShape=[4, 3])),
            [_f(2, 6)])
    compare(device, _one_op(BO.SQUEEZE, [[1, 3, 1, 2]], [[3, 2]], OPT.SqueezeOptions,
                            opts(S.SqueezeOptionsT, squeezeDims=[0, 2])), [_f(1, 3, 1, 2)])
    compare(device, _one_op(BO.EXPAND_DIMS, [[3, 2]], [[3, 1, 2]], consts=[([1], np.int32)]), [_f(3, 2)])
    compare(device, _one_op(BO.TRANSPOSE, [[2, 3, 4]], [[4, 2, 3]], consts=[([2, 0, 1], np.int32)]), [_f(2, 3, 4)])


def test_concat_pack_unpack(device: nnrt.CpuDevice) -> None:
    compare(device, _one_op(BO.CONCATENATION, [[2, 3], [2, 1]], [[2, 4]], OPT.ConcatenationOptions,
                            opts(S.ConcatenationOptionsT, axis=-1)), [_f(2, 3), _f(2, 1)])
    compare(device, _one_op(BO.PACK, [[2, 3], [2, 3]], [[2, 2, 3]], OPT.PackOptions,
                            opts(S.PackOptionsT, valuesCount=2, axis=1)), [_f(2, 3), _f(2, 3)])
    compare(device, _one_op(BO.UNPACK, [[3, 2]], [[2], [2], [2]], OPT.UnpackOptions,
                            opts(S.UnpackOptionsT, num=3, axis=0)), [_f(3, 2)])


def test_split_and_split_v(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    axis = g.const([1], np.int32)
    x = g.tensor([2, 6], name="x")
    ys = [g.tensor([2, 2], name=f"y{i}") for i in range(3)]
    g.op(BO.SPLIT, [axis, x], ys, OPT.SplitOptions, opts(S.SplitOptionsT, numSplits=3))
    g.io([x], ys)
    compare(device, m.build(), [_f(2, 6)])
    data = _one_op(BO.SPLIT_V, [[2, 6]], [[2, 1], [2, 3], [2, 2]], OPT.SplitVOptions,
                   opts(S.SplitVOptionsT, numSplits=3), consts=[([1, -1, 2], np.int32), (1, np.int32)])
    compare(device, data, [_f(2, 6)])


@pytest.mark.parametrize(("code", "consts", "out", "opt"), [
    (BO.PAD, [([[0, 0], [1, 2]], np.int32)], [2, 6], None),
    (BO.PADV2, [([[1, 0], [0, 1]], np.int32), (np.array(0.5), np.float32)], [3, 4], None),
    (BO.MIRROR_PAD, [([[1, 1], [2, 2]], np.int32)], [4, 7], (OPT.MirrorPadOptions, opts(S.MirrorPadOptionsT, mode=0))),
    (BO.MIRROR_PAD, [([[1, 1], [2, 2]], np.int32)], [4, 7], (OPT.MirrorPadOptions, opts(S.MirrorPadOptionsT, mode=1))),
    (BO.SLICE, [([0, 1], np.int32), ([2, 2], np.int32)], [2, 2], None),
    (BO.TILE, [([2, 1], np.int32)], [4, 3], None),
])
def test_pad_slice_tile(device: nnrt.CpuDevice, code: int, consts: list[Any], out: list[int], opt: Any) -> None:
    opt_type, option = opt or (0, None)
    compare(device, _one_op(code, [[2, 3]], [out], opt_type, option, consts=consts), [_f(2, 3)])


def test_strided_slice_gather(device: nnrt.CpuDevice) -> None:
    o = opts(S.StridedSliceOptionsT, beginMask=1, endMask=0, shrinkAxisMask=0)
    data = _one_op(BO.STRIDED_SLICE, [[4, 6]], [[3, 3]], OPT.StridedSliceOptions, o,
                   consts=[([1, 1], np.int32), ([3, 6], np.int32), ([1, 2], np.int32)])
    compare(device, data, [_f(4, 6)])
    data = _one_op(BO.GATHER, [[4, 3]], [[2, 3]], OPT.GatherOptions, opts(S.GatherOptionsT, axis=0),
                   consts=[([3, 1], np.int32)])
    compare(device, data, [_f(4, 3)])


@pytest.mark.parametrize(("code", "keep"), [(BO.MEAN, True), (BO.MEAN, False), (BO.SUM, False),
                                            (BO.REDUCE_MAX, True), (BO.REDUCE_MIN, False), (BO.REDUCE_PROD, False)])
def test_reductions(device: nnrt.CpuDevice, code: int, keep: bool) -> None:
    out = [2, 1, 1] if keep else [2]
    data = _one_op(code, [[2, 3, 4]], [out], OPT.ReducerOptions, opts(S.ReducerOptionsT, keepDims=keep),
                   consts=[([1, -1], np.int32)])
    compare(device, data, [_f(2, 3, 4)])


def test_arg_max_min(device: nnrt.CpuDevice) -> None:
    for code, opt_type, cls in ((BO.ARG_MAX, OPT.ArgMaxOptions, S.ArgMaxOptionsT),
                                (BO.ARG_MIN, OPT.ArgMinOptions, S.ArgMinOptionsT)):
        m = TflModel()
        g = m.main
        x = g.tensor([3, 5], name="x")
        axis = g.const([1], np.int32)
        y = g.tensor([3], np.int32, name="y")
        g.op(code, [x, axis], [y], opt_type, opts(cls, outputType=S.TensorType.INT32))
        g.io([x], [y])
        compare(device, m.build(), [_f(3, 5)])


@pytest.mark.parametrize("code", [BO.RESIZE_BILINEAR, BO.RESIZE_NEAREST_NEIGHBOR])
@pytest.mark.parametrize(("align", "half"), [(False, False), (True, False), (False, True)])
def test_resize(device: nnrt.CpuDevice, code: int, align: bool, half: bool) -> None:
    if code == BO.RESIZE_BILINEAR:
        opt_type, option = OPT.ResizeBilinearOptions, opts(S.ResizeBilinearOptionsT, alignCorners=align,
                                                           halfPixelCenters=half)
    else:
        opt_type, option = OPT.ResizeNearestNeighborOptions, opts(S.ResizeNearestNeighborOptionsT,
                                                                  alignCorners=align, halfPixelCenters=half)
    data = _one_op(code, [[1, 3, 4, 2]], [[1, 6, 7, 2]], opt_type, option, consts=[([6, 7], np.int32)])
    compare(device, data, [_f(1, 3, 4, 2)])


def test_space_depth_and_batch(device: nnrt.CpuDevice) -> None:
    compare(device, _one_op(BO.SPACE_TO_DEPTH, [[1, 4, 4, 2]], [[1, 2, 2, 8]], OPT.SpaceToDepthOptions,
                            opts(S.SpaceToDepthOptionsT, blockSize=2)), [_f(1, 4, 4, 2)])
    compare(device, _one_op(BO.DEPTH_TO_SPACE, [[1, 2, 2, 8]], [[1, 4, 4, 2]], OPT.DepthToSpaceOptions,
                            opts(S.DepthToSpaceOptionsT, blockSize=2)), [_f(1, 2, 2, 8)])
    compare(device, _one_op(BO.SPACE_TO_BATCH_ND, [[1, 4, 4, 1]], [[4, 2, 2, 1]],
                            consts=[([2, 2], np.int32), ([[0, 0], [0, 0]], np.int32)]), [_f(1, 4, 4, 1)])
    compare(device, _one_op(BO.BATCH_TO_SPACE_ND, [[4, 2, 2, 1]], [[1, 4, 4, 1]],
                            consts=[([2, 2], np.int32), ([[0, 0], [0, 0]], np.int32)]), [_f(4, 2, 2, 1)])


def test_batch_matmul_and_select(device: nnrt.CpuDevice) -> None:
    compare(device, _one_op(BO.BATCH_MATMUL, [[2, 3, 4], [2, 4, 5]], [[2, 3, 5]], OPT.BatchMatMulOptions,
                            opts(S.BatchMatMulOptionsT)), [_f(2, 3, 4), _f(2, 4, 5)])
    m = TflModel()
    g = m.main
    c, a, b = g.tensor([2, 3], np.bool_, name="c"), g.tensor([2, 3], name="a"), g.tensor([2, 3], name="b")
    y = g.tensor([2, 3], name="y")
    g.op(BO.SELECT_V2, [c, a, b], [y])
    g.io([c, a, b], [y])
    compare(device, m.build(), [RNG.random((2, 3)) > 0.5, _f(2, 3), _f(2, 3)])


def test_quantized_elementwise_chain(device: nnrt.CpuDevice) -> None:
    """uint8 ADD + RELU fused, CONCATENATION, RESHAPE, MEAN: each within a unit of LiteRT."""
    m = TflModel()
    g = m.main
    a = g.tensor([1, 4, 4, 2], np.uint8, name="a", scale=0.1, zp=100)
    b = g.tensor([1, 4, 4, 2], np.uint8, name="b", scale=0.08, zp=90)
    s = g.tensor([1, 4, 4, 2], np.uint8, name="sum", scale=0.15, zp=10)
    g.op(BO.ADD, [a, b], [s], OPT.AddOptions, opts(S.AddOptionsT, fusedActivationFunction=1))
    c = g.tensor([1, 4, 4, 4], np.uint8, name="cat", scale=0.15, zp=10)
    g.op(BO.CONCATENATION, [s, s], [c], OPT.ConcatenationOptions, opts(S.ConcatenationOptionsT, axis=3))
    r = g.tensor([1, 16, 4], np.uint8, name="flat", scale=0.15, zp=10)
    g.op(BO.RESHAPE, [c, g.const([1, 16, 4], np.int32)], [r])
    mean = g.tensor([1, 4], np.uint8, name="mean", scale=0.1, zp=5)
    g.op(BO.MEAN, [r, g.const([1], np.int32)], [mean], OPT.ReducerOptions, opts(S.ReducerOptionsT, keepDims=False))
    g.io([a, b], [mean, c])
    x1, x2 = (RNG.integers(0, 256, (1, 4, 4, 2)).astype(np.uint8) for _ in range(2))
    compare(device, m.build(), [x1, x2])


def test_batch_matmul_by_a_constant_matrix(device: nnrt.CpuDevice) -> None:
    """Rank 4 and rank 3 by a rank-2 constant: broadcast, done as a 1x1 CONV_2D."""
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    for shape in ([2, 3, 4, 5], [2, 4, 5]):
        compare(device, _one_op(BO.BATCH_MATMUL, [shape], [[*shape[:-1], 3]], OPT.BatchMatMulOptions,
                                opts(S.BatchMatMulOptionsT), consts=[(w, np.float32)]), [_f(*shape)])


def test_bool_reshape_dropping_unit_axes(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    a, b = g.tensor([1, 1, 3], name="a"), g.tensor([1, 1, 3], name="b")
    c = g.tensor([1, 1, 3], np.bool_, name="c")
    g.op(BO.GREATER, [a, b], [c])
    y = g.tensor([3], np.bool_, name="y")
    g.op(BO.RESHAPE, [c, g.const([3], np.int32)], [y])
    g.io([a, b], [y])
    compare(device, m.build(), [_f(1, 1, 3), _f(1, 1, 3)])


def test_sparse_constant_densified(device: nnrt.CpuDevice) -> None:
    """A CSR-sparse FULLY_CONNECTED weight: DENSIFY then FULLY_CONNECTED."""
    dense = RNG.standard_normal((4, 6)).astype(np.float32) * (RNG.random((4, 6)) > 0.6)
    segments = np.concatenate([[0], np.cumsum((dense != 0).sum(axis=1))]).astype(np.int32)
    indices = np.nonzero(dense)[1].astype(np.int32)
    m = TflModel()
    g = m.main
    x = g.tensor([2, 6], name="x")
    values = dense[dense != 0]
    sp = g.tensor([4, 6], np.float32, values, name="w_sparse")
    row = opts(S.DimensionMetadataT, format=S.DimensionType.DENSE, denseSize=4)
    col = opts(S.DimensionMetadataT, format=S.DimensionType.SPARSE_CSR,
               arraySegmentsType=S.SparseIndexVector.Int32Vector, arraySegments=opts(S.Int32VectorT, values=segments),
               arrayIndicesType=S.SparseIndexVector.Uint8Vector, arrayIndices=opts(S.Uint8VectorT, values=indices))
    g.t.tensors[sp].sparsity = opts(S.SparsityParametersT, traversalOrder=[0, 1], dimMetadata=[row, col])
    w = g.tensor([4, 6], name="w")
    g.op(BO.DENSIFY, [sp], [w])
    y = g.tensor([2, 4], name="y")
    g.op(BO.FULLY_CONNECTED, [x, w, g.const(np.zeros(4), name="b")], [y], OPT.FullyConnectedOptions,
         opts(S.FullyConnectedOptionsT))
    g.io([x], [y])
    compare(device, m.build(), [_f(2, 6)])


def test_float16_conv_weights_and_hard_swish(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 5, 5, 2], name="x")
    w16 = g.const(RNG.standard_normal((3, 3, 3, 2)), np.float16, name="w16")
    w = g.tensor([3, 3, 3, 2], name="w")
    g.op(BO.DEQUANTIZE, [w16], [w])
    b16 = g.const(RNG.standard_normal(3), np.float16, name="b16")
    b = g.tensor([3], name="b")
    g.op(BO.DEQUANTIZE, [b16], [b])
    c = g.tensor([1, 5, 5, 3], name="c")
    g.op(BO.CONV_2D, [x, w, b], [c], OPT.Conv2DOptions,
         opts(S.Conv2DOptionsT, padding=S.Padding.SAME, strideW=1, strideH=1, dilationWFactor=1, dilationHFactor=1))
    y = g.tensor([1, 5, 5, 3], name="y")
    g.op(BO.HARD_SWISH, [c], [y])
    g.io([x], [y])
    data = m.build()
    compare(device, data, [_f(1, 5, 5, 2)])
    # the float16 constants stay views of the file; preparation folds their CASTs once
    model = load_bytes(data)
    f16 = [o.value for o in model.operands if o.type is T.TENSOR_FLOAT16 and o.is_constant]
    assert len(f16) == 2 and all(v is not None and not v.flags.owndata for v in f16)
    assert [op.type for op in model.operations] == [Op.CAST, Op.CAST, Op.CONV_2D, Op.HARD_SWISH]
    # the HARD_SWISH is the convolution's epilogue (nnrt/execution/_fuse_epilogue.py)
    assert [s.type for s in compile_plan(model).steps] == [Op.CONV_2D]


def test_l2_norm_lrn_cast_and_int64_indices(device: nnrt.CpuDevice) -> None:
    compare(device, _one_op(BO.L2_NORMALIZATION, [[2, 5]], [[2, 5]], OPT.L2NormOptions, opts(S.L2NormOptionsT)),
            [_f(2, 5)])
    compare(device, _one_op(BO.LOCAL_RESPONSE_NORMALIZATION, [[1, 2, 2, 6]], [[1, 2, 2, 6]],
                            OPT.LocalResponseNormalizationOptions,
                            opts(S.LocalResponseNormalizationOptionsT, radius=2, bias=1.0, alpha=0.5, beta=0.75)),
            [_f(1, 2, 2, 6)])
    m = TflModel()
    g = m.main
    x = g.tensor([4, 3], name="x")
    idx = g.const([2, 0, 3], np.int64)
    gathered = g.tensor([3, 3], name="gathered")
    g.op(BO.GATHER, [x, idx], [gathered], OPT.GatherOptions, opts(S.GatherOptionsT, axis=0))
    y = g.tensor([3, 3], np.int32, name="y")
    g.op(BO.CAST, [gathered], [y])
    g.io([x], [y])
    compare(device, m.build(), [_f(4, 3) * 10])


def test_gelu_tanh_form_and_relu_0_to_1(device: nnrt.CpuDevice) -> None:
    compare(device, _one_op(BO.GELU, [[3, 7]], [[3, 7]], OPT.GeluOptions, opts(S.GeluOptionsT, approximate=True)),
            [_f(3, 7) * 3])
    compare(device, _one_op(BO.RELU_0_TO_1, [[3, 7]], [[3, 7]]), [_f(3, 7)])


def test_logic_pow_fill_embedding_and_int64_argmax(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    a, b = g.tensor([2, 3], name="a"), g.tensor([2, 3], name="b")
    la, lb = g.tensor([2, 3], np.bool_, name="la"), g.tensor([2, 3], np.bool_, name="lb")
    g.op(BO.GREATER, [a, b], [la])
    g.op(BO.LESS, [a, g.const([0.0])], [lb])
    both, either, neither = (g.tensor([2, 3], np.bool_, name=n) for n in ("both", "either", "neither"))
    g.op(BO.LOGICAL_AND, [la, lb], [both])
    g.op(BO.LOGICAL_OR, [la, lb], [either])
    g.op(BO.LOGICAL_NOT, [either], [neither])
    p = g.tensor([2, 3], name="pow")
    g.op(BO.POW, [b, g.const([2.0])], [p])
    filled = g.tensor([2, 2], name="filled")
    g.op(BO.FILL, [g.const([2, 2], np.int32), g.const(np.array(1.5, np.float32))], [filled])
    emb = g.tensor([2, 4], name="emb")
    g.op(BO.EMBEDDING_LOOKUP, [g.const([2, 0], np.int32), g.const(RNG.standard_normal((3, 4)))], [emb])
    arg = g.tensor([2], np.int64, name="arg")
    g.op(BO.ARG_MAX, [a, g.const([1], np.int32)], [arg], OPT.ArgMaxOptions,
         opts(S.ArgMaxOptionsT, outputType=S.TensorType.INT64))
    g.io([a, b], [both, either, neither, p, filled, emb, arg])
    data = m.build()
    got = compare(device, data, [_f(2, 3), _f(2, 3)])
    assert got[-1].dtype == np.int32  # NNAPI's ARGMAX gives int32; the values are LiteRT's int64 ones


def test_float_transpose_conv(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([1, 3, 3, 2], name="x")
    w = g.const(RNG.standard_normal((4, 3, 3, 2)), name="w")
    y = g.tensor([1, 6, 6, 4], name="y")
    g.op(BO.TRANSPOSE_CONV, [g.const([1, 6, 6, 4], np.int32), w, x, g.const(RNG.standard_normal(4))], [y],
         OPT.TransposeConvOptions, opts(S.TransposeConvOptionsT, padding=S.Padding.SAME, strideW=2, strideH=2))
    g.io([x], [y])
    compare(device, m.build(), [_f(1, 3, 3, 2)])


def test_integer_division_semantics(device: nnrt.CpuDevice) -> None:
    """TFLite's int32 DIV truncates and NNAPI's rounds down: DIV is refused, FLOOR_DIV maps."""
    a, b = np.array([-7, 7, -7, 7, 6], np.int32), np.array([2, 2, -2, -2, 3], np.int32)
    compare(device, _one_op(BO.FLOOR_DIV, [[5], [5]], [[5]], dtype=np.int32), [a, b])
    compare(device, _one_op(BO.FLOOR_DIV, [[5], [5]], [[5]]), [a.astype(np.float32), b.astype(np.float32) + 0.5])
    with pytest.raises(UnsupportedModelError, match="truncates"):
        load_bytes(_one_op(BO.DIV, [[5], [5]], [[5]], OPT.DivOptions, opts(S.DivOptionsT), dtype=np.int32))


def test_add_n_topk_reverse(device: nnrt.CpuDevice) -> None:
    compare(device, _one_op(BO.ADD_N, [[2, 3], [2, 3], [2, 3]], [[2, 3]]), [_f(2, 3), _f(2, 3), _f(2, 3)])
    m = TflModel()
    g = m.main
    x = g.tensor([2, 6], name="x")
    vals, idx = g.tensor([2, 3], name="values"), g.tensor([2, 3], np.int32, name="indices")
    g.op(BO.TOPK_V2, [x, g.const(3, np.int32)], [vals, idx])
    g.io([x], [vals, idx])
    compare(device, m.build(), [_f(2, 6)])
    compare(device, _one_op(BO.REVERSE_V2, [[2, 3, 4]], [[2, 3, 4]], consts=[([1], np.int32)]), [_f(2, 3, 4)])


@pytest.mark.parametrize(("code", "out_q"), [(BO.HARD_SWISH, (0.03, -20)), (BO.LOGISTIC, (1 / 256, -128)),
                                            (BO.TANH, (1 / 128, 0)), (BO.RELU6, (0.03, -128)),
                                            (BO.MAXIMUM, (0.05, 3))])
def test_int8_activations(device: nnrt.CpuDevice, code: int, out_q: tuple[float, int]) -> None:
    m = TflModel()
    g = m.main
    x = g.tensor([2, 8], np.int8, name="x", scale=0.05, zp=3)
    y = g.tensor([2, 8], np.int8, name="y", scale=out_q[0], zp=out_q[1])
    extra = [g.const(np.zeros((1, 8)), np.int8, scale=0.05, zp=3)] if code == BO.MAXIMUM else []
    g.op(code, [x, *extra], [y])
    g.io([x], [y])
    compare(device, m.build(), [RNG.integers(-128, 128, (2, 8)).astype(np.int8)])
    if code == BO.MAXIMUM:  # LiteRT does not rescale a MAXIMUM between differing quantizations: refused
        g.t.tensors[y].quantization.zeroPoint = [0]
        with pytest.raises(UnsupportedModelError, match="LiteRT does not rescale"):
            load_bytes(m.build())


def test_strided_slice_shrink_and_negative_stride(device: nnrt.CpuDevice) -> None:
    o = opts(S.StridedSliceOptionsT, shrinkAxisMask=1)
    compare(device, _one_op(BO.STRIDED_SLICE, [[4, 6]], [[3]], OPT.StridedSliceOptions, o,
                            consts=[([2, 0], np.int32), ([3, 6], np.int32), ([1, 2], np.int32)]), [_f(4, 6)])
    o = opts(S.StridedSliceOptionsT, endMask=2)
    compare(device, _one_op(BO.STRIDED_SLICE, [[4, 6]], [[2, 6]], OPT.StridedSliceOptions, o,
                            consts=[([3, 5], np.int32), ([1, 0], np.int32), ([-1, -1], np.int32)]), [_f(4, 6)])


def test_hashtable_lookup(device: nnrt.CpuDevice) -> None:
    m = TflModel()
    g = m.main
    lookups = g.tensor([4], np.int32, name="lookups")
    out = g.tensor([4, 2], name="rows")
    hits = g.tensor([4], np.uint8, name="hits")
    g.op(BO.HASHTABLE_LOOKUP, [lookups, g.const([1, 3, 7], np.int32), g.const(_f(3, 2))], [out, hits])
    g.io([lookups], [out, hits])
    got = compare(device, m.build(), [np.array([3, 5, 1, 7], np.int32)])
    assert got[1].tolist() == [1, 0, 1, 1]


def test_int64_arg_max_then_cast(device: nnrt.CpuDevice) -> None:
    """ARG_MAX to int64 then CAST (to int32, float32 and int64): nnrt holds the int64 values as int32."""
    m = TflModel()
    g = m.main
    x = g.tensor([3, 5], name="x")
    arg = g.tensor([3], np.int64, name="arg")
    g.op(BO.ARG_MAX, [x, g.const([1], np.int32)], [arg], OPT.ArgMaxOptions,
         opts(S.ArgMaxOptionsT, outputType=S.TensorType.INT64))
    outs = [g.tensor([3], dt, name=f"as_{np.dtype(dt).name}") for dt in (np.int32, np.float32, np.int64)]
    for y in outs:
        g.op(BO.CAST, [arg], [y])
    g.io([x], outs)
    got = compare(device, m.build(), [_f(3, 5)])
    assert [a.dtype for a in got] == [np.int32, np.float32, np.int32]


def test_reduce_any_all(device: nnrt.CpuDevice) -> None:
    for code in (BO.REDUCE_ANY, BO.REDUCE_ALL):
        m = TflModel()
        g = m.main
        x = g.tensor([3, 4], np.bool_, name="x")
        y = g.tensor([3], np.bool_, name="y")
        g.op(code, [x, g.const([1], np.int32)], [y], OPT.ReducerOptions, opts(S.ReducerOptionsT, keepDims=False))
        g.io([x], [y])
        compare(device, m.build(), [RNG.random((3, 4)) > 0.3])
