"""The reference runtimes ``nnrt bench`` compares against: LiteRT for TFLite, ONNX Runtime for ONNX.

Both are optional (the ``bench`` extra); when one is missing, ``open_reference`` raises
``ReferenceUnavailable`` with the command that installs it, and the bench goes on without a
reference. Each runs with one thread, as nnrt's CPU device does, so latency ratios compare
like with like: LiteRT on its default CPU path (its XNNPACK delegate where it applies), ONNX
Runtime's CPU execution provider with sequential execution.

A reference is fed by input name (nnrt's importers keep the file's names on the operands),
falling back to position when the names differ; values are cast to the dtype the reference
declares (nnrt holds ONNX's int64 as int32, for instance). Inputs the file does not have
(state that nnrt makes explicit) are not fed; inputs nnrt fixed at load (``--load-value``)
are fed by the session itself (``fixed``), so the pairing sees only nnrt's inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["Reference", "ReferenceUnavailable", "feeds_for", "open_reference", "pair_outputs"]


class ReferenceUnavailable(Exception):
    """No reference runtime for this model (not installed, or it cannot run the file)."""


class Reference(Protocol):
    """A reference runtime session on one model file, with fixed input shapes."""

    name: str
    input_names: list[str]
    output_names: list[str]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run once; outputs in the file's order (fresh arrays). ``ReferenceUnavailable`` if it fails."""
        ...


def open_reference(path: str, fmt: str, shapes: Mapping[str, Sequence[int]], *, plain: bool = False,
                   fixed: Mapping[str, np.ndarray] | None = None) -> Reference:
    """A one-thread session of the reference runtime for ``fmt`` ("tflite" or "onnx");
    ``fixed`` inputs (nnrt's ``--load-value``) are fed on every run and hidden from ``input_names``.

    ``plain=True`` opens the runtime's other, plainer path instead: LiteRT's reference kernels
    (no XNNPACK), ONNX Runtime without graph optimizations (no fusions). Two correct
    implementations still differ by rounding; how much, on a given model, is the noise floor
    against which nnrt's error is judged (``BenchReport.reference_spread``).
    """
    ref: Reference
    if fmt == "tflite":
        ref = _LiteRT(path, shapes, plain)
    elif fmt == "onnx":
        ref = _OnnxRuntime(path, plain)
    else:
        raise ReferenceUnavailable(f"no reference runtime for {fmt} models")
    return _Fixed(ref, fixed) if fixed else ref


class _Fixed:
    """A reference with some inputs fed by itself: the ones nnrt fixed at load."""

    def __init__(self, ref: Reference, fixed: Mapping[str, np.ndarray]) -> None:
        missing = set(fixed) - set(ref.input_names)
        if missing:
            raise ReferenceUnavailable(f"{ref.name} has no input {sorted(missing)[0]!r} to fix")
        self._ref, self._fixed = ref, dict(fixed)
        self.name = ref.name
        self.input_names = [n for n in ref.input_names if n not in fixed]
        self.output_names = ref.output_names

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return self._ref.run({**feeds, **self._fixed})


class _LiteRT:
    def __init__(self, path: str, shapes: Mapping[str, Sequence[int]], plain: bool) -> None:
        try:
            import ai_edge_litert
            from ai_edge_litert.interpreter import Interpreter, OpResolverType
        except ImportError:
            raise ReferenceUnavailable(
                "LiteRT is not installed: pip install ai-edge-litert (or pip install 'nnrt[bench]')"
            ) from None
        try:
            resolver = OpResolverType.BUILTIN_REF if plain else OpResolverType.AUTO
            self._it = Interpreter(model_path=path, num_threads=1, experimental_op_resolver_type=resolver)
            details = self._it.get_input_details()
            for d in details:
                if d["name"] in shapes and list(d["shape"]) != list(shapes[d["name"]]):
                    self._it.resize_tensor_input(d["index"], list(shapes[d["name"]]))
            self._it.allocate_tensors()
        except (RuntimeError, ValueError) as err:
            raise ReferenceUnavailable(f"LiteRT cannot run this model: {str(err).splitlines()[0]}") from None
        self.name = f"LiteRT {getattr(ai_edge_litert, '__version__', '')}".strip() + (" reference kernels" if plain else "")
        self._inputs = [(d["name"], d["index"], np.dtype(d["dtype"])) for d in self._it.get_input_details()]
        self._outputs = [d["index"] for d in self._it.get_output_details()]
        self.input_names = [n for n, _, _ in self._inputs]
        self.output_names = [d["name"] for d in self._it.get_output_details()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        try:
            for name, index, dtype in self._inputs:
                self._it.set_tensor(index, np.asarray(feeds[name], dtype))
            self._it.invoke()
        except (RuntimeError, ValueError) as err:
            raise ReferenceUnavailable(f"LiteRT failed to run this model: {str(err).splitlines()[0]}") from None
        return [self._it.get_tensor(i).copy() for i in self._outputs]


_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16, "tensor(bool)": np.bool_,
}


class _OnnxRuntime:
    def __init__(self, path: str, plain: bool) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise ReferenceUnavailable(
                "ONNX Runtime is not installed: pip install onnxruntime (or pip install 'nnrt[bench]')"
            ) from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        if plain:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            self._session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own exception types (Fail, InvalidGraph, ...)
            raise ReferenceUnavailable(f"ONNX Runtime cannot run this model: {str(err).splitlines()[0]}") from None
        self.name = f"ONNX Runtime {ort.__version__}" + (" unoptimized" if plain else "")
        self._inputs = [(i.name, _ORT_TYPES.get(i.type, np.float32)) for i in self._session.get_inputs()]
        self.input_names = [n for n, _ in self._inputs]
        self.output_names = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        cast: dict[str, np.ndarray] = {name: np.asarray(feeds[name], dtype) for name, dtype in self._inputs}
        try:
            out: list[Any] = self._session.run(None, cast)
        except Exception as err:  # onnxruntime's own exception types (Fail, InvalidArgument, ...)
            raise ReferenceUnavailable(f"ONNX Runtime failed to run this model: {str(err).splitlines()[0]}") from None
        return [np.asarray(o) for o in out]


def feeds_for(reference: Reference, names: Sequence[str], values: Sequence[Any]) -> dict[str, np.ndarray]:
    """Map nnrt's inputs to the reference's: by name when every reference input is named in
    nnrt's model, else by position (nnrt's first inputs)."""
    by_name = dict(zip(names, values))
    if all(n in by_name for n in reference.input_names):
        return {n: np.asarray(by_name[n]) for n in reference.input_names}
    if len(values) < len(reference.input_names):
        raise ReferenceUnavailable(
            f"the reference has inputs {reference.input_names}, nnrt's model {list(names)}: cannot pair them"
        )
    return {n: np.asarray(v) for n, v in zip(reference.input_names, values)}


def pair_outputs(reference: Reference, names: Sequence[str]) -> list[tuple[int, int]]:
    """(nnrt output index, reference output index) pairs: by name where the names match, else
    by position over the reference's outputs (extra nnrt outputs, such as state, are left out)."""
    index = {n: k for k, n in enumerate(names)}
    if all(n in index for n in reference.output_names):
        return [(index[n], r) for r, n in enumerate(reference.output_names)]
    return [(k, k) for k in range(min(len(names), len(reference.output_names)))]
