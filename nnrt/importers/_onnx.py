"""The onnx importer (being written: this placeholder rejects every file)."""

from __future__ import annotations

from collections.abc import Mapping

from nnrt.errors import InvalidArgumentError
from nnrt.model import Model

__all__ = ["load_onnx"]


def load_onnx(data: memoryview, *, name: str, input_shapes: Mapping[str, tuple[int, ...]]) -> Model:
    raise InvalidArgumentError(f"load: {name}: the onnx importer is not available yet")
