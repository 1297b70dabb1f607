"""Memory pools (arrays, shared memory, mapped files), locations in them, and device buffers."""

from nnrt.memory._domain import BufferDesc, BufferRole, BufferToken, DeviceBuffer, allocate_buffer, tracker_for
from nnrt.memory._memory import Memory, MemoryLocation, read_regular_file

__all__ = [
    "BufferDesc",
    "BufferRole",
    "BufferToken",
    "DeviceBuffer",
    "Memory",
    "MemoryLocation",
    "allocate_buffer",
    "read_regular_file",
    "tracker_for",
]
