"""AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D through the public API: a per-window numpy
formula (Hypothesis), quantized average pooling, and bad signatures rejected at preparation."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import nnrt
from nnrt import Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.helpers import rejected


def build(op: Op, x_dims: list[int], scalars: list[int | bool], *, t: T = T.TENSOR_FLOAT32,
          scale: float = 0.0, zp: int = 0) -> Model:  # fmt: skip
    m = Model()
    x = m.add_operand(t, x_dims, scale, zp)
    ins = [x]
    for s in scalars:
        i = m.add_operand(T.BOOL if isinstance(s, bool) else T.INT32)
        m.set_operand_value(i, s)
        ins.append(i)
    y = m.add_operand(t, [0, 0, 0, 0], scale, zp)
    m.add_operation(op, ins, [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


def ref_pool(op: Op, x: np.ndarray, pads: tuple[int, int, int, int], s: tuple[int, int], k: tuple[int, int]) -> np.ndarray:
    """Window by window, over the real (unpadded) elements only; NHWC, pads (l, r, t, b), s/k (w, h)."""
    left, right, top, bottom = pads
    n, h, w, c = x.shape
    oh, ow = (h + top + bottom - k[1]) // s[1] + 1, (w + left + right - k[0]) // s[0] + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[1] - top, j * s[0] - left
            win = x[:, max(h0, 0) : max(h0 + k[1], 0), max(w0, 0) : max(w0 + k[0], 0)].astype(np.float64)
            if op is Op.MAX_POOL_2D:
                out[:, i, j] = win.max(axis=(1, 2))
            elif op is Op.AVERAGE_POOL_2D:
                out[:, i, j] = win.mean(axis=(1, 2))
            else:
                out[:, i, j] = np.sqrt(np.square(win).mean(axis=(1, 2)))
    return out


@settings(max_examples=40, deadline=None)
@given(
    op=st.sampled_from([Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D]),
    k=st.tuples(st.integers(1, 3), st.integers(1, 3)), s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pad=st.integers(0, 1), nchw=st.booleans(), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_pool_explicit_matches_numpy(
    device: nnrt.CpuDevice, op: Op, k: tuple[int, int], s: tuple[int, int], pad: int, nchw: bool, seed: int
) -> None:
    x = np.random.default_rng(seed).standard_normal((2, 5, 6, 3)).astype(np.float32)
    pads = (min(pad, k[0] - 1), 0, 0, min(pad, k[1] - 1))  # every window keeps a real element
    xin = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x
    m = build(op, list(xin.shape), [*pads, *s, *k, 0, nchw])
    out = device.prepare_model_sync(m).execute_sync([xin]).outputs[0]
    np.testing.assert_allclose(out.transpose(0, 2, 3, 1) if nchw else out, ref_pool(op, x, pads, s, k), rtol=1e-5, atol=1e-5)


def test_global_average_pool_same_padding_relu6(device: nnrt.CpuDevice) -> None:
    x = np.arange(2 * 4 * 4 * 2, dtype=np.float32).reshape(2, 4, 4, 2) / 4
    out = device.prepare_model_sync(build(Op.AVERAGE_POOL_2D, [2, 4, 4, 2], [1, 1, 1, 4, 4, 3])).execute_sync([x]).outputs[0]
    # SAME 4x4 windows: output 4x4, each window clipped to the input; the RELU6 caps at 6.
    want = np.minimum(ref_pool(Op.AVERAGE_POOL_2D, x, (1, 2, 1, 2), (1, 1), (4, 4)), 6.0)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_average_pool_quant8_signed(device: nnrt.CpuDevice) -> None:
    x = np.array([-128, -100, 0, 127], np.int8).reshape(1, 2, 2, 1)
    m = build(Op.AVERAGE_POOL_2D, [1, 2, 2, 1], [2, 1, 1, 2, 2, 0], t=T.TENSOR_QUANT8_ASYMM_SIGNED, scale=0.5, zp=-10)
    out = device.prepare_model_sync(m).execute_sync([x]).outputs[0]
    assert out.dtype == np.int8 and out.shape == (1, 1, 1, 1)
    assert abs(int(out[0, 0, 0, 0]) - round((-128 - 100 + 0 + 127) / 4)) <= 1


def test_bad_signatures_are_rejected(device: nnrt.CpuDevice) -> None:
    rejected(device, lambda: build(Op.MAX_POOL_2D, [1, 4, 4, 1], [1, 1, 1, 2, 2]), "takes")  # 6 inputs
    rejected(device, lambda: build(Op.MAX_POOL_2D, [1, 4, 4], [1, 1, 1, 2, 2, 0]), "rank 3")
    rejected(device, lambda: build(Op.AVERAGE_POOL_2D, [1, 4, 4, 1], [5, 1, 1, 2, 2, 0]), "padding scheme")
    rejected(device, lambda: build(Op.AVERAGE_POOL_2D, [1, 4, 4, 1], [1, 1, 1, 0, 2, 0]), "invalid value 0")
    rejected(device, lambda: build(Op.L2_POOL_2D, [1, 4, 4, 1], [1, 1, 1, 2, 2, 0], t=T.TENSOR_QUANT8_ASYMM, scale=1.0), "type")


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from([Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D]), h=st.integers(1, 7), w=st.integers(1, 7),
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)), s=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    pads=st.tuples(*[st.integers(0, 3)] * 4), seed=st.integers(0, 2**16),
)  # fmt: skip
def test_pool_edge_shapes(device: nnrt.CpuDevice, op: Op, h: int, w: int, k: tuple[int, int], s: tuple[int, int],
                          pads: tuple[int, int, int, int], seed: int) -> None:
    """One-row and one-column inputs, strides larger than the window, padding on every side (at
    most the window less one, so every window keeps a real element)."""
    pads = (min(pads[0], k[0] - 1), min(pads[1], k[0] - 1), min(pads[2], k[1] - 1), min(pads[3], k[1] - 1))
    oh, ow = (h + pads[2] + pads[3] - k[1]) // s[1] + 1, (w + pads[0] + pads[1] - k[0]) // s[0] + 1
    if oh <= 0 or ow <= 0:
        return
    x = np.random.default_rng(seed).standard_normal((1, h, w, 2)).astype(np.float32)
    out = device.prepare_model_sync(build(op, [1, h, w, 2], [*pads, *s, *k, 0])).execute_sync([x]).outputs[0]
    np.testing.assert_allclose(out, ref_pool(op, x, pads, s, k), rtol=1e-5, atol=1e-5)
