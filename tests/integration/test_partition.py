"""``nnrt.prepare`` across devices: partitions, outputs identical to one device on every path
(execute, execute_sync, fenced, burst; CTS models), CPU fallback for a device that fails to
prepare, errors naming what no device runs, deadlines, priorities and timing across steps,
dynamic shapes across a boundary, compilation caching per step."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import numpy as np
import pytest
from structlog.testing import capture_logs

import nnrt
from nnrt import ErrorStatus, Model, Priority, RestrictedDevice, zoo
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.conformance._cts import build_model, case_inputs, load_spec
from tests.helpers import gather, on_trio_too, ones, start
from tests.integration.test_scheduler import Gate, count_calls, settle
from tests.unit.test_partition import chain, if_model

NPU_OPS = [Op.ADD, Op.MUL]


@pytest.fixture(scope="module")
def cpu() -> Iterator[nnrt.CpuDevice]:
    dev = nnrt.CpuDevice(name="cpu")
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def npu() -> Iterator[RestrictedDevice]:
    dev = RestrictedDevice("npu", feature_level=4, operations=NPU_OPS)
    yield dev
    dev.close()


def x14() -> np.ndarray:
    return np.linspace(-2, 2, 4, dtype=np.float32).reshape(1, 4)


async def test_partitions_and_identical_outputs_on_every_path(cpu: nnrt.CpuDevice, npu: RestrictedDevice) -> None:
    m = chain(Op.ADD, Op.MUL, Op.LOGISTIC, Op.TANH, Op.ADD)
    pm = await nnrt.prepare(m, [cpu, npu])
    assert pm.partitions == (nnrt.Partition("npu", (0, 1)), nnrt.Partition("cpu", (2, 3)), nnrt.Partition("npu", (4,)))
    x = x14()
    expected = (await (await cpu.prepare_model(m)).execute([x])).outputs[0]
    got = [(await pm.execute([x])).outputs[0], pm.execute_sync([x]).outputs[0]]
    out = np.zeros((1, 4), np.float32)
    fence, _cb = await pm.execute_fenced([x], [out])
    await fence
    got.append(out)
    async with pm.burst() as burst:
        got.append((await burst.execute([x])).outputs[0])
        futures = [await burst.submit([x]) for _ in range(3)]
        got += [(await f).outputs[0] for f in futures]
    for g in got:
        assert g.tobytes() == expected.tobytes()


async def test_one_device_or_one_choice_is_plain_prepare_model(cpu: nnrt.CpuDevice, npu: RestrictedDevice) -> None:
    m = chain(Op.ADD, Op.MUL)
    alone = await nnrt.prepare(m, [cpu])
    assert alone._driver is cpu and alone.partitions == (nnrt.Partition("cpu", (0, 1)),)
    on_npu = await nnrt.prepare(m, [cpu, npu])  # the npu runs everything, faster
    assert on_npu._driver is npu and on_npu.partitions == (nnrt.Partition("npu", (0, 1)),)
    assert (await cpu.prepare_model(m)).partitions == (nnrt.Partition("cpu", (0, 1)),)


async def test_failing_device_falls_back_to_the_cpu(cpu: nnrt.CpuDevice) -> None:
    bad = RestrictedDevice("bad", operations=NPU_OPS, fail_prepare=ErrorStatus.GENERAL_FAILURE)
    m = chain(Op.ADD, Op.LOGISTIC, Op.MUL)
    pm = await nnrt.prepare(m, [cpu, bad])
    assert pm.partitions == (
        nnrt.Partition("cpu", (0,), fallback_from="bad"), nnrt.Partition("cpu", (1,)), nnrt.Partition("cpu", (2,), "bad"),
    )
    expected = (await (await cpu.prepare_model(m)).execute([x14()])).outputs[0]
    assert (await pm.execute([x14()])).outputs[0].tobytes() == expected.tobytes()
    # Every operation on the failing device: the CPU prepares the whole model.
    whole = await nnrt.prepare(chain(Op.ADD, Op.MUL), [cpu, bad])
    assert whole._driver is cpu and whole.partitions == (nnrt.Partition("cpu", (0, 1), "bad"),)


async def test_step_failing_at_execution_runs_again_on_the_cpu(cpu: nnrt.CpuDevice) -> None:
    flaky = RestrictedDevice("flaky", operations=NPU_OPS, fail_execute=ErrorStatus.DEAD_OBJECT)
    m = chain(Op.ADD, Op.LOGISTIC, Op.MUL)
    pm = await nnrt.prepare(m, [cpu, flaky])
    assert [p.device for p in pm.partitions] == ["flaky", "cpu", "flaky"]
    expected = (await (await cpu.prepare_model(m)).execute([x14()])).outputs[0]
    with capture_logs() as logs:
        assert (await pm.execute([x14()])).outputs[0].tobytes() == expected.tobytes()
        assert pm.execute_sync([x14()]).outputs[0].tobytes() == expected.tobytes()
    # Steps 0 and 2 failed on the device and ran on the CPU, each prepared there once.
    assert [(e["step"], e["status"]) for e in logs if e["event"] == "execution.fallback"] == [(0, "DEAD_OBJECT"),
                                                                                             (2, "DEAD_OBJECT")]
    assert sorted(pm._driver._twins) == [0, 2]  # type: ignore[attr-defined]
    # Without the CPU in the list, the failure is the execution's.
    other = RestrictedDevice("other", operations=[Op.LOGISTIC])
    alone = await nnrt.prepare(m, [flaky, other])
    with pytest.raises(nnrt.DeadObjectError, match="fails on purpose"):
        await alone.execute([x14()])
    # A missed deadline or a refusal is never retried elsewhere.
    late = RestrictedDevice("late", operations=NPU_OPS, fail_execute=ErrorStatus.MISSED_DEADLINE_TRANSIENT)
    with pytest.raises(nnrt.MissedDeadlineError):
        await (await nnrt.prepare(m, [cpu, late])).execute([x14()])
    for dev in (flaky, other, late):
        dev.close()


@pytest.mark.parametrize("status", [ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT])
async def test_no_fallback_after_a_missed_deadline(cpu: nnrt.CpuDevice, status: ErrorStatus) -> None:
    late = RestrictedDevice("late", operations=NPU_OPS, fail_prepare=status)
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC), [cpu, late])
    assert info.value.status is status


async def test_preparation_deadline_reaches_the_steps_without_fallback(vdevices: tuple[nnrt.CpuDevice,
                                                                                     RestrictedDevice]) -> None:
    cpu, npu = vdevices
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC), [cpu, npu], deadline=cpu.clock.now())
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    pm = await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC), [cpu, npu], deadline=cpu.clock.now() + 1.0,
                            preference=nnrt.ExecutionPreference.LOW_POWER)
    assert [p.preference for p in (step.target for step in pm.plan.steps)] == [nnrt.ExecutionPreference.LOW_POWER] * 2


async def test_without_the_cpu_nothing_falls_back(npu: RestrictedDevice) -> None:
    bad = RestrictedDevice("bad", operations=NPU_OPS, fail_prepare=ErrorStatus.DEVICE_UNAVAILABLE)
    with pytest.raises(nnrt.DeviceUnavailableError):
        await nnrt.prepare(chain(Op.ADD), [bad])
    with pytest.raises(nnrt.InvalidArgumentError, match=r"no device can run operation 1 \(LOGISTIC\): npu: npu does not"):
        await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC), [npu, bad])
    with pytest.raises(nnrt.InvalidArgumentError, match=r"operation 1 \(LOGISTIC\)"):
        await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC), [npu])


async def test_bad_arguments(cpu: nnrt.CpuDevice, npu: RestrictedDevice) -> None:
    m = chain(Op.ADD)
    other_clock = nnrt.CpuDevice(name="elsewhere", clock=nnrt.VirtualClock(), calibrate=False)
    cases: list[tuple[object, str]] = [
        ([], "devices is empty"),
        ([cpu, cpu], "listed twice"),
        ([cpu, "npu"], "is not a Device"),
        ([cpu, other_clock], "do not share one clock"),
        (5, "devices must be a sequence of Device"),
    ]
    for devices, match in cases:
        with pytest.raises(nnrt.InvalidArgumentError, match=match):
            await nnrt.prepare(m, devices)  # type: ignore[arg-type]
    with pytest.raises(nnrt.InvalidArgumentError, match="preference"):
        await nnrt.prepare(m, [cpu, npu], preference=7)  # type: ignore[arg-type]
    with pytest.raises(nnrt.InvalidArgumentError, match="not finished"):
        await nnrt.prepare(Model(), [cpu, npu])
    with pytest.raises(nnrt.InvalidArgumentError, match="deadline must be"):
        await nnrt.prepare(m, [cpu, npu], deadline="soon")  # type: ignore[arg-type]
    with pytest.raises(nnrt.InvalidArgumentError, match="app must be a string"):
        await nnrt.prepare(m, [cpu, npu], app=3)  # type: ignore[arg-type]
    with pytest.raises(nnrt.InvalidArgumentError, match="token"):
        await nnrt.prepare(m, [cpu, npu], cache_dir="/tmp", token=b"short")


async def test_registered_devices_take_part_by_default() -> None:
    npu = RestrictedDevice("npu-registered", operations=NPU_OPS)
    nnrt.register_device(npu)
    try:
        assert nnrt.get_devices()[-1] is npu
        with pytest.raises(nnrt.InvalidArgumentError, match="already registered"):
            nnrt.register_device(RestrictedDevice("npu-registered"))
        pm = await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC))
        assert [p.device for p in pm.partitions] == ["npu-registered", nnrt.get_devices()[0].name]
    finally:
        nnrt.unregister_device(npu)
        npu.close()
    assert npu not in nnrt.get_devices()


async def test_timing_sums_the_steps(cpu: nnrt.CpuDevice, npu: RestrictedDevice) -> None:
    pm = await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC, Op.MUL), [cpu, npu])
    timing = (await pm.execute([x14()], measure_timing=True)).timing
    assert timing.time_on_device_ns is not None and timing.time_in_driver_ns is not None
    assert 0 < timing.time_on_device_ns <= timing.time_in_driver_ns


async def test_dynamic_shapes_cross_a_boundary(cpu: nnrt.CpuDevice, npu: RestrictedDevice) -> None:
    m = Model("dynamic")
    x = m.add_operand(T.TENSOR_FLOAT32, [0, 2])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    a, b, c = (m.add_operand(T.TENSOR_FLOAT32, [0, 0]) for _ in range(3))
    m.add_operation(Op.ADD, [x, x, act], [a])
    m.add_operation(Op.LOGISTIC, [a], [b])
    m.add_operation(Op.MUL, [b, a, act], [c])
    m.identify_inputs_and_outputs([x], [c])
    m.finish()
    pm = await nnrt.prepare(m, [cpu, npu])
    assert [p.device for p in pm.partitions] == ["npu", "cpu", "npu"]
    single = await cpu.prepare_model(m)
    for rows in (1, 3):
        xv = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
        result = await pm.execute([xv])
        assert result.output_shapes == (nnrt.OutputShape((rows, 2)),)
        assert result.outputs[0].tobytes() == (await single.execute([xv])).outputs[0].tobytes()


async def test_control_flow_kept_whole(cpu: nnrt.CpuDevice) -> None:
    m = if_model([1, 4])
    npu = RestrictedDevice("npu-if", operations=[Op.ADD])  # IF (and its MUL branch) stay on the CPU
    pm = await nnrt.prepare(m, [cpu, npu])
    assert pm.partitions == (nnrt.Partition("cpu", (0,)), nnrt.Partition("npu-if", (1,)))
    single = await cpu.prepare_model(m)
    for cond in (True, False):
        args = [np.array([cond]), x14()]
        assert (await pm.execute(args)).outputs[0].tobytes() == (await single.execute(args)).outputs[0].tobytes()
    npu.close()


CTS_SPECS = ["V1_0/mobilenet_224_gender_basic_fixed", "V1_1/mobilenet_224_gender_basic_fixed_relaxed", "V1_2/bbox_graph",
             "V1_3/bbox_graph_quant8_signed",
             "V1_2/concat_zero_sized"]


@pytest.mark.parametrize("spec", CTS_SPECS)
async def test_cts_models_bitwise_identical(cpu: nnrt.CpuDevice, spec: str) -> None:
    """Every other operation type of the model on a restricted device: the outputs equal the
    single-device outputs bit for bit (same kernels, intermediates handed over untouched)."""
    for case in load_spec(spec)[:3]:
        model = build_model(case)
        types = list(dict.fromkeys(op.type for op in model.operations))
        npu = RestrictedDevice("npu-cts", operations=types[::2])
        pm = await nnrt.prepare(model, [cpu, npu])
        assert len(pm.partitions) >= 2 and {p.device for p in pm.partitions} == {"cpu", "npu-cts"}
        inputs = case_inputs(case)
        expected = (await (await cpu.prepare_model(model)).execute(inputs)).outputs
        for got in await every_path(pm, inputs):
            assert [g.tobytes() for g in got] == [e.tobytes() for e in expected]
        npu.close()


async def every_path(pm: nnrt.PreparedModel, inputs: list[np.ndarray | None]) -> list[list[np.ndarray]]:
    """The outputs of ``inputs`` through ``execute``, ``execute_sync``, a burst, and (when every
    output's size is known, as fenced executions need) ``execute_fenced``."""
    runs = [(await pm.execute(inputs)).outputs, pm.execute_sync(inputs).outputs]
    async with pm.burst() as burst:
        runs.append((await burst.execute(inputs)).outputs)
    outs = [pm.model.operands[i] for i in pm.model.output_indexes]
    if all(op.fully_specified for op in outs):
        bufs = [np.zeros(op.dimensions, op.type.dtype) for op in outs]
        fence, _cb = await pm.execute_fenced(inputs, bufs)
        await fence
        runs.append(bufs)
    return runs


# -- QoS across steps, on a virtual clock --------------------------------------------------------


@pytest.fixture
def vdevices() -> Iterator[tuple[nnrt.CpuDevice, RestrictedDevice]]:
    clock = nnrt.VirtualClock(1000.0)
    cpu = nnrt.CpuDevice(name="vcpu", clock=clock, compute_units=1, inline_limit_ns=0)
    npu = RestrictedDevice("vnpu", operations=NPU_OPS, clock=clock, compute_units=1, inline_limit_ns=0)
    yield cpu, npu
    cpu.close()
    npu.close()


async def test_one_deadline_covers_every_step(vdevices: tuple[nnrt.CpuDevice, RestrictedDevice]) -> None:
    cpu, npu = vdevices
    clock = cpu.clock
    assert isinstance(clock, nnrt.VirtualClock)
    pm = await nnrt.prepare(chain(Op.ADD, Op.MUL, Op.LOGISTIC), [cpu, npu])
    npu_step, cpu_step = (step.target for step in pm.plan.steps)
    cpu_calls = count_calls(cpu_step)
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await pm.execute([x14()], deadline=clock.now())
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT
    gate = Gate.on_step(npu_step, 0)
    task = start(pm.execute([x14()], deadline=clock.now() + 1.0))
    await gate.wait_entered()
    clock.advance(2.0)  # the deadline passes while the npu step runs
    gate.release.set()
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await task
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert cpu_calls == [0]  # the CPU step never started
    ok = await pm.execute([x14()], deadline=clock.now() + 1.0)
    assert cpu_calls == [1] and ok.outputs[0].shape == (1, 4)


async def test_steps_that_cannot_fit_together_are_refused_before_any_runs(
    vdevices: tuple[nnrt.CpuDevice, RestrictedDevice],
) -> None:
    cpu, npu = vdevices
    clock = cpu.clock
    pm = await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC), [cpu, npu])
    steps = [step.target for step in pm.plan.steps]
    calls = [count_calls(p) for p in steps]
    for p in steps:
        for s in p.plan.steps:
            s.cost_ns = 0.6e9  # each step alone fits a 1 s deadline, both together do not
    with pytest.raises(nnrt.MissedDeadlineError) as info:
        await pm.execute([x14()], deadline=clock.now() + 1.0)
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_PERSISTENT and "2 steps" in str(info.value)
    with pytest.raises(nnrt.MissedDeadlineError):
        pm.execute_sync([x14()], deadline=clock.now() + 1.0)
    assert calls == [[0], [0]]
    assert (await pm.execute([x14()], deadline=clock.now() + 1.3)).outputs[0].shape == (1, 4)
    assert calls == [[1], [1]]


