"""One model across two devices: a restricted "npu" and the reference CPU.

The npu stands for a vendor driver at feature level 3 that runs only convolutions and fully
connected layers, and reports twice the CPU's speed. ``nnrt.prepare`` asks it which
operations it supports (with the reason for each one it does not), gives each operation to
the best device that supports it, and cuts the model into steps; the result runs like any
prepared model, with the same outputs as on the CPU alone. Then the same npu fails to
prepare on purpose: its steps are prepared on the CPU instead (a ``compilation.fallback``
warning is logged). Last, with the CPU excluded, an operation the npu does not support is
an error naming it.

Run: python examples/05_partitioning.py
"""

from __future__ import annotations

import asyncio

import nnrt
from nnrt import OperationType as Op
from nnrt import zoo

NPU_OPERATIONS = [Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED]


def show(prepared: nnrt.PreparedModel, model: nnrt.Model) -> None:
    for k, part in enumerate(prepared.partitions):
        names = ", ".join(f"{n}:{model.operations[n].type.name}" for n in part.operations)
        fallback = f"  (fallback: {part.fallback_from} failed to prepare it)" if part.fallback_from else ""
        print(f"  step {k} on {part.device:8} operations {names}{fallback}")


async def main() -> None:
    cpu = nnrt.get_devices()[0]
    npu = nnrt.RestrictedDevice("npu", feature_level=3, operations=NPU_OPERATIONS, performance=0.5)
    model = zoo.mobilenet_block()
    x = zoo.example_inputs(model)

    print(f"devices: {cpu!r}, {npu!r}")
    print("npu support:")
    for s in npu.operation_support(model):
        print(f"  operation {s.operation} {s.type.name:18} {'yes' if s.supported else 'no: ' + s.reason}")

    prepared = await nnrt.prepare(model, [cpu, npu], priority=nnrt.Priority.HIGH, app="camera")
    print("partitions:")
    show(prepared, model)
    result = await prepared.execute(x, measure_timing=True)
    alone = await (await cpu.prepare_model(model)).execute(x)
    same = result.outputs[0].tobytes() == alone.outputs[0].tobytes()
    print(f"output {result.output_shapes[0].dimensions}, identical to the CPU alone: {same}")
    print(f"timing: {result.timing.time_on_device_ns} ns computing over the steps, {result.timing.time_in_driver_ns} ns in all")

    failing = nnrt.RestrictedDevice("npu", feature_level=3, operations=NPU_OPERATIONS, performance=0.5,
                                    fail_prepare=nnrt.ErrorStatus.GENERAL_FAILURE)
    fallback = await nnrt.prepare(model, [cpu, failing])
    print("when the npu fails to prepare:")
    show(fallback, model)
    again = await fallback.execute(x)
    print(f"output identical to the CPU alone: {again.outputs[0].tobytes() == alone.outputs[0].tobytes()}")

    try:
        await nnrt.prepare(model, [npu])
    except nnrt.InvalidArgumentError as err:
        print(f"without the CPU -> {err}")
    for device in (npu, failing):
        device.close()


if __name__ == "__main__":
    asyncio.run(main())
