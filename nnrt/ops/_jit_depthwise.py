"""Compiled float32 depthwise convolution at column stride 1 (numba): the loops themselves,
written as plain annotated Python (as ``_jit_float``, whose module doc says how the loops are
shaped and why they index flat arrays with unsigned offsets). ``_conv_core.compiled_depthwise``
picks a layer's loops at preparation; the numpy kernel (``_conv_core.depthwise_sums``) stays the
reference they are tested against (``tests/unit/test_jit_float.py``).

``depthwise_rows_f32`` works on NHWC rows flattened to ``[W*C]``: the input values one tap
multiplies with a whole output row are one contiguous range, so one loop covers many pixels
with the weights tiled to a block of whole pixels; taken at column stride 1 whatever the
channels (0.65-1.05 of the time of ``_jit_float.window_pixels_f32``, the pixel loop taken at
strides > 1, where it measured 0.5-0.8 of this one's on an input split into column phases,
16-144 channels). Each output row starts with the bias and ends with the fused activation
(and a HARD_SWISH epilogue) while it is in cache. ``depthwise_quads_f32`` takes filters five columns
wide with many channels instead (four output pixels per pass where their taps are inside the
input, channels innermost), and ``depthwise_nine_f32`` 3x3 filters at column strides above 1
(one pass per output pixel) from ``NINE_MIN_CHANNELS``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK", "DEPTHWISE_NINE_F32", "DEPTHWISE_QUADS_F32", "DEPTHWISE_ROWS_F32", "NINE_MIN_CHANNELS",
           "QUADS_MIN_CHANNELS", "depthwise_nine_f32", "depthwise_quads_f32", "depthwise_rows_f32"]

#: Length (in floats) to which a depthwise kernel's per-tap weights are tiled (whole pixels):
#: the chunk of an output row done with all taps at once. Long enough for the vectorized loop,
#: short enough that the chunk, its input ranges and the weights stay in L1.
BLOCK = 512

#: The one signature ``depthwise_rows_f32`` is compiled for (at preparation, see ``_jit.compiled``).
#: Inputs are typed read-only: constants and callers' buffers often are, and numba passes a
#: writable array where a read-only one is expected (not the reverse).
DEPTHWISE_ROWS_F32 = (
    "void(Array(float32, 3, 'C', readonly=True), Array(float32, 3, 'C', readonly=True),"
    " Array(float32, 1, 'C', readonly=True), Array(int64, 2, 'C', readonly=True), float32[:, :, ::1],"
    " int64, int64, int64, float32, float32, boolean)"
)


def depthwise_rows_f32(
    xs: np.ndarray,
    wt: np.ndarray,
    bt: np.ndarray,
    cols: np.ndarray,
    out: np.ndarray,
    stride_h: int,
    dil_h: int,
    top: int,
    lo: np.float32,
    hi: np.float32,
    hswish: bool,
) -> None:
    """Depthwise convolution (depth multiplier 1, column stride 1) of float32 NHWC input into
    ``out``, plus bias and fused activation, over whole rows. The caller lays out:

    * ``xs`` [N, H, W*C]: the input rows flattened;
    * ``wt`` [KH, KW, B*C]: each tap's weights tiled to B pixels (``bt`` [B*C]: the bias);
    * ``cols`` [KW, 3]: per tap column, its shift in an input row (floats) and the first and
      last (exclusive) positions of an output row it reaches;
    * ``out`` [N, OH, OW*C], written in full.

    Rows ``iy = oy*stride_h - top + i*dil_h`` outside the input read zero. The fused
    activation clamps to [``lo``, ``hi``]; ``lo > hi`` means none. NaN stays NaN (``np.clip``).
    With ``hswish``, each finished output
    row then takes HARD_SWISH (a successor's epilogue,
    ``nnrt.ops._epilogue``) while it is in cache.
    Each output row is done in chunks of ``B*C`` floats with all taps per chunk, so that the
    chunk, its input ranges and the weights stay in L1; each pass over a chunk adds the taps
    of one filter column and up to three filter rows (a load and a store of the chunk per
    three products, not per product). A 3x3 filter whose rows all lie inside the input makes
    one pass over the part of the chunk all nine taps reach: bias, nine products and the
    activation, one store (20 memory accesses per output instead of 28), for two such output
    rows at once (the nine weight loads shared: 12.5 accesses per output); [1,112,112,32]:
    282 -> 212 -> 166 us; and for four rows at once where consecutive output rows read consecutive
    input rows (six input rows and nine weights loaded for 36 products: 7.75 accesses per output):
    0.68-0.83 of the two-row pass's time ([1,112,112,16] 101 -> 69 us, [1,112,112,32] with RELU6
    194 -> 161, [1,56,56,64] 88 -> 65). Each pass adds in the row loop's order, so the sums are
    identical (bit for bit on the block's layer). The arrays are indexed flat with unsigned
    offsets: no slice objects in the loops (each costs two atomic reference-count updates in
    numba, which took half the time) and no negative-index checks, so every inner loop vectorizes.
    Compiled with ``fastmath={"contract"}``: fused multiply-adds, each product not rounded
    before its sum (within 1e-6 of numpy's sums on the CTS and the tests).
    """
    n, h, row = xs.shape
    kh, kw, block = wt.shape
    oh, length = out.shape[1], out.shape[2]
    xf, wf, of = xs.reshape(-1), wt.reshape(-1), out.reshape(-1)
    u = np.uint64
    clamp = lo <= hi
    three, six, zero = np.float32(3), np.float32(6), np.float32(0)
    step_x, step_w = dil_h * row, kw * block
    nine = kh == 3 and kw == 3
    for b in range(n):
        oy = 0
        while oy < oh:
            # Rows whose three filter rows are all inside the input take the nine-tap pass; two
            # such rows at once share its weight loads (12.5 accesses per output instead of 20).
            y0 = oy * stride_h - top
            full = nine and y0 >= 0 and y0 + 2 * dil_h < h
            pair = full and oy + 1 < oh and y0 + stride_h + 2 * dil_h < h
            # Four rows at once where consecutive output rows read consecutive input rows (row
            # stride = row dilation): six input rows feed 36 products per position.
            quad = pair and stride_h == dil_h and oy + 3 < oh and y0 + 5 * dil_h < h
            rows_n = 4 if quad else 2 if pair else 1
            for start in range(0, length, block):
                seg = min(block, length - start)
                f0 = f1 = start
                if full:
                    f0 = max(start, cols[0, 1], cols[1, 1], cols[2, 1])
                    f1 = max(f0, min(start + seg, cols[0, 2], cols[1, 2], cols[2, 2]))
                if f1 > f0:
                    m, o0, bo = u(f1 - f0), u((b * oh + oy) * length + f0), u(f0 - start)
                    r0 = (b * h + y0) * row + f0
                    x00, x01, x02 = u(r0 + cols[0, 0]), u(r0 + cols[1, 0]), u(r0 + cols[2, 0])
                    x10, x11, x12 = x00 + u(step_x), x01 + u(step_x), x02 + u(step_x)
                    x20, x21, x22 = x10 + u(step_x), x11 + u(step_x), x12 + u(step_x)
                    w00, w01, w02 = bo, bo + u(block), bo + u(2 * block)
                    w10, w11, w12 = w00 + u(step_w), w01 + u(step_w), w02 + u(step_w)
                    w20, w21, w22 = w10 + u(step_w), w11 + u(step_w), w12 + u(step_w)
                    if quad:
                        o1, o2, o3 = o0 + u(length), o0 + u(2 * length), o0 + u(3 * length)
                        x30, x31, x32 = x20 + u(step_x), x21 + u(step_x), x22 + u(step_x)
                        x40, x41, x42 = x30 + u(step_x), x31 + u(step_x), x32 + u(step_x)
                        x50, x51, x52 = x40 + u(step_x), x41 + u(step_x), x42 + u(step_x)
                        for t in range(m):  # the row loop's order of additions: identical sums
                            a00, a10, a20 = wf[w00 + t], wf[w10 + t], wf[w20 + t]
                            a01, a11, a21 = wf[w01 + t], wf[w11 + t], wf[w21 + t]
                            a02, a12, a22 = wf[w02 + t], wf[w12 + t], wf[w22 + t]
                            p00, p10, p20, p30, p40, p50 = (xf[x00 + t], xf[x10 + t], xf[x20 + t], xf[x30 + t],
                                                            xf[x40 + t], xf[x50 + t])
                            p01, p11, p21, p31, p41, p51 = (xf[x01 + t], xf[x11 + t], xf[x21 + t], xf[x31 + t],
                                                            xf[x41 + t], xf[x51 + t])
                            p02, p12, p22, p32, p42, p52 = (xf[x02 + t], xf[x12 + t], xf[x22 + t], xf[x32 + t],
                                                            xf[x42 + t], xf[x52 + t])
                            bias = bt[bo + t]
                            v0 = bias + p00 * a00 + p10 * a10 + p20 * a20
                            v0 = v0 + p01 * a01 + p11 * a11 + p21 * a21
                            v0 = v0 + p02 * a02 + p12 * a12 + p22 * a22
                            v1 = bias + p10 * a00 + p20 * a10 + p30 * a20
                            v1 = v1 + p11 * a01 + p21 * a11 + p31 * a21
                            v1 = v1 + p12 * a02 + p22 * a12 + p32 * a22
                            v2 = bias + p20 * a00 + p30 * a10 + p40 * a20
                            v2 = v2 + p21 * a01 + p31 * a11 + p41 * a21
                            v2 = v2 + p22 * a02 + p32 * a12 + p42 * a22
                            v3 = bias + p30 * a00 + p40 * a10 + p50 * a20
                            v3 = v3 + p31 * a01 + p41 * a11 + p51 * a21
                            v3 = v3 + p32 * a02 + p42 * a12 + p52 * a22
                            if clamp:
                                v0, v1 = (lo if v0 < lo else v0), (lo if v1 < lo else v1)
                                v2, v3 = (lo if v2 < lo else v2), (lo if v3 < lo else v3)
                                v0, v1 = (hi if v0 > hi else v0), (hi if v1 > hi else v1)
                                v2, v3 = (hi if v2 > hi else v2), (hi if v3 > hi else v3)
                            of[o0 + t], of[o1 + t], of[o2 + t], of[o3 + t] = v0, v1, v2, v3
                    elif pair:
                        o1, dy = o0 + u(length), u(stride_h * row)
                        for t in range(m):  # the row loop's order of additions: identical sums
                            a00, a10, a20 = wf[w00 + t], wf[w10 + t], wf[w20 + t]
                            a01, a11, a21 = wf[w01 + t], wf[w11 + t], wf[w21 + t]
                            a02, a12, a22 = wf[w02 + t], wf[w12 + t], wf[w22 + t]
                            v = bt[bo + t] + xf[x00 + t] * a00 + xf[x10 + t] * a10 + xf[x20 + t] * a20
                            v = v + xf[x01 + t] * a01 + xf[x11 + t] * a11 + xf[x21 + t] * a21
                            v = v + xf[x02 + t] * a02 + xf[x12 + t] * a12 + xf[x22 + t] * a22
                            q = bt[bo + t] + xf[dy + x00 + t] * a00 + xf[dy + x10 + t] * a10 + xf[dy + x20 + t] * a20
                            q = q + xf[dy + x01 + t] * a01 + xf[dy + x11 + t] * a11 + xf[dy + x21 + t] * a21
                            q = q + xf[dy + x02 + t] * a02 + xf[dy + x12 + t] * a12 + xf[dy + x22 + t] * a22
                            if clamp:
                                v = lo if v < lo else v
                                v = hi if v > hi else v
                                q = lo if q < lo else q
                                q = hi if q > hi else q
                            of[o0 + t] = v
                            of[o1 + t] = q
                    else:
                        for t in range(m):
                            v = bt[bo + t] + xf[x00 + t] * wf[w00 + t] + xf[x10 + t] * wf[w10 + t] + xf[x20 + t] * wf[w20 + t]
                            v = v + xf[x01 + t] * wf[w01 + t] + xf[x11 + t] * wf[w11 + t] + xf[x21 + t] * wf[w21 + t]
                            v = v + xf[x02 + t] * wf[w02 + t] + xf[x12 + t] * wf[w12 + t] + xf[x22 + t] * wf[w22 + t]
                            if clamp:
                                v = lo if v < lo else v
                                v = hi if v > hi else v
                            of[o0 + t] = v
                for ry in range(oy, oy + rows_n):  # the rest of each row's chunk: the row loop
                    obase = (b * oh + ry) * length
                    yr = ry * stride_h - top
                    i_lo, i_hi = 0, kh  # the filter rows inside the input: a contiguous range
                    while i_lo < kh and yr + i_lo * dil_h < 0:
                        i_lo += 1
                    while i_hi > i_lo and yr + (i_hi - 1) * dil_h >= h:
                        i_hi -= 1
                    for part in range(2):  # before and after the nine-tap range
                        s0, s1 = (start, f0) if part == 0 else (f1, start + seg)
                        if s1 <= s0:
                            continue
                        d0 = u(obase + s0)
                        for t in range(u(s1 - s0)):
                            of[d0 + t] = bt[u(s0 - start) + t]
                        for j in range(kw):
                            k0, k1 = max(s0, cols[j, 1]), min(s1, cols[j, 2])
                            if k1 <= k0:
                                continue
                            m, o0 = u(k1 - k0), u(obase + k0)
                            xrow = (b * h + yr) * row + k0 + cols[j, 0]
                            wcol = j * block + k0 - start
                            for i in range(i_lo, i_hi, 3):
                                xa, wa = u(xrow + i * step_x), u(wcol + i * step_w)
                                if i + 2 < i_hi:
                                    xb, wb = xa + u(step_x), wa + u(step_w)
                                    xc, wc = xb + u(step_x), wb + u(step_w)
                                    for t in range(m):
                                        of[o0 + t] = (of[o0 + t] + xf[xa + t] * wf[wa + t] + xf[xb + t] * wf[wb + t]
                                                      + xf[xc + t] * wf[wc + t])
                                elif i + 1 < i_hi:
                                    xb, wb = xa + u(step_x), wa + u(step_w)
                                    for t in range(m):
                                        of[o0 + t] = of[o0 + t] + xf[xa + t] * wf[wa + t] + xf[xb + t] * wf[wb + t]
                                else:
                                    for t in range(m):
                                        of[o0 + t] = of[o0 + t] + xf[xa + t] * wf[wa + t]
                        if clamp:  # selects, not branches: the loop vectorizes
                            for t in range(u(s1 - s0)):
                                v = of[d0 + t]
                                v = lo if v < lo else v
                                of[d0 + t] = hi if v > hi else v
            if hswish:  # HARD_SWISH as ``hard_swish_f32`` computes it, selects: bit-identical
                for t in range(u((b * oh + oy) * length), u((b * oh + oy + rows_n) * length)):
                    v = of[t]
                    r = v + three
                    r = zero if r < zero else r
                    of[t] = (six if r > six else r) * v / six
            oy += rows_n


#: The one signature ``depthwise_quads_f32`` is compiled for.
DEPTHWISE_QUADS_F32 = (
    "void(Array(float32, 3, 'C', readonly=True), Array(float32, 3, 'C', readonly=True),"
    " Array(float32, 1, 'C', readonly=True), float32[:, :, ::1], Array(int64, 2, 'C', readonly=True), int64, int64,"
    " int64, int64, float32, float32, boolean)"
)

#: Channels from which ``depthwise_quads_f32`` beats the row loop (CPU time, 5x5 pad 2:
#: [1,3,96,88] 0.65-0.68 of it, [1,2,96,200] 0.58-0.70, [1,14,14,256] 0.73-0.76; with 64
#: channels and fewer it lost, 1.15-1.24 from 32 to 64, 3x with 16 or 24: per pass over the
#: channels, the vectorized loop's run-time overlap checks of its 17 pointers cost more than a
#: few vectors of work, and 24 channels leave a scalar remainder).
QUADS_MIN_CHANNELS = 80


def depthwise_quads_f32(
    xs: np.ndarray,
    wt: np.ndarray,
    bt: np.ndarray,
    out: np.ndarray,
    spans: np.ndarray,
    stride_h: int,
    dil_h: int,
    top: int,
    left: int,
    lo: np.float32,
    hi: np.float32,
    hswish: bool,
) -> None:
    """Depthwise convolution with a filter five columns wide (column stride and dilation 1,
    depth multiplier 1) of float32 NHWC input into ``out``, plus bias and fused activation (clamp
    to [``lo``, ``hi``]; ``lo > hi``: none), then with ``hswish`` HARD_SWISH as
    ``depthwise_rows_f32`` does it. ``xs`` [N, H, W*C] the input rows flattened, ``wt`` [KH, 5,
    C], ``bt`` [C], ``out`` [N, OH, OW*C], written in full; ``spans`` [OH, 2]: per output row,
    the filter rows inside the input (first, end; the others read zeros).

    Channels innermost. Where four adjacent output pixels have all their taps inside the input
    row, one pass per filter row loads its five weights and the eight input pixels the four
    outputs' taps reach once for all twenty products (17 loads per 20 multiply-adds; the row
    loop makes 7 per 3). Other pixels add their taps inside the input one column at a time.
    PP-OCR's classifier and MobileNetV3 run 5x5 layers on 2-14 rows of 88-256 channels (from
    ``QUADS_MIN_CHANNELS``). Compiled with ``fastmath={"contract"}`` as the row loop (another
    order of additions: within float32 rounding of it, not bit for bit). (The same four-pixel
    pass for 3x3 and 5x5 filters at column stride 2 measured 0.94-3.4x the pixel loop: not kept.)
    """
    n, h, row = xs.shape
    c = wt.shape[2]
    w, oh, length = row // c, out.shape[1], out.shape[2]
    ow = length // c
    xf, wf, of = xs.reshape(-1), wt.reshape(-1), out.reshape(-1)
    u, uc = np.uint64, np.uint64(c)
    clamp = lo <= hi
    three, six, zero = np.float32(3), np.float32(6), np.float32(0)
    for b in range(n):
        for oy in range(oh):
            y0 = oy * stride_h - top
            ox = 0
            while ox < ow:
                x_first = ox - left  # the input column of the first pixel's first tap
                four = x_first >= 0 and x_first + 8 <= w and ox + 4 <= ow
                o0 = u((b * oh + oy) * length + ox * c)
                o1, o2, o3 = o0 + uc, o0 + u(2 * c), o0 + u(3 * c)
                if four:
                    for k in range(uc):
                        v = bt[k]
                        of[o0 + k], of[o1 + k], of[o2 + k], of[o3 + k] = v, v, v, v
                else:
                    for k in range(uc):
                        of[o0 + k] = bt[k]
                for i in range(spans[oy, 0], spans[oy, 1]):
                    xr, w0 = (b * h + y0 + i * dil_h) * row, u(i * 5 * c)
                    if not four:  # its taps inside the row, one column at a time
                        for j in range(max(0, -x_first), min(5, w - x_first)):
                            xa, wa = u(xr + (x_first + j) * c), w0 + u(j * c)
                            for k in range(uc):
                                of[o0 + k] = of[o0 + k] + xf[xa + k] * wf[wa + k]
                        continue
                    w1, w2, w3, w4 = w0 + uc, w0 + u(2 * c), w0 + u(3 * c), w0 + u(4 * c)
                    x0 = u(xr + x_first * c)
                    x1, x2, x3, x4 = x0 + uc, x0 + u(2 * c), x0 + u(3 * c), x0 + u(4 * c)
                    x5, x6, x7 = x0 + u(5 * c), x0 + u(6 * c), x0 + u(7 * c)
                    for k in range(uc):
                        a0, a1, a2, a3, a4 = wf[w0 + k], wf[w1 + k], wf[w2 + k], wf[w3 + k], wf[w4 + k]
                        p0, p1, p2, p3 = xf[x0 + k], xf[x1 + k], xf[x2 + k], xf[x3 + k]
                        p4, p5, p6, p7 = xf[x4 + k], xf[x5 + k], xf[x6 + k], xf[x7 + k]
                        of[o0 + k] = of[o0 + k] + p0 * a0 + p1 * a1 + p2 * a2 + p3 * a3 + p4 * a4
                        of[o1 + k] = of[o1 + k] + p1 * a0 + p2 * a1 + p3 * a2 + p4 * a3 + p5 * a4
                        of[o2 + k] = of[o2 + k] + p2 * a0 + p3 * a1 + p4 * a2 + p5 * a3 + p6 * a4
                        of[o3 + k] = of[o3 + k] + p3 * a0 + p4 * a1 + p5 * a2 + p6 * a3 + p7 * a4
                done = u(4 * c) if four else uc
                if clamp:  # selects, not branches: the loops vectorize
                    for t in range(done):
                        v = of[o0 + t]
                        v = lo if v < lo else v
                        of[o0 + t] = hi if v > hi else v
                if hswish:
                    for t in range(done):
                        v = of[o0 + t]
                        r = v + three
                        r = zero if r < zero else r
                        of[o0 + t] = (six if r > six else r) * v / six
                ox += 4 if four else 1


#: The one signature ``depthwise_nine_f32`` is compiled for.
DEPTHWISE_NINE_F32 = (
    "void(Array(float32, 4, 'C', readonly=True), Array(float32, 3, 'C', readonly=True),"
    " Array(float32, 1, 'C', readonly=True), float32[:, :, :, ::1], int64, int64, int64, int64, int64, int64,"
    " float32, float32, boolean)"
)

#: Channels from which ``depthwise_nine_f32`` beats the pixel loop (CPU time, 3x3 stride 2: [1,112,
#: 112,32] 0.74 of it, [1,56,56,64] 0.82, [1,28,28,128] 0.72; with 16 channels 2.5x its time: one
#: pass over the channels per pixel, each paying the vectorized loop's run-time overlap checks).
NINE_MIN_CHANNELS = 32


def depthwise_nine_f32(x: np.ndarray, w: np.ndarray, bias: np.ndarray, out: np.ndarray, stride_h: int, stride_w: int,
                       dil_h: int, dil_w: int, top: int, left: int, lo: np.float32, hi: np.float32, hswish: bool) -> None:
    """Depthwise convolution with a 3x3 filter ``w`` [3, 3, C] (depth multiplier 1) of float32
    NHWC ``x`` [N, H, W, C] into ``out`` [N, OH, OW, C], plus ``bias`` and fused activation (clamp
    to [``lo``, ``hi``]; ``lo > hi``: none), then with ``hswish`` HARD_SWISH as
    ``depthwise_rows_f32`` does it; for column strides above 1 (MobileNets' downsampling layers).

    One pass over the channels per output pixel whose nine taps lie inside the input: bias and
    the nine products in registers, one store (the pixel loop ``_jit_float.window_pixels_f32``
    makes a pass per tap: a load and a store of the output per product); pixels at the edges add
    their taps inside the input one at a time. Compiled with ``fastmath={"contract"}`` as the row
    loop (another order of additions than the pixel loop's: within float32 rounding of it).
    """
    n, h, wd, c = x.shape
    oh, ow = out.shape[1], out.shape[2]
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    u, uc = np.uint64, np.uint64(c)
    clamp = lo <= hi
    three, six, zero = np.float32(3), np.float32(6), np.float32(0)
    dy, dx = u(dil_h * wd * c), u(dil_w * c)
    for b in range(n):
        for oy in range(oh):
            y0 = oy * stride_h - top
            rows_in = y0 >= 0 and y0 + 2 * dil_h < h
            o0 = (b * oh + oy) * ow * c
            for ox in range(ow):
                x0 = ox * stride_w - left
                d = u(o0 + ox * c)
                if rows_in and x0 >= 0 and x0 + 2 * dil_w < wd:
                    s00 = u(((b * h + y0) * wd + x0) * c)
                    s01, s02 = s00 + dx, s00 + dx + dx
                    s10, s11, s12 = s00 + dy, s01 + dy, s02 + dy
                    s20, s21, s22 = s10 + dy, s11 + dy, s12 + dy
                    for k in range(uc):
                        v = bias[k] + xf[s00 + k] * wf[k] + xf[s10 + k] * wf[3 * uc + k] + xf[s20 + k] * wf[6 * uc + k]
                        v = v + xf[s01 + k] * wf[uc + k] + xf[s11 + k] * wf[4 * uc + k] + xf[s21 + k] * wf[7 * uc + k]
                        of[d + k] = v + xf[s02 + k] * wf[2 * uc + k] + xf[s12 + k] * wf[5 * uc + k] + xf[s22 + k] * wf[8 * uc + k]
                    continue
                for k in range(uc):
                    of[d + k] = bias[k]
                for i in range(3):
                    iy = y0 + i * dil_h
                    for j in range(3):
                        ix = x0 + j * dil_w
                        if 0 <= iy < h and 0 <= ix < wd:
                            s, wo = u(((b * h + iy) * wd + ix) * c), u((i * 3 + j) * c)
                            for k in range(uc):
                                of[d + k] = of[d + k] + xf[s + k] * wf[wo + k]
            if clamp:  # selects, not branches: the loops vectorize
                for t in range(u(o0), u(o0 + ow * c)):
                    v = of[t]
                    v = lo if v < lo else v
                    of[t] = hi if v > hi else v
            if hswish:
                for t in range(u(o0), u(o0 + ow * c)):
                    v = of[t]
                    r = v + three
                    r = zero if r < zero else r
                    of[t] = (six if r > six else r) * v / six
