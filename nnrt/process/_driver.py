"""``RemoteDriver``: the ``Driver`` behind every prepared model of a ``ProcessDevice`` (split from
``_device``, which keeps the device, its service's life cycle and the device calls).

A prepared model's plan on the app side is one DELEGATED step (``_service_plan``); the driver
runs it by sending the step's inputs to the service's prepared model and taking its outputs
back: on the shared-memory rings as a burst packet when the request fits one
(``nnrt.process._transport``), else over the socket with ``nnrt.process._wire``'s encoding
(outputs written in place into shared pools, device buffers by handle, large plain arrays
through the arena). One object makes the trip (``_Call``: the rings first, the socket when
the request does not fit there, the arena blocks freed however it ends); ``drive`` awaits its
replies without blocking the loop, ``run_now`` blocks the calling thread for them
(``execute_sync`` outside a loop).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable, Generator, Hashable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from nnrt.errors import DeadObjectError, InternalError
from nnrt.execution import DELEGATE, DELEGATED, ExecContext, Plan, Step
from nnrt.execution._plan import _fetcher
from nnrt.memory._memory import pool_origin
from nnrt.model import Model
from nnrt.process._client import ServiceProcess
from nnrt.process._fmq import Ring
from nnrt.process._forms import Expect, RequestForm, ResultForm, request_form
from nnrt.process._pools import ring_name
from nnrt.process._transport import ARENA_INPUT_BYTES, encode_execute, io_dtypes
from nnrt.process._wire import ARENA_MIN_BYTES, InPlace, PoolRef, encode_args, encode_outputs
from nnrt.types import OperationType, Priority

if TYPE_CHECKING:
    from nnrt.process._device import ProcessDevice

__all__ = ["RemoteDriver", "service_plan"]

_Gen = Generator[int, None, list[Any]]
#: Request forms a prepared model keeps (one per input shapes and pool places seen; cleared when
#: full), and arrays whose place in a pool it remembers.
MAX_FORMS = 64


def service_plan(model: Model, driver: RemoteDriver) -> Plan:
    """The app side's plan: one DELEGATED step from the model's inputs to its outputs."""
    n_in, n_out = len(model.input_indexes), len(model.output_indexes)
    ins, outs = tuple(range(n_in)), tuple(range(n_in, n_in + n_out))
    first = model.operations[0].type if model.operations else OperationType.ADD
    step = Step(0, first, f"{model.name or 'model'} in the service", DELEGATED, ins, outs, target=driver)
    step.fetch = _fetcher(ins)
    step.cost_ns = driver.cost_ns
    return Plan(model, [None] * (n_in + n_out), ins, outs, [step])


class RemoteDriver:
    """The ``Driver`` of a prepared model whose plan runs in the service."""

    def __init__(self, device: ProcessDevice, app: str, wire: Any, options: dict[str, Any]) -> None:
        self.clock = device.clock
        self.name = device.name
        self.app = app
        self.wire = wire
        self.options = options
        self.cost_ns = 0.0
        #: The model's recent time on the service's device (seconds, a moving average): whether
        #: the app polls for a reply, and how long (``ServiceProcess._reply_window``).
        self.device_s = 0.0
        self.handle = 0
        self.service: ServiceProcess | None = None
        self.arena = device._arena
        self.buffer_domain = device  # its prepared models take the device's buffers (``domain_of``)
        self.out_specs: list[tuple[np.dtype[Any], tuple[int, ...]] | None] = []
        self.dtypes: tuple[list[Any], list[Any]] = ([], [])
        #: The result form of a success when every output's shape is known (``set_outputs``).
        self.result_form: ResultForm | None = None
        self._forms: dict[tuple[Any, ...], RequestForm | None] = {}  # (app, *input shapes and places) -> form
        self._origins: dict[int, tuple[weakref.ref[np.ndarray], tuple[str | None, int] | None]] = {}  # id -> (it, _origin)

    def __repr__(self) -> str:
        return f"<RemoteDriver {self.name} app={self.app!r} handle={self.handle}>"

    async def reprepare(self, service: ServiceProcess) -> None:
        """Prepare the model on ``service`` (the first time)."""
        self.handle, self.cost_ns = await service.call("prepare", self.app, self.wire, self.options)
        self.device_s = self.cost_ns * 1e-9
        self.service = service
        self._forms.clear()  # they carry the handle

    def reprepare_sync(self, service: ServiceProcess) -> None:
        """Prepare the model again on a new ``service`` (after a restart; blocking)."""
        self.handle, self.cost_ns = service.call_sync("prepare", self.app, self.wire, self.options)
        self.device_s = self.cost_ns * 1e-9
        self.service = service
        self._forms.clear()  # they carry the handle

    def _took(self, device_ns: int) -> None:
        """A reply came from the rings after ``device_ns`` on the device (``device_s``)."""
        self.device_s += 0.25 * (device_ns * 1e-9 - self.device_s)

    def release(self) -> None:
        service = self.service
        if service is not None and service.alive:
            service.release_later(self.app, self.handle)

    def _target(self) -> ServiceProcess:
        service = self.service
        if service is None or not service.alive:
            reason = service.dead_reason if service is not None else ""
            raise DeadObjectError(f"{self.name}: the service of this prepared model is gone"
                                  + (f" ({reason})" if reason else "; restart the device"))
        return service

    def runs_inline(self, plan: Plan) -> bool:
        return False

    def can_run_now(self, plan: Plan) -> bool:
        return False

    def set_outputs(self, model: Model) -> None:
        """The model's input and output dtypes, the result form of a success when every output's
        shape is known, and which outputs may come back through the arena: (dtype, dims) of
        each output of a known size of at least ``ARENA_MIN_BYTES``, else None."""
        self.dtypes = io_dtypes(model)
        outs = [model.operands[i] for i in model.output_indexes]
        if all(op.fully_specified for op in outs):
            self.result_form = ResultForm([op.dimensions for op in outs], self.dtypes[1])
        specs: list[tuple[np.dtype[Any], tuple[int, ...]] | None] = []
        for i in model.output_indexes:
            op = model.operands[i]
            big = op.fully_specified and op.type.dtype.itemsize * math.prod(op.dimensions) >= ARENA_MIN_BYTES
            specs.append((op.type.dtype, op.dimensions) if big else None)
        self.out_specs = specs if any(specs) else []

    @staticmethod
    def _args(gen: _Gen, ctx: ExecContext) -> list[Any]:
        """Run the plan to its one step: the step's input values."""
        while next(gen) != DELEGATE:  # INTERRUPTED: nothing interrupts a one-step plan here
            pass
        _step, args = ctx.handoff
        return list(args)

    def _packet(self, service: ServiceProcess, args: list[Any], ctx: ExecContext, app: Hashable
                ) -> tuple[int, Callable[[Ring], bool], Expect, list[tuple[int, int]]] | None:
        """The request as a ring packet (``nnrt.process._transport``, ``_forms``): its id, what writes it
        into the ring, what reads its result, and the arena blocks it holds; or None: the socket
        (outputs that come back through the arena, device buffers, and pools the rings cannot
        name travel as the socket's ``PoolRef``/``BufRef``). A request of plain small inputs and
        of arguments in shared pools takes its form (built once per signature), written in
        place; others are packed in full (large plain inputs copied into the arena)."""
        if service.channel is None or type(app) is not str:
            return None
        outs = self._out_places(ctx.outputs)
        if outs is False:
            return None
        rid = service.new_id()
        deadline, loop_timeout = ctx.deadline, ctx.loop_timeout
        form = self._form(args, outs, app)
        if form is not None:
            into = ctx.outputs
            expect = form.expect if into is None else form.expect._replace(into=into)
            return rid, lambda ring: form.write(ring, rid, args, deadline, loop_timeout), expect, []
        refs = None if outs is None else [None if o is None else PoolRef(o[0], o[1], dt.str, o[2])
                                          for o, dt in zip(outs, self.dtypes[1])]
        packed = encode_execute(rid, self.handle, app, args, deadline, loop_timeout, self.dtypes[0],
                                len(self.dtypes[1]), self.arena, refs)
        if packed is None:
            return None
        parts, nbytes, blocks = packed
        in_place = None if refs is None else [r is not None for r in refs]
        return rid, lambda ring: ring.try_write(parts, nbytes), Expect(self.dtypes[1], in_place=in_place), blocks

    def _origin(self, v: np.ndarray) -> tuple[str | None, int] | None:
        """Where a C-contiguous array lies when it is in a pool both processes map: the pool's
        ring name (``_pools.ring_name``; None for a pool the rings cannot name) and the byte
        offset; None when it is in no such pool. Remembered per array object (a
        ``MemoryLocation``'s view is the same object at every execution: ``nnrt.execution``
        caches it), so that a request in a shared pool costs no address look-up."""
        memo = self._origins.get(id(v))
        if memo is not None and memo[0]() is v:
            return memo[1]
        found = pool_origin(v) if v.flags.c_contiguous else None
        where = None if found is None else (ring_name(found[0]), found[1])
        if len(self._origins) >= MAX_FORMS:
            self._origins.clear()
        self._origins[id(v)] = (weakref.ref(v), where)
        return where

    def _out_places(self, bufs: Any) -> list[tuple[str, int, tuple[int, ...]] | None] | Literal[False] | None:
        """Where each output the service writes in place lies (``_wire.encode_outputs``'s rule:
        a C-contiguous writable view of 4 KB or more of a shared pool; None for one that comes
        back by value; None when all do), or False when the request must take the socket (a
        device buffer, a pool the rings cannot name, an output that comes back through the arena)."""
        places: list[tuple[str, int, tuple[int, ...]] | None] | None = None
        if bufs:
            if getattr(bufs, "device_buffers", None):
                return False
            for j, b in enumerate(bufs):
                if type(b) is not np.ndarray or b.nbytes < ARENA_INPUT_BYTES or not b.flags.writeable:
                    continue
                where = self._origin(b)
                if where is None:
                    continue
                if where[0] is None:
                    return False
                places = places or [None] * len(bufs)
                places[j] = (where[0], where[1], b.shape)
        if self.out_specs and any(s is not None and (places is None or places[j] is None)
                                  for j, s in enumerate(self.out_specs)):
            return False  # a large output of known size comes back through the arena
        return places

    def _form(self, args: list[Any], outs: list[tuple[str, int, tuple[int, ...]] | None] | None,
              app: str) -> RequestForm | None:
        """The request form for these values' shapes and places (made on first use), or None."""
        key: list[Any] = [app]
        origins: list[Any] = []
        for v in args:
            if v is None:
                key.append(None)
                origins.append(None)
            elif type(v) is np.ndarray:
                where = self._origin(v) if v.nbytes >= ARENA_INPUT_BYTES else None
                if where is not None and where[0] is None:
                    return None  # a pool the rings cannot name: the socket's form only
                key.append(v.shape if where is None else (v.shape, *where))
                origins.append(where)
            else:
                return None
        if outs is not None:
            key.append(tuple(outs))
        sig = tuple(key)
        form = self._forms.get(sig)
        if form is None and sig not in self._forms:
            if len(self._forms) >= MAX_FORMS:
                self._forms.clear()
            form = self._forms[sig] = request_form(self.handle, app, args, self.dtypes[0], self.dtypes[1],
                                                   self.result_form, origins, outs)
        return form

    def _request(self, args: list[Any], ctx: ExecContext, app: Hashable, staged: dict[int, np.ndarray]
                 ) -> tuple[tuple[Any, ...], list[tuple[int, int]]]:
        """The request for the socket, and the arena blocks it holds; ``staged`` gets the
        arena views of the outputs that come back through the arena."""
        values, blocks = encode_args(args, self.arena)
        bufs = ctx.outputs
        refs = encode_outputs(bufs)
        for j, spec in enumerate(self.out_specs):
            if spec is None or (refs is not None and refs[j] is not None):
                continue
            buf = bufs[j] if bufs is not None else None
            if buf is not None and (buf.shape != spec[1] or buf.dtype != spec[0]):
                continue  # a larger or reshaped caller buffer: by value, _finish handles it
            dtype, dims = spec
            block = self.arena.reserve(dtype.itemsize * math.prod(dims))
            if block is None:
                break  # the arena is full: by value
            name, offset, raw = block
            blocks.append((offset, raw.nbytes))
            staged[j] = raw.view(dtype).reshape(dims)
            refs = refs or [None] * len(self.out_specs)
            refs[j] = PoolRef(name, offset, dtype.str, dims)
        return ("execute", app, self.handle, values, ctx.deadline, ctx.loop_timeout, refs), blocks

    def _free(self, blocks: list[tuple[int, int]]) -> None:
        for offset, nbytes in blocks:
            self.arena.free(offset, nbytes)

    def run_now(self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority) -> tuple[list[Any], int]:
        call = _Call(self, gen, ctx, app)
        try:
            if call.ring is not None:
                sent, reply = call.service.ring_call_sync(*call.ring, self.device_s)
                if sent:
                    return call.finish(reply)
            kind, *args = call.socket()
            return call.finish(call.service.call_sync(kind, *args))
        finally:
            call.close()

    async def drive(self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority) -> tuple[list[Any], int]:
        call = _Call(self, gen, ctx, app)
        try:
            if call.ring is not None:
                fut = call.service.ring_call(*call.ring, self.device_s)
                if fut is not None:
                    try:
                        return call.finish(await fut)
                    except asyncio.CancelledError:
                        call.service.ring_cancelled(call.ring[0])
                        raise
            kind, *args = call.socket()
            return call.finish(await call.service.call(kind, *args))
        finally:
            call.close()


