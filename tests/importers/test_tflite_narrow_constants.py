"""Narrow constants stay views of the file at load: float16 weights (a CAST to float32 in the
graph) and uint8 / uint16 sparse index vectors (widened to int32 by graph operations). The plan
folds those operations once at preparation; results are compared with LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.execution._plan import compile_plan
from tests.importers.tflite_builder import BO, OPT, S, TflModel, compare, load_bytes, opts

RNG = np.random.default_rng(5)


def _sparse_fp16_fc(cols: int, index_kind: str) -> bytes:
    """FULLY_CONNECTED by a CSR-sparse float16 weight [4, cols]: DENSIFY, DEQUANTIZE, FC."""
    dense = (RNG.standard_normal((4, cols)) * (RNG.random((4, cols)) > 0.7)).astype(np.float16)
    dense[:, -1] = 1.5  # an index near the top of the range in every row
    segments = np.concatenate([[0], np.cumsum((dense != 0).sum(axis=1))])
    indices = np.nonzero(dense)[1]
    vec = {"uint8": (S.SparseIndexVector.Uint8Vector, S.Uint8VectorT),
           "uint16": (S.SparseIndexVector.Uint16Vector, S.Uint16VectorT),
           "int32": (S.SparseIndexVector.Int32Vector, S.Int32VectorT)}
    m = TflModel()
    g = m.main
    x = g.tensor([2, cols], name="x")
    sp = g.tensor([4, cols], np.float16, dense[dense != 0], name="w_sparse")
    row = opts(S.DimensionMetadataT, format=S.DimensionType.DENSE, denseSize=4)
    seg_kind, seg_t = vec["uint8" if segments[-1] < 256 else "uint16"]
    idx_kind, idx_t = vec[index_kind]
    col = opts(S.DimensionMetadataT, format=S.DimensionType.SPARSE_CSR,
               arraySegmentsType=seg_kind, arraySegments=opts(seg_t, values=segments.tolist()),
               arrayIndicesType=idx_kind, arrayIndices=opts(idx_t, values=indices.tolist()))
    g.t.tensors[sp].sparsity = opts(S.SparsityParametersT, traversalOrder=[0, 1], dimMetadata=[row, col])
    w16 = g.tensor([4, cols], np.float16, name="w16")
    g.op(BO.DENSIFY, [sp], [w16])
    w = g.tensor([4, cols], name="w")
    g.op(BO.DEQUANTIZE, [w16], [w])
    y = g.tensor([2, 4], name="y")
    g.op(BO.FULLY_CONNECTED, [x, w, g.const(np.zeros(4), name="b")], [y], OPT.FullyConnectedOptions,
         opts(S.FullyConnectedOptionsT))
    g.io([x], [y])
    return m.build()


@pytest.mark.parametrize(("cols", "index_kind"), [(200, "uint8"), (700, "uint16"), (70, "int32")])
def test_sparse_float16_weights_with_narrow_indices(device: nnrt.CpuDevice, cols: int, index_kind: str) -> None:
    data = _sparse_fp16_fc(cols, index_kind)
    compare(device, data, [RNG.standard_normal((2, cols)).astype(np.float32)])
    model = load_bytes(data)
    consts = [o for o in model.operands if o.is_constant and o.value is not None]
    # nothing widened at load: int32 index vectors only as views of the file, no float32 weights
    index_vectors = [o.value for o in consts if o.type is T.TENSOR_INT32 and o.value.size >= cols // 2]
    assert all(not v.flags.owndata for v in index_vectors)
    assert len(index_vectors) == (1 if index_kind == "int32" else 0)
    assert not any(o.type is T.TENSOR_FLOAT32 and o.value.size > 4 for o in consts)
    assert any(o.type is T.TENSOR_FLOAT16 for o in consts)
    # preparation folds the widening, DENSIFY and CAST: the plan runs the FC alone
    assert [s.type for s in compile_plan(model).steps] == [Op.FULLY_CONNECTED]
