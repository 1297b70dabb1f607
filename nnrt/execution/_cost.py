"""The cost model admission control relies on: what one execution of a plan will take.

A ``CostModel`` learns the service time of executions (the time they hold a compute unit,
hand-offs included) from every path that runs them: the scheduler's, the idle fast path
(sampled, so the 5 us path pays ~nothing) and burst worker batches. It starts from a prior (the
calibration at preparation: kernels alone, on zero inputs, possibly on a busy machine) that the
first real measurements replace, so a noisy calibration neither locks the estimate high nor
is a floor under it.

* **Early samples, robustly.** Until ``ESTABLISHED`` samples exist the estimate stands on their
  mean and mean absolute deviation (a spread of at least a tenth of the mean), leaving out the
  largest once there are three: one cold or descheduled run among the first few moves neither,
  while slow runs that recur (a loaded machine) are planned for. Then it switches to
  exponential averages of the mean and the absolute deviation (in the spirit of TCP's
  retransmission timer), where one outlier counts for at most four spreads above the mean,
  while a lasting change still moves the estimate by a quarter or more per execution.
* **Margin.** The estimate is the mean plus three deviations: jitter rarely makes an admitted
  job late. Under overload, larger margins measured better on on-time throughput and misses up
  to about 4 (misses waste capacity); 6 left the device idle.
* **No lock-in.** Refused executions are never measured, so an estimate pushed above the
  deadlines would refuse every later request and never learn otherwise. Each refusal in a row
  because the estimate alone does not fit (MISSED_DEADLINE_PERSISTENT; refusals for the work
  ahead say nothing about it) shrinks the excess over the lowest cost known by 15%, until an
  execution is admitted and measured (a probe, as TCP's after a timeout); after
  ``STALE_AFTER_REFUSALS`` refusals in a row that measurement starts the history afresh.

Plans with inputs of unknown dimensions get one model per *shape class* (``Plan.cost_for``:
the inputs' total element count, by power of two), since a batch of 4096 costs what a batch
of 1 does not; until a class is measured its prior is the largest cost measured for a smaller
class, scaled by size. Their steps never run on the event loop thread on an estimate; a
request whose class has a measured history that fits the inline limit (or one loop slice) runs
there at once when the device is idle (``CpuDevice``), like a cheap plan of known shapes. That
compute time (``work_ns``) starts from the early samples' lowest and then moves by at most a
fifth per sample: silero VAD's 0.2 ms step (dynamic by its rank-0 ``sr`` input) went to the worker
for 12 executions after its 9 ms first one, and for 3-4 after each slow run on a shared machine.
"""

from __future__ import annotations

__all__ = ["ESTABLISHED", "STALE_AFTER_REFUSALS", "CostModel"]

#: Refusals in a row after which a model's measured history is stale (``CostModel.observe``).
STALE_AFTER_REFUSALS = 10
#: Samples after which the estimate switches from the early median to exponential averages.
ESTABLISHED = 8


class CostModel:
    """Service time of one plan's executions (or one shape class of them); see the module doc."""

    __slots__ = ("_early", "dev_ns", "mean_ns", "observations", "prior_ns", "refusals", "work_ns")

    def __init__(self, prior_ns: float) -> None:
        #: What the estimate is before any measurement (the calibrated cost).
        self.prior_ns = float(prior_ns)
        #: The current mean and absolute deviation (ns), once measured.
        self.mean_ns = 0.0
        self.dev_ns = 0.0
        #: Executions observed since the history (re)started.
        self.observations = 0
        #: Refusals in a row because the estimate alone did not fit (see ``refused``).
        self.refusals = 0
        self._early: list[float] = []
        #: A moving average of the executions' compute time (their kernels and interpreter,
        #: without waiting and hand-offs): how long one would hold the event loop thread.
        self.work_ns = 0.0

    def observe(self, service_ns: float, work_ns: float | None = None) -> None:
        """Learn one execution's service time, and its compute time (``work_ns``; the service
        time when not given: the execution did nothing else)."""
        work = float(service_ns if work_ns is None else work_ns)
        prev = self.work_ns
        if not self.observations or (self.observations < ESTABLISHED and work < prev):
            self.work_ns = work  # the early samples' lowest: a cold first run does not linger
        else:  # one slow run (a descheduled thread, cold caches) moves it by a fifth at most
            self.work_ns = 0.8 * prev + 0.2 * min(work, 2.0 * prev)
        if self.refusals >= STALE_AFTER_REFUSALS:  # a stale history: start again from this one
            self._early.clear()
            self.observations = 0
        self.refusals = 0
        self.observations += 1
        if self.observations <= ESTABLISHED:
            early = self._early
            early.append(float(service_ns))
            # The largest sample is left out once there are three (a cold first run, a thread
            # descheduled once); the others count in full, slow ones too: on a loaded machine
            # they recur, and admission must plan for the mean service time, not the median.
            kept = sorted(early)[:-1] if len(early) >= 3 else early
            mean = sum(kept) / len(kept)
            spread = sum(abs(x - mean) for x in kept) / len(kept)
            self.mean_ns, self.dev_ns = mean, max(spread, 0.1 * mean)
            if self.observations == ESTABLISHED:
                self._early = []
            return
        mean = self.mean_ns
        sample = min(float(service_ns), mean + 4.0 * max(self.dev_ns, 0.25 * mean))
        self.dev_ns = 0.75 * self.dev_ns + 0.25 * abs(sample - mean)
        self.mean_ns = 0.8 * mean + 0.2 * sample

    def refused(self) -> None:
        """Admission refused an execution because this estimate alone did not fit its deadline."""
        self.refusals += 1

    @property
    def estimate_ns(self) -> float:
        """What admission assumes an execution will take (see the module docstring)."""
        if not self.observations:
            return self.prior_ns
        estimate = self.mean_ns + 3.0 * self.dev_ns
        if self.refusals:
            floor = min(self.prior_ns, self.mean_ns)
            estimate = floor + (estimate - floor) * 0.85 ** min(self.refusals, 400)
        return estimate

    def __repr__(self) -> str:
        return f"CostModel(estimate={self.estimate_ns / 1e3:.1f} us, n={self.observations}, refusals={self.refusals})"
