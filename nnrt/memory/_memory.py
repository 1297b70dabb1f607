"""``Memory``: a pool of bytes that constants and (later) execution data can live in.

It wraps a numpy array or a bytes-like object without copying; ``buffer`` is a flat uint8
view of it. Model constants set with ``set_operand_value_from_memory`` stay in the pool.
"""

from __future__ import annotations

import numpy as np

from nnrt.errors import InvalidArgumentError

__all__ = ["Memory"]


class Memory:
    """A memory pool over an existing array or bytes object (no copy)."""

    __slots__ = ("_buffer", "_owner")

    def __init__(self, source: np.ndarray | bytes | bytearray | memoryview) -> None:
        if isinstance(source, np.ndarray):
            if not source.flags.c_contiguous:
                raise InvalidArgumentError("Memory: the array must be C-contiguous")
            buf = source.reshape(-1).view(np.uint8)
        elif isinstance(source, (bytes, bytearray, memoryview)):
            buf = np.frombuffer(source, dtype=np.uint8)
        else:
            raise InvalidArgumentError(f"Memory: cannot wrap {type(source).__name__}")
        self._owner = source
        self._buffer = buf

    @classmethod
    def from_array(cls, array: np.ndarray) -> Memory:
        return cls(array)

    @property
    def buffer(self) -> np.ndarray:
        """The pool's bytes as a flat uint8 array (a view)."""
        return self._buffer

    @property
    def size(self) -> int:
        return int(self._buffer.nbytes)

    def __repr__(self) -> str:
        return f"<Memory {self.size} bytes>"
