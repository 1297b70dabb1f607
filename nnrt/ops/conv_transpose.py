"""TRANSPOSE_CONV_2D (imported by ``conv``, whose type rules and real-number helpers it shares).

Signatures (NNAPI): explicit ``[input, filter, bias, pad_left, pad_right, pad_top, pad_bottom,
stride_w, stride_h, activation, layout]`` or implicit ``[input, filter, bias, output_shape,
padding scheme, stride_w, stride_h, activation, layout]``. The filter is
``[depth_out, KH, KW, depth_in]``. As in NNAPI's reference, the output size is always
``in * stride + filter - stride - pad_head - pad_tail``; with the implicit form the output-shape
tensor only decides the SAME padding, whose tail may be negative (the output then extends past
the last filter tap with bias-only values).

Computation: one matrix product scatters every input pixel into ``KH*KW*depth_out`` values,
then KH*KW strided adds place them in the (uncropped) output, which is cropped by the padding.
When the filter is the stride (2x2 stride 2: the upsampling of FPN and DB-text heads) the taps
do not overlap: each output pixel is one tap of one input pixel plus the bias, so one pass
places them (``_place_taps``; with numba the loop ``place_taps_f32``, else one numpy add) instead
of a zeroed buffer, KH*KW strided adds, the bias pass and the crop's copy. Measured, PP-OCRv3
det's [1,80,80,24] -> [1,160,160,24] (2x2, stride 2), wall time malloc tuned: 1190 -> 450 us
(the product itself 280). The result is the general path's but for the sign of a zero where
tap and bias are both -0 (``v + b`` where the general path adds ``(0 + v) + b``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnrt.ops._common import PADDING_SAME, check_activation, check_padding_scheme, from_nchw, int_param, to_real
from nnrt.ops._gemm import matmul, product
from nnrt.ops._jit import compiled
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.conv import Geometry, check_conv_types, empty_output, finish_output, real_bias, real_filter
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["PLACE_TAPS_F32", "place_taps_f32"]

#: The signature ``place_taps_f32`` is compiled for.
PLACE_TAPS_F32 = ("void(Array(float32, 4, 'C', readonly=True), Array(float32, 1, 'C', readonly=True), "
                  "float32[:, :, :, ::1])")


def place_taps_f32(src: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
    """``out[p, a, j] = src[p, j, a] + bias``: the taps of ``src`` [N*H, W, KH, KW*Cout] (the
    product's rows) into ``out`` [N*H, KH, W, KW*Cout] (the output's rows), ``bias`` tiled KW times."""
    for p in range(src.shape[0]):
        for a in range(src.shape[2]):
            for j in range(src.shape[1]):
                s, o = src[p, j, a], out[p, a, j]
                for q in range(src.shape[3]):
                    o[q] = s[q] + bias[q]


def _place_taps(cols: np.ndarray, bias: np.ndarray, fast: Any) -> np.ndarray:
    """The output [N, H*KH, W*KW, Cout] of non-overlapping taps ``cols`` [N, H, W, KH, KW, Cout]
    plus ``bias`` (module doc): ``fast`` (``place_taps_f32``) on float32, else one numpy add."""
    n, h, w, kh, kw, c = cols.shape
    src = cols.reshape(n * h, w, kh, kw * c)
    out = np.empty((n * h, kh, w, kw * c), cols.dtype)
    tiled = np.tile(bias.astype(cols.dtype, copy=False), kw)
    if fast is not None and cols.dtype == np.float32:
        fast(src, tiled, out)
    else:
        np.add(src.transpose(0, 2, 1, 3), tiled, out=out)
    return out.reshape(n, h * kh, w * kw, c)


def _transpose_padding(scheme: int, out_size: int, stride: int, k: int) -> tuple[int, int]:
    """NNAPI's implicit padding for TRANSPOSE_CONV_2D (the tail fits the last stride exactly)."""
    if scheme != PADDING_SAME:
        return 0, 0
    n = (out_size + stride - 1) // stride
    total = (n - 1) * stride + k - out_size
    head = total // 2 if total > 0 else 0
    return head, total - head


def _filter_matrix(w: np.ndarray) -> np.ndarray:
    """Real filter [Cout, KH, KW, Cin] -> [Cin, KH*KW*Cout] (columns in (kh, kw, cout) order)."""
    return np.ascontiguousarray(w.transpose(3, 1, 2, 0).reshape(w.shape[3], -1))


