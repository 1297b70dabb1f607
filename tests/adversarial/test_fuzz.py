"""Coverage-guided fuzzing of everything that parses bytes (``fuzz.py``, targets in ``_targets.py``),
each target in a child process from the seed corpus in ``corpus/``. CI runs a bounded number
of inputs per target; ``--long`` runs many more."""

from __future__ import annotations

import pytest

from tests.adversarial import _tally
from tests.adversarial._targets import TARGETS
from tests.adversarial.fuzz import run_fuzzer

#: Inputs per target (CI, long) and the time cap in seconds (CI, long).
RUNS = (500, 40_000)
SECONDS = (12, 1500)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz_target(target: str) -> None:
    runs, seconds = _tally.budget(*RUNS), _tally.budget(*SECONDS)
    result = run_fuzzer(target, runs, seconds, seed=_tally.budget(1, 7))
    _tally.record(f"fuzz:{target} ({result.engine})", tries=result.tries, crashes=result.crashes, hangs=result.hangs)
    assert result.crashes == 0 and result.hangs == 0, result.detail
    assert result.tries > 0, result.detail
    assert result.uncompiled == 0, result.detail  # the compiled kernels are fuzzed, not their numpy twins
