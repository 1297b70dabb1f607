"""The rows of a compiled program (``nnrt.execution._compiled_plan``): each kernel step that runs
as one call of an 8-bit core (``CoreCall``) becomes one row of int64 for ``_jit_quant``'s
compiled loop, its constants gathered once into the program's four constant buffers.

Plain Python, apart from ``_jit_quant``: the compiled loop and the cores it calls must stay in
one file (numba's disk cache is checked against the file of the function it compiled, so a
change of a core must invalidate the loop too), this encoding need not.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nnrt.ops._jit import Arg, CoreCall
from nnrt.ops._jit_quant import (
    _G_CIN,
    _G_N,
    OP_CONV,
    OP_DEQUANTIZE,
    OP_LOOKUP,
    OP_QUANTIZE,
    _conv_q_into,
    _dequantize_q,
    _lookup_q,
    _quantize_q,
)

__all__ = ["ProgramConstants", "encode_core_call"]


class ProgramConstants:
    """The constant buffers of a program: bytes, int16, int64 and float64 (each array once)."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {"uint8": [], "int16": [], "int64": [], "float64": []}
        self.sizes = dict.fromkeys(self.parts, 0)
        self._seen: dict[tuple[int, str], int] = {}
        self._alive: list[Any] = []  # what ``_seen`` keys on, kept alive so that no id is reused

    def add(self, value: Any, kind: str) -> int:
        """Offset (in items of ``kind``) of ``value``'s items converted exactly to ``kind``."""
        key = (id(value), kind)
        if key in self._seen:
            return self._seen[key]
        arr = np.ascontiguousarray(value).reshape(-1)
        if kind == "uint8":
            arr = arr.view(np.uint8)
        else:
            conv = arr.astype(kind)
            if not np.array_equal(conv, arr):
                raise ValueError(f"constant of {arr.dtype} does not convert exactly to {kind}")
            arr = conv
        at = self._seen[key] = self.sizes[kind]
        self._alive.append(value)
        self.parts[kind].append(arr)
        self.sizes[kind] += arr.size
        return at

    def buffers(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate(p) if p else np.zeros(1, k) for k, p in self.parts.items())


def encode_core_call(call: CoreCall, ins: list[tuple[int, np.dtype[Any]]], out: int,
                     consts: ProgramConstants) -> list[int] | None:
    """The program row running ``call``, its ``Arg`` inputs at the arena offsets ``ins`` (offset
    and dtype, in ``Arg`` order) and its result at offset ``out``; None when the program does not
    run this call."""
    fn, args = getattr(call.core, "py_func", None), call.args
    eight = (np.dtype(np.int8), np.dtype(np.uint8))
    shapes = [a.shape for a in args if isinstance(a, Arg)]
    if any(dt not in eight and dt != np.float32 for _, dt in ins):
        return None
    if fn is _conv_q_into:
        _, w, geo, scales = args
        if len(shapes[0]) != 4 or ins[0][1] not in eight or tuple(geo[_G_N:_G_CIN + 1]) != shapes[0]:
            return None
        return [OP_CONV, ins[0][0], consts.add(w, "int16"), consts.add(geo, "int64"), consts.add(scales, "float64"), out]
    if fn is _quantize_q:
        _, scale, params = args
        if ins[0][1] != np.float32:
            return None
        return [OP_QUANTIZE, 0, ins[0][0], math.prod(shapes[0]),
                consts.add(np.array([scale], np.float64), "float64"), consts.add(params, "int64"), out]
    if fn is _dequantize_q:
        _, _, zero, scale = args
        if ins[0][1] not in eight:
            return None
        return [OP_DEQUANTIZE, _signed(ins[0][1]), ins[0][0], math.prod(shapes[0]),
                consts.add(np.array([zero], np.float64), "float64"), consts.add(np.array([scale], np.float64), "float64"), out]
    if fn is _lookup_q:
        table, _, _, pairs = args
        if table.dtype not in eight or any(dt not in eight for _, dt in ins):
            return None
        return [OP_LOOKUP, _signed(table.dtype), ins[0][0], ins[1][0], math.prod(shapes[0]),
                consts.add(table, "uint8"), table.size, int(pairs), out]
    return None


def _signed(dtype: Any) -> int:
    return int(np.dtype(dtype) == np.int8)
