"""Arrival processes hit their configured rates (within 1% over a long run), deterministically."""

from __future__ import annotations

import numpy as np
import pytest

from nnrt.sim import parse_scenario
from nnrt.sim._arrivals import arrival_times, expected_rate
from nnrt.sim._scenario import WorkloadSpec


def workload(fields: str) -> WorkloadSpec:
    return parse_scenario(f'duration_s = 2000\n[[workloads]]\napp = "a"\nmodel = "one_add"\n{fields}\n').workloads[0]


@pytest.mark.parametrize(
    "fields",
    [
        'arrival = "periodic"\nperiod_ms = 10\njitter_ms = 3',
        'arrival = "poisson"\nrate_hz = 50',
        'arrival = "onoff"\nrate_hz = 200\non_ms = 300\noff_ms = 700',
    ],
)
def test_rate_within_one_percent(fields: str) -> None:
    w = workload(fields)
    times = arrival_times(w, np.random.default_rng(1))
    rate = expected_rate(w)
    assert rate is not None
    assert len(times) == pytest.approx(rate * 2000, rel=0.01)
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] < 2000


def test_onoff_arrivals_only_while_on() -> None:
    w = workload('arrival = "onoff"\nrate_hz = 500\non_ms = 100\noff_ms = 400')
    phase = np.mod(arrival_times(w, np.random.default_rng(2)), 0.5)
    assert phase.max() < 0.1


def test_count_start_and_duration_bound_the_arrivals() -> None:
    w = workload('arrival = "periodic"\nperiod_ms = 100\ncount = 7\nstart_s = 3')
    assert arrival_times(w, np.random.default_rng(0)).tolist() == pytest.approx([3.0 + k * 0.1 for k in range(7)])
    w = workload('arrival = "poisson"\nrate_hz = 1000\ncount = 10000\nduration_s = 1')
    times = arrival_times(w, np.random.default_rng(0))
    assert 900 < len(times) < 1100 and times.max() < 1.0
    w = workload('arrival = "poisson"\nrate_hz = 10\ncount = 5000')
    assert len(arrival_times(w, np.random.default_rng(0))) == 5000


def test_same_seed_same_arrivals_other_seed_others() -> None:
    w = workload('arrival = "poisson"\nrate_hz = 100\nduration_s = 10')
    a, b, c = (arrival_times(w, np.random.default_rng(s)) for s in (5, 5, 6))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_trace_arrivals_are_shifted_and_counted(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    (d / "t.txt").write_text("0\n0.25\n0.25\n2\n")
    w = parse_scenario('[[workloads]]\napp = "a"\nmodel = "one_add"\narrival = "trace"\nfile = "t.txt"\nstart_s = 1\ncount = 3\n',
                       base_dir=str(d)).workloads[0]
    assert arrival_times(w, np.random.default_rng(0)).tolist() == [1.0, 1.25, 1.25]
    assert expected_rate(w) is None
