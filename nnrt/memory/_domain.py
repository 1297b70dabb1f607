"""Memory domains: device buffers (NNAPI's ``IBuffer``), their roles, tokens and tracker.

``allocate_buffer`` implements ``Device.allocate`` (digest section 5): a buffer is described by
its dimensions (``BufferDesc``) and the roles it may play, each an input or output of one of the
given prepared models (``BufferRole``, probability in (0, 1]). Every allocation rule gives
INVALID_ARGUMENT: no model or no role, an index out of range, a model of another device, a
probability outside (0, 1], a duplicated role, roles of different type or quantization,
incompatible dimensions, a scalar with dimensions. Like NNAPI's sample driver, a buffer whose
dimensions stay unknown after combining the roles is unsupported: GENERAL_FAILURE.

A buffer starts uninitialized; ``copy_from`` or a successful execution writing it initialize
it; a failed ``copy_from``, or an execution that writes it (from its start until it succeeds),
make it uninitialized again. Its data never goes to the app unless asked (``copy_to``): as an
execution input the kernels read a read-only view of the device's array, as an output the
array the kernels produced *becomes* the buffer (no copy). Storage is replaced, never written in
place, so a reader holding the previous array never sees a torn write.

Tokens are positive ints (``BufferToken``) handed out by a per-device ``BufferTracker``. A token
is bound to the app of the prepared models it was allocated for: for any other app, or once
the buffer is freed or collected, it is unknown (INVALID_ARGUMENT), as is token 0.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnrt.errors import GeneralFailureError, InvalidArgumentError
from nnrt.memory._memory import Memory
from nnrt.model import Operand, as_dims
from nnrt.types import OperandType

__all__ = [
    "BufferDesc", "BufferRole", "BufferToken", "BufferTracker", "DeviceBuffer", "allocate_buffer", "domain_of", "tracker_for",
]


@dataclass(frozen=True, slots=True)
class BufferDesc:
    """The dimensions requested for a device buffer (0 = unknown; ``()`` = from the roles)."""

    dimensions: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "dimensions", as_dims(self.dimensions, "BufferDesc: dimensions"))


@dataclass(frozen=True, slots=True)
class BufferRole:
    """One use of a device buffer: input or output ``io_index`` of ``prepared_models[model_index]``."""

    model_index: int
    io_index: int
    probability: float = 1.0


class BufferToken(int):
    """A positive int naming a device buffer in execution requests (``inputs=[token]``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"BufferToken({int(self)})"


class BufferTracker:
    """A device's token table: token -> live buffer (weakly held).

    Entries are removed by the buffer's weakref callback, which the garbage collector may run
    on any thread at any allocation, including one made inside ``add`` on the same thread:
    removal therefore takes no lock (one ``dict.pop`` of a token never reused, atomic in
    CPython). The lock only makes token numbering and insertion one step.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = itertools.count(1)
        self._buffers: dict[int, weakref.ref[DeviceBuffer]] = {}

    def add(self, buffer: DeviceBuffer) -> BufferToken:
        with self._lock:
            token = BufferToken(next(self._next))
            self._buffers[token] = weakref.ref(buffer, functools.partial(_collected, self._buffers, int(token)))
        return token

    def _forget(self, token: int) -> None:
        self._buffers.pop(token, None)

    def lookup(self, token: int, app: str, where: str) -> DeviceBuffer:
        """The buffer of ``token`` for ``app``; INVALID_ARGUMENT when 0, unknown, freed or another app's."""
        ref = self._buffers.get(int(token)) if token > 0 else None
        buf = ref() if ref is not None else None
        if buf is None or buf.app != app:
            raise InvalidArgumentError(f"{where}: token {int(token)} names no device buffer of app {app!r}")
        return buf

    def owns(self, buffer: DeviceBuffer) -> bool:
        ref = self._buffers.get(int(buffer.token))
        return ref is not None and ref() is buffer

    def __len__(self) -> int:
        return len(self._buffers)


def _collected(buffers: dict[int, weakref.ref[DeviceBuffer]], token: int, ref: weakref.ref[DeviceBuffer]) -> None:
    """A device buffer was garbage collected: forget its token (lock-free; see ``BufferTracker``)."""
    buffers.pop(token, None)


_trackers: weakref.WeakKeyDictionary[Any, BufferTracker] = weakref.WeakKeyDictionary()
_trackers_lock = threading.Lock()


def tracker_for(device: Any) -> BufferTracker:
    """The token table of ``device`` (created on first use)."""
    with _trackers_lock:
        tracker = _trackers.get(device)
        if tracker is None:
            tracker = _trackers[device] = BufferTracker()
        return tracker


class DeviceBuffer:
    """A buffer owned by a device (made by ``device.allocate``; no public constructor)."""

    __slots__ = ("__weakref__", "_models", "_roles", "_storage", "_tracker", "app", "dimensions", "operand", "token", "type")

    def __init__(self, tracker: BufferTracker, operand: Operand, dims: tuple[int, ...], app: str,
                 models: tuple[Any, ...], roles: frozenset[tuple[int, str, int]]) -> None:
        self.operand = operand
        self.type: OperandType = operand.type
        self.dimensions = dims
        self.app = app
        self._models = models  # keeps the prepared models (and so the role keys' ids) alive
        self._roles = roles
        self._storage: np.ndarray | None = None
        self._tracker = tracker
        self.token = tracker.add(self)

    # -- state ----------------------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self._storage is not None

    @property
    def nbytes(self) -> int:
        return self.type.dtype.itemsize * math.prod(self.dimensions)

    def __repr__(self) -> str:
        state = "initialized" if self.initialized else "uninitialized"
        return f"<DeviceBuffer token={int(self.token)} {self.type.name} {list(self.dimensions)} {state}>"

    # -- explicit copies --------------------------------------------------------------------------

    def copy_from(self, source: Memory | np.ndarray, dimensions: Sequence[int] | None = None) -> None:
        """Initialize the buffer from a memory pool or array of exactly its size.

        ``dimensions``: ``()`` for a scalar or to mean the buffer's own dimensions, else fully
        specified and compatible with them; an array's shape is used when omitted. Any
        violation is INVALID_ARGUMENT and leaves the buffer uninitialized.
        """
        self._storage = None
        data = self._source(source, dimensions).copy().view(self.type.dtype).reshape(self.dimensions)
        data.flags.writeable = False
        self._storage = data

    def _source(self, source: Memory | np.ndarray, dimensions: Sequence[int] | None) -> np.ndarray:
        """``copy_from``'s checks (INVALID_ARGUMENT); the source's bytes (a view)."""
        where = f"copy_from (buffer {int(self.token)})"
        raw = _bytes_of(source, self.type, where, writable=False)
        if dimensions is None:
            dimensions = source.shape if isinstance(source, np.ndarray) and not self.type.is_scalar else ()
        dims = _int_dims(dimensions, where)
        if self.type.is_scalar and dims:
            raise InvalidArgumentError(f"{where}: a scalar buffer takes no dimensions, got {list(dims)}")
        if dims and (0 in dims or not compatible(dims, self.dimensions)):
            raise InvalidArgumentError(
                f"{where}: dimensions {list(dims)} are not fully specified or not compatible with {list(self.dimensions)}"
            )
        if raw.nbytes != self.nbytes:
            raise InvalidArgumentError(f"{where}: the source has {raw.nbytes} bytes, the buffer {self.nbytes}")
        return raw

    def copy_to(self, destination: Memory | np.ndarray) -> None:
        """Copy the buffer into a writable memory pool or array of exactly its size.

        A size mismatch is INVALID_ARGUMENT; an uninitialized buffer is GENERAL_FAILURE.
        """
        raw = self._destination(destination)
        storage = self._storage
        if storage is None:
            raise GeneralFailureError(f"copy_to (buffer {int(self.token)}): the buffer is uninitialized")
        raw[...] = storage.reshape(-1).view(np.uint8)

    def _destination(self, destination: Memory | np.ndarray) -> np.ndarray:
        """``copy_to``'s checks (INVALID_ARGUMENT); the destination's bytes (a view)."""
        where = f"copy_to (buffer {int(self.token)})"
        raw = _bytes_of(destination, self.type, where, writable=True)
        if raw.nbytes != self.nbytes:
            raise InvalidArgumentError(f"{where}: the destination has {raw.nbytes} bytes, the buffer {self.nbytes}")
        return raw

    def free(self) -> None:
        """Release the buffer: its token becomes unknown and its data is dropped."""
        self._tracker._forget(int(self.token))
        self._storage = None

    # -- execution side (used by nnrt.execution._request) -------------------------------------------

    def check_role(self, prepared: Any, kind: str, io_index: int, where: str) -> None:
        if (id(prepared), kind, io_index) not in self._roles:
            raise InvalidArgumentError(
                f"{where}: device buffer {int(self.token)} was not allocated with the role {kind} {io_index} of this "
                "prepared model"
            )

    def input_view(self, where: str) -> np.ndarray:
        """A read-only view of the data; GENERAL_FAILURE when uninitialized."""
        storage = self._storage
        if storage is None:
            raise GeneralFailureError(f"{where}: device buffer {int(self.token)} is uninitialized")
        return storage.view()

    def stand_in(self) -> np.ndarray:
        """A read-only array of the buffer's type and shape that allocates nothing: what request
        validation checks in place of an uninitialized input, so that every INVALID_ARGUMENT of
        the request is reported before the GENERAL_FAILURE of reading uninitialized data."""
        return np.broadcast_to(np.zeros((), self.type.dtype), self.dimensions)

    def begin_write(self) -> None:
        self._storage = None

    def _check_result(self, value: np.ndarray, where: str) -> None:
        if value.shape != self.dimensions:
            raise GeneralFailureError(
                f"{where}: the result has shape {list(value.shape)}, device buffer {int(self.token)} holds "
                f"{list(self.dimensions)}"
            )

    def commit(self, value: np.ndarray, where: str) -> np.ndarray:
        """Adopt an execution's output array; GENERAL_FAILURE when its shape does not fit."""
        self._check_result(value, where)
        value.flags.writeable = False
        self._storage = value
        return value.view()


def domain_of(driver: Any) -> Any:
    """The device whose buffers a prepared model with this driver takes: the driver itself
    (an in-process device), or its ``buffer_domain`` (a process-backed device's per-model
    driver names its device)."""
    return getattr(driver, "buffer_domain", driver)


def resolve_buffer(device: Any, app: str, value: DeviceBuffer | BufferToken, where: str) -> DeviceBuffer:
    """The device buffer a request argument names, for a prepared model of ``app`` on ``device``
    (``domain_of`` the prepared model's driver)."""
    tracker = tracker_for(device)
    if isinstance(value, DeviceBuffer):
        if not tracker.owns(value) or value.app != app:
            raise InvalidArgumentError(f"{where}: device buffer {int(value.token)} is freed or belongs to another device or app")
        return value
    return tracker.lookup(value, app, where)


def compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """True when no known axis differs (an empty tuple is an unknown rank)."""
    if not a or not b:
        return True
    return len(a) == len(b) and all(x == 0 or y == 0 or x == y for x, y in zip(a, b))


def _combine(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a:
        return b
    if not b:
        return a
    return tuple(x or y for x, y in zip(a, b))


def _int_dims(dims: Any, where: str) -> tuple[int, ...]:
    return as_dims(dims, f"{where} dimensions")


def _bytes_of(x: Any, type_: OperandType, where: str, *, writable: bool) -> np.ndarray:
    if isinstance(x, Memory):
        raw = x.buffer
    elif isinstance(x, np.ndarray):
        if x.dtype != type_.dtype:
            raise InvalidArgumentError(f"{where}: the array has dtype {x.dtype}, the buffer holds {type_.dtype}")
        if not x.flags.c_contiguous:
            raise InvalidArgumentError(f"{where}: the array must be C-contiguous")
        raw = x.reshape(-1).view(np.uint8)
    else:
        raise InvalidArgumentError(f"{where}: {type(x).__name__} is neither a Memory nor a numpy array")
    if writable and not raw.flags.writeable:
        raise InvalidArgumentError(f"{where}: the destination is read-only")
    return raw


def allocate_buffer(
    device: Any,
    desc: BufferDesc | Sequence[int],
    prepared_models: Sequence[Any],
    input_roles: Sequence[BufferRole] = (),
    output_roles: Sequence[BufferRole] = (),
    cls: type[DeviceBuffer] | None = None,
) -> tuple[DeviceBuffer, BufferToken]:
    """``Device.allocate`` for devices that keep buffers in host memory (see the module doc);
    ``cls``: a ``DeviceBuffer`` subclass keeping its data elsewhere (a service's buffer)."""
    where = "allocate"
    dims = _int_dims(desc.dimensions if isinstance(desc, BufferDesc) else desc, f"{where}: desc")
    models = tuple(prepared_models)
    if not models:
        raise InvalidArgumentError(f"{where}: no prepared models given")
    if not input_roles and not output_roles:
        raise InvalidArgumentError(f"{where}: no input or output roles given")
    for k, pm in enumerate(models):
        if domain_of(getattr(pm, "_driver", None)) is not device:
            raise InvalidArgumentError(f"{where}: prepared model {k} is not a model prepared by this device")
    apps = {pm.app for pm in models}
    if len(apps) > 1:
        raise InvalidArgumentError(f"{where}: the prepared models belong to different apps {sorted(apps)}")
    roles: set[tuple[int, str, int]] = set()
    operands: list[tuple[str, Operand]] = []
    for kind, group in (("input", input_roles), ("output", output_roles)):
        for r, role in enumerate(group):
            at = f"{where}: {kind} role {r}"
            if not isinstance(role, BufferRole):
                raise InvalidArgumentError(f"{at}: {role!r} is not a BufferRole")
            if not isinstance(role.model_index, int) or not 0 <= role.model_index < len(models):
                raise InvalidArgumentError(f"{at}: model index {role.model_index!r} is out of range [0, {len(models)})")
            pm = models[role.model_index]
            indexes = pm.model.input_indexes if kind == "input" else pm.model.output_indexes
            if not isinstance(role.io_index, int) or not 0 <= role.io_index < len(indexes):
                raise InvalidArgumentError(f"{at}: {kind} index {role.io_index!r} is out of range [0, {len(indexes)})")
            p = role.probability
            if not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
                raise InvalidArgumentError(f"{at}: probability {p!r} is outside (0, 1]")
            key = (id(pm), kind, role.io_index)
            if key in roles:
                raise InvalidArgumentError(f"{at}: the role {kind} {role.io_index} of that prepared model is given twice")
            roles.add(key)
            operands.append((at, pm.model.operands[indexes[role.io_index]]))
    first = operands[0][1]
    if first.type.is_scalar and dims:
        raise InvalidArgumentError(f"{where}: the buffer holds a scalar ({first.type.name}); desc gives dimensions {list(dims)}")
    combined = dims
    for at, op in operands:
        if (op.type, op.scale, op.zero_point, op.channel_quant) != (first.type, first.scale, first.zero_point,
                                                                     first.channel_quant):
            raise InvalidArgumentError(f"{at}: {op.label} differs in type or quantization from the first role's {first.label}")
        if not compatible(combined, op.dimensions):
            raise InvalidArgumentError(f"{at}: dimensions {list(op.dimensions)} are incompatible with {list(combined)}")
        combined = _combine(combined, op.dimensions)
    if not first.type.is_scalar and (not combined or 0 in combined):
        raise GeneralFailureError(f"{where}: dimensions {list(combined)} are not fully known; dynamic buffers are unsupported")
    buffer = (cls or DeviceBuffer)(tracker_for(device), first, combined, next(iter(apps)), models, frozenset(roles))
    return buffer, buffer.token
