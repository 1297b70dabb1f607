"""The operation reference page, rendered from the signature tables and the kernel registry.

``render()`` returns the Markdown of ``docs/operations.md``: one section per
``OperationType`` with its forms, each input and output (name, operand types, meaning,
whether it may be omitted), feature level and notes, and whether this build has a kernel for
it. The page is generated, never edited: ``python -m nnrt.ops._reference docs/operations.md``
rewrites it, and a test fails when the committed page and this rendering differ, so the page
cannot drift from what ``Model.add_operation`` checks and what the CPU device runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nnrt.model._signatures import SIGNATURES
from nnrt.model._sigspec import Arg, Signature, Variant, describe_types
from nnrt.ops._registry import registered_operations
from nnrt.types import OperationType

__all__ = ["render"]

#: Run by the executor itself rather than by a kernel.
_CONTROL_FLOW = frozenset({OperationType.IF, OperationType.WHILE})

_HEADER = """# Operation reference

Every NNAPI operation nnrt knows, generated from the signature tables that
`Model.add_operation` checks (`nnrt/model/_sig_nn.py`, `nnrt/model/_sig_tensor.py`) and the
CPU device's kernel registry. Do not edit this page: run
`python -m nnrt.ops._reference docs/operations.md`.

How to read an entry:

- Inputs are listed in order; an operation with several *forms* (CONV_2D's implicit and
  explicit padding) lists each. Inputs marked *optional group k* may be left out from the
  end: group 1 may be given alone, group 2 only with group 1, and so on.
- *may be omitted*: the operand must be present but may have no value
  (`model.set_operand_value(index, None)`).
- `...` after a name: one or more operands in that position (zero or more for IF's inputs
  and for DENSIFY's metadata).
- Scalar parameters are operands too: add an `INT32`, `FLOAT32` or `BOOL` operand and give
  it a value with `set_operand_value` (or use `nnrt.ModelBuilder`). Float parameters are
  FLOAT16 in float16 models.
- Codes: `nnrt.FuseCode` (NONE 0, RELU 1, RELU1 2, RELU6 3) and `nnrt.PaddingCode`
  (SAME 1, VALID 2).
- `add_operation` checks the number of inputs and outputs and each operand's type and names
  what was expected; shapes, ranks and parameter values are checked when the model is
  prepared.

| operation | value | feature level | what it computes |
|---|---|---|---|
"""


def _anchor(op: OperationType) -> str:
    return op.name.lower()


def _row(k: int, a: Arg) -> str:
    name = f"`{a.name}`" + ("..." if a.repeat else "")
    extras = []
    if a.group:
        extras.append(f"optional group {a.group}")
    if a.omittable:
        extras.append("may be omitted")
    meaning = a.doc + (f" ({'; '.join(extras)})" if extras else "")
    return f"| {k} | {name} | {describe_types(a.types)} | {meaning} |"


def _table(args: tuple[Arg, ...]) -> list[str]:
    lines = ["| # | name | operand types | meaning |", "|---|---|---|---|"]
    lines += [_row(k, a) for k, a in enumerate(args)]
    return lines


def _variant(sig: Signature, v: Variant) -> list[str]:
    title = f"**{v.label.capitalize()}**: " if v.label else ""
    lines = [f"{title}`{sig.op.name}({v.render('inputs')}) → {v.render('outputs')}`", ""]
    lines += ["Inputs:", "", *_table(v.inputs), "", "Outputs:", "", *_table(v.outputs), ""]
    return lines


def _section(sig: Signature) -> list[str]:
    op = sig.op
    level = f"feature level {op.feature_level}" if op.feature_level else "experimental (no feature level)"
    runs = "run by the executor" if op in _CONTROL_FLOW else "CPU kernel" if op in registered_operations() else "no kernel"
    lines = [f"## {op.name}", "", f"Value {int(op)}, {level}, {runs}. {sig.summary}", ""]
    lines.append(f"Takes {sig.takes('inputs')} and {sig.takes('outputs')}.")
    lines.append("")
    for v in sig.variants:
        lines += _variant(sig, v)
    if sig.notes:
        lines += [sig.notes, ""]
    return lines


def render() -> str:
    """The Markdown of the operation reference."""
    ops = sorted(SIGNATURES, key=lambda o: o.name)
    lines = [_HEADER.rstrip("\n")]
    for op in ops:
        s = SIGNATURES[op]
        level = str(op.feature_level) if op.feature_level else "experimental"
        lines.append(f"| [{op.name}](#{_anchor(op)}) | {int(op)} | {level} | {s.summary} |")
    lines.append("")
    for op in ops:
        lines += _section(SIGNATURES[op])
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    """Write the page to ``argv[0]`` (or standard output)."""
    text = render()
    if argv:
        Path(argv[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
