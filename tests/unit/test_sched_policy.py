"""The scheduler's pure policy: plain synchronous tests, no event loop, time passed by hand.

The first half checks each rule on a small hand-made scene. The second half simulates a device
in unit time steps (a checkpoint after every unit, as a plan with unit-length steps would) and
checks, with Hypothesis, the promises the policy makes: EDF admission is exact for one app, one
priority and one unit (checked against a brute-force oracle, itself checked against EDF), no job
succeeds after its deadline, and aging bounds how long LOW waits.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import nnrt.sched
from nnrt.errors import InternalError
from nnrt.sched import Action, Job, JobState, Policy
from nnrt.types import ErrorStatus, Priority

LOW, MEDIUM, HIGH = Priority.LOW, Priority.MEDIUM, Priority.HIGH
NONE = ErrorStatus.NONE
MDT, MDP = ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT
RET = ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT


def job(cost: float = 1.0, deadline: float | None = None, prio: Priority = MEDIUM, app: Hashable = "a") -> Job:
    return Job(app, prio, cost, deadline)


def start(policy: Policy, now: float) -> list[Job]:
    acts = policy.poll(now)
    return list(acts.start)


# --------------------------------------------------------------------------- the job state machine


def test_job_transitions_are_a_table() -> None:
    p = Policy()
    j = job()
    with pytest.raises(InternalError):
        p.checkpoint(j, 0, 1)  # NEW: not running
    assert p.submit(j, 0)
    with pytest.raises(InternalError):
        p.submit(j, 0)  # twice
    with pytest.raises(InternalError):
        p.complete(j, 0)  # queued: not running
    assert p.next_to_run(0) is j and j.state is JobState.RUNNING and j.unit == 0
    assert p.complete(j, 1) is NONE and j.state is JobState.DONE
    with pytest.raises(InternalError):
        p.complete(j, 2)
    with pytest.raises(InternalError):
        p.checkpoint(j, 2, 0)
    assert p.cancel(j, 2) is False  # ended: cancelling is a no-op, not a bug
    for ev in nnrt.sched._job._Event:
        with pytest.raises(InternalError, match="illegal transition"):
            j._move(ev)


def test_job_validates_its_fields() -> None:
    with pytest.raises(ValueError):
        Job("a", MEDIUM, -1.0)
    with pytest.raises(ValueError):
        Job("a", MEDIUM, float("nan"))
    with pytest.raises(ValueError):
        Job("a", MEDIUM, 1.0, float("nan"))
    assert "MEDIUM" in repr(Job("a"))


def test_policy_validates_its_arguments() -> None:
    for kwargs in ({"units": 0}, {"fairness": "lottery"}, {"aging_s": 0}, {"app_weights": {"a": 0}}, {"max_queued_per_app": 0}):
        with pytest.raises(ValueError):
            Policy(**kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- admission


def test_deadline_passed_or_too_short_is_persistent() -> None:
    p = Policy()
    now_job, short, fits = job(1, 5.0), job(3, 7.0), job(2, 7.0)
    assert p.submit(now_job, 5.0).status is MDP  # deadline NOW: VTS says MISSED_DEADLINE_*
    assert now_job.state is JobState.FAILED and now_job.status is MDP
    adm = p.submit(short, 5.0)
    assert adm.status is MDP and not adm and "idle device" in adm.reason
    assert p.submit(fits, 5.0).admitted  # 5 + 2 == 7: finishing at the deadline is on time
    assert p.statistics().get("a", MEDIUM).rejected == {MDP: 2}


def test_work_ahead_is_transient_and_exact() -> None:
    p = Policy()
    assert p.submit(job(3, 10), 0)
    assert p.submit(job(3, 6), 0)  # EDF: runs first, finishes at 3; the first then at 6 <= 10
    assert p.submit(job(4, 10), 0)  # 3 + 3 + 4 = 10: exactly fits
    late = job(1, 10)
    adm = p.submit(late, 0)
    assert adm.status is MDT and "after its deadline" in adm.reason
    pushy = job(2, 5)  # fits itself (finishes at 2) but pushes the last 10-deadline job to 12
    adm = p.submit(pushy, 0)
    assert adm.status is MDT and "miss its deadline" in adm.reason
    assert p.submit(job(100), 0)  # no deadline: never refused for time


def test_running_work_is_counted_from_its_latest_estimate() -> None:
    p = Policy()
    a = job(4, 10)
    p.submit(a, 0)
    assert start(p, 0) == [a]
    assert not p.submit(job(7, 10), 1)  # a has 3 left at t=1: 1 + 3 + 7 = 11 > 10
    assert p.checkpoint(a, 2, 1).action is Action.CONTINUE  # a turned out cheaper
    assert p.submit(job(7, 10), 2)  # 2 + 1 + 7 = 10


def test_higher_classes_count_ahead_lower_ones_do_not() -> None:
    p = Policy()
    p.submit(job(5, prio=HIGH), 0)
    p.submit(job(50, prio=LOW), 0)
    assert not p.submit(job(2, 6, prio=MEDIUM), 0)  # 5 (HIGH) + 2 > 6
    assert p.submit(job(1, 6, prio=MEDIUM), 0)
    assert p.submit(job(1, 2, prio=HIGH), 0)  # MEDIUM and LOW work does not delay HIGH


def test_queue_full_is_resource_exhausted_transient() -> None:
    p = Policy(max_queued_per_app=2)
    assert p.submit(job(), 0) and p.submit(job(), 0)
    assert p.submit(job(), 0).status is RET
    assert p.submit(job(app="b"), 0)  # per app
    start(p, 0)  # one job of "a" leaves the queue
    assert p.submit(job(), 0)


def test_other_apps_take_their_fair_share_in_the_estimate() -> None:
    p = Policy()
    p.submit(job(10, app="b"), 0)
    p.submit(job(10, app="b"), 0)
    assert not p.submit(job(4, 7), 0)  # b takes as much as a does while a works: 4 + 4 > 7
    assert p.submit(job(4, 8), 0)
    q = Policy()
    q.submit(job(1, app="b"), 0)
    assert q.submit(job(4, 5), 0)  # b has only 1 s of work


def test_units_share_the_work_ahead() -> None:
    p = Policy(units=2)
    for _ in range(2):
        p.submit(job(4, 10), 0)
    assert p.submit(job(4, 8), 0)  # (4 + 4 + 4) / 2 = 6 <= 8
    assert not p.submit(job(9, 9.5), 0)  # pushes the last 10-deadline job to (4 + 9 + 4 + 4) / 2 = 10.5


# --------------------------------------------------------------------------- order of service


def test_priority_then_deadline_then_fifo_and_no_deadline_last() -> None:
    p = Policy(aging=False)
    jobs = [job(1, prio=LOW), job(1), job(1, 50), job(1, 20), job(1, 20), job(1, prio=HIGH)]
    for j in jobs:
        assert p.submit(j, 0)
    order = []
    for t in range(len(jobs)):
        (j,) = start(p, t)
        order.append(j)
        p.complete(j, t + 1)
    assert order == [jobs[5], jobs[3], jobs[4], jobs[2], jobs[1], jobs[0]]
    assert p.next_to_run(9) is None


def test_units_run_jobs_side_by_side() -> None:
    p = Policy(units=2)
    a, b, c = job(), job(), job()
    for j in (a, b, c):
        p.submit(j, 0)
    assert start(p, 0) == [a, b] and (a.unit, b.unit) == (0, 1)
    assert p.next_to_run(0) is None  # both busy
    p.complete(a, 1)
    assert start(p, 1) == [c] and c.unit == 0
    assert p.running() == [c, b]


def test_round_robin_across_apps() -> None:
    p = Policy()
    for _ in range(3):
        p.submit(job(app="a"), 0)
    p.submit(job(app="b"), 0)
    p.submit(job(app="c"), 0)
    apps = []
    for t in range(5):
        (j,) = start(p, t)
        apps.append(j.app)
        p.complete(j, t + 1)
    assert apps == ["a", "b", "c", "a", "a"]


def test_weighted_share_follows_weights() -> None:
    p = Policy(fairness="weighted", app_weights={"a": 3.0})
    busy = {"a": 0, "b": 0}
    for _ in range(40):
        p.submit(job(app="a"), 0)
        p.submit(job(app="b"), 0)
    for t in range(40):
        (j,) = start(p, t)
        busy[str(j.app)] += 1
        p.complete(j, t + 1)
    assert busy == {"a": 30, "b": 10}


# --------------------------------------------------------------------------- checkpoints


def test_higher_priority_of_the_same_app_takes_the_unit() -> None:
    p = Policy()
    low, high = job(5, prio=LOW), job(1, prio=HIGH)
    p.submit(low, 0)
    start(p, 0)
    assert p.checkpoint(low, 1, 4) is nnrt.sched.CONTINUE
    p.submit(high, 1.5)
    assert p.poll(1.5).interrupt == (low,)  # the async layer sets low's flag
    d = p.checkpoint(low, 2, 3)
    assert d.action is Action.YIELD and d.successor is high
    assert low.state is JobState.PREEMPTED and high.state is JobState.RUNNING and high.unit == 0
    assert p.next_to_run(2) is None  # the unit was handed over, not freed
    assert p.complete(high, 3) is NONE
    assert start(p, 3) == [low] and low.remaining == 3  # resumes with its context
    assert p.statistics().get("a", LOW).preemptions == 1 and low.preemptions == 1


def test_earlier_deadline_of_the_same_class_preempts_later_arrival_with_equal_deadline_does_not() -> None:
    p = Policy()
    a, b, c = job(5, 20), job(1, 20), job(1, 8)
    p.submit(a, 0)
    start(p, 0)
    p.submit(b, 1)
    assert p.checkpoint(a, 1, 4) is nnrt.sched.CONTINUE  # same deadline: FIFO, no thrashing
    p.submit(c, 1)
    d = p.checkpoint(a, 2, 3)
    assert d.action is Action.YIELD and d.successor is c


def test_no_preemption_across_apps() -> None:
    p = Policy()
    low = job(5, prio=LOW, app="a")
    p.submit(low, 0)
    start(p, 0)
    p.submit(job(1, 3, prio=HIGH, app="b"), 0)
    assert p.preemption_targets(0) == []
    assert p.checkpoint(low, 1, 4) is nnrt.sched.CONTINUE


def test_with_two_units_the_worst_running_job_yields() -> None:
    p = Policy(units=2, aging=False)
    med, low, high = job(9, prio=MEDIUM), job(9, prio=LOW), job(1, prio=HIGH)
    p.submit(med, 0)
    p.submit(low, 0)
    start(p, 0)
    p.submit(high, 0)
    assert p.preemption_targets(0) == [low]
    assert p.checkpoint(med, 1, 8) is nnrt.sched.CONTINUE
    assert p.checkpoint(low, 1, 8).successor is high


def test_deadline_passed_at_a_checkpoint_aborts() -> None:
    p = Policy(abort_predicted=False)
    j = job(2, 5)
    p.submit(j, 0)
    start(p, 0)
    assert p.checkpoint(j, 4, 3) is nnrt.sched.CONTINUE  # predicted late, but asked not to guess
    d = p.checkpoint(j, 5, 1)
    assert (d.action, d.status) == (Action.ABORT, MDT)
    assert j.state is JobState.FAILED and p.running() == []
    assert p.statistics().get("a", MEDIUM).aborted == 1


def test_predicted_late_aborts_early() -> None:
    p = Policy()
    j = job(2, 5)
    p.submit(j, 0)
    start(p, 0)
    assert p.checkpoint(j, 1, 4) is nnrt.sched.CONTINUE  # 1 + 4 == 5: just fits
    assert p.checkpoint(j, 2, 3.5).status is MDT  # 2 + 3.5 > 5: no use spending the device on it


def test_success_after_the_deadline_is_reported_as_a_miss() -> None:
    p = Policy()
    j = job(2, 5)
    p.submit(j, 0)
    start(p, 0)
    assert p.complete(j, 5.5) is MDT and j.status is MDT
    k = job(2, 5)
    p.submit(k, 1)
    start(p, 1)
    assert p.complete(k, 2, ErrorStatus.GENERAL_FAILURE) is ErrorStatus.GENERAL_FAILURE
    assert p.statistics().get("a", MEDIUM).failures == {MDT: 1, ErrorStatus.GENERAL_FAILURE: 1}


def test_cancel_waiting_and_running() -> None:
    p = Policy()
    a, b = job(), job()
    p.submit(a, 0)
    p.submit(b, 0)
    start(p, 0)
    assert p.cancel(b, 0) and b.state is JobState.CANCELLED
    assert p.cancel(a, 0.5) and p.running() == []
    c = job()
    p.submit(c, 1)
    assert start(p, 1) == [c]  # the unit was freed
    assert p.statistics().get("a", MEDIUM).cancelled == 2


# --------------------------------------------------------------------------- expiry


def test_waiting_job_expires_at_its_deadline_while_another_runs() -> None:
    p = Policy(abort_predicted=False)
    long_, short = job(10), job(1, 4)
    p.submit(long_, 0)
    start(p, 0)
    p.submit(job(1, app="b"), 0)  # another app: no preemption, so short waits
    assert not p.submit(job(1, 9, app="b"), 0)  # a's running job is never stopped for b: done at 10
    assert p.submit(job(1, 12, app="b"), 0)
    p.submit(short, 0.5)
    assert p.next_expiry() == 4
    assert p.expire(3.9) == []
    assert p.expire(4) == [short] and short.status is MDT
    assert p.next_expiry() == 12
    assert p.statistics().get("a", MEDIUM).expired == 1


def test_predicted_expiry_and_refusal_to_start_a_hopeless_job() -> None:
    p = Policy()
    long_, doomed = job(1, app="b"), job(3, 5)  # long_ will run longer than its estimate
    p.submit(long_, 0)
    start(p, 0)
    assert p.submit(doomed, 0)  # 0 + 1 + 3 <= 5
    assert p.expire(2) == []
    acts = p.poll(2.5)  # 2.5 + 3 > 5: fails now, not at 5
    assert acts.failed == (doomed,) and acts.start == () and acts.next_expiry is None
    q = Policy()
    j, k = job(2, 4), job(2, 4, app="b")
    q.submit(j, 0)
    q.submit(k, 0)  # admitted: a has just 2 s of work
    start(q, 0)
    q.complete(j, 2.5)  # j took longer than estimated
    assert q.next_to_run(2.5) is None  # k is never started: it could not finish by 4
    assert k.state is JobState.FAILED and q.expire(2.5) == [k]


# --------------------------------------------------------------------------- aging


def test_aging_raises_a_starving_class_one_level_per_period() -> None:
    p = Policy(aging_s=1.0)
    hog, low = job(100, prio=HIGH), job(1, prio=LOW)
    p.submit(hog, 0)
    start(p, 0)
    p.submit(low, 0)
    assert [p.effective_priority(low, t) for t in (0.5, 1.0, 1.9, 2.0, 9.0)] == [0, 1, 1, 2, 2]
    assert p.checkpoint(hog, 1.5, 98.5) is nnrt.sched.CONTINUE  # MEDIUM < HIGH
    d = p.checkpoint(hog, 2.0, 98)  # raised to HIGH, and raised before native at equal level
    assert d.successor is low
    p.submit(job(1, prio=HIGH), 2.0)
    assert p.checkpoint(low, 2.5, 0.5) is nnrt.sched.CONTINUE  # keeps its level while it runs
    assert p.complete(low, 3.0) is NONE


def test_without_aging_low_starves() -> None:
    p = Policy(aging=False)
    hog, low = job(100, prio=HIGH), job(1, prio=LOW)
    p.submit(hog, 0)
    p.submit(low, 0)
    start(p, 0)
    assert p.checkpoint(hog, 50, 50) is nnrt.sched.CONTINUE and p.effective_priority(low, 50) == 0


def test_aging_keeps_edf_inside_a_class() -> None:
    p = Policy(aging_s=1.0)
    hog, a, b = job(100, prio=HIGH), job(5, 200, prio=LOW), job(1, 150, prio=LOW)
    p.submit(hog, 0)
    start(p, 0)
    p.submit(a, 0)
    assert p.checkpoint(hog, 2, 98).successor is a  # raised to HIGH after 2 periods
    p.submit(b, 3)  # the whole class is at one level: EDF decides
    assert p.checkpoint(a, 3, 4).successor is b
    assert p.checkpoint(b, 3.5, 0.5) is nnrt.sched.CONTINUE  # b inherited the class's level
    p.complete(b, 4)
    assert p.effective_priority(a, 4) == 0  # the class was served: it starts aging again


# --------------------------------------------------------------------------- introspection


def test_statistics_are_frozen_snapshots() -> None:
    p = Policy()
    p.submit(job(1, 1, app="x"), 0)
    p.submit(job(1, prio=HIGH, app="x"), 0)
    start(p, 0)
    s = p.statistics()
    assert (s.units, s.busy_units, s.queued, s.running) == (1, 1, 1, 1)
    assert s.get("x", HIGH).running == 1 and s.get("x", MEDIUM).queued == 1
    assert [c.priority for c in s.for_app("x")] == [LOW, MEDIUM, HIGH]
    with pytest.raises(KeyError):
        s.get("y", LOW)
    with pytest.raises(AttributeError):
        s.units = 3  # type: ignore[misc]
    p.poll(2)
    assert s.get("x", MEDIUM).queued == 1 and p.statistics().get("x", MEDIUM).expired == 1
    assert "Policy(" in repr(p) and p.waiting("x") == [] and p.waiting("nobody") == []


def test_all_names_are_exported() -> None:
    assert set(nnrt.sched.__all__) == {n for n in dir(nnrt.sched) if not n.startswith("_")}


# --------------------------------------------------------------------------- simulation, oracles


@dataclass
class Spec:
    release: int
    cost: int  # the real device time, in units
    deadline: int | None
    prio: Priority = MEDIUM
    app: str = "a"
    estimate: int | None = None  # what the policy is told (default: exact)


@dataclass
class Run:
    jobs: list[Job]
    admissions: list[ErrorStatus] = field(default_factory=list)


def simulate(specs: Sequence[Spec], policy: Policy, horizon: int, check_rejections: bool = False) -> Run:
    """Unit steps: at each integer t, finished jobs complete, arrivals submit, running jobs reach a
    checkpoint (one unit of work done since the last), then free units are filled."""
    jobs = [Job(s.app, s.prio, s.cost if s.estimate is None else s.estimate, s.deadline, owner=s) for s in specs]
    done = {j.id: 0 for j in jobs}
    run = Run(jobs, [NONE] * len(jobs))
    for t in range(horizon + 1):
        for j in policy.running():
            if done[j.id] >= j.owner.cost:  # type: ignore[attr-defined]
                policy.complete(j, t)
        for i, j in enumerate(jobs):
            if specs[i].release == t:
                if check_rejections:
                    live = [x for x in jobs if x.state.waiting or x.state is JobState.RUNNING]
                    before = [(x.deadline, x.owner.cost - done[x.id]) for x in live]  # type: ignore[attr-defined]
                adm = policy.submit(j, t)
                run.admissions[i] = adm.status
                if check_rejections and adm.status is not NONE:
                    event(f"refused {adm.status.name}")
                if check_rejections and adm.status is MDT:
                    assert j.deadline is not None
                    assert not feasible_now(t, [*before, (j.deadline, j.cost)]), "refused a feasible set"
        for j in policy.running():
            d = policy.checkpoint(j, t, max(0, j.cost - done[j.id]))
            assert d.action is not Action.YIELD or d.successor is not None
        policy.poll(t)
        running = policy.running()
        assert len({j.unit for j in running}) == len(running) <= policy.units
        for j in running:
            done[j.id] += 1
    return run


def edf_feasible(specs: Sequence[tuple[int, int, int]]) -> bool:
    """EDF in unit steps over (release, cost, deadline): optimal on one preemptive processor."""
    rem = [c for _, c, _ in specs]
    t = 0
    while any(rem):
        if any(r and t >= d for r, (_, _, d) in zip(rem, specs)):
            return False
        ready = [i for i, (rel, _, d) in enumerate(specs) if rem[i] and rel <= t]
        if ready:
            rem[min(ready, key=lambda i: (specs[i][2], i))] -= 1
        t += 1
    return True


def brute_feasible(specs: Sequence[tuple[int, int, int]]) -> bool:
    """Every preemptive unit-step schedule (any ready job or idle, each step): does one meet all deadlines?"""
    rel = [r for r, _, _ in specs]
    dl = [d for _, _, d in specs]

    @functools.cache
    def search(t: int, rem: tuple[int, ...]) -> bool:
        if not any(rem):
            return True
        if any(r and t + r > d for r, d in zip(rem, dl)):
            return False
        moves = [i for i, r in enumerate(rem) if r and rel[i] <= t]
        nexts = [(*rem[:i], rem[i] - 1, *rem[i + 1 :]) for i in moves] + [rem]  # or idle
        return any(search(t + 1, n) for n in nexts)

    return search(0, tuple(c for _, c, _ in specs))


def feasible_now(now: int, jobs: Sequence[tuple[float | None, int]]) -> bool:
    """Jobs all released at ``now``, as (deadline or None, remaining units)."""
    specs = [(0, int(c), int(d - now)) for d, c in jobs if d is not None and c > 0]
    return brute_feasible(specs) if len(specs) <= 6 and sum(c for _, c, _ in specs) <= 16 else edf_feasible(specs)


@st.composite
def one_class(draw: st.DrawFn, max_jobs: int = 6, max_cost: int = 4) -> list[tuple[int, int, int]]:
    n = draw(st.integers(1, max_jobs))
    out = []
    for _ in range(n):
        r, c = draw(st.integers(0, 8)), draw(st.integers(1, max_cost))
        out.append((r, c, r + c + draw(st.integers(0, 10))))
    return out


@settings(max_examples=300, deadline=None)
@given(one_class(max_jobs=5, max_cost=3))
def test_oracle_edf_agrees_with_brute_force(specs: list[tuple[int, int, int]]) -> None:
    assert edf_feasible(specs) == brute_feasible(specs)


@settings(max_examples=500, deadline=None)
@given(one_class(), st.sampled_from([False, True]))
def test_edf_admission_is_exact_for_one_class_on_one_unit(specs: list[tuple[int, int, int]], aging: bool) -> None:
    feasible = brute_feasible(specs) if sum(c for _, c, _ in specs) <= 16 else edf_feasible(specs)
    note(f"feasible={feasible}")
    event(f"feasible={feasible}")
    policy = Policy(aging=aging, aging_s=1.0)
    run = simulate([Spec(r, c, d) for r, c, d in specs], policy, max(d for _, _, d in specs) + 1, check_rejections=True)
    for j, status in zip(run.jobs, run.admissions):
        if feasible:
            assert status is NONE, f"refused {j} of a feasible set"
        if status is NONE:  # admitted: it never misses (the set it joined stays feasible)
            assert j.state is JobState.DONE and j.finished is not None and j.deadline is not None
            assert j.finished <= j.deadline
        else:
            assert status in (MDT, MDP) and j.started is None
    stats = policy.statistics().get("a", MEDIUM)
    assert stats.completed == sum(s is NONE for s in run.admissions) and not stats.failures


specs_strategy = st.lists(
    st.builds(
        Spec,
        release=st.integers(0, 10),
        cost=st.integers(1, 5),
        deadline=st.none() | st.integers(1, 25),
        prio=st.sampled_from(list(Priority)),
        app=st.sampled_from(["a", "b"]),
        estimate=st.none() | st.integers(0, 6),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=300, deadline=None)
@given(specs_strategy, st.integers(1, 2), st.sampled_from(["round_robin", "weighted"]), st.booleans())
def test_no_job_succeeds_after_its_deadline(specs: list[Spec], units: int, fairness: str, predicted: bool) -> None:
    for s in specs:
        if s.deadline is not None:
            s.deadline += s.release
    policy = Policy(units=units, fairness=fairness, abort_predicted=predicted, aging_s=2.0)  # type: ignore[arg-type]
    run = simulate(specs, policy, 10 + 25 + sum(s.cost for s in specs))
    for j in run.jobs:
        assert j.state.terminal, j
        if j.state is JobState.DONE:
            assert j.deadline is None or (j.finished is not None and j.finished <= j.deadline)
        elif j.deadline is None:
            pytest.fail(f"{j} without a deadline failed ({j.status.name})")
    stats = policy.statistics()
    assert stats.running == stats.queued == 0
    ends = sum(c.completed + c.cancelled + sum(c.failures.values()) + sum(c.rejected.values()) for c in stats.classes)
    assert ends == len(specs)


@settings(max_examples=100, deadline=None)
@given(
    aging_s=st.integers(1, 4),
    t0=st.integers(0, 6),
    low_cost=st.integers(1, 4),
    high_costs=st.lists(st.integers(1, 3), min_size=30, max_size=30),
    medium=st.booleans(),
)
def test_aging_bounds_how_long_low_waits(aging_s: int, t0: int, low_cost: int, high_costs: list[int], medium: bool) -> None:
    """A saturating stream of HIGH (and MEDIUM) work in the same app: LOW still starts within
    2 * aging_s of its arrival and then runs to the end without being preempted."""
    specs = [Spec(t, c, None, HIGH) for t, c in enumerate(high_costs)]
    if medium:
        specs += [Spec(t, c, None, MEDIUM) for t, c in enumerate(high_costs)]
    specs.append(Spec(t0, low_cost, None, LOW))
    run = simulate(specs, Policy(aging_s=aging_s), t0 + 2 * aging_s + low_cost + 1)
    low = run.jobs[-1]
    assert low.started is not None and low.started <= t0 + 2 * aging_s
    assert low.state is JobState.DONE and low.finished == low.started + low_cost and low.preemptions == 0


# --------------------------------------------------------------------------- issue 15, items 5-7


def test_admission_counts_the_rest_of_the_running_step() -> None:
    """Item 5: a LOW job runs a 5 s step (no checkpoint before t=5); a HIGH job of the same
    app arriving at t=1 waits for that step's rest (4 s), then runs 2 s: finishing at 7, it
    cannot make a deadline of 6.5 and is refused at once (it used to be admitted, then miss)."""
    p = Policy()
    low = Job("a", LOW, 5.0, step=5.0)
    p.submit(low, 0)
    assert start(p, 0) == [low]
    refused = p.submit(job(2, 6.5, prio=HIGH), 1)
    assert refused.status is MDT
    assert p.submit(job(2, 7.0, prio=HIGH), 1)  # 1 + 4 + 2 = 7: fits exactly
    q = Policy(units=2)  # a free unit: nothing blocks
    q.submit(Job("a", LOW, 5.0, step=5.0), 0)
    start(q, 0)
    assert q.submit(job(2, 3.5, prio=HIGH), 1)


def test_admission_counts_another_apps_running_execution_in_full() -> None:
    """Item 5: another app's running execution is never stopped for this app, so its rest
    counts in full, not as a fair share (it used to be charged 1 s of its 10 here)."""
    p = Policy()
    other = job(10, app="b")
    p.submit(other, 0)
    start(p, 0)
    assert p.submit(job(1, 5), 0).status is MDT
    assert p.submit(job(1, 11), 0)


def test_a_checkpoint_never_hands_the_unit_to_a_job_that_cannot_make_it() -> None:
    """Item 6: the HIGH job was admitted (0 + 2 <= 3), but the LOW job's step ran until 2:
    HIGH can no longer finish by 3, so the checkpoint fails it and LOW continues (it used to
    yield, wasting the unit on a job then aborted)."""
    p = Policy()
    low = job(10, prio=LOW)
    p.submit(low, 0)
    start(p, 0)
    high = job(2, 3, prio=HIGH)
    assert p.submit(high, 0)
    assert p.preemption_targets(0) == [low]
    decision = p.checkpoint(low, 2, 8)
    assert decision.action is Action.CONTINUE
    assert high.state is JobState.FAILED and high.status is MDT and high.started is None
    assert p.poll(2).failed == (high,)
    assert low.preemptions == 0


def _short_beside_long(fairness: str) -> list[float]:
    """App "s" sends a 1 ms request every 20 ms; app "l" keeps two 100 ms executions queued,
    back to back, on one unit, for 20 s. The latencies of "s"."""
    p = Policy(fairness=fairness)  # type: ignore[arg-type]
    latency: list[float] = []
    running: Job | None = None
    next_short, t = 0.0, 0.0
    for _ in range(2):
        p.submit(job(0.1, app="l"), 0)
    while t < 20.0:
        end = float("inf") if running is None else running.mark + running.remaining
        if running is not None and end <= next_short:
            t = end
            p.complete(running, t)
            if running.app == "s":
                latency.append(t - running.arrival)
            else:
                p.submit(job(0.1, app="l"), t)
            running = None
        else:
            t = next_short
            p.submit(job(0.001, app="s"), t)
            next_short += 0.02
        if running is None:
            running = p.next_to_run(t)
    return sorted(latency)


def test_fair_share_is_device_time_by_default() -> None:
    """Item 7: by default apps share the device by time, so the short requests wait at most one
    long execution (round robin gave them one turn per 100 ms execution: a queue that grows)."""
    assert Policy().fairness == "weighted"
    fair = _short_beside_long("weighted")
    assert len(fair) > 900 and fair[-1] <= 0.101 + 1e-9
    turns = _short_beside_long("round_robin")
    assert turns[len(turns) // 2] > 1.0
