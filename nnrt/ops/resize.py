"""Image resizing kernels: RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR.

Signature (NNAPI): ``[input (4-D), width, height, nchw?, align_corners?, half_pixel_centers?]``.
``width``/``height`` are either the output size (two INT32) or scale factors (two FLOAT32, or
FLOAT16 for a float16 tensor), in which case the output size is ``floor(input size * scale)``.
The layout flag is optional for RESIZE_BILINEAR (FL3) and required for RESIZE_NEAREST_NEIGHBOR;
the corner flags are optional (FL4) and may not both be true. Sampling follows TensorFlow
Lite's reference kernels, in float32 as they do: the ratio is ``in / out``, or
``(in - 1) / (out - 1)`` with align_corners; half-pixel centers shift by 0.5. Bilinear clamps
its two source rows/columns to the image; nearest neighbour floors (rounds half away from zero
with align_corners). Quantized tensors are interpolated in real numbers and requantized.

With numba (``nnrt.ops._jit``), bilinear runs the compiled one-pass loop ``_jit_float.bilinear_f32``
(the same float32 operations in the same order: bit-identical; 10-30x faster than the numpy
gathers on MediaPipe's [1,24,24,48] to 48x48), with each input/output size's source tables
computed once and kept by the kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnrt.ops._common import (
    check_result_size,
    float_scalar_type,
    from_nchw,
    from_real,
    round_half_away,
    same_quant,
    to_nchw,
    to_real,
)
from nnrt.ops._into import set_into, write
from nnrt.ops._jit import compiled
from nnrt.ops._jit_float import BILINEAR_F32, bilinear_f32
from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__: list[str] = []

_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_F32 = np.float32


def _out_size(call: OpCall, in_size: int, value: Any, by_scale: bool, i: int) -> int:
    """Output size along one axis from an INT32 size or a float scale (input ``i``)."""
    if by_scale:
        scale = float(value)
        if not scale > 0:
            call.fail(f"input {i}: scale {scale} must be positive")
        size = int(np.floor(_F32(in_size) * _F32(scale)))
    else:
        size = int(value)
    if size <= 0:
        call.fail(f"input {i}: output size {size} must be positive")
    return size


def _ratio(in_size: int, out_size: int, align: bool) -> np.float32:
    if align and out_size > 1:
        return _F32(in_size - 1) / _F32(out_size - 1)
    return _F32(in_size) / _F32(out_size)


def _bilinear_axis(in_size: int, out_size: int, align: bool, half: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, weight of upper) per output position along one axis."""
    pos = np.arange(out_size, dtype=_F32)
    ratio = _ratio(in_size, out_size, align)
    src = (pos + _F32(0.5)) * ratio - _F32(0.5) if half else pos * ratio
    lo = np.maximum(np.floor(src).astype(np.int64), 0)
    hi = np.minimum(np.ceil(src).astype(np.int64), in_size - 1)
    return lo, hi, (src - lo.astype(_F32)).astype(_F32)


def _nearest_axis(in_size: int, out_size: int, align: bool, half: bool) -> np.ndarray:
    pos = np.arange(out_size, dtype=_F32)
    src = (pos + _F32(0.5 if half else 0.0)) * _ratio(in_size, out_size, align)
    idx = (round_half_away(src) if align else np.floor(src)).astype(np.int64)
    idx = np.minimum(idx, in_size - 1)
    return np.maximum(idx, 0) if half else idx


def _bilinear(x: np.ndarray, oh: int, ow: int, align: bool, half: bool) -> np.ndarray:
    """Bilinear resize of a float32 NHWC array."""
    _, h, w, _ = x.shape
    y0, y1, dy = _bilinear_axis(h, oh, align, half)
    x0, x1, dx = _bilinear_axis(w, ow, align, half)
    dy = dy[None, :, None, None]
    dx = dx[None, None, :, None]
    top, bottom = x[:, y0], x[:, y1]
    top = top[:, :, x0] * (1 - dx) + top[:, :, x1] * dx
    bottom = bottom[:, :, x0] * (1 - dx) + bottom[:, :, x1] * dx
    out: np.ndarray = top * (1 - dy) + bottom * dy
    return out


Tables = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _bilinear_compiled(fn: Any, cache: dict[tuple[int, ...], Tables]) -> Any:
    """``_bilinear`` done by the compiled loop ``fn``, its per-axis tables kept in ``cache``."""

    def run(x: np.ndarray, oh: int, ow: int, align: bool, half: bool) -> np.ndarray:
        key = (x.shape[1], x.shape[2], oh, ow, align, half)
        tables = cache.get(key)
        if tables is None:
            tables = (*_bilinear_axis(x.shape[1], oh, align, half), *_bilinear_axis(x.shape[2], ow, align, half))
            if len(cache) < 8:
                cache[key] = tables
        out = np.empty((x.shape[0], oh, ow, x.shape[3]), dtype=_F32)
        fn(np.ascontiguousarray(x, dtype=_F32), *tables, out)
        return out

    return run