async def test_each_step_runs_under_its_device_scheduler_with_the_apps_priority(
    vdevices: tuple[nnrt.CpuDevice, RestrictedDevice],
) -> None:
    cpu, npu = vdevices
    low = await nnrt.prepare(chain(Op.ADD, Op.MUL, Op.ADD, Op.LOGISTIC), [cpu, npu], priority=Priority.LOW, app="camera")
    assert [p.device for p in low.partitions] == ["vnpu", "vcpu"]
    high = await npu.prepare_model(zoo.one_add(), priority=Priority.HIGH, app="camera")
    npu_step = low.plan.steps[0].target
    gate = Gate.on_step(npu_step, 1)
    order: list[str] = []

    async def run(name: str, prepared: nnrt.PreparedModel, inputs: list[np.ndarray]) -> None:
        await prepared.execute(inputs)
        order.append(name)

    low_task = start(run("low", low, [x14()]))
    await gate.wait_entered()
    high_task = start(run("high", high, [ones(1, 4), ones(1, 4)]))
    await settle()
    gate.release.set()
    await gather(low_task, high_task)
    assert order == ["high", "low"]  # the LOW step yielded the npu to the app's HIGH execution
    assert npu.statistics().get("camera", Priority.LOW).preemptions == 1
    assert npu.statistics().get("camera", Priority.LOW).completed == 1
    assert cpu.statistics().get("camera", Priority.LOW).completed == 1


