"""The client half of a burst's memory slot cache, and requests packed over it.

``Burst`` (``_burst``) owns the life cycle and the order of requests; what a request *is* on
the wire lives here. ``ClientSlots`` keeps the pools registered with the burst by slot (a pool
already registered keeps its slot; freed slots are reused, lowest first) and tells the server
(``BurstServer.add_memory`` / ``free_memory``) so both halves agree. ``pack`` turns a client's
request (``Location``s, C-contiguous arrays of the model's dtypes, ``None``) into a
``RequestPacket``: arrays are registered in transient slots for that one request (zero copy),
outputs not given are allocated when their dimensions are known, and a request that a packet
cannot express (strided arrays, scalars, outputs of unknown size) comes back as ``None``, for
the burst to run as a normal execution. Output locations map to client views of their pools,
cached per location object, so a streaming request costs no view per result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nnrt.burst._packet import Location, RequestPacket, client_times
from nnrt.burst._server import BurstServer
from nnrt.errors import InvalidArgumentError
from nnrt.memory import Memory
from nnrt.model import Operand

__all__ = ["ClientSlots"]


class ClientSlots:
    """Pools by slot on the client side of one burst, and the packing of requests over them."""

    __slots__ = ("_free", "_in_ops", "_next_slot", "_out_ops", "_out_views", "_server", "_slot_of", "pools")

    def __init__(self, server: BurstServer, in_ops: Sequence[Operand], out_ops: Sequence[Operand]) -> None:
        self._server = server
        self._in_ops = list(in_ops)
        self._out_ops = list(out_ops)
        #: Pool by slot; slot by pool identity; freed slots.
        self.pools: dict[int, Memory] = {}
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = []
        self._next_slot = 0
        # (output index, id(location)) -> (location, view) for output locations.
        self._out_views: dict[tuple[int, int], tuple[Location, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.pools)

    def clear(self) -> None:
        self.pools.clear()
        self._slot_of.clear()
        self._free.clear()
        self._out_views.clear()

    # -- slots ---------------------------------------------------------------------------------

    def register(self, memory: Memory) -> int:
        """``memory``'s slot: the one it has, else a new one."""
        slot = self._slot_of.get(id(memory))
        return self.add(memory) if slot is None else slot

    def add(self, memory: Memory) -> int:
        if self._free:
            slot = min(self._free)
            self._free.remove(slot)
        else:
            slot = self._next_slot
            self._next_slot += 1
        self.pools[slot] = memory
        self._slot_of[id(memory)] = slot
        self._server.add_memory(slot, memory)
        return slot

    def release(self, slot: int) -> bool:
        """Evict ``slot``; False if it is not registered."""
        memory = self.pools.pop(slot, None) if type(slot) is int else None
        if memory is None:
            return False
        self._forget(slot, memory)
        return True

    def release_transient(self, slots: tuple[int, ...]) -> None:
        for slot in slots:
            memory = self.pools.pop(slot, None)
            if memory is not None:
                self._forget(slot, memory)

    def _forget(self, slot: int, memory: Memory) -> None:
        del self._slot_of[id(memory)]
        self._free.append(slot)
        self._server.free_memory(slot)

    # -- requests ------------------------------------------------------------------------------

    def check_counts(self, inputs: Sequence[Any], outputs: Sequence[Any] | None) -> None:
        if isinstance(inputs, np.ndarray) or len(inputs) != len(self._in_ops):
            n = 1 if isinstance(inputs, np.ndarray) else len(inputs)
            raise InvalidArgumentError(f"the model has {len(self._in_ops)} inputs, the request gives {n}")
        if outputs is not None and (isinstance(outputs, np.ndarray) or len(outputs) != len(self._out_ops)):
            n = 1 if isinstance(outputs, np.ndarray) else len(outputs)
            raise InvalidArgumentError(f"the model has {len(self._out_ops)} outputs, the request gives {n}")

    def pack(
        self, inputs: Sequence[Any], outputs: Sequence[Any] | None, measure: bool, deadline: Any, loop_timeout: Any
    ) -> tuple[RequestPacket, list[np.ndarray], tuple[int, ...]] | None:
        """The request packet, the client's output arrays and the transient slots; None: not expressible."""
        self.check_counts(inputs, outputs)
        client_times(deadline, loop_timeout)
        arrays: list[tuple[int, np.ndarray]] = []  # (position, array) to register transiently
        in_locs: list[Location | None] = []
        if outputs is not None and all(type(a) is Location for a in (*inputs, *outputs)):  # the streaming case
            outs = tuple(outputs)
            packet = RequestPacket(tuple(inputs), outs, bool(measure), deadline, loop_timeout)
            return packet, [self._client_view(j, y) for j, y in enumerate(outs)], ()
        for k, x in enumerate(inputs):
            if x is None or type(x) is Location:
                in_locs.append(x)
            elif _expressible(x, self._in_ops[k]):
                in_locs.append(None)
                arrays.append((k, x))
            else:
                return None
        n_in = len(in_locs)
        out_locs: list[Location | None] = []
        out_arrays: list[np.ndarray] = []
        for j, op in enumerate(self._out_ops):
            y = None if outputs is None else outputs[j]
            if type(y) is Location:
                out_locs.append(y)
                out_arrays.append(self._client_view(j, y))
                continue
            if y is None:
                if not op.fully_specified:
                    return None
                y = np.empty(op.dimensions, op.type.dtype)
            elif not (_expressible(y, op) and y.flags.writeable):
                return None
            out_locs.append(None)
            out_arrays.append(y)
            arrays.append((n_in + j, y))
        transient: tuple[int, ...] = ()
        if arrays:
            slots = []
            for pos, arr in arrays:
                slot = self.add(Memory(arr))
                slots.append(slot)
                loc = Location(slot, 0, arr.nbytes, arr.shape)
                if pos < n_in:
                    in_locs[pos] = loc
                else:
                    out_locs[pos - n_in] = loc
            transient = tuple(slots)
        packet = RequestPacket(tuple(in_locs), tuple(out_locs), bool(measure), deadline, loop_timeout)  # type: ignore[arg-type]
        return packet, out_arrays, transient

    def _client_view(self, j: int, loc: Location) -> np.ndarray:
        hit = self._out_views.get((j, id(loc)))
        if hit is not None and hit[0] is loc:
            return hit[1]
        pool = self.pools.get(loc.slot) if type(loc.slot) is int else None
        view: np.ndarray
        try:
            if pool is None or loc.offset < 0 or loc.length < 0:
                raise ValueError
            view = pool.buffer[loc.offset : loc.offset + loc.length].view(self._out_ops[j].type.dtype)
            dims = loc.dimensions
            if dims and type(dims) is tuple and math.prod(dims) <= view.size:
                view = view[: math.prod(dims)].reshape(dims)  # the usual result shape: no reshape per result
        except (ValueError, TypeError):
            view = np.empty(0, self._out_ops[j].type.dtype)  # the server will refuse the request
        else:
            if len(self._out_views) > 1024:
                self._out_views.clear()
            self._out_views[j, id(loc)] = (loc, view)
        return view


def _expressible(x: Any, op: Operand) -> bool:
    return type(x) is np.ndarray and x.dtype == op.type.dtype and x.flags.c_contiguous and not op.type.is_scalar
