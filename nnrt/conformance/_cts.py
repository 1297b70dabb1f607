"""Running Android's CTS generated tests (shipped as JSON in ``data/``) through nnrt's public API.

Each case is a model (main graph plus referenced IF/WHILE graphs), input values and expected
outputs. ``run_case`` builds the model with the NDK-style ``Model`` calls, prepares it on a
device, executes it with ``await prepared.execute`` and compares with the CTS rule
(``|actual - expected| <= atol + rtol * |expected|`` per element, exact for bool, the case's
precomputed tolerances). ``expect_failure`` cases pass when nnrt rejects them with
INVALID_ARGUMENT (``while_infinite_loop`` instead must end with MISSED_DEADLINE_* under a 1 ms
loop timeout). RANDOM_MULTINOMIAL outputs are checked by class frequency against softmax.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nnrt.devices import Device
from nnrt.errors import NnrtError
from nnrt.memory import Memory
from nnrt.model import Model
from nnrt.ops import registered_operations
from nnrt.types import ErrorStatus, OperandType, OperationType

__all__ = ["DATA_DIR", "CaseResult", "iter_specs", "load_spec", "case_ops", "is_supported", "run_case"]

DATA_DIR = Path(__file__).parent / "data" / "cases"
_CONTROL_FLOW = frozenset({OperationType.IF, OperationType.WHILE})
INFINITE_LOOP_SPEC = "V1_3/while_infinite_loop"


@dataclass(slots=True)
class CaseResult:
    name: str
    spec: str
    ops: tuple[str, ...]
    status: str  # "pass", "fail", "unsupported"
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def iter_specs() -> Iterator[str]:
    """Every spec as ``folder/name``, sorted."""
    for path in sorted(DATA_DIR.glob("*/*.json.gz")):
        yield f"{path.parent.name}/{path.name[: -len('.json.gz')]}"


def load_spec(spec: str) -> list[dict[str, Any]]:
    with gzip.open(DATA_DIR / f"{spec}.json.gz", "rt") as f:
        cases: list[dict[str, Any]] = json.load(f)
    return cases


def case_ops(case: dict[str, Any]) -> tuple[str, ...]:
    names = {op["type"] for sg in (case["main"], *case["referenced"]) for op in sg["operations"]}
    return tuple(sorted(names))


def is_supported(case: dict[str, Any]) -> bool:
    supported = registered_operations() | _CONTROL_FLOW
    return all(OperationType[name] in supported for name in case_ops(case))


def _array(operand: dict[str, Any], data: list[Any]) -> np.ndarray:
    t = OperandType[operand["type"]]
    arr = np.array(data, dtype=t.dtype)
    return arr.reshape(operand["dimensions"]) if operand["dimensions"] else arr.reshape(-1) if t.is_tensor else arr


def build_model(case: dict[str, Any]) -> Model:
    """Build the case's main model (and its referenced models) with the NDK-style API."""
    built: dict[int, Model] = {}

    def build(sg: dict[str, Any], name: str) -> Model:
        m = Model(name=name)
        for k, od in enumerate(sg["operands"]):
            t = OperandType[od["type"]]
            idx = m.add_operand(t, od["dimensions"], od["scale"], od["zero_point"], name=od.get("name", ""))
            assert idx == k
            if od["channel_quant"]:
                m.set_operand_symm_per_channel_quant_params(k, od["channel_quant"]["channel_dim"], od["channel_quant"]["scales"])
            life = od["lifetime"]
            if life in ("CONSTANT_COPY", "CONSTANT_REFERENCE") and not od["data"] and t.is_tensor:
                # The CTS harness passes an empty constant as setOperandValue(i, nullptr, 0),
                # which NNAPI takes as an omitted operand (DENSIFY's unused block maps).
                m.set_operand_value(k, None)
            elif life == "CONSTANT_COPY":
                m.set_operand_value(k, _array(od, od["data"]) if t.is_tensor else od["data"][0])
            elif life == "CONSTANT_REFERENCE":
                value = _array(od, od["data"])
                m.set_operand_value_from_memory(k, Memory(np.ascontiguousarray(value)), 0, value.nbytes)
            elif life == "NO_VALUE":
                m.set_operand_value(k, None)
            elif life == "SUBGRAPH":
                ref = int(od["data"][0])
                if ref not in built:
                    built[ref] = build(case["referenced"][ref], f"{case['name']}/ref{ref}")
                m.set_operand_value_from_model(k, built[ref])
        for op in sg["operations"]:
            m.add_operation(OperationType[op["type"]], op["inputs"], op["outputs"])
        m.identify_inputs_and_outputs(sg["input_indexes"], sg["output_indexes"])
        m.relax_computation_float32_to_float16(case["is_relaxed"])
        m.finish()
        return m

    return build(case["main"], case["name"])


