"""The tflite importer (being written: this placeholder rejects every file)."""

from __future__ import annotations

from collections.abc import Mapping

from nnrt.errors import InvalidArgumentError
from nnrt.model import Model

__all__ = ["load_tflite"]


def load_tflite(data: memoryview, *, name: str, input_shapes: Mapping[str, tuple[int, ...]]) -> Model:
    raise InvalidArgumentError(f"load: {name}: the tflite importer is not available yet")
