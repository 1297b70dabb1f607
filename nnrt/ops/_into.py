"""Kernels that can write their result into an array they are given: the ``into`` protocol.

A kernel returns a fresh array of its own. Where the plan compiler knows where that result
goes next (a CONCATENATION's slice of its output: ``nnrt.execution._concat_in_place``), a
kernel that declared an ``into`` (``set_into``) writes it there instead, and the copy the
CONCATENATION made is gone. ``into(out, *args)`` takes the kernel's own arguments and ``out``,
an array of the result's shape and type that may be a strided view (a slice along any axis of a
C-contiguous buffer: rows of ``rows(out)``). It writes exactly the values the kernel would
return (the same operations; tests compare them bit for bit), or raises as the kernel would.
``write(out, result, what)`` is the fallback an ``into`` uses for arguments its fast way does
not take: the kernel's result copied, its shape checked first (numpy would broadcast a smaller
one silently).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nnrt.errors import InvalidArgumentError

__all__ = ["Into", "into_of", "row_span", "rows", "set_into", "write"]

#: ``into(out, *kernel_args)``: the kernel's result written into ``out`` (module doc).
Into = Callable[..., None]

_INTO = "_nnrt_into"


def set_into(kernel: Callable[..., Any], into: Into) -> None:
    """Declare that ``kernel``'s result can be written into an array by ``into``."""
    setattr(kernel, _INTO, into)


def into_of(kernel: Callable[..., Any] | None) -> Into | None:
    """The ``into`` declared for ``kernel``, or None."""
    return getattr(kernel, _INTO, None)


def rows(out: np.ndarray) -> np.ndarray | None:
    """``out`` as a 2-D view [R, L] whose rows are contiguous (R runs of L values at one
    stride), when its strides allow it (a slice along one axis of a C-contiguous array does);
    else None."""
    shape, strides, item = out.shape, out.strides, out.itemsize
    k = len(shape)
    inner = 1
    while k > 0 and (shape[k - 1] == 1 or strides[k - 1] == inner * item):  # the contiguous tail
        inner *= shape[k - 1]
        k -= 1
    if k == 0:
        return out.reshape(1, inner)
    outer, stride = shape[k - 1], strides[k - 1]
    for d in range(k - 2, -1, -1):  # the leading dimensions must merge into one at ``stride``
        if shape[d] != 1 and strides[d] != stride * outer:
            return None
        outer *= shape[d]
    return np.lib.stride_tricks.as_strided(out, (outer, inner), (stride, item))


def row_span(out: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``out``'s rows (``rows``) as columns ``off:off + L`` of a C-contiguous 2-D view [R, S] of
    the array ``out`` is a slice of (its ``base``): ``(view, off)``, for a compiled loop that
    takes contiguous arrays; None when ``out`` is not such a slice."""
    if out.flags.c_contiguous:
        return out.reshape(1, -1), 0
    r, base = rows(out), out.base
    if r is None or not isinstance(base, np.ndarray) or not base.flags.c_contiguous or base.dtype != out.dtype:
        return None
    item = out.itemsize
    n, width = r.shape
    stride = r.strides[0] // item if n > 1 else width
    start = (out.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    row0, off = divmod(start, stride) if stride else (0, start)
    if r.strides[0] % item or start < 0 or off + width > stride or (row0 + n) * stride > base.size:
        return None
    return base.reshape(-1)[row0 * stride:(row0 + n) * stride].reshape(n, stride), off


def write(out: np.ndarray, result: np.ndarray, what: str) -> None:
    """Copy ``result`` into ``out`` when the shapes are the same; INVALID_ARGUMENT otherwise."""
    if result.shape != out.shape:
        raise InvalidArgumentError(f"{what}: the result has shape {list(result.shape)}; its place in the "
                                   f"output has {list(out.shape)}")
    np.copyto(out, result)
