"""``nnrt conformance``: progress on a terminal only, and a non-zero exit for a selection matching nothing."""

from __future__ import annotations

import asyncio
import io

import pytest

from nnrt._progress import Progress, progress_stream
from nnrt.cli import main
from nnrt.conformance.__main__ import run_conformance


def test_an_unknown_operation_is_an_argument_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["conformance", "--op", "NOPE"])
    assert info.value.code == 2 and "--op NOPE: no such operation" in capsys.readouterr().err


def test_a_selection_matching_no_case_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--spec", "no-such-spec"]) == 2
    assert "matches no case" in capsys.readouterr().err


def test_a_small_selection_passes_and_prints_no_progress_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--spec", "V1_0/add", "--op", "ADD"]) == 0
    captured = capsys.readouterr()
    assert " 0 failed" in captured.out and "\r" not in captured.err and "\r" not in captured.out


def test_progress_goes_to_the_given_stream_and_is_erased() -> None:
    stream = io.StringIO()
    results = asyncio.run(run_conformance(["ADD"], "V1_0/add", progress=stream))
    assert results and all(r.status == "pass" for r in results)
    text = stream.getvalue()
    assert "conformance: [" in text and "V1_0/add" in text and text.endswith("\r")


def test_progress_only_when_stdout_and_stderr_are_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdout", Tty())
    monkeypatch.setattr("sys.stderr", Tty())
    assert progress_stream() is not None
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert progress_stream() is None
    silent = Progress("x", 10, None)
    silent.update(5, force=True)
    silent.note("nothing")
    silent.close()
