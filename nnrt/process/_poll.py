"""The polling policy of a ``ProcessDevice``'s rings (issue 18): who polls, for how long.

A ring's consumer either polls it (a core burnt, a packet seen within a microsecond) or sleeps on
its doorbell; a producer that finds its consumer asleep rings the doorbell, an ``eventfd`` write.
On this 2-vCPU VM a wake-up is the dear part: ~45 us of the round trip, much of it on the
waker's time (``nnrt.process._fmq``). A one-ADD round trip costs ~15 us of work on each side,
so the targets (p50 <= 40 us) are met only when *neither* side sleeps: the app polls for its
reply and the service polls for the next request, and no doorbell is rung either way.

Each side alone cannot find that equilibrium (measured before this policy: 2,953 doorbells in
3,000 calls): the service polled 50 us after a reply, but an app that slept for its reply sent
its next request ~45 us (its own wake-up) + ~17 us (its work) later, so the service's poll
missed, its score fell and both sides settled into sleeping. Hence the **joint policy**:

* the app (``ReplyPoller``, in ``nnrt.process._client``) polls for the reply to its only
  execution outstanding (in this process: with more, the services need the cores, and results
  wake it soon enough) when the model's recent time on the device is short, for a window fitted
  to the reply's expected wait, learnt apart for a service that was awake and one it had to wake;
  it says so *before* it rings: the request ring's *polling* word is set, its result ring's
  *sleeping* word cleared (a service that answers while the app is still in its doorbell's
  system call must not ring back);
* the service (``RequestPoller``, in ``nnrt.process._service``) polls for the next request
  when the app was awake as its result was published (it polls for its replies, or its loop
  handles results and refills the ring after them), for a window fitted to the app's observed
  gap, learnt apart for the two; never for an app asleep (it sends nothing before it woke up),
  never while its own executions run on worker threads (they need the interpreter lock); then
  it sleeps on its doorbell (an idle device burns no CPU);
* both keep polling only while it pays (``Poller``'s score, its CPU-share rule: on a machine
  whose cores are taken, spinners share a core with their peer and polling only makes it later).

**Doorbells with several requests in flight** (``hold_doorbell``): a service that writes a result
while more requests wait on its ring rings a sleeping app only once those would run out within
``LEAD_S`` (what the app needs to wake, take the results and refill the ring), and never holds a
result's doorbell back beyond ``HOLD_S`` (a latency bound): the app wakes once for several
results, yet the service never runs dry. The app, once woken, takes the results of every
service its loop consumes (``_consumer``), and it polls for a lone reply only when its loop has
nothing else ready (a task about to send the next request must not wait for that poll); a
producer rings only a consumer that said it sleeps (``_fmq.Doorbell``).

Every decision is taken by a ``Poller`` on injected clocks, or by a pure function of what was
measured: the unit tests drive them with fake ones.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from nnrt.process._fmq import STRONGLY_ORDERED

__all__ = ["HOLD_S", "LEAD_S", "Poller", "ReplyPoller", "RequestPoller", "hold_doorbell"]


#: What an app needs, once rung, to wake, take its results and refill a service's request ring
#: (seconds; a wake-up is ~45-150 us on this VM, the app's work ~10-20 us per execution).
LEAD_S = 200e-6
#: The longest a service holds back the doorbell for a result (seconds; a latency bound).
HOLD_S = 500e-6


def hold_doorbell(queued: int, per_request: float, held_for: float, lead: float = LEAD_S,
                  hold: float = HOLD_S) -> bool:
    """Whether a service holds back the doorbell for a result it has just written while serving its
    request ring (the app sleeps): ``queued`` requests still wait behind it, each taking about
    ``per_request`` seconds, so the service stays busy longer than ``lead``, and the first result
    held would still be rung within ``hold`` after the next one (``held_for``: how long it has
    waited so far). False: ring now (nothing queued, or too little to cover the app's wake-up, or
    the latency bound)."""
    return queued * per_request > lead and held_for + per_request <= hold


class Poller:
    """How long to poll a ring now, learnt from how it went (as an adaptive mutex spins).

    A poll *pays* when the awaited packet came within the window: the peer ran on another core
    meanwhile. On a machine whose cores are all busy it does not (the spinner takes the core its
    peer needs: ``benchmarks/fmq.py``, p99 in milliseconds) and sleeping on the doorbell is
    better. The machine's load average cannot decide this: the two processes' own polling
    counts in it. So a poller keeps a *score* (a moving average of hits) and ``should`` answers
    the window to poll (0: sleep at once): a window while the score is at least a half, or at
    least ``AWAKE_SCORE`` when the peer is awake now (its answer is near); otherwise now and then
    a probe of the longest window, to notice when cores come free again: after ``PROBE_FIRST``
    calls, then twice as many after each probe that missed, up to ``PROBE_EVERY`` (a transient,
    such as a model's first executions, is over within a few calls; on a saturated machine a
    probe is CPU burnt, so they grow rare).

    **The window is fitted to the wait**: the caller gives the peer's work it expects (``base``: the model's recent
    time on the device, or 0), the poller adds what it learnt the rest takes (``expected``: a
    moving average, over hits, of the wait beyond ``base``: the round trip's transport, the
    peer's wake-up when it slept, the app's own work between two requests) and polls
    ``MARGIN`` times that, at least the configured window and at most ``MAX_WINDOW`` (or the
    configured window when that is longer). Until its first hit it polls the longest window,
    to learn. A wait of more than ``MAX_WINDOW / MARGIN`` (a long model) is not polled for at
    all: a core burnt that long buys nothing a wake-up (~45 us on this VM) would not.

    **A spin that shared its core did not pay**, whatever it saw: when the machine has fewer
    free cores than spinners, the peer runs on the spinner's core (or waits for it), so the
    packet comes only once the spinner is preempted, late, and polling made it later. ``spin``
    measures the share of the wall time it ran (``cpu_clock``: this thread's CPU time) and
    answers a miss when it ran less than ``MIN_SHARE`` of a spin longer than ``SHARE_AFTER``.

    ``clock`` and ``cpu_clock`` are the time sources (seconds); tests give fake ones.
    """

    AWAKE_SCORE = 0.2
    PROBE_FIRST = 4
    PROBE_EVERY = 64
    MARGIN = 2.0
    MAX_WINDOW = 200e-6
    LEARN = 0.25
    MIN_SHARE = 0.5
    SHARE_AFTER = 20e-6

    def __init__(self, window: float, *, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.window = window if STRONGLY_ORDERED else 0.0
        self.longest = max(self.window, self.MAX_WINDOW)
        self.clock, self.cpu_clock = clock, cpu_clock
        self.yield_ = os.sched_yield
        #: Learnt wait beyond ``base`` (seconds; None until a poll hit).
        self.expected: float | None = None
        self._score = 1.0
        self._count = 0
        self._probe_gap = self.PROBE_FIRST  # calls between two probes now
        self._probing = False
        #: Polls made (probes included) and polls that paid.
        self.polls = self.hits = 0

    def fit(self, base: float = 0.0) -> float:
        """The window for a packet expected after ``base`` seconds of the peer's work and what
        this poller learnt (the longest window until it learnt anything)."""
        if self.expected is None:
            return self.longest
        return min(self.longest, max(self.window, self.MARGIN * (base + self.expected)))

    def should(self, peer_awake: bool = False, base: float = 0.0) -> float:
        """Seconds to poll now (0.0: sleep on the doorbell at once)."""
        if self.window <= 0 or self.MARGIN * base > self.longest:
            return 0.0
        score = self._score
        if score >= 0.5 or (peer_awake and score >= self.AWAKE_SCORE):
            return self.fit(base)
        self._count += 1
        if self._count < self._probe_gap:
            return 0.0
        self._count, self._probing = 0, True
        return self.longest

    def spin(self, ready: Callable[[], bool], window: float, since: float | None = None) -> float:
        """Call ``ready`` until it answers True or ``window`` seconds after ``since`` (default:
        now) have passed: the seconds from ``since`` to True, or -1.0 (a miss, or a spin that
        shared its core: see the class docstring)."""
        clock, yield_ = self.clock, self.yield_
        began, cpu = clock(), self.cpu_clock()
        start = began if since is None else since
        end = start + window
        while True:
            if ready():
                now = clock()
                waited = max(now - start, 0.0)
                break
            now = clock()
            if now >= end:
                waited = -1.0
                break
            yield_()
        spun = now - began
        if spun > self.SHARE_AFTER and self.cpu_clock() - cpu < self.MIN_SHARE * spun:
            return -1.0
        return waited

    def record(self, waited: float, base: float = 0.0) -> None:
        """How a poll went: ``waited`` seconds until the packet came (-1: it did not come
        within the window), of which ``base`` were the peer's expected work."""
        self.polls += 1
        hit = waited >= 0
        self.hits += hit
        self._score = 0.75 * self._score + (0.25 if hit else 0.0)
        if self._probing or hit:
            self._probing = False
            self._probe_gap = self.PROBE_FIRST if hit else min(2 * self._probe_gap, self.PROBE_EVERY)
        if hit:
            extra = max(waited - base, 0.0)
            self.expected = extra if self.expected is None else self.expected + self.LEARN * (extra - self.expected)


class _Kinds:
    """One ``Poller`` per kind of wait (``pollers[kind]``): each learns its own wait and score."""

    KINDS = 2

    def __init__(self, window: float, *, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.pollers = tuple(Poller(window, clock=clock, cpu_clock=cpu_clock) for _ in range(self.KINDS))

    def _wait(self, kind: int, ready: Callable[[], bool], window: float, since: float | None, base: float) -> bool:
        poller = self.pollers[kind]
        waited = poller.spin(ready, window, since)
        poller.record(waited, base)
        return waited >= 0

    @property
    def polls(self) -> int:
        return sum(p.polls for p in self.pollers)

    @property
    def hits(self) -> int:
        return sum(p.hits for p in self.pollers)


class ReplyPoller(_Kinds):
    """The app's side of the joint policy (module docstring): whether to poll for the reply to
    the request just sent, and how long; two ``Poller``s, for a service that was awake when the
    request went (it answers after its work) and for one that had to be woken (~45 us more)."""

    def should(self, alone: bool, service_awake: bool, base: float) -> float:
        """Seconds to poll for the reply (0.0: sleep on the doorbell): only for the one request
        outstanding in this process (``alone``), expected ``base`` seconds of device work."""
        return self.pollers[service_awake].should(service_awake, base) if alone else 0.0

    def wait(self, ready: Callable[[], bool], window: float, service_awake: bool, base: float,
             since: float) -> bool:
        """Poll ``ready`` for up to ``window`` seconds after the request was sent (``since``),
        and learn from it; True when it answered in time."""
        return self._wait(service_awake, ready, window, since, base)


class RequestPoller(_Kinds):
    """The service's side of the joint policy (module docstring): whether to poll for the app's
    next request after publishing its results, and how long; one ``Poller`` per kind of app
    (``kind``): 2, one that polls for its replies (the request ring's *polling* word: its next
    request follows after its own work, no wake-up in between); 1, one merely awake (its loop
    was handling results, and refills the ring after them: several requests in flight); 0, one
    asleep (its refill comes after its wake-up: polled for only while that pays)."""

    KINDS = 3

    @staticmethod
    def kind(app_polls: bool, app_awake: bool) -> int:
        return 2 if app_polls and app_awake else int(app_awake)

    def should(self, kind: int, *, busy: bool) -> float:
        """Seconds to poll for the next request (0.0: sleep on the doorbell at once); never while
        the service's executions run on worker threads (``busy``: they need the interpreter
        lock); the window is fitted to the gap observed for this kind of app."""
        return 0.0 if busy else self.pollers[kind].should(kind > 0)

    def wait(self, ready: Callable[[], bool], window: float, kind: int, since: float | None) -> bool:
        """Poll ``ready`` for up to ``window`` seconds after the results were published
        (``since``), and learn from it; True when the request came in time."""
        return self._wait(kind, ready, window, since, 0.0)