class _Call:
    """One execution's trip to the service, but for its waiting (``run_now`` blocks for the
    replies, ``drive`` awaits them): the request as a ring packet (``ring``: the arguments of
    ``ServiceProcess.ring_call``, None when it cannot travel there), else ``socket()`` (the
    ring packet's arena blocks freed, the socket's request made), ``finish`` with the reply,
    and ``close`` however it ends (the arena blocks freed, the plan closed)."""

    __slots__ = ("app", "blocks", "ctx", "driver", "gen", "ring", "service", "staged", "values")

    def __init__(self, driver: RemoteDriver, gen: _Gen, ctx: ExecContext, app: Hashable) -> None:
        self.driver, self.gen, self.ctx, self.app = driver, gen, ctx, app
        self.blocks: list[tuple[int, int]] = []
        self.staged: dict[int, np.ndarray] = {}
        try:
            self.service = driver._target()
            self.values = driver._args(gen, ctx)
            packet = driver._packet(self.service, self.values, ctx, app)
        except BaseException:
            gen.close()
            raise
        self.ring: tuple[int, Callable[[Ring], bool], Expect] | None = None
        if packet is not None:
            self.ring, self.blocks = packet[:3], packet[3]

    def socket(self) -> tuple[Any, ...]:
        """The request for the socket (the ring's arena blocks freed first)."""
        self.driver._free(self.blocks)
        self.blocks = []
        request, self.blocks = self.driver._request(self.values, self.ctx, self.app, self.staged)
        return request

    def finish(self, reply: tuple[list[Any], int]) -> tuple[list[Any], int]:
        self.driver._took(reply[1])
        return _finish(self.gen, self.ctx, reply[0], reply[1], self.staged)

    def close(self) -> None:
        self.driver._free(self.blocks)
        self.gen.close()


