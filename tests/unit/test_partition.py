"""Device support and partitioning, without an event loop: feature levels, the reasons given
for unsupported operations, the best device by capabilities and preference, step formation
and boundaries, IF/WHILE kept whole, and the errors naming an operation no device runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import nnrt
from nnrt import ErrorStatus, ExecutionPreference, Model, PerformanceInfo, RestrictedDevice
from nnrt import OperandType as T
from nnrt import OperationType as Op
from nnrt.framework import choose_devices, form_steps, partition


@pytest.fixture(scope="module")
def cpu() -> Iterator[nnrt.CpuDevice]:
    dev = nnrt.CpuDevice(name="cpu-ref", calibrate=False)
    yield dev
    dev.close()


def chain(*ops: Op, t: T = T.TENSOR_FLOAT32) -> Model:
    """x -> ops[0] -> ops[1] -> ... (binary ops take the running value twice, unary ops once)."""
    m = Model("chain")
    x = m.add_operand(t, [1, 4])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    cur = x
    for op in ops:
        y = m.add_operand(t, [1, 4])
        ins = [cur, cur, act] if op in (Op.ADD, Op.MUL, Op.SUB) else [cur]
        m.add_operation(op, ins, [y])
        cur = y
    m.identify_inputs_and_outputs([x], [cur])
    m.finish()
    return m


def test_feature_level_filters_operations_and_operand_types() -> None:
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [2, 2])
    b = m.add_operand(T.TENSOR_FLOAT32, [2, 2])
    c = m.add_operand(T.TENSOR_FLOAT32, [2, 2])
    d = m.add_operand(T.TENSOR_QUANT8_ASYMM_SIGNED, [2, 2], 0.5, 0)
    e = m.add_operand(T.TENSOR_FLOAT32, [2, 2])
    adj = m.add_operand(T.BOOL)
    m.set_operand_value(adj, False)
    m.add_operation(Op.BATCH_MATMUL, [a, b, adj, adj], [c])  # FL6
    m.add_operation(Op.QUANTIZE, [c], [d])  # FL3 operation, FL4 output type
    m.add_operation(Op.DEQUANTIZE, [d], [e])  # FL1 operation, FL4 input type
    m.identify_inputs_and_outputs([a, b], [e])
    m.finish()
    fl3 = RestrictedDevice("fl3", feature_level=3)
    support = fl3.operation_support(m)
    assert [s.supported for s in support] == [False, False, False]
    assert "BATCH_MATMUL needs feature level 6, the device has 3" in support[0].reason
    assert "TENSOR_QUANT8_ASYMM_SIGNED, which needs feature level 4" in support[1].reason
    assert fl3.supported_operations(m) == [False, False, False]  # the list-of-bool contract
    assert RestrictedDevice("fl6", feature_level=6).supported_operations(m) == [True, True, True]
    assert RestrictedDevice("fl4", feature_level=4).supported_operations(m) == [False, True, True]


def test_dynamic_output_shapes_need_feature_level_3() -> None:
    m = Model()
    a = m.add_operand(T.TENSOR_FLOAT32, [0, 2])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    c = m.add_operand(T.TENSOR_FLOAT32, [0, 2])
    m.add_operation(Op.ADD, [a, a, act], [c])
    m.identify_inputs_and_outputs([a], [c])
    m.finish()
    (s,) = RestrictedDevice("fl2", feature_level=2).operation_support(m)
    assert not s.supported and "unknown dimensions" in s.reason
    assert RestrictedDevice("fl3", feature_level=3).supported_operations(m) == [True]


def test_operations_and_operand_types_restrict(cpu: nnrt.CpuDevice) -> None:
    m = chain(Op.ADD, Op.LOGISTIC, Op.MUL)
    npu = RestrictedDevice("npu", operations=[Op.ADD, "MUL"])
    reasons = [s.reason for s in npu.operation_support(m)]
    assert reasons == ["", "npu does not support LOGISTIC", ""]
    f16 = RestrictedDevice("f16", operand_types=[T.TENSOR_FLOAT16, T.INT32])
    assert "does not support TENSOR_FLOAT32" in f16.operation_support(m)[0].reason
    # The reference CPU device checks each kernel too, and reports its own feature level.
    assert cpu.supported_operations(m) == [True, True, True]
    assert all(s.reason == "" for s in cpu.operation_support(m))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"feature_level": 9}, "feature_level"),
        ({"feature_level": True}, "feature_level"),
        ({"operations": ["NOT_AN_OP"]}, "operations"),
        ({"operations": "ADD"}, "operations"),
        ({"operations": 5}, "operations"),
        ({"operand_types": [999]}, "operand_types"),
        ({"performance": -1.0}, "performance"),
        ({"performance": "fast"}, "performance"),
        ({"fail_prepare": ErrorStatus.NONE}, "fail_prepare"),
        ({"fail_execute": 1}, "fail_execute"),
        ({"device_type": 3}, "device_type"),
    ],
)
def test_restricted_device_rejects_bad_configuration(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(nnrt.InvalidArgumentError, match=match):
        RestrictedDevice("npu", **kwargs)  # type: ignore[arg-type]


def test_restricted_device_refuses_an_unsupported_model() -> None:
    npu = RestrictedDevice("npu", operations=[Op.ADD])
    with pytest.raises(nnrt.InvalidArgumentError, match=r"operation 1 \(LOGISTIC\): npu does not support LOGISTIC"):
        npu.prepare_model_sync(chain(Op.ADD, Op.LOGISTIC))
    failing = RestrictedDevice("bad", fail_prepare=ErrorStatus.DEVICE_UNAVAILABLE)
    with pytest.raises(nnrt.DeviceUnavailableError, match="fails on purpose"):
        failing.prepare_model_sync(chain(Op.ADD))


def test_best_device_by_capabilities(cpu: nnrt.CpuDevice) -> None:
    m = chain(Op.ADD, Op.MUL)
    slow = RestrictedDevice("slow", performance=2.0)
    fast = RestrictedDevice("fast", performance=0.25)
    same = RestrictedDevice("same", performance=1.0)
    assert choose_devices(m, [cpu, slow], ExecutionPreference.FAST_SINGLE_ANSWER) == [0, 0]
    assert choose_devices(m, [cpu, slow, fast], ExecutionPreference.FAST_SINGLE_ANSWER) == [2, 2]
    # Ties go to the CPU, then to the earlier device.
    assert choose_devices(m, [same, cpu], ExecutionPreference.FAST_SINGLE_ANSWER) == [1, 1]
    twin = RestrictedDevice("twin", performance=0.25)
    assert choose_devices(m, [cpu, twin, fast], ExecutionPreference.FAST_SINGLE_ANSWER) == [1, 1]


def test_preference_picks_the_figure(cpu: nnrt.CpuDevice) -> None:
    m = chain(Op.ADD)
    quick = RestrictedDevice("quick", performance=PerformanceInfo(exec_time=0.2, power_usage=3.0))
    frugal = RestrictedDevice("frugal", performance=PerformanceInfo(exec_time=0.8, power_usage=0.1))
    devices = [cpu, quick, frugal]
    assert choose_devices(m, devices, ExecutionPreference.FAST_SINGLE_ANSWER) == [1]
    assert choose_devices(m, devices, ExecutionPreference.SUSTAINED_SPEED) == [1]  # NNAPI: exec time too
    assert choose_devices(m, devices, ExecutionPreference.LOW_POWER) == [2]


def test_performance_is_per_operand_type(cpu: nnrt.CpuDevice) -> None:
    caps = nnrt.Capabilities(
        operand_performance={T.TENSOR_FLOAT32: PerformanceInfo(2.0, 2.0), T.TENSOR_QUANT8_ASYMM: PerformanceInfo(0.1, 0.1)}
    )
    npu = RestrictedDevice("npu", performance=caps)
    assert choose_devices(chain(Op.ADD), [cpu, npu], ExecutionPreference.FAST_SINGLE_ANSWER) == [0]
    q = Model()
    x = q.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 4], 0.5, 128)
    act = q.add_operand(T.INT32)
    q.set_operand_value(act, 0)
    y = q.add_operand(T.TENSOR_QUANT8_ASYMM, [1, 4], 1.0, 128)
    q.add_operation(Op.ADD, [x, x, act], [y])
    q.identify_inputs_and_outputs([x], [y])
    q.finish()
    assert choose_devices(q, [cpu, npu], ExecutionPreference.FAST_SINGLE_ANSWER) == [1]


def test_steps_and_boundaries(cpu: nnrt.CpuDevice) -> None:
    m = chain(Op.ADD, Op.MUL, Op.LOGISTIC, Op.TANH, Op.ADD)
    npu = RestrictedDevice("npu", operations=[Op.ADD, Op.MUL])
    steps = partition(m, [cpu, npu])
    assert [(s.device.name, s.operations) for s in steps] == [("npu", (0, 1)), ("cpu-ref", (2, 3)), ("npu", (4,))]
    # Operands 2..7 are the chain's values: x=0, act=1, then one output per operation.
    assert [(s.inputs, s.outputs) for s in steps] == [((0,), (3,)), ((3,), (5,)), ((5,), (6,))]


def test_independent_branches_share_a_step(cpu: nnrt.CpuDevice) -> None:
    """Ready operations of one device drain into one step, whatever their order in the model."""
    m = Model()
    x = m.add_operand(T.TENSOR_FLOAT32, [1, 4])
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    vals = [m.add_operand(T.TENSOR_FLOAT32, [1, 4]) for _ in range(4)]
    m.add_operation(Op.ADD, [x, x, act], [vals[0]])  # 0: npu
    m.add_operation(Op.LOGISTIC, [x], [vals[1]])  # 1: cpu
    m.add_operation(Op.ADD, [vals[0], x, act], [vals[2]])  # 2: npu, after 0
    m.add_operation(Op.MUL, [vals[1], vals[2], act], [vals[3]])  # 3: npu, after 1 and 2
    m.identify_inputs_and_outputs([x], [vals[3]])
    m.finish()
    npu = RestrictedDevice("npu", operations=[Op.ADD, Op.MUL])
    steps = partition(m, [cpu, npu])
    assert [(s.device.name, s.operations) for s in steps] == [("cpu-ref", (1,)), ("npu", (0, 2, 3))]
    assert steps[1].inputs == (x, vals[1])


def test_no_device_for_an_operation_names_it() -> None:
    m = chain(Op.ADD, Op.LOGISTIC)
    npu = RestrictedDevice("npu", operations=[Op.ADD])
    old = RestrictedDevice("old", feature_level=1, operations=[Op.ADD, Op.LOGISTIC, Op.MUL])
    fast = ExecutionPreference.FAST_SINGLE_ANSWER
    with pytest.raises(nnrt.InvalidArgumentError,
                       match=r"no device can run operation 1 \(LOGISTIC\): npu: npu does not support LOGISTIC$"):
        choose_devices(m, [npu], fast)
    assert choose_devices(m, [npu, old], fast) == [0, 1]
    f16 = RestrictedDevice("f16", operand_types=[T.TENSOR_FLOAT16])
    with pytest.raises(nnrt.InvalidArgumentError, match="npu does not support LOGISTIC; f16: f16 does not support"):
        choose_devices(m, [npu, f16], fast)


def if_model(dims: list[int]) -> Model:
    """y = IF(c) THEN x + x ELSE x * x, then ADD y + y on the main graph."""
    def branch(op: Op) -> Model:
        b = Model(op.name)
        bx = b.add_operand(T.TENSOR_FLOAT32, dims)
        bact = b.add_operand(T.INT32)
        b.set_operand_value(bact, 0)
        by = b.add_operand(T.TENSOR_FLOAT32, dims)
        b.add_operation(op, [bx, bx, bact], [by])
        b.identify_inputs_and_outputs([bx], [by])
        b.finish()
        return b

    m = Model("if")
    c = m.add_operand(T.TENSOR_BOOL8, [1])
    x = m.add_operand(T.TENSOR_FLOAT32, dims)
    then, other = m.add_operand(T.SUBGRAPH), m.add_operand(T.SUBGRAPH)
    m.set_operand_value_from_model(then, branch(Op.ADD))
    m.set_operand_value_from_model(other, branch(Op.MUL))
    y = m.add_operand(T.TENSOR_FLOAT32, dims)
    act = m.add_operand(T.INT32)
    m.set_operand_value(act, 0)
    z = m.add_operand(T.TENSOR_FLOAT32, dims)
    m.add_operation(Op.IF, [c, then, other, x], [y])
    m.add_operation(Op.ADD, [y, y, act], [z])
    m.identify_inputs_and_outputs([c, x], [z])
    m.finish()
    return m


def test_if_stays_whole_on_a_device_supporting_its_branches(cpu: nnrt.CpuDevice) -> None:
    m = if_model([1, 4])
    full = RestrictedDevice("full", operations=[Op.IF, Op.ADD, Op.MUL])
    assert [(s.device.name, s.operations) for s in partition(m, [cpu, full])] == [("full", (0, 1))]
    partial = RestrictedDevice("partial", operations=[Op.IF, Op.ADD])  # not the else branch's MUL
    (s0, _s1) = partition(m, [cpu, partial])
    assert (s0.device.name, s0.operations) == ("cpu-ref", (0,))
    assert "its subgraph's operation 0 (MUL)" in partial.operation_support(m)[0].reason
    fl3 = RestrictedDevice("fl3", feature_level=3)  # IF needs FL4
    assert "IF needs feature level 4" in fl3.operation_support(m)[0].reason


def test_if_with_unknown_sizes_runs_only_on_the_cpu(cpu: nnrt.CpuDevice) -> None:
    m = if_model([0, 4])
    full = RestrictedDevice("full", operations=[Op.IF, Op.ADD, Op.MUL])
    assert [s.device.name for s in partition(m, [cpu, full])] == ["cpu-ref", "full"]
    with pytest.raises(nnrt.InvalidArgumentError, match="runs only on the CPU"):
        partition(m, [full])


def test_steps_cover_every_operation_once(cpu: nnrt.CpuDevice) -> None:
    ops = [Op.ADD, Op.MUL, Op.LOGISTIC, Op.TANH] * 25
    m = chain(*ops)
    npu = RestrictedDevice("npu", operations=[Op.ADD, Op.MUL])
    steps = form_steps(m, choose_devices(m, [cpu, npu], ExecutionPreference.FAST_SINGLE_ANSWER), [cpu, npu])
    seen = sorted(n for s in steps for n in s.operations)
    assert seen == list(range(len(ops)))
    assert len(steps) == 50  # alternating pairs


def test_while_is_chosen_whole_by_its_subgraphs(cpu: nnrt.CpuDevice) -> None:
    from nnrt.conformance._cts import build_model, load_spec

    m = build_model(load_spec("V1_3/while_fib")[0])
    inner = {op.type for sub in m.referenced_models() for op in sub.operations}
    full = RestrictedDevice("full", operations=[Op.WHILE, *inner])
    fast = ExecutionPreference.FAST_SINGLE_ANSWER
    assert choose_devices(m, [cpu, full], fast) == [1]
    missing = sorted(inner)[0]
    partial = RestrictedDevice("partial", operations=[Op.WHILE, *(inner - {missing})])
    assert choose_devices(m, [cpu, partial], fast) == [0]
    assert "its subgraph's operation" in partial.operation_support(m)[0].reason
    assert missing.name in partial.operation_support(m)[0].reason
