"""Build a model with the NNAPI-style API, prepare it on the CPU device, execute it.

(``nnrt.ModelBuilder`` writes the same model with less bookkeeping: see the docs' guide
"Building a model by hand".)

Run: python examples/01_execute.py
"""

from __future__ import annotations

import asyncio

import numpy as np

import nnrt
from nnrt import OperandType as T
from nnrt import OperationType as Op


def build_model() -> nnrt.Model:
    """y = relu(x @ W.T + b) + x, on a [2, 4] input."""
    model = nnrt.Model(name="fc_residual")
    x = model.add_operand(T.TENSOR_FLOAT32, dimensions=[2, 4])
    w = model.add_operand(T.TENSOR_FLOAT32, dimensions=[4, 4])
    b = model.add_operand(T.TENSOR_FLOAT32, dimensions=[4])
    relu = model.add_operand(T.INT32)
    none = model.add_operand(T.INT32)
    h = model.add_operand(T.TENSOR_FLOAT32, dimensions=[2, 4])
    y = model.add_operand(T.TENSOR_FLOAT32, dimensions=[2, 4])
    model.set_operand_value(w, np.eye(4, dtype=np.float32) * 2)
    model.set_operand_value(b, np.full(4, -1.0, np.float32))
    model.set_operand_value(relu, nnrt.FuseCode.RELU)  # scalar parameters are operands too
    model.set_operand_value(none, nnrt.FuseCode.NONE)
    model.add_operation(Op.FULLY_CONNECTED, inputs=[x, w, b, relu], outputs=[h])
    model.add_operation(Op.ADD, inputs=[h, x, none], outputs=[y])
    model.identify_inputs_and_outputs(inputs=[x], outputs=[y])
    model.finish()
    return model


async def main() -> None:
    model = build_model()
    device = nnrt.get_devices()[0]
    print(f"device: {device}")
    print(f"supported operations: {device.supported_operations(model)}")
    prepared = await device.prepare_model(model, priority=nnrt.Priority.HIGH)

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = await prepared.execute([x], measure_timing=True, deadline=nnrt.deadline_after(1.0))
    print("input:\n", x)
    print("output:\n", result.outputs[0])
    print("output shapes:", result.output_shapes)
    print("timing:", result.timing)

    # Bad requests fail with an NNAPI status and a message naming the argument.
    try:
        await prepared.execute([x.astype(np.float64)])
    except nnrt.NnrtError as err:
        print(f"bad request -> {err.status.name}: {err}")

    # A deadline that has already passed fails without running anything.
    try:
        await prepared.execute([x], deadline=nnrt.deadline_after(-1.0))
    except nnrt.MissedDeadlineError as err:
        print(f"late request -> {err.status.name}")


if __name__ == "__main__":
    asyncio.run(main())
