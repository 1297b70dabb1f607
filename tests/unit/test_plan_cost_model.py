"""The cost model admission relies on (``nnrt.execution._cost``, through ``Plan.observe``,
``refused``, ``admission_cost_ns`` and ``cost_for``): robust to one outlier and to a noisy
calibration, quick to learn a lasting change, never locked in by its own refusals, and defined
per shape class for plans with inputs of unknown dimensions."""

from __future__ import annotations

import numpy as np
import pytest

from nnrt import zoo
from nnrt.execution import compile_plan
from nnrt.execution._cost import ESTABLISHED, STALE_AFTER_REFUSALS, CostModel
from nnrt.execution._plan import FAST_SAMPLE_EVERY, Plan
from tests.helpers import unknown_shape_add

US = 1000.0


def plan_costing(ns: float) -> Plan:
    """A compiled plan whose calibrated cost is ``ns`` (one step)."""
    plan = compile_plan(zoo.one_add())
    plan.steps[0].cost_ns = ns
    return plan


def history(plan: Plan, ns: float, n: int = 20) -> None:
    for _ in range(n):
        plan.observe(ns)


def test_the_calibrated_cost_until_something_is_observed() -> None:
    plan = plan_costing(100 * US)
    assert plan.admission_cost_ns == 100 * US


def test_steady_observations_converge_with_a_small_margin() -> None:
    plan = plan_costing(100 * US)
    history(plan, 120 * US, 50)
    assert 119 * US < plan.admission_cost_ns < 122 * US


def test_a_noisy_calibration_is_neither_a_floor_nor_sticky() -> None:
    """Item 8: the calibration ran on a busy machine (5x): the first real measurements replace
    it at once, and the estimate goes below it (it used to be a floor, and decayed slowly)."""
    plan = plan_costing(500 * US)
    plan.observe(100 * US)
    assert plan.admission_cost_ns < 200 * US
    history(plan, 100 * US, 5)
    assert plan.admission_cost_ns < 150 * US


def test_a_cold_first_run_does_not_inflate_the_early_estimate() -> None:
    """Item 8: early samples stand on their median: one cold run among the first few (20x)
    moves the estimate only while it is the only sample."""
    plan = plan_costing(100 * US)
    plan.observe(2000 * US)
    plan.observe(100 * US)
    plan.observe(110 * US)
    assert plan.admission_cost_ns < 200 * US


def test_one_outlier_does_not_multiply_the_estimate() -> None:
    plan = plan_costing(100 * US)
    history(plan, 100 * US)
    plan.observe(5000 * US)  # a cold run or a descheduled thread: 50x
    assert plan.admission_cost_ns < 250 * US


def test_a_lasting_change_is_learned_within_a_few_executions() -> None:
    plan = plan_costing(100 * US)
    history(plan, 100 * US)
    history(plan, 1000 * US, 12)  # the machine got 10x slower
    assert plan.admission_cost_ns > 900 * US


def test_refusals_decay_the_excess_back_to_the_lowest_known_cost() -> None:
    plan = plan_costing(100 * US)
    history(plan, 1000 * US, 12)
    inflated = plan.admission_cost_ns
    plan.refused()
    assert plan.admission_cost_ns < inflated
    for _ in range(40):
        plan.refused()
    assert plan.admission_cost_ns < 100 * US + 0.02 * (inflated - 100 * US)
    plan.observe(1000 * US)  # an admitted probe measures again: the estimate stands on it
    assert plan.cost.refusals == 0 and plan.admission_cost_ns > 1000 * US


def test_a_probe_after_a_long_lock_in_replaces_the_stale_history() -> None:
    plan = plan_costing(100 * US)
    history(plan, 50_000 * US)  # a bad history: 50 ms
    for _ in range(STALE_AFTER_REFUSALS):
        plan.refused()
    plan.observe(200 * US)
    assert plan.cost.observations == 1
    assert plan.admission_cost_ns == 200 * US * 1.3  # the sample and a tenth of it as spread


def test_a_few_refusals_do_not_discard_the_history() -> None:
    """Under overload some executions are refused between admitted ones: each measurement
    then refines the estimate as usual."""
    plan = plan_costing(100 * US)
    history(plan, 1000 * US)
    for _ in range(STALE_AFTER_REFUSALS - 1):
        plan.refused()
    plan.observe(200 * US)
    assert plan.admission_cost_ns > 800 * US


def test_the_fast_path_samples_one_execution_in_n() -> None:
    """Item 8: the fast path learns too (every execution until a history exists, then one in
    ``FAST_SAMPLE_EVERY``); callers count ``fast_countdown`` down between samples."""
    plan = plan_costing(100 * US)
    for _ in range(ESTABLISHED):
        assert plan.fast_countdown == 0
        plan.observe_fast(50 * US)
    assert plan.fast_countdown == FAST_SAMPLE_EVERY - 1
    assert plan.admission_cost_ns < 100 * US


def test_dynamic_plans_have_a_cost_model_per_shape_class() -> None:
    """Item 2: a plan with inputs of unknown dimensions never runs on the loop thread, and
    learns per shape class; an unmeasured larger class is not assumed cheap."""
    plan = compile_plan(unknown_shape_add())
    assert plan.dynamic and not plan.inline and all(step.heavy for step in plan.steps)
    small = [np.ones((1, 2), np.float32)] * 2
    big = [np.ones((4096, 2), np.float32)] * 2
    assert plan.cost_for(small) is plan.cost_for(small)
    assert plan.cost_for(small) is not plan.cost_for(big)
    for _ in range(ESTABLISHED):
        plan.cost_for(small).observe(10 * US)
    bigger = [np.ones((65536, 2), np.float32)] * 2
    assert plan.cost_for(bigger).estimate_ns >= 10 * US * 4096  # scaled by size from the class measured
    static = compile_plan(zoo.one_add())
    assert not static.dynamic and static.cost_for(small) is static.cost


def test_cost_model_repr_and_prior() -> None:
    model = CostModel(42 * US)
    assert model.estimate_ns == 42 * US and "n=0" in repr(model)


def test_the_compute_time_is_learnt_apart_from_the_service_time() -> None:
    """``work_ns`` (what an execution would hold the loop thread for) follows the compute time
    given beside the service time, or the service time alone when none is given."""
    model = CostModel(100 * US)
    for _ in range(30):
        model.observe(2000 * US, 300 * US)  # on a worker: hand-offs and waiting around 0.3 ms of work
    assert model.work_ns == pytest.approx(300 * US)
    assert model.estimate_ns > 1900 * US  # admission still plans for the service time
    for _ in range(30):
        model.observe(250 * US)  # the fast path: the service time is the compute time
    assert 250 * US <= model.work_ns < 252 * US


def test_the_compute_time_forgets_a_cold_first_run_and_clips_one_slow_one() -> None:
    """A cold first execution does not keep ``work_ns`` high through the early samples, one slow
    run later moves it by a fifth at most, and a lasting change still moves it within a few."""
    model = CostModel(100 * US)
    model.observe(9000 * US)  # the first run: compilation, cold caches
    model.observe(200 * US)
    assert model.work_ns == pytest.approx(200 * US)
    for _ in range(10):
        model.observe(200 * US)
    model.observe(1800 * US)  # one descheduled run
    assert model.work_ns == pytest.approx(240 * US)
    for _ in range(12):
        model.observe(1500 * US)  # the plan really is slower now
    assert model.work_ns > 1000 * US
