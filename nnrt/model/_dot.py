"""Graphviz rendering of a model: operands as ellipses, operations as boxes, subgraphs as clusters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnrt.types import OperandLifeTime

if TYPE_CHECKING:
    from nnrt.model._model import Model

__all__ = ["model_to_dot"]

_COLORS = {
    OperandLifeTime.SUBGRAPH_INPUT: "lightblue",
    OperandLifeTime.SUBGRAPH_OUTPUT: "palegreen",
    OperandLifeTime.CONSTANT_COPY: "lightgrey",
    OperandLifeTime.CONSTANT_POOL: "lightgrey",
    OperandLifeTime.NO_VALUE: "white",
    OperandLifeTime.SUBGRAPH: "khaki",
}


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _body(model: Model, prefix: str, lines: list[str], names: dict[int, str]) -> None:
    for op in model.operands:
        dims = "x".join(str(d) for d in op.dimensions) or ("?" if op.type.is_tensor else "scalar")
        label = f"{op.index}{(' ' + op.name) if op.name else ''}\\n{op.type.name}\\n[{dims}]"
        color = _COLORS.get(op.lifetime, "white")
        lines.append(f'  "{prefix}o{op.index}" [label="{_escape(label)}", style=filled, fillcolor={color}];')
    for operation in model.operations:
        node = f"{prefix}n{operation.index}"
        lines.append(f'  "{node}" [shape=box, label="{operation.type.name}"];')
        for k, i in enumerate(operation.inputs):
            lines.append(f'  "{prefix}o{i}" -> "{node}" [label="{k}"];')
        for i in operation.outputs:
            lines.append(f'  "{node}" -> "{prefix}o{i}";')
    for op in model.operands:
        if op.subgraph is not None:
            lines.append(f'  "{prefix}o{op.index}" -> "{names[id(op.subgraph)]}" [style=dashed];')


def model_to_dot(model: Model) -> str:
    subs = model.referenced_models()
    names = {id(m): f"s{k}_anchor" for k, m in enumerate(subs)}
    lines = ["digraph model {", "  rankdir=TB;"]
    _body(model, "", lines, names)
    for k, sub in enumerate(subs):
        lines.append(f'  subgraph "cluster_s{k}" {{')
        lines.append(f'  label="{_escape(sub.name or f"subgraph {k}")}";')
        lines.append(f'  "s{k}_anchor" [shape=point];')
        _body(sub, f"s{k}_", lines, names)
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
