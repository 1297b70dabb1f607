"""``nnrt bench --stream N``: a streaming model compared with its reference over a stream.

One step from a fresh state says little about state handling. A TFLite streaming model keeps
its state inside the interpreter (resource variables, variable tensors); nnrt makes that state
explicit inputs and outputs (``nnrt.importers.state_variables``). Here both run the same
stream of ``N`` seeded steps: a fresh reference session invoked once per step, and nnrt's
``execute`` fed each step's ``state_out`` as the next step's ``state_in``. The worst error per
output over the stream is kept, so a state carried wrongly shows up within a few steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nnrt.bench._inputs import InputSpec, make_inputs
from nnrt.bench._reference import feeds_for, open_reference
from nnrt.bench._stats import Accuracy, compare
from nnrt.execution import PreparedModel
from nnrt.importers import state_variables

__all__ = ["run_stream", "worse"]


def worse(a: Accuracy, b: Accuracy) -> Accuracy:
    """The worse of two comparisons of one output."""
    if a.ok != b.ok:
        return b if a.ok else a
    if a.quant_units is not None and b.quant_units is not None:
        return b if b.quant_units > a.quant_units else a
    return b if (b.tolerance_used or 0.0) > (a.tolerance_used or 0.0) else a


async def run_stream(prepared: PreparedModel, path: str, fmt: str, specs: Sequence[InputSpec], first: list[Any],
                     pairs: list[tuple[int, int]], out_names: Sequence[str], *, steps: int, seed: int,
                     values: dict[str, float], loop_timeout: float | None,
                     fixed: Mapping[str, np.ndarray] | None = None) -> tuple[list[Accuracy], bool]:
    """The worst comparison per paired output over ``steps`` stream steps (empty when the
    model has no explicit state), and whether the reference's outputs changed along the stream
    (when they did not, the comparison cannot see the state). ``first`` are the first step's
    inputs (state at its initial values); later steps draw fresh seeded inputs and carry the state."""
    state = state_variables(prepared.model)
    if not state:
        return [], False
    ref = open_reference(path, fmt, {s.name: s.shape for s in specs}, fixed=fixed)
    names = [s.name for s in specs]
    quantized = [prepared.model.operands[prepared.model.output_indexes[ours]].type.is_quantized for ours, _ in pairs]
    worst: list[Accuracy | None] = [None] * len(pairs)
    inputs = list(first)
    previous: list[Any] | None = None
    varied = False
    for step in range(steps):
        outs = list((await prepared.execute(inputs, loop_timeout=loop_timeout)).outputs)
        ref_out = ref.run(feeds_for(ref, names, inputs))
        if previous is not None and not all(np.array_equal(a, b) for a, b in zip(previous, ref_out)):
            varied = True
        previous = ref_out
        for k, ((ours, theirs), q) in enumerate(zip(pairs, quantized)):
            acc = compare(out_names[ours], outs[ours], ref_out[theirs], quantized=q)
            worst[k] = acc if worst[k] is None else worse(worst[k], acc)  # type: ignore[arg-type]
        fresh = make_inputs(specs, seed=seed + 1 + step, values=values)
        for var in state:
            fresh[var.input] = outs[var.output]
        inputs = fresh
    return [w for w in worst if w is not None], varied
