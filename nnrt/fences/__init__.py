"""Sync fences: NNAPI's completion signals for fenced execution, as awaitables.

``SyncFence`` is awaited (``await fence``) or waited on with a timeout (``fence.wait(t)``) on
asyncio, uvloop or trio; an app creates its own with ``SyncFence()`` and signals it from any
thread. ``all_of`` / ``any_of`` combine fences, ``from_awaitable`` / ``from_future`` turn work
into a fence. The state machine underneath (``_state``) is pure and tested without a loop.
"""

from nnrt.fences._fence import SyncFence, all_of, any_of, from_awaitable, from_future
from nnrt.fences._state import FenceState

__all__ = ["FenceState", "SyncFence", "all_of", "any_of", "from_awaitable", "from_future"]
