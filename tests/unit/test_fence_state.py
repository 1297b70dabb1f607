"""The pure fence state machine (``nnrt.fences._state``): plain synchronous tests, no event loop.

Covers the transition table (every (state, event) pair, strict and idempotent calls), the
outcome fields, listeners (order, once-only, late registration, removal, re-entrancy, a raising
listener) and a thread-safety smoke test where many threads race to resolve one core.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnrt.errors import InternalError
from nnrt.fences._state import TRANSITIONS, FenceCore, FenceEvent, FenceState
from nnrt.types import ErrorStatus

FAILURES = [s for s in ErrorStatus if s is not ErrorStatus.NONE]


def _core_in(state: FenceState) -> FenceCore:
    core = FenceCore()
    if state is FenceState.SIGNALED:
        core.signal()
    elif state is FenceState.ERROR:
        core.fail(ErrorStatus.DEVICE_UNAVAILABLE, "gone")
    assert core.state is state
    return core


def _strict(core: FenceCore, event: FenceEvent) -> None:
    if event is FenceEvent.SIGNAL:
        core.signal()
    else:
        core.fail(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "late")


def _try(core: FenceCore, event: FenceEvent) -> bool:
    if event is FenceEvent.SIGNAL:
        return core.try_signal()
    return core.try_fail(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "late")


# -- the table ------------------------------------------------------------------------------------


def test_table_only_leaves_active() -> None:
    assert TRANSITIONS == {
        (FenceState.ACTIVE, FenceEvent.SIGNAL): FenceState.SIGNALED,
        (FenceState.ACTIVE, FenceEvent.FAIL): FenceState.ERROR,
    }
    # End states are final: nothing in the table leaves them.
    assert {state for state, _ in TRANSITIONS} == {FenceState.ACTIVE}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(FenceState, FenceEvent)))
def test_every_pair_strict(state: FenceState, event: FenceEvent) -> None:
    core = _core_in(state)
    before = (core.state, core.status, core.message)
    target = TRANSITIONS.get((state, event))
    if target is None:
        with pytest.raises(InternalError, match="illegal fence transition"):
            _strict(core, event)
        assert (core.state, core.status, core.message) == before
    else:
        _strict(core, event)
        assert core.state is target


@pytest.mark.parametrize(("state", "event"), list(itertools.product(FenceState, FenceEvent)))
def test_every_pair_idempotent(state: FenceState, event: FenceEvent) -> None:
    core = _core_in(state)
    before = (core.state, core.status, core.message)
    target = TRANSITIONS.get((state, event))
    assert _try(core, event) is (target is not None)
    if target is None:
        assert (core.state, core.status, core.message) == before
    else:
        assert core.state is target
    assert _try(core, event) is False  # a second time is always a no-op


def test_initial_and_outcomes() -> None:
    core = FenceCore()
    assert (core.state, core.status, core.message, core.done()) == (FenceState.ACTIVE, None, "", False)
    core.signal()
    assert (core.state, core.status, core.message, core.done()) == (FenceState.SIGNALED, ErrorStatus.NONE, "", True)


@pytest.mark.parametrize("status", FAILURES)
def test_fail_keeps_status_and_message(status: ErrorStatus) -> None:
    core = FenceCore()
    core.fail(status, "why")
    assert (core.state, core.status, core.message) == (FenceState.ERROR, status, "why")
    assert status.name in repr(core)


def test_fail_accepts_plain_int_status() -> None:
    core = FenceCore()
    core.fail(5, "late")  # type: ignore[arg-type]
    assert core.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT


def test_none_is_not_a_failure() -> None:
    core = FenceCore()
    with pytest.raises(InternalError, match="NONE"):
        core.fail(ErrorStatus.NONE)
    with pytest.raises(InternalError, match="NONE"):
        core.try_fail(ErrorStatus.NONE)
    assert core.state is FenceState.ACTIVE
    core.signal()
    with pytest.raises(InternalError, match="NONE"):  # still a bug once resolved
        core.try_fail(ErrorStatus.NONE)


def test_illegal_message_names_the_outcome() -> None:
    core = _core_in(FenceState.ERROR)
    with pytest.raises(InternalError, match=r"SIGNAL on a fence already ERROR \(DEVICE_UNAVAILABLE\)") as info:
        core.signal()
    assert info.value.status is ErrorStatus.GENERAL_FAILURE


# -- listeners ------------------------------------------------------------------------------------


def test_listeners_called_once_in_order() -> None:
    core = FenceCore()
    calls: list[tuple[str, FenceState]] = []

    def listener(name: str) -> Callable[[FenceCore], None]:
        return lambda c: calls.append((name, c.state))

    handles = [core.add_listener(listener(name)) for name in "abc"]
    assert all(isinstance(h, int) for h in handles) and len(set(handles)) == 3
    assert calls == []
    core.fail(ErrorStatus.GENERAL_FAILURE, "x")
    assert calls == [("a", FenceState.ERROR), ("b", FenceState.ERROR), ("c", FenceState.ERROR)]
    assert not core.try_signal()
    assert len(calls) == 3


def test_listener_on_resolved_fence_runs_at_once() -> None:
    core = _core_in(FenceState.SIGNALED)
    seen: list[FenceCore] = []
    assert core.add_listener(seen.append) is None
    assert seen == [core]


def test_remove_listener() -> None:
    core = FenceCore()
    seen: list[str] = []
    keep = core.add_listener(lambda c: seen.append("keep"))
    drop = core.add_listener(lambda c: seen.append("drop"))
    assert core.remove_listener(drop) is True
    assert core.remove_listener(drop) is False
    assert core.remove_listener(None) is False
    core.signal()
    assert seen == ["keep"]
    assert core.remove_listener(keep) is False  # already called


def test_listener_may_reenter() -> None:
    core = FenceCore()
    other = FenceCore()
    seen: list[str] = []

    def listener(c: FenceCore) -> None:
        # Runs outside the lock: reading, registering late and resolving another core all work.
        assert c.done()
        c.add_listener(lambda _: seen.append("late"))
        other.signal()

    core.add_listener(listener)
    core.signal()
    assert seen == ["late"] and other.state is FenceState.SIGNALED


def test_raising_listener_does_not_starve_others() -> None:
    core = FenceCore()
    seen: list[str] = []
    core.add_listener(lambda c: seen.append("first"))

    def broken(_: FenceCore) -> None:
        raise ZeroDivisionError("listener bug")

    core.add_listener(broken)
    core.add_listener(lambda c: seen.append("last"))
    with pytest.raises(InternalError, match="listener raised") as info:
        core.signal()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert seen == ["first", "last"]
    assert core.state is FenceState.SIGNALED


# -- a model-based check --------------------------------------------------------------------------


@given(st.lists(st.sampled_from(["signal", "fail", "try_signal", "try_fail", "listen"]), max_size=12))
def test_random_sequences_match_model(ops: list[str]) -> None:
    core = FenceCore()
    model: FenceState = FenceState.ACTIVE
    calls = 0
    listeners = 0

    def count(_: FenceCore) -> None:
        nonlocal calls
        calls += 1

    for op in ops:
        if op == "listen":
            listeners += 1
            core.add_listener(count)
            continue
        event = FenceEvent.SIGNAL if "signal" in op else FenceEvent.FAIL
        target = TRANSITIONS.get((model, event))
        if op.startswith("try_"):
            assert _try(core, event) is (target is not None)
        elif target is None:
            with pytest.raises(InternalError):
                _strict(core, event)
        else:
            _strict(core, event)
        model = target or model
        assert core.state is model
    # Every listener ran exactly once if the fence resolved, and none ran otherwise.
    assert calls == (listeners if model is not FenceState.ACTIVE else 0)


# -- threads --------------------------------------------------------------------------------------


def _race_once(n: int) -> None:
    core = FenceCore()
    barrier = threading.Barrier(n + 1)
    wins: list[bool] = []
    calls: list[int] = []

    def racer(i: int) -> None:
        barrier.wait()
        # Half the threads register listeners while the others resolve: each listener must run
        # exactly once, whichever side of the transition it lands on.
        if i % 2:
            core.add_listener(lambda c: calls.append(i))
            won = core.try_fail(ErrorStatus.GENERAL_FAILURE, f"t{i}")
        else:
            won = core.try_signal()
        wins.append(won)  # list.append is atomic

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join()
    assert wins.count(True) == 1
    assert sorted(calls) == [i for i in range(n) if i % 2]
    assert core.done()


def test_threads_race_to_resolve() -> None:
    for _ in range(20):
        _race_once(8)


def test_strict_signal_from_many_threads_exactly_one_succeeds() -> None:
    core = FenceCore()
    n = 8
    barrier = threading.Barrier(n)
    outcomes: list[str] = []

    def signal() -> None:
        barrier.wait()
        try:
            core.signal()
            outcomes.append("ok")
        except InternalError:
            outcomes.append("illegal")

    threads = [threading.Thread(target=signal) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["illegal"] * (n - 1) + ["ok"]
