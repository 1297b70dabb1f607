"""Hypothesis stateful tests over the public API: model building (valid templates and garbage),
``finish``, preparation, execution on every path, fences and memory domains.

Invariants checked after every step:

* only an ``NnrtError`` carrying an NNAPI status escapes any call (anything else is a crash);
* nothing changes after ``finish``: every mutating call on a finished model is refused and the
  model's description stays byte-for-byte the same;
* an accepted model gives identical results on ``execute``, ``execute_sync``,
  ``execute_fenced`` and a burst (or fails on all of them with the same status).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import nnrt
from nnrt import BufferDesc, BufferRole, ErrorStatus, Model
from nnrt import OperandType as T
from nnrt import OperationType as Op
from tests.adversarial import _tally
from tests.adversarial._targets import UnexpectedError, check_status

CATEGORY = "stateful (hypothesis)"

_junk = st.one_of(st.none(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=3),
                  st.lists(st.integers(-3, 5), max_size=3), st.just(object()), st.binary(max_size=8))
_dims = st.one_of(st.lists(st.integers(0, 4), min_size=0, max_size=4), _junk)
_types = st.one_of(st.sampled_from(list(T)), st.integers(-2, 20), _junk)
_ops = st.one_of(st.sampled_from([Op.ADD, Op.MUL, Op.RELU, Op.TRANSPOSE, Op.SQUEEZE, Op.REDUCE_MAX, Op.MEAN,
                                  Op.CONCATENATION, Op.RESHAPE, Op.FILL, Op.TILE, Op.IF, Op.WHILE]),
                 st.sampled_from(list(Op)), _junk)


def _describe(m: Model) -> str:
    """Everything a finished model holds, as text: must never change after ``finish``."""
    ops = [(o.index, int(o.type), o.dimensions, o.scale, o.zero_point, int(o.lifetime), o.name,
            None if not isinstance(o.value, np.ndarray) else o.value.tobytes(),
            o.value if not isinstance(o.value, np.ndarray) else None, id(o.subgraph)) for o in m.operands]
    return repr((ops, [(int(o.type), o.inputs, o.outputs) for o in m.operations], m.input_indexes, m.output_indexes,
                 m.relaxed))


def _template(kind: str, dims: list[int], t: T) -> Model:
    """A valid small model of one operation (the stateful machine then perturbs around it)."""
    m = Model(name=kind)
    x = m.add_operand(t, dims)
    y_dims = list(dims)
    if kind in ("ADD", "MUL"):
        b = m.add_operand(t, dims)
        act = m.add_operand(T.INT32)
        m.set_operand_value(act, 0)
        y = m.add_operand(t, dims)
        m.add_operation(Op.ADD if kind == "ADD" else Op.MUL, [x, b, act], [y])
        m.identify_inputs_and_outputs([x, b], [y])
    elif kind == "RELU":
        y = m.add_operand(t, dims)
        m.add_operation(Op.RELU, [x], [y])
        m.identify_inputs_and_outputs([x], [y])
    elif kind == "TRANSPOSE":
        y = m.add_operand(t, y_dims[::-1])
        m.add_operation(Op.TRANSPOSE, [x], [y])
        m.identify_inputs_and_outputs([x], [y])
    else:  # REDUCE_MAX over axis 0, or MEAN
        axes = m.add_operand(T.TENSOR_INT32, [1])
        m.set_operand_value(axes, np.array([0], np.int32))
        keep = m.add_operand(T.INT32 if kind == "MEAN" else T.BOOL)
        m.set_operand_value(keep, 0 if kind == "MEAN" else False)
        y = m.add_operand(t, [0] * max(1, len(dims) - 1))
        m.add_operation(Op.MEAN if kind == "MEAN" else Op.REDUCE_MAX, [x, axes, keep], [y])
        m.identify_inputs_and_outputs([x], [y])
    m.finish()
    return m


class ApiMachine(RuleBasedStateMachine):
    device = nnrt.CpuDevice(name="nnrt-stateful", calibrate=False)

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.building = Model()
        self.finished: list[tuple[Model, str]] = []
        self.prepared: list[nnrt.PreparedModel] = []
        self.fences: list[nnrt.SyncFence] = []

    def teardown(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()

    # -- the contract ------------------------------------------------------------------------

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run one API call; an ``NnrtError`` with an NNAPI status is fine, anything else a crash."""
        _tally.record(CATEGORY, tries=1)
        try:
            return fn()
        except nnrt.NnrtError as err:
            try:
                check_status(err)
            except UnexpectedError:
                _tally.record(CATEGORY, crashes=1)
                raise
            return err
        except BaseException:
            _tally.record(CATEGORY, crashes=1)
            raise

    def run(self, coro_fn: Callable[[], Any]) -> Any:
        """``call`` for a coroutine, on this machine's loop, under a 60 s watchdog (a hang)."""
        try:
            return self.call(lambda: self.loop.run_until_complete(asyncio.wait_for(coro_fn(), 60)))
        except TimeoutError:
            _tally.record(CATEGORY, hangs=1, crashes=-1)  # counted by ``call`` as a crash: it is a hang
            raise

    # -- building -----------------------------------------------------------------------------

    @rule(t=_types, dims=_dims, scale=st.one_of(st.floats(allow_nan=True), _junk), zp=st.one_of(st.integers(-300, 300), _junk))
    def add_operand(self, t: Any, dims: Any, scale: Any, zp: Any) -> None:
        self.call(lambda: self.building.add_operand(t, dims, scale, zp))

    @rule(index=st.one_of(st.integers(-1, 8), _junk), value=st.one_of(_junk, st.integers(), st.floats(),
          st.lists(st.floats(width=32), max_size=6).map(lambda v: np.array(v, np.float32))))
    def set_value(self, index: Any, value: Any) -> None:
        self.call(lambda: self.building.set_operand_value(index, value))

    @rule(op=_ops, ins=st.one_of(st.lists(st.integers(-1, 8), max_size=4), _junk),
          outs=st.one_of(st.lists(st.integers(-1, 8), max_size=2), _junk))
    def add_operation(self, op: Any, ins: Any, outs: Any) -> None:
        self.call(lambda: self.building.add_operation(op, ins, outs))

    @rule(ins=st.one_of(st.lists(st.integers(-1, 8), max_size=3), _junk),
          outs=st.one_of(st.lists(st.integers(-1, 8), max_size=2), _junk))
    def identify(self, ins: Any, outs: Any) -> None:
        self.call(lambda: self.building.identify_inputs_and_outputs(ins, outs))

    @rule()
    def finish(self) -> None:
        result = self.call(self.building.finish)
        if not isinstance(result, nnrt.NnrtError):
            self.finished.append((self.building, _describe(self.building)))
        self.building = Model()

    @rule(kind=st.sampled_from(["ADD", "MUL", "RELU", "TRANSPOSE", "REDUCE_MAX", "MEAN"]),
          dims=st.lists(st.integers(0, 3), min_size=1, max_size=3),
          t=st.sampled_from([T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32]))
    def valid_model(self, kind: str, dims: list[int], t: T) -> None:
        if t is T.TENSOR_INT32 and kind in ("RELU", "MEAN", "REDUCE_MAX"):
            t = T.TENSOR_FLOAT32
        model = self.call(lambda: _template(kind, dims, t))
        if isinstance(model, Model):
            self.finished.append((model, _describe(model)))

    @precondition(lambda self: self.finished)
    @rule(data=st.data())
    def mutate_finished(self, data: st.DataObject) -> None:
        model, _ = data.draw(st.sampled_from(self.finished))
        attempt = data.draw(st.sampled_from([
            lambda: model.add_operand(T.TENSOR_FLOAT32, [1]),
            lambda: model.set_operand_value(0, np.zeros(1, np.float32)),
            lambda: model.add_operation(Op.RELU, [0], [0]),
            lambda: model.identify_inputs_and_outputs([], []),
            lambda: model.relax_computation_float32_to_float16(True),
            lambda: model.finish(),
        ]))
        result = self.call(attempt)
        assert isinstance(result, nnrt.InvalidArgumentError), f"a finished model accepted a change: {result!r}"

    # -- preparation and execution -----------------------------------------------------------

    @precondition(lambda self: self.finished)
    @rule(data=st.data())
    def prepare(self, data: st.DataObject) -> None:
        model, _ = data.draw(st.sampled_from(self.finished))
        prepared = self.call(lambda: self.device.prepare_model_sync(model))
        if isinstance(prepared, nnrt.PreparedModel):
            self.prepared.append(prepared)

    @precondition(lambda self: self.prepared)
    @rule(data=st.data(), garbage=st.booleans())
    def execute_everywhere(self, data: st.DataObject, garbage: bool) -> None:
        prepared = data.draw(st.sampled_from(self.prepared))
        model = prepared.model
        args: list[Any] = []
        for i in model.input_indexes:
            op = model.operands[i]
            dims = [d or data.draw(st.integers(0, 3)) for d in op.dimensions]
            values = data.draw(st.lists(st.floats(-1e3, 1e3, width=16), min_size=int(np.prod(dims)),
                                        max_size=int(np.prod(dims))))
            args.append(np.array(values, np.float64).astype(op.type.dtype).reshape(dims))
        if garbage:
            args = data.draw(st.sampled_from([None, 5, [None] * len(args), args[:-1], [*args, args[0] if args else 1],
                                              [a.astype(np.float64) for a in args]]))
        outcomes = [self.run(lambda: prepared.execute(args)), self.call(lambda: prepared.execute_sync(args))]

        async def fenced() -> Any:
            fence, cb = await prepared.execute_fenced(args)
            await fence
            return cb.result

        async def burst() -> Any:
            async with prepared.burst() as b:
                return await b.execute(args)

        outcomes += [self.run(fenced), self.run(burst)]
        statuses = {o.status if isinstance(o, nnrt.NnrtError) else ErrorStatus.NONE for o in outcomes}
        results = [o for o in outcomes if not isinstance(o, nnrt.NnrtError)]
        same = all(len(r.outputs) == len(results[0].outputs) and all(
            a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
            for a, b in zip(r.outputs, results[0].outputs)) for r in results)
        fenced_only = statuses - {ErrorStatus.NONE} == {ErrorStatus.INVALID_ARGUMENT} and any(
            isinstance(o, nnrt.NnrtError) and "fenced execution needs fully specified outputs" in o.message for o in outcomes)
        if not same or (len(statuses) > 1 and not fenced_only):
            _tally.record(CATEGORY, wrong=1)
            raise AssertionError(f"the execution paths disagree: {outcomes!r}")

    # -- fences and memory domains -----------------------------------------------------------

    @rule(action=st.sampled_from(["new", "signal", "error", "all_of", "any_of", "wait"]), status=st.one_of(
        st.sampled_from(list(ErrorStatus)), _junk), data=st.data())
    def fences_(self, action: str, status: Any, data: st.DataObject) -> None:
        if action == "new" or not self.fences:
            self.fences.append(nnrt.SyncFence())
            return
        fence = data.draw(st.sampled_from(self.fences))
        picked = data.draw(st.lists(st.one_of(st.sampled_from(self.fences), _junk), max_size=3))
        if action == "signal":
            self.call(fence.signal)
        elif action == "error":
            self.call(lambda: fence.signal_error(status, "x"))
        elif action in ("all_of", "any_of"):
            made = self.call(lambda: (nnrt.all_of if action == "all_of" else nnrt.any_of)(picked))
            if isinstance(made, nnrt.SyncFence):
                self.fences.append(made)
        else:
            # bounded timeouts only: wait(inf) on a fence nobody signals rightly waits forever
            timeout = data.draw(st.sampled_from([0.0, -1.0, 0.001, float("nan"), None, "x", True, [0.1]]))
            self.run(lambda: fence.wait(timeout))

    @precondition(lambda self: self.prepared)
    @rule(data=st.data(), desc=st.one_of(_dims, st.just(BufferDesc())), role=st.integers(-1, 3))
    def memory_domain(self, data: st.DataObject, desc: Any, role: int) -> None:
        prepared = data.draw(st.sampled_from(self.prepared))
        got = self.call(lambda: self.device.allocate(desc, [prepared], [BufferRole(0, role)], [BufferRole(0, 0)]))
        if isinstance(got, tuple):
            buf, token = got
            args = [buf if k == role else np.zeros(1, np.float32) for k in range(len(prepared.model.input_indexes))]
            self.call(lambda: prepared.execute_sync(args, [token]))

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def finished_models_never_change(self) -> None:
        for model, before in self.finished:
            assert _describe(model) == before, f"{model!r} changed after finish"


ApiMachine.TestCase.settings = settings(
    max_examples=_tally.budget(25, 4000), stateful_step_count=40 if _tally.is_long() else 25, deadline=None,
    suppress_health_check=list(HealthCheck), derandomize=not _tally.is_long(), database=None, report_multiple_bugs=False,
)
TestApi = ApiMachine.TestCase
