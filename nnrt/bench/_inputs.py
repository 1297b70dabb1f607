"""What ``nnrt bench`` runs: the model file opened, and seeded inputs that fit it.

``open_model`` takes a ``.tflite`` or ``.onnx`` file (``nnrt.load``) or a model saved with
``Model.save`` (told apart by its magic bytes), so the command works on nnrt's own models as
well as on imported ones. ``make_inputs`` draws one seeded value per model input, respecting
its type: normal floats, integers over the full range of 8-bit quantized types (so both ends
of the quantized scale are exercised), small non-negative integers for plain integer tensors
(they are often indices or lengths), booleans; state inputs an importer made explicit start at
their initial values (``with_initial_state``). Dynamic dimensions must be fixed, either when
the file is loaded (``input_shapes``) or here; a value given with ``--input-value`` fills an
input whose content matters (a sample rate, a flag). ``--load-value`` instead fixes the value
when the file is loaded (``nnrt.load(input_values=...)``): the input becomes a constant of
nnrt's model, and an If it decides is taken at load (the reference still receives it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnrt.errors import InvalidArgumentError
from nnrt.importers import load, sniff_format, state_variables
from nnrt.model import Model, Operand
from nnrt.model._serialize import MAGIC
from nnrt.types import OperandType

__all__ = ["InputSpec", "LoadedModel", "input_specs", "make_inputs", "open_model", "parse_shape_options", "parse_value_options",
           "with_initial_state"]


@dataclass(frozen=True)
class LoadedModel:
    """A model opened for benchmarking: the finished ``Model``, its file and the file's format."""

    model: Model
    path: str
    format: str  # "tflite", "onnx" or "nnrt"
    size: int


@dataclass(frozen=True)
class InputSpec:
    """One model input as ``nnrt bench`` feeds it."""

    name: str
    type: OperandType
    shape: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0


def parse_shape_options(items: Sequence[str]) -> dict[str, list[int]]:
    """``["x=1,3,224,224", ...]`` -> ``{"x": [1, 3, 224, 224]}`` (``"sr="``: a 0-d tensor);
    INVALID_ARGUMENT naming the bad one."""
    out: dict[str, list[int]] = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = [int(d) for d in dims.replace("x", ",").split(",") if d.strip()]
            if any(d <= 0 for d in out[name]):
                raise ValueError
        except ValueError:
            raise InvalidArgumentError(f"--input-shape {item!r}: expected NAME=D1,D2,... with positive dimensions") from None
    return out


def parse_value_options(items: Sequence[str], option: str = "--input-value") -> dict[str, float]:
    """``["sr=16000"]`` -> ``{"sr": 16000.0}``; INVALID_ARGUMENT naming the bad one."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = float(value)
        except ValueError:
            raise InvalidArgumentError(f"{option} {item!r}: expected NAME=NUMBER") from None
    return out


def open_model(path: str | os.PathLike[str], input_shapes: Mapping[str, Sequence[int]] | None = None,
               load_values: Mapping[str, float] | None = None) -> LoadedModel:
    """Open ``path``: an nnrt model file (``Model.save``), else ``nnrt.load``'s formats
    (``load_values`` are its ``input_values``: inputs fixed at load).

    Raises ``InvalidArgumentError`` for a missing or unreadable file and ``UnsupportedModelError``
    (listing every rejected node) for a model nnrt cannot express.
    """
    name = os.fspath(path)
    try:
        size = os.path.getsize(name)
        with open(name, "rb") as f:
            head = f.read(8)
    except OSError as err:
        raise InvalidArgumentError(f"{name}: cannot open the model: {err.strerror or err}") from None
    if head == MAGIC:
        if load_values:
            raise InvalidArgumentError(f"{name}: --load-value applies to .onnx files, not to a saved nnrt model")
        return LoadedModel(Model.load(name), name, "nnrt", size)
    return LoadedModel(load(name, input_shapes=input_shapes, input_values=load_values), name, sniff_format(head), size)


def input_specs(model: Model, shapes: Mapping[str, Sequence[int]] | None = None,
                values: Mapping[str, float] | None = None) -> list[InputSpec]:
    """The concrete shape of every input: the model's, with dynamic dimensions from ``shapes``.
    An input of unknown rank given a value (``values``) and no shape is a 0-d tensor (ONNX's
    scalar tensors, such as a sample rate, have rank 0 and arrive with an unknown rank).

    INVALID_ARGUMENT names an input whose dimensions are still unknown, or whose given shape
    contradicts the model's.
    """
    shapes = shapes or {}
    values = values or {}
    specs = []
    for k, i in enumerate(model.input_indexes):
        op = model.operands[i]
        name = op.name or f"input{k}"
        given = shapes.get(name)
        if given is None and name in values and not op.type.is_scalar and not op.dimensions:
            given = ()
        specs.append(InputSpec(name, op.type, _concrete_shape(op, name, given), op.scale, op.zero_point))
    return specs


def _concrete_shape(op: Operand, name: str, given: Sequence[int] | None) -> tuple[int, ...]:
    if op.type.is_scalar:
        return ()
    dims = tuple(op.dimensions)
    if given is not None:
        fixed = tuple(int(d) for d in given)
        if dims and (len(dims) != len(fixed) or any(d and d != g for d, g in zip(dims, fixed))):
            raise InvalidArgumentError(f"input {name!r}: --input-shape {list(fixed)} contradicts the model's {list(dims)}")
        return fixed
    if not dims or any(d == 0 for d in dims):
        shown = list(dims) if dims else "unknown rank"
        raise InvalidArgumentError(
            f"input {name!r} has dynamic dimensions ({shown}, 0 = unknown): give them with --input-shape {name}=D1,D2,..."
        )
    return dims


def with_initial_state(model: Model, inputs: list[Any]) -> list[Any]:
    """``inputs`` with the state inputs an importer made explicit (``nnrt.importers.state_variables``)
    set to their initial values, as at the start of a stream."""
    out = list(inputs)
    for var in state_variables(model):
        out[var.input] = np.array(var.initial, dtype=np.asarray(out[var.input]).dtype).reshape(np.shape(out[var.input]))
    return out


def make_inputs(specs: Sequence[InputSpec], *, seed: int = 0, values: Mapping[str, float] | None = None) -> list[Any]:
    """One seeded value per input (``values`` fills the named inputs with a constant)."""
    rng = np.random.default_rng(seed)
    values = values or {}
    known = {s.name for s in specs}
    for name in values:
        if name not in known:
            raise InvalidArgumentError(f"--input-value {name}: the model has no input {name!r} (inputs: {sorted(known)})")
    out: list[Any] = []
    for spec in specs:
        dtype = spec.type.dtype
        if spec.name in values:
            arr = np.full(spec.shape, values[spec.name]).astype(dtype)
        elif dtype.kind == "f":
            arr = rng.standard_normal(spec.shape).astype(dtype)
        elif dtype.kind == "b":
            arr = rng.integers(0, 2, spec.shape).astype(dtype)
        elif spec.type.is_quantized and dtype.itemsize == 1:
            lo, hi = (-128, 127) if dtype.kind == "i" else (0, 255)
            arr = rng.integers(lo, hi + 1, spec.shape).astype(dtype)
        else:
            arr = rng.integers(0, 4, spec.shape).astype(dtype)
        out.append(arr.reshape(()).item() if spec.type.is_scalar else arr)
    return out
