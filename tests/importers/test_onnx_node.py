"""The onnx backend node tests (about 1,900 single-operator models) through ``nnrt.load``.

Every case whose op types the importer supports must load, run and match ONNX's expected
outputs; every other case must be refused by ``load`` with ``UnsupportedModelError`` naming
the op type, or (for a supported op type used with an attribute, mode or dtype NNAPI cannot
express) naming the reason. ``benchmarks/onnx_node_tests.py`` prints the counts per op.
"""

from __future__ import annotations

import collections

import pytest

from nnrt import CpuDevice
from tests.importers.onnx_node_cases import CaseResult, load_cases, run_case

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def results(device: CpuDevice, tmp_path_factory: pytest.TempPathFactory) -> list[CaseResult]:
    tmp = str(tmp_path_factory.mktemp("onnx_node"))
    return [run_case(case, device, tmp) for case in load_cases()]


def test_no_case_fails(results: list[CaseResult]) -> None:
    failed = [f"{r.name} {list(r.ops)}: {r.detail}" for r in results if r.status == "fail"]
    assert not failed, f"{len(failed)} node tests failed:\n" + "\n".join(failed)


def test_supported_cases_pass(results: list[CaseResult]) -> None:
    counts = collections.Counter(r.status for r in results)
    # A floor, not an exact figure: a regression that rejects what used to run shows here.
    assert counts["pass"] >= 650, counts


def test_unsupported_cases_name_the_op(results: list[CaseResult]) -> None:
    for r in results:
        if r.status == "unsupported":
            assert "UnsupportedModelError" not in r.detail
            assert any(f"({op})" in r.detail for op in r.ops), r.detail
