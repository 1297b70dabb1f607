"""Where a plan may run on the event loop thread (``Plan.set_inline_limit``): whole when within
the inline limit; otherwise, without control flow, in segments of at most the loop slice, each
segment starting at a ``SLICE`` mark, with ``OFFLOAD`` before a step longer than the slice."""

from __future__ import annotations

import pytest

from nnrt import zoo
from nnrt.execution import compile_plan
from nnrt.execution._plan import LOOP_SLICE_NS, OFFLOAD, SLICE, Plan
from tests.helpers import unknown_shape_add

US = 1000.0
LIMIT = 100 * US


def chain(*costs_us: float) -> Plan:
    """A chain of ADDs whose steps cost ``costs_us`` (µs), as calibration would have set them."""
    plan = compile_plan(zoo.add_chain(len(costs_us)))
    for step, cost in zip(plan.steps, costs_us):
        step.cost_ns = cost * US
    return plan


def test_a_plan_within_the_limit_is_inline_and_never_stops() -> None:
    plan = chain(30, 30, 30)
    plan.set_inline_limit(LIMIT)
    assert plan.inline and plan.idle_inline and not plan.sliced
    assert [s.stop for s in plan.steps] == [0, 0, 0]


def test_a_larger_plan_is_cut_into_segments_of_at_most_one_slice() -> None:
    plan = chain(400, 400, 400, 300, 100, 900, 50)
    plan.set_inline_limit(LIMIT)
    assert plan.sliced and not plan.inline and not plan.idle_inline
    assert [s.stop for s in plan.steps] == [0, 0, SLICE, 0, 0, SLICE, 0]
    # segments: 800, 800, 950 us: the longest is what runs without a checkpoint on the loop
    assert plan.step_share() == pytest.approx(950 / 2550)


def test_a_step_longer_than_the_slice_is_offloaded() -> None:
    plan = chain(400, 2000, 400, 400, 400)
    plan.set_inline_limit(LIMIT)
    assert plan.sliced
    assert [s.stop for s in plan.steps] == [0, OFFLOAD, 0, 0, SLICE]
    assert [s.heavy for s in plan.steps] == [False, True, False, False, False]
    assert plan.step_share() == pytest.approx(2000 / 3600)  # the long step, on the worker


def test_a_plan_within_one_slice_runs_whole_when_the_device_is_idle() -> None:
    plan = chain(300, 300, 300)
    plan.set_inline_limit(LIMIT)
    assert plan.sliced and plan.idle_inline and not plan.inline
    assert [s.stop for s in plan.steps] == [0, 0, 0]


@pytest.mark.parametrize("limit", [0.0, -1.0, LOOP_SLICE_NS, 2 * LOOP_SLICE_NS], ids=["zero", "negative", "slice", "above"])
def test_no_slices_unless_the_limit_lies_between_zero_and_the_slice(limit: float) -> None:
    """A limit of 0 keeps every kernel off the loop (tests, simulated devices); a limit of a
    slice or more (a driver process's service) leaves whole-plan inlining alone."""
    plan = chain(400, 400, 400, 2500)
    plan.set_inline_limit(limit)
    assert not plan.sliced and plan.idle_inline is plan.inline
    assert [s.stop for s in plan.steps] == [OFFLOAD if s.cost_ns > limit else 0 for s in plan.steps]


def test_an_explicit_slice() -> None:
    plan = chain(400, 400, 400)
    plan.set_inline_limit(LIMIT, slice_ns=500 * US)
    assert [s.stop for s in plan.steps] == [0, SLICE, SLICE]
    plan.set_inline_limit(LIMIT, slice_ns=0.0)
    assert not plan.sliced and [s.stop for s in plan.steps] == [OFFLOAD] * 3


def test_dynamic_and_control_flow_plans_are_never_sliced() -> None:
    dynamic = compile_plan(unknown_shape_add())
    for step in dynamic.steps:
        step.cost_ns = 200 * US
    dynamic.set_inline_limit(LIMIT)
    assert not dynamic.sliced and not dynamic.idle_inline and all(s.stop == OFFLOAD for s in dynamic.steps)
    branching = chain(400, 400, 400)
    branching.has_control_flow = True  # (as an IF or WHILE step makes it: its cost is unbounded)
    branching.set_inline_limit(LIMIT)
    assert not branching.sliced and not branching.idle_inline and all(s.stop == OFFLOAD for s in branching.steps)


def test_a_while_anywhere_makes_a_plan_unbounded() -> None:
    from nnrt.conformance._cts import build_model, load_spec

    assert compile_plan(build_model(load_spec("V1_3/while_fib")[0])).has_loop
    branching = compile_plan(build_model(load_spec("V1_3/if_simple")[0]))
    assert branching.has_control_flow and not branching.has_loop
    assert not chain(1, 1).has_loop
