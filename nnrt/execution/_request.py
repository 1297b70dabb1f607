"""Request arguments that live in memory pools or device buffers (the slow path of validation).

``PreparedModel._validate_request`` handles plain numpy arrays itself (the fast path) and calls
``resolve_request`` only when it meets an argument that is not one: a ``MemoryLocation`` (or a
``(memory, offset, length)`` tuple), a ``DeviceBuffer`` or a ``BufferToken``. Each is turned into
an array and the request is validated again, now all arrays:

* a location must lie inside its pool (offset >= 0, length > 0, offset + length <= size), and its
  length must be exactly the size implied by the operand's type and dimensions (the model's, or
  the location's ``dimensions`` where the model leaves them unknown); an output location must be
  writable. Inputs become zero-copy views of the pool; outputs are views the results are written
  into. Violations are INVALID_ARGUMENT naming the argument.
* a device buffer (digest section 5) must be known to this device and app (token 0 or unknown:
  INVALID_ARGUMENT) and declared at allocation for this role (else INVALID_ARGUMENT); one buffer
  may be several inputs but never an input and an output nor two outputs (INVALID_ARGUMENT); an
  uninitialized input is GENERAL_FAILURE. An output buffer becomes uninitialized when the request
  is accepted and initialized with the kernels' array when the execution succeeds
  (``ResolvedOutputs.commit``, called by ``_finish``); a result of the wrong shape is
  GENERAL_FAILURE.

It also holds the input-by-input checks of a request the one-pass check does not take
(``check_request``: conversions of lists and scalars, each rejection naming its input), the type
checks of the request's containers (``request_args``: ``inputs``/``outputs`` that are not a list
or tuple) and the rule
for ``None`` arguments (``check_omitted``): a model input may be omitted only where every
operation reading it takes that input as optional; otherwise the request is INVALID_ARGUMENT,
before any kernel sees it.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.errors import InvalidArgumentError, NnrtError
from nnrt.memory import BufferToken, DeviceBuffer, Memory, MemoryLocation
from nnrt.memory._domain import compatible, domain_of, resolve_buffer
from nnrt.model import Operand
from nnrt.ops import OpCall, prepare_function
from nnrt.types import OperandLifeTime, OperationType, OutputShape

if TYPE_CHECKING:
    from nnrt.execution._prepared import PreparedModel, _InputSpec

__all__ = ["ResolvedOutputs", "check_omitted", "check_request", "is_pool_arg", "request_args", "resolve_request"]


def request_args(values: Any, what: str) -> Any:
    """``inputs`` or ``outputs`` given as something other than a list or tuple: another sequence
    becomes a list; a numpy array is returned for the caller's own message; anything else
    (None, a number, a string, an iterator) is INVALID_ARGUMENT."""
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes, bytearray, memoryview)):
        return list(values)
    raise InvalidArgumentError(f"{what} must be a list or tuple of arguments, got {type(values).__name__}")


#: Per prepared model, per input index: may that input be omitted (None)? Computed on first use.
_omittable: weakref.WeakKeyDictionary[Any, dict[int, bool]] = weakref.WeakKeyDictionary()


def check_omitted(prepared: PreparedModel, k: int, operand: Operand) -> None:
    """INVALID_ARGUMENT unless model input ``k`` may be omitted: every operation reading it must
    take it as an optional input, which its kernel's prepare function decides, asked once with
    the operand marked NO_VALUE: it must accept that, and must have asked whether the input is
    present (``OpCall.has_input``), else it never treats that input as optional. Inputs of IF
    and WHILE are never optional."""
    known = _omittable.setdefault(prepared, {})
    if k not in known:
        known[k] = _may_omit(prepared.model, operand)
    if not known[k]:
        raise InvalidArgumentError(f"input {k} ({operand.label}) is None, but an operation reading it requires a value")


def _may_omit(model: Any, operand: Operand) -> bool:
    omitted = dataclasses.replace(operand, lifetime=OperandLifeTime.NO_VALUE, value=None)
    for operation in model.operations:
        if operand.index not in operation.inputs:
            continue
        prepare = prepare_function(operation.type)
        if prepare is None or operation.type in (OperationType.IF, OperationType.WHILE):
            return False
        ins = tuple(omitted if i == operand.index else model.operands[i] for i in operation.inputs)
        outs = tuple(model.operands[i] for i in operation.outputs)
        probe = _Probe(operation.type, operation.index, ins, outs, model.relaxed)
        try:
            prepare(probe)
        except NnrtError:
            return False
        if not any(ins[i] is omitted for i in probe.asked):
            return False
    return True


class _Probe(OpCall):
    """An ``OpCall`` that records which inputs its prepare function asked about."""

    __slots__ = ("asked",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked: set[int] = set()

    def has_input(self, i: int) -> bool:
        self.asked.add(i)
        return super().has_input(i)


def is_pool_arg(x: Any) -> bool:
    """True for the argument kinds this module resolves."""
    return isinstance(x, (MemoryLocation, DeviceBuffer, BufferToken)) or (
        type(x) is tuple and 3 <= len(x) <= 4 and isinstance(x[0], Memory)
    )


class ResolvedOutputs(list[np.ndarray | None]):
    """Output buffers after resolution, with the device buffers to initialize on success."""

    __slots__ = ("device_buffers",)

    def __init__(self, bufs: Sequence[np.ndarray | None], device_buffers: list[tuple[int, DeviceBuffer]]) -> None:
        super().__init__(bufs)
        self.device_buffers = device_buffers

    def commit(self, outs: list[np.ndarray], shapes: Sequence[OutputShape]) -> None:
        """Hand each device-buffer output its array; the result keeps a read-only view."""
        for j, buf in self.device_buffers:
            outs[j] = buf.commit(outs[j], f"output {j}")


def resolve_request(
    prepared: PreparedModel, inputs: Sequence[Any], outputs: Sequence[Any] | None
) -> tuple[list[Any], Sequence[np.ndarray | None] | None]:
    """Turn pool and device-buffer arguments into arrays, then validate the request as usual."""
    specs = prepared._inputs
    if len(inputs) != len(specs):
        raise InvalidArgumentError(f"the model has {len(specs)} inputs, the request gives {len(inputs)}")
    device, app = domain_of(prepared._driver), prepared.app
    new_inputs = list(inputs)
    read: set[int] = set()
    uninitialized: list[tuple[DeviceBuffer, str]] = []
    for spec, x in zip(specs, inputs):
        if not is_pool_arg(x):
            continue
        where = f"input {spec.k} ({spec.operand.label})"
        if isinstance(x, (DeviceBuffer, BufferToken)):
            buf = resolve_buffer(device, app, x, where)
            buf.check_role(prepared, "input", spec.k, where)
            if buf.initialized:
                new_inputs[spec.k] = buf.input_view(where)
            else:  # GENERAL_FAILURE, but only after every INVALID_ARGUMENT check
                new_inputs[spec.k] = buf.stand_in()
                uninitialized.append((buf, where))
            read.add(id(buf))
        else:
            new_inputs[spec.k] = _view(x, spec.operand, where, output=False)
    new_outputs: list[Any] | None = None
    written: list[tuple[int, DeviceBuffer]] = []
    if outputs is not None and not isinstance(outputs, np.ndarray):
        ops = prepared._outputs
        if len(outputs) != len(ops):
            raise InvalidArgumentError(f"the model has {len(ops)} outputs, the request gives {len(outputs)}")
        new_outputs = list(outputs)
        for j, (op, b) in enumerate(zip(ops, outputs)):
            if not is_pool_arg(b):
                continue
            where = f"output {j} ({op.label})"
            if isinstance(b, (DeviceBuffer, BufferToken)):
                buf = resolve_buffer(device, app, b, where)
                buf.check_role(prepared, "output", j, where)
                if id(buf) in read:
                    raise InvalidArgumentError(f"{where}: device buffer {int(buf.token)} is also an input of the request")
                if any(other is buf for _, other in written):
                    raise InvalidArgumentError(f"{where}: device buffer {int(buf.token)} is given for two outputs")
                written.append((j, buf))
                new_outputs[j] = None
            else:
                new_outputs[j] = _view(b, op, where, output=True)
    args, bufs = prepared._validate_request(new_inputs, outputs if new_outputs is None else new_outputs)
    for buf, where in uninitialized:
        buf.input_view(where)  # raises
    if not written:
        return args, bufs
    for _, buf in written:
        buf.begin_write()
    assert bufs is not None
    return args, ResolvedOutputs(bufs, written)


#: At most this many resolved views per pool (``Memory._views``), keyed by (offset, length,
#: dimensions, operand type and dims, output, pool size). Apps reuse the same locations
#: execution after execution; a hit skips every check, which were all passed when the view was
#: made (a pool's size never changes). The pool owns its cache and ``Memory.close`` empties it,
#: so a closed pool is never kept mapped (nor its file descriptor open) by views of our own.
_MAX_VIEWS = 64


def _view(x: Any, op: Operand, where: str, *, output: bool) -> np.ndarray:
    loc = x if isinstance(x, MemoryLocation) else None
    mem, offset, length = (loc.memory, loc.offset, loc.length) if loc is not None else x[:3]
    dims = loc.dimensions if loc is not None else (x[3] if len(x) == 4 else None)
    try:
        key = (offset, length, dims, op.type, op.dimensions, output, mem.size)
        views: dict[tuple[Any, ...], np.ndarray] | None = mem._views
        view = views.get(key) if views is not None else None
    except (TypeError, AttributeError):  # not a pool, or unhashable parts: no caching, the checks below report them
        key, views, view = None, None, None
    if view is None:
        view = _location_view(_location(x, where), op, where, output=output)
        if key is not None and views is not None and len(views) < _MAX_VIEWS:
            views[key] = view
    return view


def _location(x: Any, where: str) -> MemoryLocation:
    if isinstance(x, MemoryLocation):
        loc = x
    else:
        loc = MemoryLocation(*x)
    mem, offset, length = loc.memory, loc.offset, loc.length
    if not isinstance(mem, Memory):
        raise InvalidArgumentError(f"{where}: {type(mem).__name__} is not a Memory")
    for name, v in (("offset", offset), ("length", length)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise InvalidArgumentError(f"{where}: the location's {name} {v!r} is not an int")
    if offset < 0 or length <= 0 or offset + length > mem.size:
        raise InvalidArgumentError(f"{where}: offset {offset} + length {length} is outside the memory of {mem.size} bytes")
    return loc


def _location_view(loc: MemoryLocation, op: Operand, where: str, *, output: bool) -> np.ndarray:
    dtype = op.type.dtype
    if op.type.is_scalar:
        dims: tuple[int, ...] | None = ()
    elif loc.dimensions is not None:
        try:
            dims = tuple(int(d) for d in loc.dimensions)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{where}: dimensions {loc.dimensions!r} are not integers") from None
        if not dims or any(d <= 0 for d in dims) or not compatible(dims, op.dimensions):
            raise InvalidArgumentError(
                f"{where}: the location's dimensions {list(dims)} are not fully specified or not compatible with "
                f"the model's {list(op.dimensions)}"
            )
    elif op.fully_specified:
        dims = op.dimensions
    elif output:
        dims = None  # the result's shape is known only after the run: a flat view
    else:
        raise InvalidArgumentError(
            f"{where}: the model's dimensions {list(op.dimensions)} are not fully specified; give the location dimensions"
        )
    length = int(loc.length)
    if dims is None:
        if length % dtype.itemsize:
            raise InvalidArgumentError(f"{where}: length {length} is not a multiple of the {dtype} item size")
    elif length != dtype.itemsize * math.prod(dims):
        raise InvalidArgumentError(
            f"{where}: length {length} given, {dtype.itemsize * math.prod(dims)} bytes expected for {op.type.name} "
            f"{list(dims)}"
        )
    raw = loc.memory.buffer[int(loc.offset) : int(loc.offset) + length]
    if output and not raw.flags.writeable:
        raise InvalidArgumentError(f"{where}: the memory is read-only")
    view = raw.view(dtype)
    return view if dims is None else view.reshape(dims)


def check_request(
    prepared: PreparedModel, inputs: Sequence[Any], outputs: Sequence[np.ndarray | None] | None
) -> tuple[list[Any], Sequence[np.ndarray | None] | None]:
    """``PreparedModel._validate_request`` input by input, for a request its one-pass check does
    not take: conversions, omitted inputs, pool views, and each rejection's error naming its
    input."""
    specs = prepared._inputs
    if type(inputs) is not list and type(inputs) is not tuple:
        inputs = request_args(inputs, "inputs")
    if outputs is not None and type(outputs) is not list and type(outputs) is not tuple:
        outputs = request_args(outputs, "outputs")
    if isinstance(inputs, np.ndarray) or len(inputs) != len(specs):
        n = 1 if isinstance(inputs, np.ndarray) else len(inputs)
        raise InvalidArgumentError(f"the model has {len(specs)} inputs, the request gives {n}")
    args: list[Any] = []
    for spec, x in zip(specs, inputs):
        if x is None:
            check_omitted(prepared, spec.k, spec.operand)
            args.append(None)
            continue
        if not isinstance(x, np.ndarray) or x.dtype != spec.dtype:
            if is_pool_arg(x):  # a memory location or device buffer: nnrt.execution._request
                return resolve_request(prepared, inputs, outputs)
            x = _coerce_input(spec, x)
        if spec.scalar:
            if x.size != 1:
                raise InvalidArgumentError(f"input {spec.k} ({spec.operand.label}) is a scalar; got shape {x.shape}")
            args.append(x.reshape(()).item())
            continue
        dims = spec.dims
        if dims and x.shape != dims:
            shape = x.shape
            if len(shape) != len(dims):
                raise InvalidArgumentError(
                    f"input {spec.k} ({spec.operand.label}) has rank {len(shape)}; the model says {len(dims)} {list(dims)}"
                )
            for d, s in zip(dims, shape):
                if d and d != s:
                    raise InvalidArgumentError(
                        f"input {spec.k} ({spec.operand.label}) has shape {list(shape)}; the model says {list(dims)}"
                    )
        args.append(x)
    if outputs is not None and not prepared._validate_outputs(outputs):
        return resolve_request(prepared, inputs, outputs)
    return args, outputs

def _coerce_input(spec: _InputSpec, x: Any) -> np.ndarray:
    where = f"input {spec.k} ({spec.operand.label})"
    if isinstance(x, np.ndarray):
        raise InvalidArgumentError(f"{where} has dtype {x.dtype}; the model's {spec.operand.type.name} needs {spec.dtype}")
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{where}: {type(x).__name__} is not an array") from None
    if arr.dtype == object or (arr.dtype.kind == "f" and spec.dtype.kind in "iub") or arr.dtype.kind not in "biuf":
        raise InvalidArgumentError(f"{where}: values of kind {arr.dtype} cannot be {spec.operand.type.name}")
    converted = arr.astype(spec.dtype)
    if arr.dtype.kind in "iu" and spec.dtype.kind in "iu" and not np.array_equal(converted, arr):
        raise InvalidArgumentError(f"{where}: values do not fit in {spec.dtype}")
    return converted
