"""Saving and loading models: ``model.save(path)`` / ``Model.load(path)``, and the pieces the
compilation cache reuses (``model_to_dict`` / ``model_from_dict``).

File format, version 1 (little-endian)::

    offset 0   8 bytes   magic b"NNRTMDL1"
    offset 8   8 bytes   u64 n: length of the JSON header
    offset 16  n bytes   UTF-8 JSON header (below)
    then zero padding to a multiple of 64, then the data section: every constant tensor's raw
    bytes (C order, the dtype of its operand type), each starting at a multiple of 64.

The header is ``{"format": 1, "main": 0, "models": [...]}``; ``models[0]`` is the main model,
then every referenced subgraph once. A model is ``{"name", "relaxed", "inputs", "outputs",
"operands", "operations"}``; an operand is ``{"type", "dims", "scale", "zero_point",
"lifetime", "name"}`` plus ``"channel_quant": [dim, [scales]]`` when per-channel, and a value:
``"scalar": v`` for a constant scalar, ``"array": {"offset", "nbytes"}`` (relative to the data
section) for a constant tensor, ``"subgraph": k`` (index into ``models``) for a SUBGRAPH
operand. An operation is ``{"type", "inputs", "outputs"}``. Enum fields hold NNAPI's numbers.

Loading rebuilds the model through the public ``Model`` calls, so a malformed file fails with
INVALID_ARGUMENT like a badly built model; a truncated or unreadable file is INVALID_ARGUMENT
too. The file is read once into private memory and constant tensors are read-only views of
that copy: a loaded model never changes when the file is rewritten or truncated afterwards
(a mapping of the file would compute on the new bytes, or die of SIGBUS). The header is strict
JSON (no ``NaN``/``Infinity``) of bounded nesting; anything else is INVALID_ARGUMENT.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.errors import InvalidArgumentError
from nnrt.model._operand import dims_product
from nnrt.types import OperandLifeTime

if TYPE_CHECKING:
    from nnrt.model._model import Model

__all__ = ["FORMAT_VERSION", "MAGIC", "array_at", "load_model", "model_from_dict", "model_to_dict", "parse_header", "save_model"]

MAGIC = b"NNRTMDL1"
FORMAT_VERSION = 1
ALIGN = 64

#: Given an array, store it and return its descriptor (``{"offset", "nbytes"}``).
AddArray = Callable[[np.ndarray], dict[str, int]]
#: Given a descriptor and the operand's dtype and dimensions, return the (read-only) array.
GetArray = Callable[[dict[str, Any], np.dtype[Any], tuple[int, ...]], np.ndarray]


def model_to_dict(model: Model, add_array: AddArray) -> dict[str, Any]:
    """The JSON-ready description of ``model`` and its subgraphs; tensors go to ``add_array``."""
    models = [model, *model.referenced_models()]
    index = {id(m): k for k, m in enumerate(models)}
    out = []
    for m in models:
        operands = []
        for op in m.operands:
            d: dict[str, Any] = {"type": int(op.type), "dims": list(op.dimensions), "scale": op.scale,
                                 "zero_point": op.zero_point, "lifetime": int(op.lifetime), "name": op.name}
            if op.channel_quant is not None:
                d["channel_quant"] = [op.channel_quant.channel_dim, list(op.channel_quant.scales)]
            if op.is_constant:
                if isinstance(op.value, np.ndarray):
                    d["array"] = add_array(np.ascontiguousarray(op.value))
                else:
                    d["scalar"] = op.value
            elif op.subgraph is not None:
                d["subgraph"] = index[id(op.subgraph)]
            operands.append(d)
        out.append({"name": m.name, "relaxed": m.relaxed, "inputs": list(m.input_indexes), "outputs": list(m.output_indexes),
                    "operands": operands,
                    "operations": [{"type": int(o.type), "inputs": list(o.inputs), "outputs": list(o.outputs)}
                                   for o in m.operations]})
    return {"format": FORMAT_VERSION, "main": 0, "models": out}


def model_from_dict(doc: Any, get_array: GetArray) -> Model:
    """Rebuild the model ``model_to_dict`` described (INVALID_ARGUMENT when malformed)."""
    from nnrt.model._model import Model

    try:
        if doc["format"] != FORMAT_VERSION:
            raise InvalidArgumentError(f"Model.load: format version {doc['format']!r} is not {FORMAT_VERSION}")
        descs = doc["models"]
        built: dict[int, Model] = {}

        def build(k: int, path: tuple[int, ...]) -> Model:
            if k in built:
                return built[k]
            if k in path or not 0 <= k < len(descs):
                raise InvalidArgumentError(f"Model.load: bad subgraph reference {k}")
            desc = descs[k]
            m = Model(name=str(desc["name"]))
            for i, d in enumerate(desc["operands"]):
                m.add_operand(d["type"], d["dims"], d["scale"], d["zero_point"], name=str(d["name"]))
                op = m.operands[i]
                if "channel_quant" in d:
                    dim, scales = d["channel_quant"]
                    m.set_operand_symm_per_channel_quant_params(i, dim, scales)
                if "array" in d:
                    if not op.fully_specified or op.type.is_scalar:
                        raise InvalidArgumentError(f"Model.load: {op.label}: a constant tensor needs full dimensions")
                    arr = get_array(d["array"], op.type.dtype, op.dimensions)
                    arr.flags.writeable = False
                    op.value = arr
                    op.lifetime = OperandLifeTime(d["lifetime"])
                    if not op.is_constant:
                        raise InvalidArgumentError(f"Model.load: {op.label} has a value but lifetime {op.lifetime.name}")
                elif "scalar" in d:
                    m.set_operand_value(i, d["scalar"])
                    if d["lifetime"] == OperandLifeTime.CONSTANT_POOL:
                        op.lifetime = OperandLifeTime.CONSTANT_POOL
                elif "subgraph" in d:
                    m.set_operand_value_from_model(i, build(int(d["subgraph"]), (*path, k)))
                elif d["lifetime"] == OperandLifeTime.NO_VALUE:
                    m.set_operand_value(i, None)
            for o in desc["operations"]:
                m.add_operation(o["type"], o["inputs"], o["outputs"])
            m.identify_inputs_and_outputs(desc["inputs"], desc["outputs"])
            m.relax_computation_float32_to_float16(bool(desc["relaxed"]))
            m.finish()
            built[k] = m
            return m

        return build(int(doc["main"]), ())
    except InvalidArgumentError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, AttributeError, RecursionError) as err:
        raise InvalidArgumentError(f"Model.load: malformed model description ({type(err).__name__}: {str(err)[:200]})") from None


def save_model(model: Model, path: str | os.PathLike[str]) -> None:
    """Write ``model`` (finished) to ``path`` in the format above."""
    if not model.finished:
        raise InvalidArgumentError("Model.save: the model is not finished")
    arrays: list[np.ndarray] = []
    descs: list[dict[str, int]] = []
    size = 0

    def add(arr: np.ndarray) -> dict[str, int]:
        nonlocal size
        offset = -(-size // ALIGN) * ALIGN
        arrays.append(arr)
        size = offset + arr.nbytes
        descs.append({"offset": offset, "nbytes": int(arr.nbytes)})
        return descs[-1]

    header = json.dumps(model_to_dict(model, add), separators=(",", ":")).encode()
    offsets = [d["offset"] for d in descs]
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        base = -(-f.tell() // ALIGN) * ALIGN
        for offset, arr in zip(offsets, arrays):
            f.seek(base + offset)
            f.write(arr.reshape(-1).view(np.uint8).data)
        f.truncate(base + size)


def parse_header(data: bytes) -> Any:
    """Strict JSON: ``NaN``/``Infinity`` and nesting too deep for the parser raise ValueError."""

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON value")

    try:
        return json.loads(data, parse_constant=no_constant)
    except RecursionError:
        raise ValueError("the header nests too deeply") from None


def load_model(path: str | os.PathLike[str]) -> Model:
    """Read a model written by ``save_model`` (into private memory, see the module doc)."""
    from nnrt.memory import read_regular_file

    raw = read_regular_file(path, "Model.load")  # names the path in its errors
    shown = repr(os.fspath(path))
    if raw.size < 16 or raw[:8].tobytes() != MAGIC:
        raise InvalidArgumentError(f"Model.load: {shown} is not an nnrt model file")
    (n,) = struct.unpack("<Q", raw[8:16].tobytes())
    if 16 + n > raw.size:
        raise InvalidArgumentError(f"Model.load: {shown} is truncated")
    try:
        doc = parse_header(raw[16 : 16 + n].tobytes())
    except (UnicodeDecodeError, ValueError):
        raise InvalidArgumentError(f"Model.load: {shown} has a malformed header") from None
    base = -(-(16 + n) // ALIGN) * ALIGN
    return model_from_dict(doc, lambda d, dtype, dims: array_at(raw, base, d, dtype, dims))


def array_at(raw: np.ndarray, base: int, d: dict[str, Any], dtype: np.dtype[Any], dims: tuple[int, ...]) -> np.ndarray:
    """The array a descriptor names in the flat bytes ``raw`` (data section at ``base``)."""
    offset, nbytes = d["offset"], d["nbytes"]
    if not isinstance(offset, int) or not isinstance(nbytes, int):
        raise InvalidArgumentError(f"Model.load: a constant's offset {offset!r:.40} and size {nbytes!r:.40} must be integers")
    if offset < 0 or nbytes != dtype.itemsize * dims_product(dims) or base + offset + nbytes > raw.size:
        raise InvalidArgumentError(f"Model.load: a constant of {nbytes} bytes at {offset} does not fit the file or its shape")
    return raw[base + offset : base + offset + nbytes].view(dtype).reshape(dims)

