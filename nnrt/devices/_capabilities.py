"""Measuring a device's ``Capabilities`` on reference workloads, once per process.

NNAPI asks drivers for performance figures relative to the CPU reference. nnrt measures them:
a small float32 CONV_2D-like matmul and an elementwise ADD in each operand type, timed on
this machine, reported as time relative to float32 (so float32 is 1.0 on this device).
"""

from __future__ import annotations

import numpy as np

from nnrt.clock import perf_ns
from nnrt.types import Capabilities, OperandType, PerformanceInfo

__all__ = ["measure_capabilities"]


def _time_us(fn: object, repeat: int = 200) -> float:
    assert callable(fn)
    best = float("inf")
    for _ in range(5):
        t = perf_ns()
        for _ in range(repeat):
            fn()
        best = min(best, (perf_ns() - t) / repeat / 1e3)
    return best


def measure_capabilities() -> Capabilities:
    figures: dict[str, float] = {}
    rng = np.random.default_rng(0)
    base = rng.standard_normal((64, 64)).astype(np.float32)
    for t in (OperandType.TENSOR_FLOAT32, OperandType.TENSOR_FLOAT16, OperandType.TENSOR_INT32,
              OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED):
        a = base.astype(t.dtype)
        figures[f"matmul64_{t.name}"] = _time_us(lambda a=a: a @ a)
        figures[f"add4096_{t.name}"] = _time_us(lambda a=a: a + a)
    ref = figures["matmul64_TENSOR_FLOAT32"] + figures["add4096_TENSOR_FLOAT32"]
    perf = {
        t: PerformanceInfo(exec_time=(figures[f"matmul64_{t.name}"] + figures[f"add4096_{t.name}"]) / ref, power_usage=1.0)
        for t in (OperandType.TENSOR_FLOAT32, OperandType.TENSOR_FLOAT16, OperandType.TENSOR_INT32,
                  OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED)
    }
    relaxed = perf[OperandType.TENSOR_FLOAT32]
    return Capabilities(relaxed, relaxed, perf, PerformanceInfo(), PerformanceInfo(), figures)
