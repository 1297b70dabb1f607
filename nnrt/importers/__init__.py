"""Importers: ``nnrt.load(path)`` reads a ``.tflite`` or ``.onnx`` file into a finished ``Model``.

The format is chosen by content, not by file name: a TFLite flatbuffer carries the file
identifier ``TFL3`` at bytes 4-8; anything else is read as an ONNX ``ModelProto``. An importer
builds the model through the same public ``Model`` calls a user would make, so every
validation rule applies. It knows no device.

A node that cannot be expressed does not stop the import at once: every offending node is
collected (``Rejections``) and ``load`` fails with one INVALID_ARGUMENT listing them all, like
TFLite's NNAPI delegate's validation reasons.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from nnrt.errors import InvalidArgumentError
from nnrt.importers._common import Rejection, Rejections, UnsupportedModelError
from nnrt.importers._tflite_control import StateVariable, state_variables
from nnrt.model import Model

__all__ = ["Rejection", "Rejections", "StateVariable", "UnsupportedModelError", "load", "sniff_format",
           "state_variables"]

InputShapes = Mapping[str, Sequence[int]]
InputValues = Mapping[str, object]


def sniff_format(head: bytes) -> str:
    """``"tflite"`` or ``"onnx"`` from the first bytes of a file."""
    if len(head) >= 8 and head[4:8] == b"TFL3":
        return "tflite"
    return "onnx"


def load(path: str | os.PathLike[str], *, input_shapes: InputShapes | None = None,
         input_values: InputValues | None = None) -> Model:
    """Read a ``.tflite`` or ``.onnx`` file into a finished ``Model``.

    Inputs and outputs are, in order, the file's graph inputs and outputs, with their names
    kept on the operands. ``input_shapes={"name": [dims]}`` fixes dynamic dimensions; those
    left dynamic stay unknown (0). A stateful TFLite model (resource variables, LSTM/RNN
    variable tensors) gets its state as extra inputs and outputs after the file's own
    (``state_in/<key>``, ``state_out/<key>``); ``state_variables(model)`` lists them with their
    positions and initial values. ``input_values={"name": value}`` (ONNX) fixes an input's value at
    load: the input becomes a constant and leaves the model's inputs, so what depends on it only
    (a condition that picks an If branch, as silero's sample rate does) is decided at load.
    Raises ``InvalidArgumentError`` for a file that cannot be
    read or parsed, and for a model with nodes nnrt cannot express (every one listed: name,
    op type, reason).
    """
    try:
        with open(os.fspath(path), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            # One copy, read once: constants stay views of this buffer (never a second copy),
            # and nothing done to the file afterwards (rewritten, truncated) can reach the model.
            data = bytearray(size)
            got = f.readinto(data)
    except (OSError, TypeError, ValueError) as err:
        raise InvalidArgumentError(f"load: cannot read {path!r}: {err}") from None
    if got != size:
        raise InvalidArgumentError(f"load: {path!r} changed while it was read ({got} of {size} bytes)")
    if size == 0:
        raise InvalidArgumentError(f"load: {path!r} is empty")
    shapes = _check_input_shapes(input_shapes)
    values = _check_input_values(input_values)
    name = os.path.basename(os.fspath(path))
    if sniff_format(bytes(data[:8])) == "tflite":
        from nnrt.importers._tflite import load_tflite

        if values:
            raise InvalidArgumentError(f"load: {name}: input_values is supported for ONNX files only")

        return load_tflite(memoryview(data), name=name, input_shapes=shapes)
    from nnrt.importers._onnx_graph import load_onnx

    return load_onnx(memoryview(data), name=name, input_shapes=shapes, input_values=values,
                     base_dir=os.path.dirname(os.path.abspath(path)))


def _check_input_shapes(input_shapes: InputShapes | None) -> dict[str, tuple[int, ...]]:
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise InvalidArgumentError(f"load: input_shapes must map input names to dimensions, got {input_shapes!r}")
    out: dict[str, tuple[int, ...]] = {}
    for key, dims in input_shapes.items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"load: input_shapes key {key!r} is not an input name")
        try:
            fixed = tuple(int(d) for d in dims)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"load: input_shapes[{key!r}] = {dims!r} is not a list of integers") from None
        if any(d < 0 for d in fixed):
            raise InvalidArgumentError(f"load: input_shapes[{key!r}] = {list(fixed)} has a negative dimension")
        out[key] = fixed
    return out


def _check_input_values(input_values: InputValues | None) -> dict[str, np.ndarray]:
    if input_values is None:
        return {}
    if not isinstance(input_values, Mapping):
        raise InvalidArgumentError(f"load: input_values must map input names to values, got {input_values!r}")
    out: dict[str, np.ndarray] = {}
    for key, value in input_values.items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"load: input_values key {key!r} is not an input name")
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as err:
            raise InvalidArgumentError(f"load: input_values[{key!r}] is not an array: {err}") from None
        if arr.dtype.kind not in "biuf":
            raise InvalidArgumentError(f"load: input_values[{key!r}] = {value!r} is not a number or numeric array")
        out[key] = arr
    return out
