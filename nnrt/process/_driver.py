"""``RemoteDriver``: the ``Driver`` behind every prepared model of a ``ProcessDevice`` (split from
``_device``, which keeps the device, its service's life cycle and the device calls).

A prepared model's plan on the app side is one DELEGATED step (``_service_plan``); the driver
runs it by sending the step's inputs to the service's prepared model and taking its outputs
back: on the shared-memory rings as a burst packet when the request fits one
(``nnrt.process._transport``), else over the socket with ``nnrt.process._wire``'s encoding
(outputs written in place into shared pools, device buffers by handle, large plain arrays
through the arena). ``drive`` awaits the reply without blocking the loop; ``run_now`` blocks
the calling thread (``execute_sync`` outside a loop).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Generator, Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from nnrt.errors import DeadObjectError, InternalError
from nnrt.execution import DELEGATE, DELEGATED, ExecContext, Plan, Step
from nnrt.execution._plan import _fetcher
from nnrt.model import Model
from nnrt.process._client import ServiceProcess
from nnrt.process._fmq import Ring
from nnrt.process._transport import Expect, RequestForm, ResultForm, encode_execute, io_dtypes, request_form
from nnrt.process._wire import ARENA_MIN_BYTES, InPlace, PoolRef, encode_args, encode_outputs
from nnrt.types import OperationType, Priority

if TYPE_CHECKING:
    from nnrt.process._device import ProcessDevice

__all__ = ["RemoteDriver", "service_plan"]

_Gen = Generator[int, None, list[Any]]
#: Request forms a prepared model keeps (one per input shapes seen; cleared when full).
MAX_FORMS = 16


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
        self._forms: dict[tuple[Any, ...], RequestForm | None] = {}  # (app, *input shapes) -> form

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
        """The request as a ring packet (``nnrt.process._transport``): its id, what writes it
        into the ring, what reads its result, and the arena blocks it holds; or None: the socket
        (outputs that come back through the arena, or that go into device buffers or mapped
        files, travel as the socket's ``PoolRef``/``BufRef``). Plain small inputs take the
        request's form (built once per input shapes), written in place; others are packed in
        full, outputs the service writes into shared-memory segments as pool locations."""
        if service.channel is None or type(app) is not str or self.out_specs:
            return None
        rid = service.new_id()
        deadline, loop_timeout = ctx.deadline, ctx.loop_timeout
        refs = encode_outputs(ctx.outputs)
        if refs is None:
            form = self._form(args, app)
            if form is not None:
                into = ctx.outputs
                expect = form.expect if into is None else form.expect._replace(into=into)
                return rid, lambda ring: form.write(ring, rid, args, deadline, loop_timeout), expect, []
        packed = encode_execute(rid, self.handle, app, args, deadline, loop_timeout, self.dtypes[0],
                                len(self.dtypes[1]), self.arena, refs)
        if packed is None:
            return None
        parts, nbytes, blocks = packed
        in_place = None if refs is None else [r is not None for r in refs]
        return rid, lambda ring: ring.try_write(parts, nbytes), Expect(self.dtypes[1], in_place=in_place), blocks

    def _form(self, args: list[Any], app: str) -> RequestForm | None:
        """The request form for these values' shapes (made on first use), or None."""
        key: list[Any] = [app]
        for v in args:
            if v is None:
                key.append(None)
            elif type(v) is np.ndarray:
                key.append(v.shape)
            else:
                return None
        sig = tuple(key)
        form = self._forms.get(sig)
        if form is None and sig not in self._forms:
            if len(self._forms) >= MAX_FORMS:
                self._forms.clear()
            form = self._forms[sig] = request_form(self.handle, app, args, self.dtypes[0], self.dtypes[1],
                                                   self.result_form)
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
        blocks: list[tuple[int, int]] = []
        staged: dict[int, np.ndarray] = {}
        try:
            service = self._target()
            values = self._args(gen, ctx)
            packet = self._packet(service, values, ctx, app)
            if packet is not None:
                rid, write, expect, blocks = packet
                sent, reply = service.ring_call_sync(rid, write, expect, self.device_s)
                if sent:
                    ring_outputs, ring_ns = reply
                    self._took(ring_ns)
                    return _finish(gen, ctx, ring_outputs, ring_ns, staged)
                self._free(blocks)
                blocks = []
            (kind, *args), blocks = self._request(values, ctx, app, staged)
            outputs, device_ns = service.call_sync(kind, *args)
            return _finish(gen, ctx, outputs, device_ns, staged)
        finally:
            self._free(blocks)
            gen.close()

    async def drive(self, gen: _Gen, ctx: ExecContext, plan: Plan, app: Hashable, priority: Priority) -> tuple[list[Any], int]:
        blocks: list[tuple[int, int]] = []
        staged: dict[int, np.ndarray] = {}
        try:
            service = self._target()
            values = self._args(gen, ctx)
            packet = self._packet(service, values, ctx, app)
            if packet is not None:
                rid, write, expect, blocks = packet
                fut = service.ring_call(rid, write, expect, self.device_s)
                if fut is not None:
                    try:
                        ring_outputs, ring_ns = await fut
                    except asyncio.CancelledError:
                        service.ring_cancelled(rid)
                        raise
                    self._took(ring_ns)
                    return _finish(gen, ctx, ring_outputs, ring_ns, staged)
                self._free(blocks)
                blocks = []
            (kind, *args), blocks = self._request(values, ctx, app, staged)
            outputs, device_ns = await service.call(kind, *args)
            return _finish(gen, ctx, outputs, device_ns, staged)
        finally:
            self._free(blocks)
            gen.close()


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