async def test_cancelled_partitioned_execution_releases_its_device(
    vdevices: tuple[nnrt.CpuDevice, RestrictedDevice],
) -> None:
    cpu, npu = vdevices
    pm = await nnrt.prepare(chain(Op.ADD, Op.LOGISTIC), [cpu, npu])
    gate = Gate.on_step(pm.plan.steps[0].target, 0)
    task = start(pm.execute([x14()]))
    await gate.wait_entered()
    task.cancel()
    await settle()
    gate.release.set()
    with pytest.raises(anyio.get_cancelled_exc_class()):
        await task
    await settle()
    assert npu.statistics().running == 0 and cpu.statistics().running == 0
    assert (await pm.execute([x14()])).outputs[0].shape == (1, 4)


async def test_compilation_cache_per_step(cpu: nnrt.CpuDevice, npu: RestrictedDevice, tmp_path: Path) -> None:
    m = chain(Op.ADD, Op.LOGISTIC)
    token = bytes(range(32))
    first = await nnrt.prepare(m, [cpu, npu], cache_dir=tmp_path, token=token)
    written = sorted(os.listdir(tmp_path))
    assert len(written) >= 2  # an entry per step
    second = await nnrt.prepare(m, [cpu, npu], cache_dir=tmp_path, token=token)
    assert sorted(os.listdir(tmp_path)) == written
    x = x14()
    assert (await first.execute([x])).outputs[0].tobytes() == (await second.execute([x])).outputs[0].tobytes()


