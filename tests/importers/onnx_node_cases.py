"""The onnx package's backend node tests run through ``nnrt.load``: shared by the test and the script.

``run_case`` writes one case's model to a file, loads it with ``nnrt.load``, prepares it on a
CPU device and compares every data set with ONNX's expected outputs (rtol 1e-3, atol 1e-7, the
onnx backend runner's defaults). A case ends as one of:

- ``pass``: loaded, ran, matched;
- ``unsupported``: ``load`` raised ``UnsupportedModelError`` naming an op type the importer has
  no mapper for;
- ``rejected``: ``load`` refused a supported op type for a named reason (attribute, mode, dtype);
- ``fail``: anything else (a wrong value, another exception, a rejection naming nothing).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

import nnrt
from nnrt.importers import UnsupportedModelError
from nnrt.importers._onnx import MAPPERS, _load_mappers

__all__ = ["CaseResult", "load_cases", "run_case"]

RTOL, ATOL = 1e-3, 1e-7
#: float16 outputs: one float16 ulp is 9.8e-4 relative, so rtol 1e-3 would fail on a single
#: rounding difference along a chain of ops; allow 4 ulps.
RTOL16, ATOL16 = 4e-3, 1e-3


@dataclasses.dataclass
class CaseResult:
    name: str
    ops: tuple[str, ...]
    status: str
    detail: str = ""


@functools.cache
def load_cases() -> tuple[Any, ...]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():  # the case generators overflow float casts on purpose
        warnings.simplefilter("ignore")
        return tuple(c for c in load_model_tests(kind="node") if c.model is not None)


def _ops(model: Any) -> tuple[str, ...]:
    seen: list[str] = []

    def walk(graph: Any) -> None:
        for n in graph.node:
            if n.op_type not in seen:
                seen.append(n.op_type)
            for a in n.attribute:
                if a.type == 5:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(model.graph)
    return tuple(seen)


def _array(x: Any) -> np.ndarray:
    if not isinstance(x, np.ndarray) and hasattr(x, "SerializeToString"):
        from onnx import numpy_helper

        x = numpy_helper.to_array(x)
    return np.asarray(x)


def _feed(x: Any) -> np.ndarray:
    a = _array(x)
    return a.astype(np.int32) if a.dtype == np.int64 else a


def _compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str:
    if len(got) != len(want):
        return f"{len(got)} outputs, {len(want)} expected"
    for k, (g, w) in enumerate(zip(got, want)):
        w = _array(w)
        if w.shape == () and g.shape == (1,):
            g = g.reshape(())
        if g.shape != w.shape:
            return f"output {k}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "biu":
            if not np.array_equal(g.astype(np.int64), w.astype(np.int64)):
                return f"output {k}: values differ"
            continue
        try:
            rtol, atol = (RTOL16, ATOL16) if w.dtype == np.float16 else (RTOL, ATOL)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
        except AssertionError as err:
            return f"output {k}: {str(err).strip().splitlines()[2] if len(str(err).splitlines()) > 2 else err}"
    return ""


def run_case(case: Any, device: nnrt.CpuDevice, tmpdir: str | None = None) -> CaseResult:
    _load_mappers()
    name = case.name
    ops = _ops(case.model)
    with tempfile.TemporaryDirectory(dir=tmpdir) as d:
        path = os.path.join(d, "model.onnx")
        with open(path, "wb") as f:
            f.write(case.model.SerializeToString())
        try:
            model = nnrt.load(path)
        except UnsupportedModelError as err:
            types = {r.op_type for r in err.rejections}
            if any(t in ops and t not in MAPPERS for t in types):
                return CaseResult(name, ops, "unsupported", str(err))
            if all(r.reason for r in err.rejections):
                return CaseResult(name, ops, "rejected", str(err))
            return CaseResult(name, ops, "fail", f"unnamed rejection: {err}")
        except Exception as err:
            return CaseResult(name, ops, "fail", f"load: {type(err).__name__}: {err}")
    try:
        prepared = device.prepare_model_sync(model)
        for inputs, outputs in case.data_sets:
            result = prepared.execute_sync([_feed(x) for x in inputs])
            why = _compare(list(result.outputs), outputs)
            if why:
                return CaseResult(name, ops, "fail", why)
    except Exception as err:
        return CaseResult(name, ops, "fail", f"run: {type(err).__name__}: {err}")
    return CaseResult(name, ops, "pass")
