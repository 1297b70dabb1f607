"""Memory pools. For now ``Memory`` wraps an array or bytes without copying."""

from nnrt.memory._memory import Memory

__all__ = ["Memory"]
