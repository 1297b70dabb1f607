"""The layers of ``DESIGN.md`` hold in the code: no import circle runs through the execution,
device, burst, cache or framework packages (counting imports inside functions, not those
under ``if TYPE_CHECKING:``), and nothing below the framework imports it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

NNRT = Path(__file__).parents[1] / "nnrt"
GUARDED = {"execution", "devices", "burst", "cache", "framework"}
BELOW_FRAMEWORK = {"execution", "devices", "burst", "cache", "memory", "sched", "fences", "model", "ops"}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "nnrt"


def import_graph() -> dict[str, set[str]]:
    """Package -> the nnrt packages its modules import at run time."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in NNRT.rglob("*.py"):
        rel = path.relative_to(NNRT.parent).with_suffix("")
        src = _package(".".join(rel.parts))
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "nnrt":
                names = [f"nnrt.{a.name}" for a in node.names] if node.module == "nnrt" else [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "nnrt"]
            else:
                continue
            for name in names:
                dst = _package(name)
                if dst != src:
                    edges[src].add(dst)
    return edges


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, ()))
    return False


def test_no_import_circle_through_the_guarded_packages() -> None:
    edges = import_graph()
    assert "devices" in edges["framework"] and "execution" in edges["devices"]  # the graph was read
    circles = [(a, b) for a in GUARDED for b in edges.get(a, ()) if _reaches(edges, b, a)]
    assert circles == []


def test_nothing_below_the_framework_imports_it() -> None:
    edges = import_graph()
    assert [p for p in BELOW_FRAMEWORK if "framework" in edges.get(p, ())] == []
