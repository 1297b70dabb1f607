"""TFLite control flow and state: IF/WHILE subgraphs, CALL and STABLEHLO_COMPOSITE (another
subgraph's operators mapped in place, a composite by its decomposition), and resource or
variable tensors turned into explicit state inputs and outputs.

IF and WHILE map onto NNAPI's IF and WHILE with their subgraphs imported as referenced models
(``set_operand_value_from_model``); every TFLite WHILE value is an NNAPI input-output value.

State. A TFLite interpreter keeps resource variables (VAR_HANDLE / READ_VARIABLE /
ASSIGN_VARIABLE, initialized by CALL_ONCE's init subgraph) and variable tensors (the state
inputs of LSTM/RNN ops, updated in place) across invocations. NNAPI models are stateless, so
each variable becomes one extra model input (its value before the execution) and one extra
model output (its value after), appended after the file's own inputs and outputs, in order of
first appearance. The input is named ``state_in/<key>`` and the output ``state_out/<key>``,
where ``<key>`` is the variable's ``shared_name`` (resource variables) or the tensor's name
(variable tensors). ``state_variables(model)`` lists them with their positions and initial
values (CALL_ONCE's constant assignments, a variable tensor's buffer, else zeros), so a
stream feeds each execution's ``state_out`` to the next one's ``state_in``.
"""

from __future__ import annotations

import dataclasses
import math
import weakref

import numpy as np

from nnrt.importers._tflite_graph import Graph, Unsupported, mapper
from nnrt.importers._tflite_schema import TflFile, TflOp, TflTensor
from nnrt.model import Model
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["State", "StateVariable", "record_state", "state_variables"]

_IF, _WHILE, _CALL_ONCE, _VAR_HANDLE, _READ_VARIABLE, _ASSIGN_VARIABLE = 118, 119, 129, 142, 143, 144
_CALL, _COMPOSITE = 31, 206


@dataclasses.dataclass(frozen=True)
class StateVariable:
    """One piece of state a loaded TFLite model carries explicitly.

    ``input`` and ``output`` are positions in the model's inputs and outputs; ``initial`` is
    the value to feed the first execution (in the operand's own dtype: quantized values for
    quantized state).
    """

    key: str
    input: int
    output: int
    initial: np.ndarray


_STATE: weakref.WeakKeyDictionary[Model, tuple[StateVariable, ...]] = weakref.WeakKeyDictionary()


def state_variables(model: Model) -> tuple[StateVariable, ...]:
    """The state inputs and outputs ``nnrt.load`` gave a TFLite model (empty for others)."""
    return _STATE.get(model, ())


def record_state(model: Model, variables: tuple[StateVariable, ...]) -> None:
    if variables:
        _STATE[model] = variables


@dataclasses.dataclass
class _Var:
    key: str
    state_in: int | None = None
    current: int | None = None
    initial: np.ndarray | None = None


class State:
    """The variables of the main subgraph while it is imported."""

    def __init__(self, file: TflFile) -> None:
        self.file = file
        self.vars: dict[str, _Var] = {}
        self.resources: dict[int, str] = {}
        self.initial: dict[str, np.ndarray] = {}

    def _var(self, key: str) -> _Var:
        return self.vars.setdefault(key, _Var(key))

    def _state_in(self, g: Graph, var: _Var, t: TflTensor) -> int:
        if var.state_in is None:
            typ, scale, zp = g.nn_type(t)
            var.state_in = g.model.add_operand(typ, g.dims(t), scale, zp, name=f"state_in/{var.key}")
            if typ is T.TENSOR_QUANT8_SYMM_PER_CHANNEL or 0 in g.model.operands[var.state_in].dimensions:
                raise Unsupported(f"state {var.key!r} needs a fully known shape and a per-tensor type")
        return var.state_in

    def read_variable_tensor(self, g: Graph, t: TflTensor) -> int:
        """A variable tensor read by an op: the current value of its state."""
        var = self._var(t.name or f"tensor{t.index}")
        if var.initial is None and t.data is not None:
            var.initial = np.array(t.data).reshape(g.dims(t))
        return var.current if var.current is not None else self._state_in(g, var, t)

    def assign_tensor(self, g: Graph, t: TflTensor, operand: int) -> None:
        """An op updated variable tensor ``t`` (e.g. an LSTM's state output) to ``operand``."""
        self._var(t.name or f"tensor{t.index}").current = operand

    def finish(self, g: Graph, inputs: list[int], outputs: list[int]) -> tuple[StateVariable, ...]:
        """Append each variable's state input and output; return their descriptions."""
        found = []
        for var in self.vars.values():
            if var.state_in is None:
                if var.current is None:
                    continue
                src = g.model.operands[var.current]
                var.state_in = g.model.add_operand(src.type, src.dimensions, src.scale, src.zero_point,
                                                   name=f"state_in/{var.key}")
            sin = g.model.operands[var.state_in]
            cur = var.current if var.current is not None else var.state_in
            co = g.model.operands[cur]
            if (co.type, co.scale, co.zero_point) != (sin.type, sin.scale, sin.zero_point):
                raise Unsupported(f"state {var.key!r} is assigned a {co.type.name} value but read as {sin.type.name}")
            # declared like the state input (fully known), whatever shape the new value has on the way
            out = g.model.add_operand(sin.type, sin.dimensions, sin.scale, sin.zero_point, name=f"state_out/{var.key}")
            g.op(Op.CAST, [cur], [out])
            init = self.initial.get(var.key, var.initial)
            if init is None:
                init = np.zeros(sin.dimensions, sin.type.dtype)
            init = np.asarray(init, sin.type.dtype)
            if init.size != math.prod(sin.dimensions):
                raise Unsupported(f"state {var.key!r}: initial value of {init.size} elements for dimensions "
                                  f"{list(sin.dimensions)}")
            init = init.reshape(sin.dimensions)
            inputs.append(var.state_in)
            outputs.append(out)
            found.append(StateVariable(var.key, len(inputs) - 1, len(outputs) - 1, init))
        return tuple(found)


