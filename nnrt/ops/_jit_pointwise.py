"""Compiled float32 1x1 CONV_2D and global AVERAGE_POOL_2D, and the two as one step (numba).

A plain 1x1 convolution (``conv.plain_pointwise``) is one BLAS product per block of pixels
written into the output, its bias and activation (or a successor's epilogue, ``_epilogue``)
applied while the block is in L2 (``pointwise_blocks``). A global average pool sums each block
with the same compiled pass (``BlockMean``), and a 1x1 convolution read only by such a pool
(``execution._fuse_pool``) makes the same products into a scratch block that is summed there and
never stored: the three add the same float32 values in the same order, so fused and unfused
agree bit for bit. The products are the backend's (``_gemm.product``: MKL or numpy), asked for
once at preparation by the step that owns them. Split from ``_jit_conv`` (the KxK paths) to keep both modules readable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.ops._epilogue import Epilogue
from nnrt.ops._gemm import Product
from nnrt.ops._jit_conv import scratch
from nnrt.ops._jit_float import SUM_ROWS

__all__ = ["MEAN_BLOCK_FLOATS", "MEAN_ROWS", "BlockMean", "mean_rows", "pointwise_blocks"]

#: Pixels per block of a plain 1x1 CONV_2D and of a global average pool, per image: at least
#: ``MEAN_ROWS``, and as many as make ``MEAN_BLOCK_FLOATS`` floats of output (1 MB: bias,
#: activation or sums pass over it while in L2), a multiple of ``SUM_ROWS`` (``mean_rows``), so
#: that every way of running these blocks adds the same rows in the same order. Measured
#: against one product over the whole image, CPU us interleaved at load 4: [1,112,112,32] -> 64
#: 600 -> ~600 (the fused pool: 0.68-0.75 ms -> 0.47-0.50 for both steps); [1,160,160,16] -> 96
#: 1490 -> 1260; fixed blocks of 1024 pixels lost 5-8% where Cout is small (96 -> 24).
MEAN_ROWS = 1024
MEAN_BLOCK_FLOATS = 1 << 18


def mean_rows(cout: int) -> int:
    """Pixels per block of ``pointwise_blocks`` and ``BlockMean`` for ``cout`` output channels."""
    return max(MEAN_ROWS, MEAN_BLOCK_FLOATS // max(cout, 1) // SUM_ROWS * SUM_ROWS)


def pointwise_blocks(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32,
                     bias_act: Callable[..., Any], mm: Product, epilogue: Epilogue | None = None) -> np.ndarray:
    """A plain 1x1 float32 CONV_2D (``conv.plain_pointwise``) of C-contiguous NHWC ``x``: per
    image, blocks of ``mean_rows`` pixels, one product ``mm`` each written into the output and
    ``bias_act_f32`` (or the ``epilogue``'s pass) over it while in cache. ``BlockMean`` makes
    the very same products."""
    n, h, w, c = x.shape
    cout, pixels = weights.shape[1], h * w
    xf = x.reshape(n, pixels, c)
    out = np.empty((n, pixels, cout), dtype=np.float32)
    rows = mean_rows(cout)
    for b in range(n):
        for p0 in range(0, pixels, rows):
            dst = out[b, p0 : p0 + rows]
            mm(xf[b, p0 : p0 + rows], weights, dst)
            if epilogue is None:
                bias_act(dst, bias, lo, hi)
            else:
                epilogue.with_bias(dst, bias, lo, hi, b * pixels + p0, bias_act)
    return out.reshape(n, h, w, cout)


class BlockMean:
    """The means over each image's pixels of float32 NHWC values, sums in float64 over blocks
    of ``mean_rows`` pixels by ``bias_act_sum_f32``, then the pool's activation: a global
    AVERAGE_POOL_2D (``parts`` None: the block is the input's), or a plain 1x1 CONV_2D
    (``parts``: ``conv.pointwise_parts``) and that pool as one step (``execution._fuse_pool``),
    where the block is the product ``pointwise_blocks`` makes, written to a scratch block that
    stays in L2 and summed there with the convolution's bias and activation, never stored. Both
    add the convolution's very float32 values in the same order, so the fused step gives bit
    for bit the two steps' result (the unfused pool sums ``x + 0``: the same values) when ``mm``
    is the convolution's product function."""

    __slots__ = ("_act", "_bias", "_hi", "_lo", "_mm", "_pool_hi", "_pool_lo", "_weights")

    def __init__(self, parts: tuple[np.ndarray, np.ndarray, np.float32, np.float32] | None,
                 act_sum: Callable[..., Any], pool_bounds: tuple[np.float32, np.float32],
                 mm: Product | None = None) -> None:
        self._weights = parts[0] if parts is not None else None
        self._bias = parts[1] if parts is not None else None
        self._lo, self._hi = (parts[2], parts[3]) if parts is not None else (np.float32(1), np.float32(0))
        self._act = act_sum
        self._mm = mm
        self._pool_lo, self._pool_hi = pool_bounds

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``x`` float32 NHWC [N, H, W, C] (H*W > 0): the pooled [N, 1, 1, Cout]."""
        n, h, w, c = x.shape
        pixels = h * w
        weights, mm = self._weights, self._mm
        cout = weights.shape[1] if weights is not None else c
        bias = self._bias if self._bias is not None else np.zeros(c, dtype=np.float32)
        xf = np.ascontiguousarray(x).reshape(n, pixels, c)
        rows = mean_rows(cout)
        buf = scratch(min(pixels, rows) * cout) if weights is not None else None
        acc = np.empty(cout, dtype=np.float64)
        out = np.empty((n, cout), dtype=np.float32)
        for b in range(n):
            acc[:] = 0.0
            for p0 in range(0, pixels, rows):
                block = xf[b, p0 : p0 + rows]
                if weights is not None and buf is not None and mm is not None:
                    product = buf[: block.shape[0] * cout].reshape(block.shape[0], cout)
                    mm(block, weights, product)
                    block = product
                self._act(block, bias, self._lo, self._hi, acc)
            np.divide(acc, pixels, out=out[b], casting="same_kind")
        if self._pool_lo <= self._pool_hi:
            np.clip(out, self._pool_lo, self._pool_hi, out=out)
        return out.reshape(n, 1, 1, cout)