REAL_MODELS = Path(__file__).parents[1] / "data" / "models"


def _random_inputs(model: Model, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for i in model.input_indexes:
        op = model.operands[i]
        if op.type.is_quantized:
            info = np.iinfo(op.type.dtype)
            out.append(rng.integers(info.min, info.max, op.dimensions, endpoint=True).astype(op.type.dtype))
        else:
            out.append(rng.standard_normal(op.dimensions).astype(op.type.dtype))
    return out


@pytest.mark.parametrize("name", ["microwakeword_hey_jarvis.tflite", "mediapipe_hand_recrop.tflite"])
async def test_real_models_bitwise_identical(cpu: nnrt.CpuDevice, name: str) -> None:
    """Two vendored real models (imported by ``nnrt.load``): convolutions on a restricted
    device, the rest on the CPU; outputs equal the single-device ones bit for bit."""
    model = nnrt.load(REAL_MODELS / name)
    conv = RestrictedDevice("npu-conv", operations=[Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.ADD])
    pm = await nnrt.prepare(model, [cpu, conv])
    assert len(pm.partitions) >= 3 and {p.device for p in pm.partitions} == {"cpu", "npu-conv"}
    assert sorted(n for p in pm.partitions for n in p.operations) == list(range(len(model.operations)))
    single = await cpu.prepare_model(model)
    inputs = _random_inputs(model, np.random.default_rng(0))
    expected = (await single.execute(inputs)).outputs
    runs = await every_path(pm, inputs)
    assert len(runs) == 4  # fenced too: every output's size is known
    for got in runs:
        assert [g.tobytes() for g in got] == [e.tobytes() for e in expected]
    conv.close()


async def test_worker_path_fenced_and_burst() -> None:
    """Devices that run every plan on their workers (nothing inline): execute, a fenced chain
    of two partitioned models, and a pipelined burst give the single-device outputs."""
    cpu = nnrt.CpuDevice(name="wcpu", inline_limit_ns=0)
    npu = RestrictedDevice("wnpu", operations=NPU_OPS, inline_limit_ns=0)
    m = chain(Op.ADD, Op.LOGISTIC, Op.MUL)
    pm = await nnrt.prepare(m, [cpu, npu])
    assert not pm._driver.runs_inline(pm.plan)
    x = x14()
    once = (await (await cpu.prepare_model(m)).execute([x])).outputs[0]
    twice = (await (await cpu.prepare_model(m)).execute([once])).outputs[0]
    assert (await pm.execute([x])).outputs[0].tobytes() == once.tobytes()
    mid, out = np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32)
    gate = nnrt.SyncFence()
    f1, _ = await pm.execute_fenced([x], [mid], wait_for=[gate])
    f2, cb = await pm.execute_fenced([mid], [out], wait_for=[f1])
    gate.signal()
    await f2
    assert cb.get_execution_info().status is ErrorStatus.NONE
    assert mid.tobytes() == once.tobytes() and out.tobytes() == twice.tobytes()
    async with pm.burst() as burst:
        futures = [await burst.submit([x]) for _ in range(4)]
        for f in futures:
            assert (await f).outputs[0].tobytes() == once.tobytes()
    cpu.close()
    npu.close()


