"""Every CTS spec whose operations nnrt supports, run through the public API (one test per spec)."""

from __future__ import annotations

import pytest

from nnrt import CpuDevice
from nnrt.conformance import iter_specs, load_spec, run_case

SPECS = list(iter_specs())


@pytest.mark.parametrize("spec", SPECS)
async def test_cts_spec(spec: str, device: CpuDevice) -> None:
    failures = []
    for case in load_spec(spec):
        result = await run_case(case, device)
        if result.status == "fail":
            failures.append(f"{result.name}: {result.message}")
    assert not failures, "\n".join(failures)
