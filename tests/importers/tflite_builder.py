"""A small writer of ``.tflite`` files for the importer tests, on LiteRT's flatbuffers object API.

``TflModel`` holds subgraphs; ``Sub.tensor`` adds a tensor (constant when ``data`` is given),
``Sub.op`` an operator with its options object (``S.Conv2DOptionsT()`` ...). ``build()``
returns the file's bytes. ``run_litert`` runs them with LiteRT's interpreter (one thread) and
``run_nnrt`` through ``nnrt.load``, so a test compares the two on the same inputs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

import flatbuffers
import numpy as np
import pytest

import nnrt

# LiteRT has wheels for Linux and macOS only (the test extra installs it there); elsewhere the
# TFLite tests, which build their files with its schema and compare with its interpreter, skip.
S: Any = pytest.importorskip("ai_edge_litert.schema_py_generated", reason="ai-edge-litert has no wheel here")

OPT = S.BuiltinOptions
BO = S.BuiltinOperator
TT = S.TensorType

_TYPES = {np.dtype(np.float32): TT.FLOAT32, np.dtype(np.float16): TT.FLOAT16, np.dtype(np.int32): TT.INT32,
          np.dtype(np.uint8): TT.UINT8, np.dtype(np.int64): TT.INT64, np.dtype(np.bool_): TT.BOOL,
          np.dtype(np.int16): TT.INT16, np.dtype(np.int8): TT.INT8}


class Sub:
    def __init__(self, owner: TflModel) -> None:
        self.owner = owner
        self.t = S.SubGraphT()
        self.t.tensors, self.t.operators, self.t.inputs, self.t.outputs = [], [], [], []

    def tensor(self, shape: Sequence[int], dtype: Any = np.float32, data: Any = None, *, name: str | None = None,
               scale: Any = None, zp: Any = None, qdim: int = 0, variable: bool = False,
               signature: Sequence[int] | None = None, ttype: int | None = None) -> int:
        t = S.TensorT()
        t.shape = list(shape)
        t.type = _TYPES[np.dtype(dtype)] if ttype is None else ttype
        t.name = name or f"t{len(self.t.tensors)}"
        t.isVariable = variable
        if signature is not None:
            t.shapeSignature = list(signature)
        if scale is not None:
            q = S.QuantizationParametersT()
            q.scale = list(np.atleast_1d(np.asarray(scale, np.float32)).tolist())
            q.zeroPoint = list(np.atleast_1d(np.asarray(0 if zp is None else zp, np.int64)).tolist())
            if len(q.zeroPoint) == 1 and len(q.scale) > 1:
                q.zeroPoint = q.zeroPoint * len(q.scale)
            q.quantizedDimension = qdim
            t.quantization = q
        t.buffer = 0 if data is None else self.owner.buffer(np.asarray(data, dtype))
        self.t.tensors.append(t)
        return len(self.t.tensors) - 1

    def const(self, data: Any, dtype: Any = np.float32, **kw: Any) -> int:
        arr = np.asarray(data, dtype)
        return self.tensor(arr.shape, dtype, arr, **kw)

    def op(self, code: int, inputs: Sequence[int], outputs: Sequence[int], opt_type: int = 0, opts: Any = None,
           custom: str | None = None) -> None:
        o = S.OperatorT()
        o.opcodeIndex = self.owner.opcode(code, custom)
        o.inputs, o.outputs = list(inputs), list(outputs)
        o.builtinOptionsType, o.builtinOptions = opt_type, opts
        self.t.operators.append(o)

    def io(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.t.inputs, self.t.outputs = list(inputs), list(outputs)


class TflModel:
    def __init__(self) -> None:
        self.m = S.ModelT()
        self.m.version = 3
        self.m.buffers = [S.BufferT()]
        self.m.operatorCodes = []
        self.subs = [Sub(self)]

    @property
    def main(self) -> Sub:
        return self.subs[0]

    def subgraph(self) -> Sub:
        self.subs.append(Sub(self))
        return self.subs[-1]

    def buffer(self, arr: np.ndarray) -> int:
        b = S.BufferT()
        b.data = np.frombuffer(np.ascontiguousarray(arr).tobytes(), np.uint8)
        self.m.buffers.append(b)
        return len(self.m.buffers) - 1

    def opcode(self, code: int, custom: str | None) -> int:
        for i, oc in enumerate(self.m.operatorCodes):
            if oc.builtinCode == code and oc.customCode == custom:
                return i
        oc = S.OperatorCodeT()
        oc.builtinCode = code
        oc.deprecatedBuiltinCode = min(code, 127)
        oc.customCode = custom
        oc.version = 1
        self.m.operatorCodes.append(oc)
        return len(self.m.operatorCodes) - 1

    def build(self) -> bytes:
        self.m.subgraphs = [s.t for s in self.subs]
        b = flatbuffers.Builder(1024)
        b.Finish(self.m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def opts(cls: Any, **fields: Any) -> Any:
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def run_litert(data: bytes, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data, num_threads=1)
    for d, x in zip(it.get_input_details(), inputs):
        if list(d["shape"]) != list(x.shape):
            it.resize_tensor_input(d["index"], list(x.shape))
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def load_bytes(data: bytes, **kw: Any) -> nnrt.Model:
    fd, path = tempfile.mkstemp(suffix=".tflite")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return nnrt.load(path, **kw)
    finally:
        os.unlink(path)


def run_nnrt(device: nnrt.CpuDevice, model: nnrt.Model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    prepared = device.prepare_model_sync(model)
    return [np.asarray(o) for o in prepared.execute_sync(list(inputs)).outputs]


def assert_close(got: np.ndarray, want: np.ndarray, *, units: int = 1) -> None:
    """Float: atol 1e-4 + rtol 1e-3. Integer (quantized): within ``units``."""
    assert got.shape == want.shape or got.size == want.size == 1, (got.shape, want.shape)
    got = got.reshape(want.shape)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)
    elif want.dtype.kind == "b":
        np.testing.assert_array_equal(got, want)
    else:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.max(initial=0) <= units, f"max difference {diff.max()} units > {units}"


def compare(device: nnrt.CpuDevice, data: bytes, inputs: Sequence[np.ndarray], *, units: int = 1,
            **load_kw: Any) -> list[np.ndarray]:
    """Load ``data`` with nnrt, run it and LiteRT on ``inputs``, check every output agrees."""
    model = load_bytes(data, **load_kw)
    got = run_nnrt(device, model, inputs)
    want = run_litert(data, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, w, units=units)
    return got