async def test_step_failing_on_the_worker_path_runs_again_on_the_cpu() -> None:
    cpu = nnrt.CpuDevice(name="wcpu2", inline_limit_ns=0)
    flaky = RestrictedDevice("wflaky", operations=NPU_OPS, fail_execute=ErrorStatus.GENERAL_FAILURE, inline_limit_ns=0)
    m = chain(Op.ADD, Op.LOGISTIC)
    pm = await nnrt.prepare(m, [cpu, flaky])
    assert not pm._driver.can_run_now(pm.plan)
    expected = (await (await cpu.prepare_model(m)).execute([x14()])).outputs[0]
    for _ in range(2):
        assert (await pm.execute([x14()])).outputs[0].tobytes() == expected.tobytes()
    assert sorted(pm._driver._twins) == [0]  # type: ignore[attr-defined]
    assert cpu.statistics().running == 0 and flaky.statistics().running == 0
    cpu.close()
    flaky.close()


async def test_a_step_output_that_is_also_a_model_output(cpu: nnrt.CpuDevice, npu: RestrictedDevice) -> None:
    """An intermediate the model also returns is kept for the caller (not freed after the last
    step reading it), and a model input read by several steps reaches each of them."""
    m = Model("two-outputs")
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    a, b, c = (m.add_operand(T.TENSOR_FLOAT32, [1, 4]) for _ in range(3))
    m.add_operation(Op.ADD, [x, x, act], [a])  # npu
    m.add_operation(Op.LOGISTIC, [a], [b])  # cpu
    m.add_operation(Op.MUL, [b, x, act], [c])  # npu, reads the input again
    m.identify_inputs_and_outputs([x], [c, a])
    m.finish()
    pm = await nnrt.prepare(m, [cpu, npu])
    assert [p.device for p in pm.partitions] == ["npu", "cpu", "npu"]
    expected = (await (await cpu.prepare_model(m)).execute([x14()])).outputs
    for run in ((await pm.execute([x14()])).outputs, pm.execute_sync([x14()]).outputs):
        assert [r.tobytes() for r in run] == [e.tobytes() for e in expected]
    bufs = [np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32)]
    await pm.execute([x14()], bufs)
    assert [b.tobytes() for b in bufs] == [e.tobytes() for e in expected]


