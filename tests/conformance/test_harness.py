"""The conformance harness can fail: wrong values, shapes or a missed rejection are caught; and
``supported_operations`` is True for every operation of every CTS model nnrt runs."""

from __future__ import annotations

import copy

import pytest

import nnrt
from nnrt import OperationType
from nnrt.conformance import build_model, load_spec, run_case
from nnrt.ops import registered_operations


def case(spec: str, name: str | None = None) -> dict[str, object]:
    cases = load_spec(spec)
    return next(c for c in cases if name is None or c["name"] == name)


async def test_a_wrong_expected_value_fails(device: nnrt.CpuDevice) -> None:
    good = case("V1_0/add", "add")
    assert (await run_case(good, device)).status == "pass"
    bad = copy.deepcopy(good)
    out = bad["main"]["output_indexes"][0]  # type: ignore[index]
    bad["main"]["operands"][out]["data"][0] += 1.0  # type: ignore[index]
    result = await run_case(bad, device)
    assert result.status == "fail" and "values off" in result.message


async def test_a_wrong_expected_shape_fails(device: nnrt.CpuDevice) -> None:
    bad = copy.deepcopy(case("V1_0/add", "add"))
    out = bad["main"]["output_indexes"][0]  # type: ignore[index]
    bad["main"]["operands"][out]["dimensions"] = [2, 1]  # type: ignore[index]
    result = await run_case(bad, device)
    assert result.status == "fail"


async def test_an_expected_failure_that_runs_fails(device: nnrt.CpuDevice) -> None:
    bad = copy.deepcopy(case("V1_0/add", "add"))
    bad["expect_failure"] = True
    result = await run_case(bad, device)
    assert result.status == "fail" and "expected a failure" in result.message


async def test_a_wrong_distribution_fails(device: nnrt.CpuDevice) -> None:
    good = case("V1_2/random_multinomial")
    assert (await run_case(good, device)).status == "pass"
    bad = copy.deepcopy(good)
    bad["expected_multinomial_distribution_tolerance"] = 1e-9
    assert (await run_case(bad, device)).status == "fail"


def test_every_operation_has_a_kernel() -> None:
    assert registered_operations() | {OperationType.IF, OperationType.WHILE} == set(OperationType)


@pytest.mark.parametrize(
    "spec", ["V1_0/conv_float", "V1_2/box_with_nms_limit_hard", "V1_3/while_fib", "V1_0/lstm", "experimental/densify_1"]
)
def test_supported_operations_reports_true_for_cts_models(spec: str, device: nnrt.CpuDevice) -> None:
    for c in load_spec(spec)[:4]:
        model = build_model(c)
        assert all(device.supported_operations(model)), c["name"]