def _repeat_factor(idx: np.ndarray, in_size: int) -> int:
    """``f`` when the source indices ``idx`` repeat every input position ``f`` times in order
    (an upscale by a whole factor: ``idx == arange(out) // f``), else 0."""
    f = idx.size // in_size
    return f if f * in_size == idx.size and np.array_equal(idx, np.arange(idx.size) // f) else 0


def _nearest(x: np.ndarray, oh: int, ow: int, align: bool, half: bool, into: np.ndarray | None = None
             ) -> np.ndarray | None:
    """Nearest-neighbour resize of NHWC ``x`` into a fresh C-contiguous array of its type: an
    upscale by whole factors (FPN's 2x) as one broadcasting copy, [1,40,40,96] to 80x80 370 ->
    107 us against the two gathers and the copy before it; other sizes by the two gathers.
    With ``into`` (an array of the result's shape, any strides) the result goes there and None
    is returned."""
    n, h, w, c = x.shape
    ih, iw = _nearest_axis(h, oh, align, half), _nearest_axis(w, ow, align, half)
    fh, fw = _repeat_factor(ih, h), _repeat_factor(iw, w)
    if fh and fw:
        out = np.empty((n, oh, ow, c), x.dtype) if into is None else into.view()
        out.shape = (n, h, fh, w, fw, c)  # splitting axes: a view whatever the strides
        np.copyto(out, x[:, :, None, :, None, :])
        return out.reshape(n, oh, ow, c) if into is None else None
    if into is None:
        return x[:, ih][:, :, iw]
    np.take(x[:, ih], iw, axis=2, out=into)
    return None


@kernel(Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR)
def prepare_resize(call: OpCall) -> Kernel:
    nearest = call.type is Op.RESIZE_NEAREST_NEIGHBOR
    call.expect_counts((4, 5, 6) if nearest else (3, 4, 5, 6), 1)
    call.require_inputs(*range(4 if nearest else 3, len(call.inputs)))
    t = call.expect_type(0, *_TYPES)
    call.expect_same_type(0, outputs=[0])
    call.expect_rank(0, 4)
    scale_type = float_scalar_type(t)
    by_scale = call.expect_type(1, T.INT32, scale_type) is not T.INT32
    call.expect_type(2, call.inputs[1].type)
    for i in range(3, len(call.inputs)):
        if call.has_input(i):
            call.expect_type(i, T.BOOL)
    if call.has_input(4) and call.has_input(5) and call.const(4) and call.const(5):
        call.fail("align_corners (input 4) and half_pixel_centers (input 5) cannot both be true")
    src, dst = call.inputs[0], call.outputs[0]
    unchanged = same_quant(src, dst)
    fast = None if nearest else compiled(bilinear_f32, BILINEAR_F32)
    interpolate = _nearest if nearest else _bilinear if fast is None else _bilinear_compiled(fast, {})

    def geometry(x: np.ndarray, width: Any, height: Any, flags: tuple[Any, ...]) -> tuple[np.ndarray, int, int, bool, bool, bool]:
        if x.ndim != 4:
            call.fail(f"input 0 has rank {x.ndim}; expected 4")
        nchw, align, half = ([f is not None and bool(f) for f in flags] + [False] * 3)[:3]
        if align and half:
            call.fail("align_corners (input 4) and half_pixel_centers (input 5) cannot both be true")
        img = from_nchw(x) if nchw else x
        if not (img.shape[1] and img.shape[2]):  # no pixel to sample (the compiled loop would read past it)
            call.fail(f"input 0 has shape {list(x.shape)}: an image without rows or columns cannot be resized")
        oh = _out_size(call, img.shape[1], height, by_scale, 2)
        ow = _out_size(call, img.shape[2], width, by_scale, 1)
        check_result_size(call, [img.shape[0], oh, ow, img.shape[3]], dst.type.dtype)
        return img, oh, ow, nchw, align, half

    def run(x: np.ndarray, width: Any, height: Any, *flags: Any) -> np.ndarray:
        img, oh, ow, nchw, align, half = geometry(x, width, height, flags)
        if nearest and unchanged:  # a pure gather: stays in the tensor's own type
            y = _nearest(img, oh, ow, align, half)  # fresh: returned as it is when in the output's layout
            assert y is not None
            return y if not nchw else to_nchw(y).astype(dst.type.dtype, order="C")
        y = interpolate(to_real(img, src), oh, ow, align, half)
        assert y is not None
        return from_real(np.ascontiguousarray(to_nchw(y) if nchw else y), dst)

    def into(out: np.ndarray, x: np.ndarray, width: Any, height: Any, *flags: Any) -> None:
        """``run``'s result into ``out`` (``nnrt.ops._into``): an NHWC nearest resize directly."""
        img, oh, ow, nchw, align, half = geometry(x, width, height, flags)
        if nchw or out.shape != (img.shape[0], oh, ow, img.shape[3]) or out.dtype != img.dtype:
            write(out, run(x, width, height, *flags), call.label)
            return
        _nearest(img, oh, ow, align, half, out)

    if nearest and unchanged:
        set_into(run, into)
    return run