def _state(g: Graph, op: TflOp) -> State:
    if g.state is None:
        raise Unsupported("resource variables inside a control-flow subgraph")
    return g.state


def _handle_key(op: TflOp, tensors: list[TflTensor]) -> str:
    """A VAR_HANDLE's variable: ``container/shared_name``, else its output tensor's name."""
    o = op.options
    container, shared = (o.text(0), o.text(1)) if o is not None else ("", "")
    return (f"{container}/{shared}" if container else shared) or tensors[op.outputs[0]].name or f"resource{op.outputs[0]}"


@mapper(_VAR_HANDLE)
def _var_handle(g: Graph, op: TflOp) -> None:
    _state(g, op).resources[op.outputs[0]] = _handle_key(op, g.sub.tensors)


def _resource(g: Graph, op: TflOp) -> str:
    key = _state(g, op).resources.get(op.inputs[0])
    if key is None:
        raise Unsupported(f"resource {g.tensor(op.inputs[0]).label()} does not come from a VAR_HANDLE")
    return key


@mapper(_READ_VARIABLE)
def _read_variable(g: Graph, op: TflOp) -> None:
    state = _state(g, op)
    var = state._var(_resource(g, op))
    value = var.current if var.current is not None else state._state_in(g, var, g.tensor(op.outputs[0]))
    g.alias(op.outputs[0], value)


@mapper(_ASSIGN_VARIABLE)
def _assign_variable(g: Graph, op: TflOp) -> None:
    state = _state(g, op)
    state._var(_resource(g, op)).current = g.input(op.inputs[1])


@mapper(_CALL_ONCE)
def _call_once(g: Graph, op: TflOp) -> None:
    """Read the init subgraph's constant assignments as initial values (it runs no ops here)."""
    state = _state(g, op)
    index = op.options.num(0) if op.options is not None else -1
    if not 0 <= index < len(state.file.subgraphs):
        raise Unsupported(f"init subgraph index {index} is outside the {len(state.file.subgraphs)} subgraphs")
    sub = state.file.subgraphs[index]
    handles: dict[int, str] = {}
    for inner in sub.operators:
        if inner.code == _VAR_HANDLE:
            handles[inner.outputs[0]] = _handle_key(inner, sub.tensors)
        elif inner.code == _ASSIGN_VARIABLE and inner.inputs[0] in handles and \
                sub.tensors[inner.inputs[1]].data is not None:
            state.initial[handles[inner.inputs[0]]] = np.array(sub.tensors[inner.inputs[1]].data)
        else:
            raise Unsupported(f"init subgraph {index} runs {inner.name} (only constant assignments are read)")


def _subgraph_operand(g: Graph, index: int) -> int:
    ref = g.model.add_operand(T.SUBGRAPH)
    g.model.set_operand_value_from_model(ref, g.subgraph_model(index))
    return ref


@mapper(_IF)
def _if(g: Graph, op: TflOp) -> None:
    o = op.options
    if o is None:
        raise Unsupported("IF without options")
    cond = g.input(op.inputs[0])
    if g.type_of(cond) is not T.TENSOR_BOOL8:
        raise Unsupported(f"condition of type {g.type_of(cond).name}; NNAPI's IF takes a bool")
    args = [g.input(i) for i in op.inputs[1:]]
    then_ref, else_ref = _subgraph_operand(g, o.num(0)), _subgraph_operand(g, o.num(1))
    g.op(Op.IF, [cond, then_ref, else_ref, *args], [g.out(t) for t in op.outputs])


@mapper(_WHILE)
def _while(g: Graph, op: TflOp) -> None:
    o = op.options
    if o is None:
        raise Unsupported("WHILE without options")
    values = [g.input(i) for i in op.inputs]
    cond_ref, body_ref = _subgraph_operand(g, o.num(0)), _subgraph_operand(g, o.num(1))
    g.op(Op.WHILE, [cond_ref, body_ref, *values], [g.out(t) for t in op.outputs])


@mapper(_CALL, _COMPOSITE)
def _call(g: Graph, op: TflOp) -> None:
    """CALL and STABLEHLO_COMPOSITE run another subgraph on their inputs: its operators are
    mapped in place (a composite by its decomposition, which is what LiteRT runs too)."""
    if op.code == _CALL:
        index = op.options.num(0, "u32") if op.options is not None else -1
    else:
        index = op.options2.num(1) if op.options2 is not None else -1
    if g.inline is None:
        raise Unsupported("inlining a subgraph is not available here")
    results = g.inline(g, index, [g.input(i) for i in op.inputs])
    if len(results) != len(op.outputs):
        raise Unsupported(f"subgraph {index} has {len(results)} outputs, the node {len(op.outputs)}")
    for ti, operand in zip(op.outputs, results):
        g.alias(ti, operand)