def _finish(gen: _Gen, ctx: ExecContext, outputs: list[Any], device_ns: int,
            staged: dict[int, np.ndarray]) -> tuple[list[Any], int]:
    """Hand the service's outputs to the interpreter and let it end the plan (its last
    deadline check included). An output the service wrote in place (``InPlace``) is the
    caller's buffer (viewed with the result's shape when the buffer is flat or larger); one
    written into the arena (``staged``) is copied out of it now, before its block is freed:
    into the caller's array, or a new one."""
    for j, value in enumerate(outputs):
        if type(value) is InPlace:
            view = staged.get(j)
            if view is None:
                outputs[j] = _in_place(ctx.outputs[j], value.shape)
            elif ctx.outputs is not None and ctx.outputs[j] is not None:
                buf = ctx.outputs[j]
                buf[...] = view
                outputs[j] = buf
            else:
                outputs[j] = view.copy()
    ctx.handoff = outputs
    try:
        next(gen)
    except StopIteration as stop:
        return stop.value, device_ns
    raise InternalError("the service step did not end the plan")


def _in_place(buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if buf.shape == shape:
        return buf
    n = math.prod(shape)
    if n > buf.size:  # the service checked it: only a broken service gets here
        raise InternalError(f"the service wrote {n} elements in place into a buffer of {buf.size}")
    return buf.reshape(-1)[:n].reshape(shape)
