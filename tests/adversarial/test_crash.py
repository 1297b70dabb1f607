"""MLTS-style crash tests: models (valid and mutated files) and request storms, each in a child
process under ``nnrt.bench``'s watchdog (``crash_test``): SUCCESS / FAILURE / HANG / CRASH.

SUCCESS and FAILURE (an ``NnrtError``: the model or a request was refused) are both fine; HANG
and CRASH (a signal, a non-zero exit, an exception that is not an ``NnrtError``, execution paths
that disagree, a leak after a storm) are not."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nnrt.bench._crash import CrashResult, crash_test
from tests.adversarial import _tally
from tests.adversarial._crash_runners import model_runner, storm_runner
from tests.adversarial.fuzz import CORPUS, _mutate

#: Mutated model files per seed (CI, long); storm executions per model (CI, long).
MUTANTS = (1, 150)
STORM = (300, 5000)


def _tally_results(category: str, results: list[CrashResult]) -> None:
    outcomes = [r.outcome for r in results]
    wrong = sum(1 for r in results if "WRONG" in r.detail)
    leaks = sum(1 for r in results if "LEAK" in r.detail)
    _tally.record(category, tries=len(results), crashes=outcomes.count("CRASH") - wrong - leaks,
                  hangs=outcomes.count("HANG"), wrong=wrong, leaks=leaks)


def test_model_files_valid_and_mutated(tmp_path: Path) -> None:
    seeds = sorted((CORPUS / "model_file").iterdir())
    rng = random.Random(_tally.budget(16, 1616))
    corpus = [p.read_bytes() for p in seeds]
    paths = [str(p) for p in seeds]
    for k in range(_tally.budget(*MUTANTS) * len(seeds)):
        path = tmp_path / f"mutant{k}"
        path.write_bytes(_mutate(rng, corpus[k % len(corpus)], corpus))
        paths.append(str(path))
    results = crash_test(paths, timeout_s=60, start_timeout_s=120, options={"seed": 3, "requests": 3}, runner=model_runner)
    _tally_results("crash:model files", results)
    bad = [r for r in results if r.outcome in ("HANG", "CRASH")]
    assert not bad, bad
    assert any(r.outcome == "SUCCESS" for r in results)


@pytest.mark.parametrize("model", ["one_add", "small_cnn"])
def test_request_storm_in_a_child(model: str) -> None:
    results = crash_test([model], timeout_s=120, start_timeout_s=120,
                         options={"executions": _tally.budget(*STORM), "seed": 5}, runner=storm_runner)
    _tally_results("crash:request storms", results)
    assert [r.outcome for r in results] == ["SUCCESS"], results
