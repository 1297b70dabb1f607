"""Built-in models, built in code with the NNAPI-style ``Model`` API.

Written with the public ``nnrt.ModelBuilder`` (the same calls the guide "Building a model by
hand" teaches). Used by ``nnrt demo``, the examples and the benchmarks (and scenario files later):

* ``one_add()``: ADD of two [1, 4] float32 tensors, the smallest useful model;
* ``add_chain(n)``: n ADDs in a row over [1, 16], for per-operation overhead;
* ``mlp()``: FULLY_CONNECTED 784-256-256-10 with RELU, then SOFTMAX;
* ``mobilenet_block()``: CONV_2D 3x3/2 to 32 channels on 1x224x224x3, DEPTHWISE_CONV_2D 3x3,
  CONV_2D 1x1 to 64 channels (RELU6 fused everywhere), AVERAGE_POOL_2D to 1x1, then
  FULLY_CONNECTED to 1000;
* ``small_cnn()``: the same shape of network on a 1x32x32x3 image with 10 classes;
* ``first_element(n)``: SLICE of a [1, n] input's first element (compute that does not grow
  with n: what an input's size costs a transport), and ``broadcast_add(n)``: [1, 1] plus a
  [1, n] constant (a tiny input, an output of n floats).

Weights are random with a fixed seed. ``example_inputs(model)`` makes matching inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnrt.model import Model, ModelBuilder, OperandRef
from nnrt.types import FuseCode, PaddingCode
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["NAMES", "add_chain", "broadcast_add", "build", "example_inputs", "first_element", "mlp", "mobilenet_block", "one_add",
           "small_cnn"]


class _Zoo(ModelBuilder):
    """``ModelBuilder`` plus random float32 weights with a fixed seed and the zoo's layers."""

    def __init__(self, name: str, seed: int = 0) -> None:
        super().__init__(name)
        self.rng = np.random.default_rng(seed)

    def weights(self, dims: Sequence[int], scale: float) -> OperandRef:
        return self.constant((self.rng.standard_normal(dims) * scale).astype(np.float32))

    def conv(self, x: OperandRef, cin: int, cout: int, k: int, stride: int, out_hw: int) -> OperandRef:
        w = self.weights([cout, k, k, cin], (2.0 / (k * k * cin)) ** 0.5)
        b = self.weights([cout], 0.01)
        return self.op(Op.CONV_2D, x, w, b, PaddingCode.SAME, stride, stride, FuseCode.RELU6, out=[1, out_hw, out_hw, cout])

    def depthwise(self, x: OperandRef, c: int, k: int, out_hw: int) -> OperandRef:
        w = self.weights([1, k, k, c], (2.0 / (k * k)) ** 0.5)
        b = self.weights([c], 0.01)
        return self.op(Op.DEPTHWISE_CONV_2D, x, w, b, PaddingCode.SAME, 1, 1, 1, FuseCode.RELU6, out=[1, out_hw, out_hw, c])

    def fc(self, x: OperandRef, n_in: int, n_out: int, batch: int, act: FuseCode) -> OperandRef:
        w = self.weights([n_out, n_in], (2.0 / n_in) ** 0.5)
        b = self.weights([n_out], 0.01)
        return self.op(Op.FULLY_CONNECTED, x, w, b, act, out=[batch, n_out])


def one_add() -> Model:
    b = _Zoo("one_add")
    x, y = b.input(T.TENSOR_FLOAT32, [1, 4]), b.input(T.TENSOR_FLOAT32, [1, 4])
    return b.finish(outputs=[b.op(Op.ADD, x, y, FuseCode.NONE, out=[1, 4])])


def add_chain(n: int = 50, width: int = 16) -> Model:
    b = _Zoo(f"add_chain_{n}")
    x = b.input(T.TENSOR_FLOAT32, [1, width])
    c = b.weights([1, width], 0.1)
    act = b.scalar(FuseCode.NONE)
    cur = x
    for _ in range(n):
        cur = b.op(Op.ADD, cur, c, act, out=[1, width])
    return b.finish(outputs=[cur])


def first_element(n: int) -> Model:
    b = _Zoo(f"first_element_{n}")
    x = b.input(T.TENSOR_FLOAT32, [1, n])
    begin, size = b.constant(np.array([0, 0], np.int32)), b.constant(np.array([1, 1], np.int32))
    return b.finish(outputs=[b.op(Op.SLICE, x, begin, size, out=[1, 1])])


def broadcast_add(n: int) -> Model:
    b = _Zoo(f"broadcast_add_{n}")
    x = b.input(T.TENSOR_FLOAT32, [1, 1])
    c = b.constant(np.arange(n, dtype=np.float32).reshape(1, n))
    return b.finish(outputs=[b.op(Op.ADD, x, c, FuseCode.NONE, out=[1, n])])


def mlp(batch: int = 1, sizes: Sequence[int] = (784, 256, 256, 10)) -> Model:
    b = _Zoo("mlp")
    cur = b.input(T.TENSOR_FLOAT32, [batch, sizes[0]])
    for k in range(len(sizes) - 1):
        last = k == len(sizes) - 2
        cur = b.fc(cur, sizes[k], sizes[k + 1], batch, FuseCode.NONE if last else FuseCode.RELU)
    return b.finish(outputs=[b.op(Op.SOFTMAX, cur, 1.0, out=[batch, sizes[-1]])])


def _cnn(name: str, hw: int, classes: int) -> Model:
    b = _Zoo(name)
    x = b.input(T.TENSOR_FLOAT32, [1, hw, hw, 3])
    half = (hw + 1) // 2
    c1 = b.conv(x, 3, 32, 3, 2, half)
    d1 = b.depthwise(c1, 32, 3, half)
    p1 = b.conv(d1, 32, 64, 1, 1, half)
    pooled = b.op(Op.AVERAGE_POOL_2D, p1, PaddingCode.VALID, 1, 1, half, half, FuseCode.NONE, out=[1, 1, 1, 64])
    flat = b.op(Op.RESHAPE, pooled, np.array([1, 64], np.int32), out=[1, 64])
    return b.finish(outputs=[b.fc(flat, 64, classes, 1, FuseCode.NONE)])


def mobilenet_block() -> Model:
    return _cnn("mobilenet_block", 224, 1000)


def small_cnn() -> Model:
    return _cnn("small_cnn", 32, 10)


NAMES = {"one_add": one_add, "add_chain": add_chain, "mlp": mlp, "mobilenet_block": mobilenet_block, "small_cnn": small_cnn}


def build(name: str) -> Model:
    """A built-in model by name (``NAMES``)."""
    try:
        return NAMES[name]()
    except KeyError:
        raise KeyError(f"unknown built-in model {name!r}; choose from {sorted(NAMES)}") from None


def example_inputs(model: Model, seed: int = 0) -> list[np.ndarray]:
    """Random inputs matching ``model``'s (fully specified) inputs."""
    rng = np.random.default_rng(seed)
    out = []
    for i in model.input_indexes:
        op = model.operands[i]
        out.append(rng.standard_normal(op.dimensions).astype(op.type.dtype))
    return out