def case_inputs(case: dict[str, Any]) -> list[np.ndarray | None]:
    main = case["main"]
    inputs: list[np.ndarray | None] = []
    for i in main["input_indexes"]:
        od = main["operands"][i]
        size = int(np.prod(od["dimensions"])) if od["dimensions"] else 1
        if not od["data"] and size != 0:
            inputs.append(None)  # an omitted optional input
        else:
            inputs.append(_array(od, od["data"]))
    return inputs


def _compare(case: dict[str, Any], j: int, od: dict[str, Any], actual: np.ndarray) -> str | None:
    if od.get("ignored"):
        return None
    expected_dims = tuple(od["dimensions"])
    if actual.shape != expected_dims and not (expected_dims == () and actual.size == 1):
        return f"output {j}: shape {list(actual.shape)}, expected {list(expected_dims)}"
    t = OperandType[od["type"]]
    expected = np.array(od["data"], dtype=np.float64 if t is not OperandType.TENSOR_BOOL8 else bool).reshape(-1)
    got = actual.reshape(-1)
    tol = case["tolerance"]
    if t is OperandType.TENSOR_BOOL8:
        bad = np.flatnonzero(got != expected)
        return f"output {j}: {bad.size} mismatches, first at {int(bad[0])}" if bad.size else None
    if t is OperandType.TENSOR_FLOAT32:
        key = "float16" if tol["float32_uses_relaxed"] else "float32"
        atol, rtol = tol[key]["atol"], tol[key]["rtol"]
    elif t is OperandType.TENSOR_FLOAT16:
        atol, rtol = tol["float16"]["atol"], tol["float16"]["rtol"]
    elif t in (OperandType.TENSOR_QUANT16_ASYMM, OperandType.TENSOR_QUANT16_SYMM):
        atol, rtol = tol["quant16"]["atol"], 0.0
    elif t is OperandType.TENSOR_INT32 or t is OperandType.INT32:
        atol, rtol = tol["int32"]["atol"], 0.0
    else:
        atol, rtol = tol["quant8"]["atol"], 0.0
        if "mobilenet" in case["name"]:
            atol = max(atol, 3)
    g = got.astype(np.float64)
    diff = np.abs(g - expected)
    ok = diff <= atol + rtol * np.abs(expected)
    if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        return f"output {j}: {int((~ok).sum())} of {ok.size} values off; first at {k}: got {g[k]!r}, expected {expected[k]!r}"
    return None


def _check_multinomial(case: dict[str, Any], inputs: list[np.ndarray | None], outputs: list[np.ndarray]) -> str | None:
    tolerance = case["expected_multinomial_distribution_tolerance"]
    logits = np.asarray(inputs[0], dtype=np.float64)
    samples = outputs[0]
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    for b in range(logits.shape[0]):
        freq = np.bincount(samples[b], minlength=logits.shape[1]) / samples.shape[1]
        worst = float(np.abs(freq - probs[b]).max())
        if worst > tolerance:
            return f"batch {b}: class frequency off by {worst:.4f} (tolerance {tolerance})"
    return None


async def run_case(case: dict[str, Any], device: Device) -> CaseResult:
    """Run one CTS case on ``device``."""
    ops = case_ops(case)
    result = CaseResult(case["name"], case["spec"], ops, "pass")
    if not is_supported(case):
        result.status = "unsupported"
        return result
    infinite = case["spec"] == INFINITE_LOOP_SPEC
    try:
        model = build_model(case)
        prepared = await device.prepare_model(model)
        inputs = case_inputs(case)
        executed = await prepared.execute(inputs, loop_timeout=0.001 if infinite else None)
    except NnrtError as err:
        if infinite and err.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT):
            return result
        if case["expect_failure"] and err.status is ErrorStatus.INVALID_ARGUMENT and not infinite:
            return result
        result.status, result.message = "fail", f"{type(err).__name__}: {err}"
        return result
    if case["expect_failure"]:
        result.status, result.message = "fail", "expected a failure, but the case ran"
        return result
    if case["expected_multinomial_distribution_tolerance"] > 0:
        msg = _check_multinomial(case, inputs, executed.outputs)
        if msg:
            result.status, result.message = "fail", msg
        return result
    main = case["main"]
    for j, i in enumerate(main["output_indexes"]):
        msg = _compare(case, j, main["operands"][i], executed.outputs[j])
        if msg:
            result.status, result.message = "fail", msg
            break
    return result
