"""The cost model admission relies on (``Plan.observe``, ``refused``, ``admission_cost_ns``):
robust to one outlier, quick to learn a lasting change, and never locked in by its own refusals."""

from __future__ import annotations

from nnrt import zoo
from nnrt.execution import compile_plan
from nnrt.execution._plan import STALE_AFTER_REFUSALS, Plan

US = 1000.0


def plan_costing(ns: float) -> Plan:
    """A compiled plan whose calibrated cost is ``ns`` (one step)."""
    plan = compile_plan(zoo.one_add())
    plan.steps[0].cost_ns = ns
    return plan


def test_the_calibrated_cost_until_something_is_observed() -> None:
    plan = plan_costing(100 * US)
    assert plan.admission_cost_ns == 100 * US


def test_steady_observations_converge_with_a_small_margin() -> None:
    plan = plan_costing(100 * US)
    for _ in range(50):
        plan.observe(120 * US)
    assert 119 * US < plan.admission_cost_ns < 122 * US


def test_one_outlier_does_not_multiply_the_estimate() -> None:
    plan = plan_costing(100 * US)
    for _ in range(20):
        plan.observe(100 * US)
    plan.observe(5000 * US)  # a cold run or a descheduled thread: 50x
    # Unclipped, the mean would jump to ~1080 us and the deviation to ~1225 us: ~4.8 ms.
    assert plan.admission_cost_ns < 250 * US


def test_a_lasting_change_is_learned_within_a_few_executions() -> None:
    plan = plan_costing(100 * US)
    for _ in range(20):
        plan.observe(100 * US)
    for _ in range(12):
        plan.observe(1000 * US)  # the machine got 10x slower
    assert plan.admission_cost_ns > 900 * US


def test_refusals_decay_the_excess_back_to_the_calibrated_cost() -> None:
    plan = plan_costing(100 * US)
    for _ in range(12):
        plan.observe(1000 * US)
    inflated = plan.admission_cost_ns
    plan.refused()
    assert plan.admission_cost_ns < inflated
    for _ in range(40):
        plan.refused()
    assert plan.admission_cost_ns < 100 * US + 0.02 * (inflated - 100 * US)
    assert plan.admission_cost_ns >= 100 * US  # never below the calibration
    plan.observe(1000 * US)  # an admitted probe measures again: the estimate stands on it
    assert plan.refusals == 0 and plan.admission_cost_ns > 1000 * US


def test_a_probe_after_a_long_lock_in_replaces_the_stale_history() -> None:
    plan = plan_costing(100 * US)
    plan.observed_ns, plan.observed_dev_ns = 50_000 * US, 1000 * US  # a bad history: 53 ms
    for _ in range(STALE_AFTER_REFUSALS):
        plan.refused()
    plan.observe(200 * US)
    assert plan.admission_cost_ns == 200 * US * 1.75


def test_a_few_refusals_do_not_discard_the_history() -> None:
    """Under overload some executions are refused between admitted ones: each measurement
    then refines the estimate as usual."""
    plan = plan_costing(100 * US)
    for _ in range(20):
        plan.observe(1000 * US)
    for _ in range(STALE_AFTER_REFUSALS - 1):
        plan.refused()
    plan.observe(200 * US)
    assert plan.admission_cost_ns > 800 * US


def test_early_samples_correct_the_calibration_unclipped() -> None:
    """Calibration times the kernels alone; the first real executions (hand-offs included)
    correct it in full, even when far above it: caution before a history exists."""
    plan = plan_costing(100 * US)
    plan.observe(1000 * US)
    assert plan.admission_cost_ns > 900 * US  # mean 280 us + 3 x 225 us
