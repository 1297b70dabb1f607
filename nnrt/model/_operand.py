"""Operands and operations as the model stores them, and the per-operand validation rules.

An ``Operand`` is mutable only while its model is being built; ``Model.finish()`` freezes the
whole graph. The rules checked here are NNAPI's per-operand rules (section 7 of the NNAPI
digest): type in range, scalars of rank 0, scale and zero point per type, per-channel
parameters, and the size of constant values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from nnrt.errors import InvalidArgumentError
from nnrt.types import OperandLifeTime, OperandType, OperationType

if TYPE_CHECKING:
    from nnrt.model._model import Model

__all__ = [
    "ChannelQuant", "Operand", "Operation", "SupportsBuffer", "as_dims", "as_float", "as_int", "as_int_list",
    "check_quant_params", "dims_product",
]

_INT32_MAX = 2**31 - 1


class SupportsBuffer(Protocol):
    """Anything that exposes its bytes as a 1-D uint8 numpy array (``nnrt.Memory`` does)."""

    @property
    def buffer(self) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class ChannelQuant:
    """Per-channel symmetric quantization: one scale per slice along ``channel_dim``."""

    channel_dim: int
    scales: tuple[float, ...]

    def scales_array(self) -> np.ndarray:
        return np.asarray(self.scales, dtype=np.float32)


@dataclass(slots=True)
class Operand:
    """One operand of a model: type, shape (0 = unknown; ``()`` on a tensor = unknown rank)."""

    index: int
    type: OperandType
    dimensions: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    channel_quant: ChannelQuant | None = None
    #: Constant value (CONSTANT_COPY / CONSTANT_POOL): an array of ``type.dtype`` shaped like
    #: ``dimensions``, or a Python scalar for scalar types.
    value: np.ndarray | int | float | bool | None = None
    #: Referenced model (SUBGRAPH lifetime).
    subgraph: Model | None = None
    name: str = ""

    @property
    def label(self) -> str:
        return f"operand {self.index}" + (f" ({self.name})" if self.name else "")

    @property
    def is_constant(self) -> bool:
        return self.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_POOL)

    @property
    def fully_specified(self) -> bool:
        if self.type.is_scalar:
            return True
        return len(self.dimensions) > 0 and all(d > 0 for d in self.dimensions)

    @property
    def byte_size(self) -> int:
        """Bytes of a value of this operand (requires a fully specified shape)."""
        return self.type.dtype.itemsize * dims_product(self.dimensions)


@dataclass(slots=True)
class Operation:
    type: OperationType
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    index: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"operation {self.index} ({self.type.name})"


def dims_product(dims: tuple[int, ...]) -> int:
    return math.prod(dims) if dims else 1


# -- argument coercion at the public boundary ------------------------------------------------------
# One place turns what a caller passed into ints and floats, so that every entry point rejects the
# same things the same way: bools, non-integral or non-finite floats, strings, None, and values
# whose conversion overflows all become INVALID_ARGUMENT naming the argument.


def as_int(value: object, what: str) -> int:
    """``value`` as an int (a Python or numpy integer; no bool, no float)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise InvalidArgumentError(f"{what}: {value!r:.60} is not an integer")


def as_float(value: object, what: str) -> float:
    """``value`` as a float (any real number that fits a double; no bool)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        try:
            return float(value)
        except OverflowError:
            pass
    raise InvalidArgumentError(f"{what}: {value!r:.60} is not a real number that fits a double")


def as_int_list(values: object, what: str) -> tuple[int, ...]:
    """A sequence of ints (a list, tuple, range or 1-D numpy array) as a tuple."""
    if isinstance(values, np.ndarray):
        values = values.tolist() if values.ndim == 1 else None
    if not isinstance(values, (list, tuple, range)):
        raise InvalidArgumentError(f"{what}: {values!r:.60} is not a list of integers")
    return tuple(as_int(v, f"{what}[{k}]") for k, v in enumerate(values))


def as_dims(values: object, what: str) -> tuple[int, ...]:
    """Dimensions: a sequence of non-negative ints (None: no dimensions)."""
    dims = () if values is None else as_int_list(values, what)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{what}: negative dimension in {list(dims)}")
    return dims


def check_quant_params(type_: OperandType, dims: tuple[int, ...], scale: float, zero_point: int, label: str) -> None:
    """NNAPI's scale and zero-point rules for one operand; raises INVALID_ARGUMENT."""

    def bad(msg: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{label} of type {type_.name}: {msg}")

    if type_.is_scalar and dims:
        raise bad(f"a scalar must have rank 0, got dimensions {list(dims)}")
    if any(d < 0 for d in dims):
        raise bad(f"negative dimension in {list(dims)}")
    if dims and all(d > 0 for d in dims) and dims_product(dims) * type_.dtype.itemsize > _INT32_MAX:
        raise bad(f"dimensions {list(dims)} overflow the maximum operand size")
    if not math.isfinite(scale):
        raise bad(f"scale {scale} is not finite")
    if type_ in _ZERO_SCALE_TYPES:
        if scale != 0.0:
            raise bad(f"scale must be 0, got {scale}")
    elif type_ is OperandType.TENSOR_INT32:
        if scale < 0.0:
            raise bad(f"scale must be >= 0, got {scale}")
    elif scale <= 0.0:
        raise bad(f"scale must be > 0, got {scale}")
    lo, hi = _ZERO_POINT_RANGES.get(type_, (0, 0))
    if not lo <= zero_point <= hi:
        want = "0" if lo == hi else f"in [{lo}, {hi}]"
        raise bad(f"zero point must be {want}, got {zero_point}")


_ZERO_SCALE_TYPES = frozenset(
    {
        OperandType.FLOAT32,
        OperandType.INT32,
        OperandType.UINT32,
        OperandType.BOOL,
        OperandType.FLOAT16,
        OperandType.TENSOR_FLOAT32,
        OperandType.TENSOR_FLOAT16,
        OperandType.TENSOR_BOOL8,
        OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL,
        OperandType.SUBGRAPH,
    }
)
_ZERO_POINT_RANGES = {
    OperandType.TENSOR_QUANT8_ASYMM: (0, 255),
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    OperandType.TENSOR_QUANT16_ASYMM: (0, 65535),
    # TENSOR_INT32 carries an optional zero point in NNAPI 1.3 ("bias" tensors use 0).
    OperandType.TENSOR_INT32: (-(2**31), 2**31 - 1),
}
