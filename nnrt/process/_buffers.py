"""Memory domains through the service: ``RemoteBuffer``, a ``DeviceBuffer`` whose data lives in
the service process.

``ProcessDevice.allocate`` checks the request on the app side with the rules every device
uses (``nnrt.memory._domain.allocate_buffer``: roles, dimensions, apps; the app-side token),
then asks the service to allocate the same buffer on its device for its own prepared models;
the service files it under ``(app, random handle)``, like a prepared model. The app side keeps
only what request validation needs (type, dimensions, roles, whether it is initialized):

* ``copy_from`` sends the source once (by name when it is in a shared pool or large enough
  for the arena, ``nnrt.process._wire``); ``copy_to`` has the service write into a shared
  destination in place, or send the bytes back;
* as an execution input the buffer crosses as its handle (``BufRef``): nothing is sent; as an
  output the service's buffer adopts the result, and the reply also carries the result, so
  that ``ExecutionResult.outputs`` shows it as on the CPU device (one copy back);
* ``free()`` (or the buffer being garbage-collected) releases it in the service too;
* the buffer dies with its service: after the service's death (even once the device has
  restarted) every use of it is DEAD_OBJECT; allocate a new one.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.errors import DeadObjectError, GeneralFailureError
from nnrt.memory import DeviceBuffer, Memory
from nnrt.process._wire import RemoteInput, encode_args, encode_outputs

if TYPE_CHECKING:
    from nnrt.process._arena import Arena
    from nnrt.process._client import ServiceProcess

__all__ = ["RemoteBuffer"]


class RemoteBuffer(DeviceBuffer):
    """A device buffer of a ``ProcessDevice`` (see the module docstring)."""

    __slots__ = ("_arena", "_live", "_service", "handle")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._live = False
        self._service: ServiceProcess | None = None
        self._arena: Arena | None = None
        self.handle = 0

    def bind(self, service: ServiceProcess, handle: int, arena: Arena) -> None:
        """The service's buffer behind this one; released there when this one is collected."""
        self._service, self.handle, self._arena = service, handle, arena
        weakref.finalize(self, service.release_later, self.app, handle)

    def _alive(self, where: str) -> ServiceProcess:
        service = self._service
        if service is None or not service.alive:
            reason = f" ({service.dead_reason})" if service is not None and service.dead_reason else ""
            raise DeadObjectError(f"{where}: device buffer {int(self.token)} lived in a service that is gone{reason}")
        return service

    @property
    def initialized(self) -> bool:
        return self._live

    def __repr__(self) -> str:
        return super().__repr__().replace("<DeviceBuffer", f"<RemoteBuffer handle={self.handle}", 1)

    # -- explicit copies ------------------------------------------------------------------------------

    def copy_from(self, source: Memory | np.ndarray, dimensions: Sequence[int] | None = None) -> None:
        self._live = False
        where = f"copy_from (buffer {int(self.token)})"
        data = self._source(source, dimensions).view(self.type.dtype).reshape(self.dimensions)
        service = self._alive(where)
        values, blocks = encode_args([data], self._arena)
        try:
            service.call_sync("copy_from", self.app, self.handle, values)
        finally:
            for offset, nbytes in blocks:
                self._arena.free(offset, nbytes)  # type: ignore[union-attr]
        self._live = True

    def copy_to(self, destination: Memory | np.ndarray) -> None:
        raw = self._destination(destination)
        where = f"copy_to (buffer {int(self.token)})"
        if not self._live:
            raise GeneralFailureError(f"{where}: the buffer is uninitialized")
        service = self._alive(where)
        refs = encode_outputs([raw])
        data = service.call_sync("copy_to", self.app, self.handle, refs[0] if refs else None)
        if data is not None:
            raw[...] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)

    def free(self) -> None:
        super().free()
        self._live = False
        service = self._service
        if service is not None and service.alive:
            service.notify("release", self.app, self.handle)

    # -- execution side ---------------------------------------------------------------------------------

    def check_role(self, prepared: Any, kind: str, io_index: int, where: str) -> None:
        super().check_role(prepared, kind, io_index, where)
        self._alive(where)

    def input_view(self, where: str) -> np.ndarray:
        """The buffer's stand-in, which crosses as its handle (``RemoteInput``); a scalar is
        fetched (validation reads a scalar's value)."""
        if not self._live:
            raise GeneralFailureError(f"{where}: device buffer {int(self.token)} is uninitialized")
        if self.type.is_scalar:
            value = np.empty((), self.type.dtype)
            self.copy_to(value)
            return value
        marker = self.stand_in().view(RemoteInput)
        marker.handle = self.handle
        return marker

    def begin_write(self) -> None:
        self._live = False

    def commit(self, value: np.ndarray, where: str) -> np.ndarray:
        """The service's buffer adopted the result; ``value`` is its copy in the reply."""
        self._check_result(value, where)
        self._live = True
        view = value.view()
        view.flags.writeable = False
        return view
