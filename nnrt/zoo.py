"""Built-in models, built in code with the NNAPI-style ``Model`` API.

Used by ``nnrt demo``, the examples and the benchmarks (and scenario files later):

* ``one_add()``: ADD of two [1, 4] float32 tensors, the smallest useful model;
* ``add_chain(n)``: n ADDs in a row over [1, 16], for per-operation overhead;
* ``mlp()``: FULLY_CONNECTED 784-256-256-10 with RELU, then SOFTMAX;
* ``mobilenet_block()``: CONV_2D 3x3/2 to 32 channels on 1x224x224x3, DEPTHWISE_CONV_2D 3x3,
  CONV_2D 1x1 to 64 channels (RELU6 fused everywhere), AVERAGE_POOL_2D to 1x1, then
  FULLY_CONNECTED to 1000;
* ``small_cnn()``: the same shape of network on a 1x32x32x3 image with 10 classes.

Weights are random with a fixed seed. ``example_inputs(model)`` makes matching inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnrt.model import Model
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["NAMES", "add_chain", "build", "example_inputs", "mlp", "mobilenet_block", "one_add", "small_cnn"]

RELU, RELU6 = 1, 3
SAME, VALID = 1, 2


class _Builder:
    """A thin helper over ``Model`` for writing the zoo compactly."""

    def __init__(self, name: str, seed: int = 0) -> None:
        self.m = Model(name=name)
        self.rng = np.random.default_rng(seed)

    def tensor(self, dims: Sequence[int]) -> int:
        return self.m.add_operand(T.TENSOR_FLOAT32, list(dims))

    def weights(self, dims: Sequence[int], scale: float) -> int:
        i = self.tensor(dims)
        self.m.set_operand_value(i, (self.rng.standard_normal(dims) * scale).astype(np.float32))
        return i

    def i32(self, value: int) -> int:
        i = self.m.add_operand(T.INT32)
        self.m.set_operand_value(i, value)
        return i

    def f32(self, value: float) -> int:
        i = self.m.add_operand(T.FLOAT32)
        self.m.set_operand_value(i, value)
        return i

    def op(self, op: Op, inputs: Sequence[int], out_dims: Sequence[int]) -> int:
        out = self.tensor(out_dims)
        self.m.add_operation(op, list(inputs), [out])
        return out

    def conv(self, x: int, cin: int, cout: int, k: int, stride: int, out_hw: int, act: int = RELU6) -> int:
        w = self.weights([cout, k, k, cin], (2.0 / (k * k * cin)) ** 0.5)
        b = self.weights([cout], 0.01)
        args = [x, w, b, self.i32(SAME), self.i32(stride), self.i32(stride), self.i32(act)]
        return self.op(Op.CONV_2D, args, [1, out_hw, out_hw, cout])

    def depthwise(self, x: int, c: int, k: int, out_hw: int, act: int = RELU6) -> int:
        w = self.weights([1, k, k, c], (2.0 / (k * k)) ** 0.5)
        b = self.weights([c], 0.01)
        args = [x, w, b, self.i32(SAME), self.i32(1), self.i32(1), self.i32(1), self.i32(act)]
        return self.op(Op.DEPTHWISE_CONV_2D, args, [1, out_hw, out_hw, c])

    def fc(self, x: int, n_in: int, n_out: int, batch: int, act: int) -> int:
        w = self.weights([n_out, n_in], (2.0 / n_in) ** 0.5)
        b = self.weights([n_out], 0.01)
        return self.op(Op.FULLY_CONNECTED, [x, w, b, self.i32(act)], [batch, n_out])

    def finish(self, inputs: Sequence[int], outputs: Sequence[int]) -> Model:
        self.m.identify_inputs_and_outputs(list(inputs), list(outputs))
        self.m.finish()
        return self.m


def one_add() -> Model:
    b = _Builder("one_add")
    x, y = b.tensor([1, 4]), b.tensor([1, 4])
    out = b.op(Op.ADD, [x, y, b.i32(0)], [1, 4])
    return b.finish([x, y], [out])


def add_chain(n: int = 50, width: int = 16) -> Model:
    b = _Builder(f"add_chain_{n}")
    x = b.tensor([1, width])
    c = b.weights([1, width], 0.1)
    act = b.i32(0)
    cur = x
    for _ in range(n):
        cur = b.op(Op.ADD, [cur, c, act], [1, width])
    return b.finish([x], [cur])


def mlp(batch: int = 1, sizes: Sequence[int] = (784, 256, 256, 10)) -> Model:
    b = _Builder("mlp")
    x = b.tensor([batch, sizes[0]])
    cur = x
    for k in range(len(sizes) - 1):
        last = k == len(sizes) - 2
        cur = b.fc(cur, sizes[k], sizes[k + 1], batch, 0 if last else RELU)
    out = b.op(Op.SOFTMAX, [cur, b.f32(1.0)], [batch, sizes[-1]])
    return b.finish([x], [out])


def _cnn(name: str, hw: int, classes: int) -> Model:
    b = _Builder(name)
    x = b.tensor([1, hw, hw, 3])
    half = (hw + 1) // 2
    c1 = b.conv(x, 3, 32, 3, 2, half)
    d1 = b.depthwise(c1, 32, 3, half)
    p1 = b.conv(d1, 32, 64, 1, 1, half)
    pool_args = [p1, b.i32(VALID), b.i32(1), b.i32(1), b.i32(half), b.i32(half), b.i32(0)]
    pooled = b.op(Op.AVERAGE_POOL_2D, pool_args, [1, 1, 1, 64])
    flat = b.op(Op.RESHAPE, [pooled, _shape(b, [1, 64])], [1, 64])
    logits = b.fc(flat, 64, classes, 1, 0)
    return b.finish([x], [logits])


def _shape(b: _Builder, dims: list[int]) -> int:
    i = b.m.add_operand(T.TENSOR_INT32, [len(dims)])
    b.m.set_operand_value(i, np.array(dims, dtype=np.int32))
    return i


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
