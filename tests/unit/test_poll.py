"""The rings' polling policy (``nnrt.process._poll``) on fake clocks: a poller fits its window
to the wait it learnt, stops when polls miss and probes back with a growing gap, counts a spin
that shared its core as a miss, never polls for a long model; the app polls only for its one
request outstanding, the service only for an app that polls; and, simulated together, the two
sides settle into both polling when each has a core and into both sleeping when they share one.
A service holds back the doorbell of a result only while the requests queued behind it outlast
the app's refill, and never beyond the latency bound."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nnrt.process._fmq import STRONGLY_ORDERED
from nnrt.process._poll import HOLD_S, LEAD_S, Poller, ReplyPoller, RequestPoller, hold_doorbell

pytestmark = pytest.mark.skipif(not STRONGLY_ORDERED, reason="weakly ordered CPUs never poll (tested below)")

US = 1e-6


class FakeClock:
    """Seconds; every read is one spin iteration later (``tick``)."""

    def __init__(self, tick: float = 1 * US) -> None:
        self.now = 0.0
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def cpu(self, share: float) -> Callable[[], float]:
        """A CPU clock of a thread that runs ``share`` of the wall time."""
        return lambda: self.now * share


def make(window: float = 50 * US, share: float = 1.0) -> tuple[Poller, FakeClock]:
    clock = FakeClock()
    poller = Poller(window, clock=clock, cpu_clock=clock.cpu(share))
    poller.yield_ = lambda: None
    return poller, clock


def arrives(clock: FakeClock, after: float) -> Callable[[], bool]:
    at = clock.now + after
    return lambda: clock.now >= at


def test_weakly_ordered_cpus_never_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nnrt.process._poll.STRONGLY_ORDERED", False)
    assert not Poller(50 * US).should() and not Poller(50 * US).should(True)


def test_a_poller_fits_its_window_to_the_wait_it_learnt() -> None:
    assert not Poller(0.0).should() and not Poller(0.0).should(True)
    poller, clock = make()
    assert poller.should() == Poller.MAX_WINDOW  # nothing learnt yet: the longest window, to learn
    waited = poller.spin(arrives(clock, 30 * US), poller.should())
    assert 30 * US <= waited <= 32 * US
    poller.record(waited, base=10 * US)  # 10 us of it were the peer's expected work
    assert poller.expected == pytest.approx(waited - 10 * US)
    assert poller.should(base=10 * US) == pytest.approx(Poller.MARGIN * waited)  # ~60 us: the same wait again
    assert poller.should(base=0.0) == pytest.approx(max(50 * US, Poller.MARGIN * (waited - 10 * US)))
    for _ in range(20):
        poller.record(150 * US)  # the waits grew: the window follows, up to the longest
    assert poller.should() == Poller.MAX_WINDOW
    for _ in range(40):
        poller.record(5 * US)
    assert poller.should() == 50 * US  # never below the configured window


def test_no_poll_for_a_long_model() -> None:
    poller, _ = make()
    assert poller.should(True, base=90 * US) > 0
    assert poller.should(True, base=120 * US) == 0.0  # 2 x 120 us > the longest window: sleep at once
    assert poller.polls == 0


def test_misses_stop_polling_and_probes_back_off() -> None:
    poller, _ = make()
    for _ in range(3):
        poller.record(-1.0)
    assert poller.should(peer_awake=True) > 0  # a quarter of hits: only while the peer is awake
    for _ in range(3):
        poller.record(-1.0)
    gaps = []
    for _ in range(6):  # each probe misses: the gap between probes doubles, up to PROBE_EVERY
        calls = 1
        while not poller.should(peer_awake=True):
            calls += 1
        gaps.append(calls)
        poller.record(-1.0)
    assert gaps == [4, 8, 16, 32, 64, 64]
    calls = 1
    while not (window := poller.should()):
        calls += 1
    assert calls == 64 and window == Poller.MAX_WINDOW  # a probe is the longest window
    poller.record(40 * US)  # it paid: with the peer awake, poll again; the gap is back to the first
    assert poller.should(peer_awake=True) > 0
    assert poller.should(peer_awake=False) == 0.0  # alone, a quarter is not enough (1 call of the gap)
    poller.record(-1.0)
    poller.record(-1.0)
    assert [bool(poller.should()) for _ in range(Poller.PROBE_FIRST - 1)] == [False, False, True]
    for _ in range(4):
        poller.record(20 * US)
    assert all(poller.should() for _ in range(10))  # hits again: polls every time
    assert poller.hits == 5 and poller.polls == 19


def test_a_spin_that_shared_its_core_is_a_miss() -> None:
    poller, clock = make(share=1.0)
    assert poller.spin(arrives(clock, 40 * US), 200 * US) > 0
    shared, clock = make(share=0.3)  # the spinner ran 30% of the time: its peer ran on its core
    assert shared.spin(arrives(clock, 40 * US), 200 * US) == -1.0
    assert shared.spin(arrives(clock, 5 * US), 200 * US) > 0  # too short to judge: a hit
    assert shared.spin(lambda: False, 200 * US) == -1.0


def test_the_window_counts_from_when_the_request_went() -> None:
    poller, clock = make()
    clock.now = 1.0
    since = clock.now - 150 * US  # sent 150 us ago (a doorbell's system call, say)
    assert poller.spin(lambda: False, 200 * US, since) == -1.0
    assert clock.now - since == pytest.approx(200 * US, abs=2 * US)  # 50 us more, not 200
    clock.now = 2.0
    ready = arrives(clock, 10 * US)
    assert poller.spin(ready, 200 * US, clock.now - 30 * US) == pytest.approx(40 * US, abs=2 * US)


def test_the_app_polls_only_for_its_one_request_and_learns_per_service_state() -> None:
    clock = FakeClock()
    app = ReplyPoller(50 * US, clock=clock, cpu_clock=clock.cpu(1.0))
    for p in app.pollers:
        p.yield_ = lambda: None
    assert app.should(False, True, 5 * US) == 0.0  # another request outstanding: sleep
    assert app.should(True, True, 5 * US) == Poller.MAX_WINDOW
    for _ in range(6):  # a woken service answers late: that side stops polling ...
        assert not app.wait(lambda: False, 100 * US, False, 5 * US, clock())
    assert app.should(True, False, 5 * US) == 0.0
    assert app.should(True, True, 5 * US) > 0  # ... an awake one is another matter
    assert app.wait(arrives(clock, 15 * US), 200 * US, True, 5 * US, clock())
    assert app.pollers[True].expected == pytest.approx(10 * US, abs=2 * US)
    assert (app.polls, app.hits) == (7, 1)


def test_the_service_learns_per_kind_of_app() -> None:
    clock = FakeClock()
    service = RequestPoller(50 * US, clock=clock, cpu_clock=clock.cpu(1.0))
    for p in service.pollers:
        p.yield_ = lambda: None
    polling, awake, asleep = (service.kind(True, True), service.kind(False, True), service.kind(False, False))
    assert (polling, awake, asleep) == (2, 1, 0) and service.kind(True, False) == asleep
    assert all(service.should(k, busy=False) == Poller.MAX_WINDOW for k in (polling, awake, asleep))
    assert service.should(polling, busy=True) == 0.0  # executions on worker threads need the GIL
    for _ in range(3):  # an app asleep sends its next request only after its wake-up: stop for it ...
        assert not service.wait(lambda: False, 100 * US, asleep, clock())
    assert service.should(asleep, busy=False) == 0.0
    assert service.should(awake, busy=False) > 0  # ... not for the others
    for _ in range(3):
        assert not service.wait(lambda: False, 100 * US, awake, clock())
    assert service.should(awake, busy=False) > 0  # an awake app: down to AWAKE_SCORE
    assert service.wait(arrives(clock, 20 * US), 200 * US, polling, clock())
    assert service.should(polling, busy=False) == 50 * US  # 2 x ~20 us, at least the configured window
    assert (service.polls, service.hits) == (7, 1)


def simulate(share: float, calls: int = 300) -> list[tuple[bool, bool]]:
    """One app and one service exchanging one-ADD requests, on fake clocks: each side works
    15 us per call, a sleeping side takes 45 us more to wake. A spinner runs ``share`` of the
    time: 1.0, each side has a core; less, they share one, and the peer works only while the
    spinner does not run (its work takes 1 / (1 - share) longer). Per call: (the app caught the
    reply polling, the service caught the next request polling)."""
    clock = FakeClock(0.5 * US)
    cpu = clock.cpu(share)
    app = ReplyPoller(50 * US, clock=clock, cpu_clock=cpu)
    service = RequestPoller(50 * US, clock=clock, cpu_clock=cpu)
    for p in (*app.pollers, *service.pollers):
        p.yield_ = lambda: None
    work = 15 * US / (1.0 - share if share < 1 else 1.0)
    wake, base = 45 * US, 5 * US
    service_awake = False
    out = []
    for _ in range(calls):
        sent = clock.now
        window = app.should(True, service_awake, base)
        published = sent + work + (0.0 if service_awake else wake)
        caught = window > 0 and app.wait(arrives(clock, published - clock.now), window, service_awake, base, sent)
        clock.now = published  # the service's side, from the moment it published the result
        kind = service.kind(window > 0, caught)
        window = service.should(kind, busy=False)
        arrival = published + (0.0 if caught else wake) + work  # the app's wake-up (if it slept), its work
        service_awake = bool(window) and service.wait(arrives(clock, arrival - clock.now), window, kind, published)
        clock.now = max(clock.now, arrival)
        out.append((caught, service_awake))
    return out


def test_both_sides_settle_into_polling_when_each_has_a_core() -> None:
    calls = simulate(share=1.0)
    assert sum(a and s for a, s in calls[-100:]) >= 95  # both awake: no doorbell either way


def test_both_sides_settle_into_sleeping_when_they_share_a_core() -> None:
    calls = simulate(share=0.3)
    assert sum(a or s for a, s in calls[-100:]) <= 10  # only the occasional probe


def test_a_result_s_doorbell_waits_only_while_the_queue_outlasts_the_refill() -> None:
    per = 100 * US  # each queued request keeps the service busy this long
    assert pytest.approx((200 * US, 500 * US)) == (LEAD_S, HOLD_S)
    # nothing or too little queued behind it: ring now (the app refills before the service runs dry)
    assert not hold_doorbell(0, per, 0.0)
    assert not hold_doorbell(2, per, 0.0)
    # three queued (300 us of work): hold, unless the first held result would then wait too long
    assert hold_doorbell(3, per, 0.0)
    assert hold_doorbell(3, per, 399 * US)
    assert not hold_doorbell(3, per, 401 * US)
    # a long model: its next result would come after the bound, so it never holds
    assert not hold_doorbell(10, 600 * US, 0.0)
    # before the service measured a request (0 s each) it never holds
    assert not hold_doorbell(100, 0.0, 0.0)
    # a queue of 16 requests of 30 us: the first nine results are held (the queue behind them
    # outlasts the refill); the first doorbell is due with six left (180 us of work, within the
    # lead), and from then on each result may ring, if the app went back to sleep
    decisions, held_for = [], 0.0
    for queued in range(15, -1, -1):
        hold = hold_doorbell(queued, 30 * US, held_for)
        decisions.append(hold)
        held_for = held_for + 30 * US if hold else 0.0
    assert decisions == [True] * 9 + [False] * 7
    # the same queue of 110 us requests: held until the next result would pass the latency bound,
    # then again; rung for the last two (within the lead)
    decisions, held_for = [], 0.0
    for queued in range(15, -1, -1):
        hold = hold_doorbell(queued, 110 * US, held_for)
        decisions.append(hold)
        held_for = held_for + 110 * US if hold else 0.0
    assert decisions == ([True] * 4 + [False]) * 3 + [False]
