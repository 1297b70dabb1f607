"""The docs site: its code runs as written, and the command-line page names every option.

(``mkdocs build --strict`` itself runs in CI, after the tests: see the README's test command.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nnrt import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("page", ["guides/model-by-hand.md", "getting-started.md"])
def test_the_pages_code_runs_as_written(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = python_blocks(page)
    assert blocks
    namespace: dict[str, object] = {"__name__": "docs_example"}
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), namespace)  # the page's own code
    out = capsys.readouterr().out
    if page == "guides/model-by-hand.md":
        assert "6 operations" in out and "INVALID_ARGUMENT" in out and "CONV_2D takes 7, 8, 10, 11 or 13 inputs" in out


def test_the_small_cnn_guide_uses_every_layer_the_issue_names() -> None:
    code = "\n".join(python_blocks("guides/model-by-hand.md"))
    for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "FULLY_CONNECTED", "SOFTMAX"):
        assert f"Op.{op}" in code


@pytest.mark.parametrize("command", ["demo", "devices", "conformance", "simulate", "bench"])
def test_the_command_line_page_names_every_option(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    options = set(re.findall(r"(--[a-z][a-z-]+)", capsys.readouterr().out)) - {"--help"}
    assert options
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = sorted(o for o in options if f"`{o}" not in page)
    assert not missing, f"docs/cli.md does not describe {missing}"


def test_every_page_is_in_the_navigation() -> None:
    nav = (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert pages and all(f": {p}" in nav for p in pages)


def test_help_on_the_public_calls_names_no_private_module_and_says_what_they_raise() -> None:
    import pydoc

    import nnrt

    for call in (nnrt.PreparedModel.execute, nnrt.PreparedModel.execute_fenced, nnrt.PreparedModel.burst,
                 nnrt.Device.prepare_model, nnrt.Memory, nnrt.load, nnrt.ModelBuilder, nnrt.Model.add_operation):
        text = pydoc.render_doc(call, renderer=pydoc.plaintext)
        assert not re.search(r"nnrt(\.\w+)*\._\w+", call.__doc__ or ""), call  # no pointer to a private module
        assert "INVALID_ARGUMENT" in text or "InvalidArgumentError" in text, call
    header = pydoc.render_doc(nnrt.PreparedModel.execute_fenced, renderer=pydoc.plaintext).splitlines()[0]
    assert header.endswith("in module nnrt.execution"), header
