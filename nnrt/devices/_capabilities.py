"""Measuring a device's ``Capabilities`` on reference workloads, once per process.

NNAPI asks drivers for performance figures relative to the CPU reference. nnrt measures its
own kernels: a reference model (FULLY_CONNECTED 64x64 then ADD, on a [4, 64] input) built in
each operand type with the ordinary model API, compiled and run through the plan interpreter,
timed on this machine. Figures are reported relative to float32 (float32 is 1.0), so they
say what choosing a type costs on this device, the way NNAPI's ``PerformanceInfo`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnrt.clock import perf_ns
from nnrt.execution import ExecContext, compile_plan, run_plan
from nnrt.execution._interpreter import fp_errors_ignored, fp_errors_restored
from nnrt.model import Model
from nnrt.types import Capabilities, OperandType, OperationType, PerformanceInfo

__all__ = ["measure_capabilities"]

T = OperandType
_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_N = 64


def _reference_model(t: OperandType) -> tuple[Model, list[Any]]:
    """FULLY_CONNECTED [4, 64] x [64, 64] then ADD of the input, in type ``t``."""
    quant = t.is_quantized
    zp = 128 if t is T.TENSOR_QUANT8_ASYMM else 0
    scale = 0.05 if quant else 0.0
    m = Model(name=f"capabilities-{t.name}")
    x = m.add_operand(t, [4, _N], scale, zp)
    w = m.add_operand(t, [_N, _N], scale, zp)
    b = m.add_operand(T.TENSOR_INT32 if quant else t, [_N], scale * scale if quant else 0.0)
    act = m.add_operand(T.INT32)
    h = m.add_operand(t, [4, _N], scale, zp)
    y = m.add_operand(t, [4, _N], scale, zp)
    rng = np.random.default_rng(0)
    m.set_operand_value(w, _values(t, (_N, _N), rng))
    m.set_operand_value(b, np.zeros(_N, np.int32 if quant else t.dtype))
    m.set_operand_value(act, 0)
    m.add_operation(OperationType.FULLY_CONNECTED, [x, w, b, act], [h])
    m.add_operation(OperationType.ADD, [h, x, act], [y])
    m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m, [_values(t, (4, _N), rng)]


def _values(t: OperandType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if t.is_quantized:
        info = np.iinfo(str(t.dtype))
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(t.dtype)
    return rng.standard_normal(shape).astype(t.dtype)


def _time_us(model: Model, args: list[Any], repeat: int = 200) -> float:
    plan = compile_plan(model)
    token = fp_errors_ignored()
    try:
        best = float("inf")
        for _ in range(5):
            t = perf_ns()
            for _ in range(repeat):
                for _ in run_plan(plan, args, ExecContext()):
                    pass
            best = min(best, (perf_ns() - t) / repeat / 1e3)
    finally:
        fp_errors_restored(token)
    return best


def measure_capabilities() -> Capabilities:
    figures = {f"reference_us_{t.name}": _time_us(*_reference_model(t)) for t in _TYPES}
    ref = figures["reference_us_TENSOR_FLOAT32"]
    perf = {t: PerformanceInfo(exec_time=figures[f"reference_us_{t.name}"] / ref, power_usage=1.0) for t in _TYPES}
    relaxed = perf[T.TENSOR_FLOAT32]  # relaxed float32 computes in float32 on this device
    return Capabilities(relaxed, relaxed, perf, PerformanceInfo(), PerformanceInfo(), figures)
