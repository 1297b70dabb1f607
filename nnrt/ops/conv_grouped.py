"""GROUPED_CONV_2D: the input's channels split into ``groups`` slices, each convolved with its
slice of the filters by ``conv.conv_nhwc`` (one matrix product per group), the outputs
concatenated. Signature, types and geometry are ``conv``'s (see its docstring); split from it to
keep that module readable.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnrt.ops._registry import Kernel, OpCall, kernel
from nnrt.ops.conv import (
    check_const_params,
    check_conv_types,
    conv_matrix,
    conv_nhwc,
    conv_signature,
    empty_output,
    finish_output,
    input_nhwc,
    real_bias,
    real_filter,
    run_geometry,
)
from nnrt.types import OperationType as Op

__all__: list[str] = []


@kernel(Op.GROUPED_CONV_2D)
def prepare_grouped_conv2d(call: OpCall) -> Kernel:
    sig = conv_signature(call, 3, extra=True, layout_required=True, dilation=False)
    types = check_conv_types(call, 0)
    check_const_params(call, sig)
    groups_const = call.const(sig.extra) if sig.extra is not None else None
    fd = call.inputs[1].dimensions
    if groups_const is not None and fd and fd[0] and fd[0] % groups_const:
        call.fail(f"filter has {fd[0]} output channels, not a multiple of {groups_const} groups")

    const_w, const_b = call.const(1), call.const(2)
    wreal0 = real_filter(const_w, call, types) if const_w is not None else None
    bias0 = real_bias(const_b, call, types) if const_b is not None else None
    mats: dict[int, list[np.ndarray]] = {}

    def group_mats(wreal: np.ndarray, bias: np.ndarray, groups: int) -> list[np.ndarray]:
        per = wreal.shape[0] // groups
        return [conv_matrix(wreal[k * per : (k + 1) * per], bias[k * per : (k + 1) * per]) for k in range(groups)]

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray, *params: Any) -> np.ndarray:
        g, cin = run_geometry(call, sig, (x, w, b, *params))
        groups = g.extra
        cout = w.shape[0]
        if cout % groups or w.shape[3] * groups != cin or b.shape != (cout,):
            call.fail(
                f"filter {list(w.shape)} / bias {list(b.shape)} do not match {cin} input channels in {groups} groups"
            )
        if x.shape[0] == 0 or g.out_h == 0 or g.out_w == 0:
            return empty_output(call, x.shape[0], cout, g)
        if wreal0 is not None and bias0 is not None:
            if groups not in mats:
                mats[groups] = group_mats(wreal0, bias0, groups)
            gm = mats[groups]
        else:
            gm = group_mats(real_filter(w, call, types), real_bias(b, call, types), groups)
        xr = input_nhwc(call, x, g, types)
        cg = w.shape[3]
        parts = [conv_nhwc(xr[..., k * cg : (k + 1) * cg], gm[k], w.shape[1], w.shape[2], g)[0] for k in range(groups)]
        out = np.concatenate(parts, axis=3) if groups > 1 else parts[0]
        return finish_output(call, out, g)

    return run
