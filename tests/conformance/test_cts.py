"""Every CTS spec whose operations nnrt supports, run through the public API (one test per spec).

The numpy kernels are the reference: ``test_cts_spec`` runs them (``NNRT_JIT=0``). The specs
that use an operation with a compiled kernel (``nnrt/ops/_jit*.py``) run a second time with
numba's kernels in ``test_cts_spec_compiled``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nnrt import CpuDevice
from nnrt.conformance import iter_specs, load_spec, run_case
from nnrt.ops import _jit

SPECS = list(iter_specs())

#: Operations whose float kernels have a compiled twin or part (``nnrt/ops/_jit_float.py``), and
#: those whose 8-bit kernels do (``_jit_quant``; the quantized ADD/SUB/MUL lookups are left to
#: ``tests/unit/test_jit_quant.py``, which compares their specs bit for bit: the CTS puts an ADD
#: in a third of all specs).
COMPILED_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "HARD_SWISH", "MAX_POOL_2D", "MEAN", "PRELU",
                          "FULLY_CONNECTED", "QUANTIZE", "DEQUANTIZE", "LOGISTIC"})


def _uses_compiled(spec: str) -> bool:
    return any(op["type"] in COMPILED_OPS for case in load_spec(spec)
               for model in (case["main"], *case["referenced"]) for op in model["operations"])


COMPILED_SPECS = [s for s in SPECS if _uses_compiled(s)]


@pytest.fixture
def numba_kernels(request: pytest.FixtureRequest) -> Iterator[None]:
    """The preparations inside use numba's kernels or not, as the test's parameter says."""
    with _jit.forced(request.param):
        yield


async def _run_spec(spec: str, device: CpuDevice) -> None:
    failures = []
    for case in load_spec(spec):
        result = await run_case(case, device)
        if result.status == "fail":
            failures.append(f"{result.name}: {result.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("numba_kernels", [False], indirect=True)
@pytest.mark.parametrize("spec", SPECS)
async def test_cts_spec(spec: str, device: CpuDevice, numba_kernels: None) -> None:
    await _run_spec(spec, device)


@pytest.mark.parametrize("numba_kernels", [True], indirect=True)
@pytest.mark.parametrize("spec", COMPILED_SPECS)
async def test_cts_spec_compiled(spec: str, device: CpuDevice, numba_kernels: None) -> None:
    pytest.importorskip("numba")
    assert _jit.available()
    await _run_spec(spec, device)