async def test_memory_pools_and_device_buffers(cpu: nnrt.CpuDevice, npu: RestrictedDevice) -> None:
    """Memory-pool arguments work as for any prepared model; a device buffer is per device, so
    allocating one for a partitioned model is INVALID_ARGUMENT."""
    m = chain(Op.ADD, Op.LOGISTIC, Op.MUL)
    pm = await nnrt.prepare(m, [cpu, npu])
    pool = nnrt.Memory.from_array(np.zeros(8, np.float32))
    pool.buffer.view(np.float32)[:4] = x14().ravel()
    result = await pm.execute([nnrt.MemoryLocation(pool, 0, 16)], [nnrt.MemoryLocation(pool, 16, 16)])
    expected = (await (await cpu.prepare_model(m)).execute([x14()])).outputs[0]
    assert result.output_shapes == (nnrt.OutputShape((1, 4)),)
    assert pool.buffer.view(np.float32)[4:].tobytes() == expected.tobytes()
    with pytest.raises(nnrt.InvalidArgumentError, match="not a model prepared by this device"):
        cpu.allocate([1, 4], [pm], [nnrt.BufferRole(0, 0)], [])


def test_partitioned_model_on_trio() -> None:
    """``nnrt.prepare`` and a partitioned model's executions (inline and on the workers) on trio."""
    import trio

    async def main() -> None:
        for limit in (None, 0):
            options = {} if limit is None else {"inline_limit_ns": limit}
            cpu = nnrt.CpuDevice(name="tcpu", **options)  # type: ignore[arg-type]
            npu = RestrictedDevice("tnpu", operations=NPU_OPS, **options)  # type: ignore[arg-type]
            m = chain(Op.ADD, Op.LOGISTIC, Op.MUL)
            pm = await nnrt.prepare(m, [cpu, npu])
            assert [p.device for p in pm.partitions] == ["tnpu", "tcpu", "tnpu"]
            expected = cpu.prepare_model_sync(m).execute_sync([x14()]).outputs[0]
            assert (await pm.execute([x14()])).outputs[0].tobytes() == expected.tobytes()
            cpu.close()
            npu.close()

    trio.run(main)


on_trio_too(globals())
