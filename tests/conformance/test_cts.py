"""Every CTS spec whose operations nnrt supports, run through the public API (one test per spec).

The numpy kernels are the reference: ``test_cts_spec`` runs them (``NNRT_JIT=0``). The cases
with an operation that has a compiled path for its operand types (``nnrt/ops/_jit*.py``) run a
second time with numba's kernels in ``test_cts_spec_compiled``, their float32 products MKL's when
it is installed (``nnrt/ops/_gemm.py``); the cases with a float32 product run a third time with
the compiled kernels and numpy's products in ``test_cts_spec_compiled_numpy_products``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nnrt import CpuDevice
from nnrt.conformance import iter_specs, load_spec, run_case
from nnrt.ops import _gemm, _jit

SPECS = list(iter_specs())

#: Operations with a compiled twin or part, by the operand types that take it: float32
#: (``nnrt/ops/_jit_float.py``) and 8-bit (``nnrt/ops/_jit_quant.py``: QUANTIZE/DEQUANTIZE,
#: convolutions, FULLY_CONNECTED, the activations' table lookups). The 8-bit ADD/SUB/MUL/DIV
#: lookups are left to ``tests/unit/test_jit_quant.py``, which compares their specs bit for bit
#: (an ADD is in a third of all specs).
COMPILED_OPS = {
    "TENSOR_FLOAT32": frozenset({"AVERAGE_POOL_2D", "CONCATENATION", "CONV_2D", "DEPTHWISE_CONV_2D", "HARD_SWISH", "LOGISTIC",
                                 "MAX_POOL_2D", "MEAN", "PAD", "PAD_V2", "PRELU", "RESIZE_BILINEAR",
                                 "TRANSPOSE_CONV_2D"}),
    "TENSOR_QUANT8_ASYMM": frozenset({
        "CONV_2D", "DEPTHWISE_CONV_2D", "DEQUANTIZE", "FULLY_CONNECTED", "HARD_SWISH", "LOGISTIC", "PRELU",
        "QUANTIZE", "RELU", "RELU1", "RELU6", "RESIZE_BILINEAR", "TANH",
    }),
}  # fmt: skip
COMPILED_OPS["TENSOR_QUANT8_ASYMM_SIGNED"] = COMPILED_OPS["TENSOR_QUANT8_ASYMM"]
COMPILED_OPS["TENSOR_FLOAT16"] = frozenset({"RESIZE_BILINEAR", "TRANSPOSE_CONV_2D"})  # widened to float32 for the loop

#: Float32 operations whose matrix products are the backend's with the compiled kernels
#: (``nnrt/ops/_gemm.py``: MKL's when installed, else numpy's).
PRODUCT_OPS = {"TENSOR_FLOAT32": frozenset({"BATCH_MATMUL", "BIDIRECTIONAL_SEQUENCE_LSTM", "CONV_2D",
                                            "FULLY_CONNECTED", "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM"})}
COMPILED_OPS["TENSOR_FLOAT32"] |= PRODUCT_OPS["TENSOR_FLOAT32"]


def _uses_compiled(case: dict[str, Any], ops: dict[str, frozenset[str]] = COMPILED_OPS) -> bool:
    """Whether an operation of the case has a compiled path (``ops``: by operand type) for one
    of its operands' types."""
    return any(op["type"] in ops.get(model["operands"][i]["type"], ())
               for model in (case["main"], *case["referenced"])
               for op in model["operations"] for i in (*op["inputs"], *op["outputs"]))


def _uses_products(case: dict[str, Any]) -> bool:
    return _uses_compiled(case, PRODUCT_OPS)


COMPILED_SPECS = [s for s in SPECS if any(_uses_compiled(case) for case in load_spec(s))]
PRODUCT_SPECS = [s for s in SPECS if any(_uses_products(case) for case in load_spec(s))]


@pytest.fixture
def numba_kernels(request: pytest.FixtureRequest) -> Iterator[None]:
    """The preparations inside use numba's kernels or not, as the test's parameter says."""
    with _jit.forced(request.param):
        yield


async def _run_spec(spec: str, device: CpuDevice, only: Callable[[dict[str, Any]], bool] | None = None) -> None:
    failures = []
    for case in load_spec(spec):
        if only is not None and not only(case):
            continue
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
    await _run_spec(spec, device, _uses_compiled)


@pytest.mark.parametrize("numba_kernels", [True], indirect=True)
@pytest.mark.parametrize("spec", PRODUCT_SPECS)
async def test_cts_spec_compiled_numpy_products(spec: str, device: CpuDevice, numba_kernels: None) -> None:
    pytest.importorskip("numba")
    with _gemm.forced("numpy"):
        assert _gemm.backend() == "numpy"
        await _run_spec(spec, device, _uses_products)