@kernel(Op.TRANSPOSE_CONV_2D)
def prepare_transpose_conv2d(call: OpCall) -> Kernel:
    call.expect_counts((9, 11), 1)
    explicit = len(call.inputs) == 11
    types = check_conv_types(call, 0)
    if explicit:
        for i in range(3, 10):
            call.expect_type(i, T.INT32)
        layout_i, stride_i, act_i = 10, 7, 9
    else:
        call.expect_type(3, T.TENSOR_INT32)
        call.expect_rank(3, 1)
        for i in range(4, 8):
            call.expect_type(i, T.INT32)
        layout_i, stride_i, act_i = 8, 5, 7
    call.expect_type(layout_i, T.BOOL)
    for i in (stride_i, stride_i + 1):
        v = call.const(i)
        if v is not None and v < 1:
            call.fail(f"input {i} (stride) must be >= 1, got {v}")
    act_const = call.const(act_i)
    if act_const is not None:
        check_activation(call, act_const, act_i)
    if not explicit and call.const(4) is not None:
        check_padding_scheme(call, call.const(4), 4)

    const_w, const_b = call.const(1), call.const(2)
    wmat0 = _filter_matrix(real_filter(const_w, call, types)) if const_w is not None else None
    fast = compiled(place_taps_f32, PLACE_TAPS_F32) if types.real == np.float32 else None
    mm = product()  # (float32 products: MKL's when in use; others take numpy's in ``matmul``)
    bias0 = real_bias(const_b, call, types) if const_b is not None else None

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, *params: Any) -> np.ndarray:
        args = (x, w, b, *params)
        if x.ndim != 4 or w.ndim != 4 or b.ndim != 1:
            call.fail(f"input {list(x.shape)}, filter {list(w.shape)} and bias {list(b.shape)} must have ranks 4, 4, 1")
        nchw = bool(args[layout_i])
        n, in_h, in_w, cin = (x.shape[0], x.shape[2], x.shape[3], x.shape[1]) if nchw else x.shape
        cout, kh, kw = w.shape[0], w.shape[1], w.shape[2]
        if w.shape[3] != cin or b.shape[0] != cout or cin == 0 or cout == 0 or kh == 0 or kw == 0:
            call.fail(f"filter {list(w.shape)} / bias {list(b.shape)} do not match {cin} input channels")
        sw, sh = int_param(call, args, stride_i, "stride_w", 1), int_param(call, args, stride_i + 1, "stride_h", 1)
        act = check_activation(call, args[act_i], act_i)
        if explicit:
            left, right = int_param(call, args, 3, "padding_left", 0), int_param(call, args, 4, "padding_right", None)
            top, bottom = int_param(call, args, 5, "padding_top", 0), int_param(call, args, 6, "padding_bottom", None)
        else:
            shape = args[3]
            if shape.shape != (4,):
                call.fail(f"input 3 (output shape) must have 4 elements, got shape {list(shape.shape)}")
            scheme = check_padding_scheme(call, args[4], 4)
            want_h, want_w = (int(shape[2]), int(shape[3])) if nchw else (int(shape[1]), int(shape[2]))
            left, right = _transpose_padding(scheme, want_w, sw, kw)
            top, bottom = _transpose_padding(scheme, want_h, sh, kh)
        out_h = in_h * sh + kh - sh - top - bottom
        out_w = in_w * sw + kw - sw - left - right
        if out_h <= 0 or out_w <= 0 or in_h <= 0 or in_w <= 0:
            call.fail(f"output size {out_h}x{out_w} from input {in_h}x{in_w} is not positive")
        g = Geometry(top, bottom, left, right, sh, sw, 1, 1, out_h, out_w, nchw, act, 1)
        if n == 0:
            return empty_output(call, 0, cout, g)
        wmat = wmat0 if wmat0 is not None else _filter_matrix(real_filter(w, call, types))
        bias = bias0 if bias0 is not None else real_bias(b, call, types)
        xr = to_real(x, call.inputs[0], types.real)
        if nchw:
            xr = from_nchw(xr)
        cols = matmul(mm, xr.reshape(-1, cin), wmat).reshape(n, in_h, in_w, kh, kw, cout)
        if kh == sh and kw == sw and top + out_h <= in_h * sh and left + out_w <= in_w * sw:
            placed = _place_taps(cols, bias, fast)
            if top or left or out_h != in_h * sh or out_w != in_w * sw:
                placed = np.ascontiguousarray(placed[:, top : top + out_h, left : left + out_w])
            return finish_output(call, placed, g)
        full_h = max((in_h - 1) * sh + kh, top + out_h)
        full_w = max((in_w - 1) * sw + kw, left + out_w)
        full = np.zeros((n, full_h, full_w, cout), dtype=cols.dtype)
        for i in range(kh):
            for j in range(kw):
                full[:, i : i + (in_h - 1) * sh + 1 : sh, j : j + (in_w - 1) * sw + 1 : sw] += cols[:, :, :, i, j]
        out = full[:, top : top + out_h, left : left + out_w]
        out += bias
        return finish_output(call, np.ascontiguousarray(out), g)

    return run
