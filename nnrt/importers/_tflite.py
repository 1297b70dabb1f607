"""The TFLite importer: a ``.tflite`` flatbuffer into a finished nnrt ``Model``.

``load_tflite`` parses the file (``_tflite_schema`` over the zero-copy reader ``_flatbuf``),
imports subgraph 0 as the model and any IF/WHILE subgraphs as referenced models, mapping every
operator with the ``_tflite_ops_*`` and ``_tflite_control`` mappers, which follow TFLite's
NNAPI delegate. Every node that cannot be expressed is recorded and ``load`` fails once, with
all of them. Constants are views of the loaded file (``set_operand_value_from_memory``):
nothing is copied except what must change (int64 constants narrowed to int32; re-scaled biases
keep their data). Narrow constants are not widened at load: float16 weights get a CAST to
float32 and uint8/uint16 sparse index vectors graph operations to int32, which preparation
folds once (``nnrt.execution._fuse.ConstantFolder``).

Inputs and outputs are subgraph 0's, in its order, named after their tensors. Rank-0 tensors
become ``[1]``; ``shape_signature`` -1 dimensions are unknown (0) unless ``input_shapes``
fixes them. Stateful models get their state as extra inputs and outputs after the file's own:
``state_in/<key>`` and ``state_out/<key>`` (see ``_tflite_control`` and ``state_variables``).

Supported builtins (NNAPI op in brackets where the name differs):

- arithmetic: ADD SUB MUL DIV with fused NONE/RELU/RELU_N1_TO_1/RELU6 (int32 DIV is refused:
  TFLite truncates, NNAPI rounds down), FLOOR_DIV (int32: DIV; float: DIV + FLOOR), ADD_N
  (ADDs), SQUARE and SQUARED_DIFFERENCE (MUL/SUB), MAXIMUM MINIMUM POW;
- weighted: CONV_2D (GROUPED_CONV_2D when the filter has fewer input channels),
  DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED (keep_num_dims, hybrid, per-channel int8
  as a 1x1 CONV_2D), BATCH_MATMUL (by a lower-rank constant: a 1x1 CONV_2D);
- windows and normalization: AVERAGE/MAX/L2_POOL_2D, SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION,
  LOCAL_RESPONSE_NORMALIZATION;
- activations and unary math: RELU RELU_N1_TO_1 (RELU1) RELU6 LOGISTIC TANH HARD_SWISH ELU,
  GELU (tanh form: MUL/ADD/TANH), RELU_0_TO_1 (RELU + MINIMUM), LEAKY_RELU (PRELU), PRELU,
  ABS EXP LOG NEG SQRT RSQRT SIN FLOOR;
- comparisons and logic: LESS LESS_EQUAL GREATER GREATER_EQUAL EQUAL NOT_EQUAL,
  LOGICAL_AND/OR/NOT, SELECT and SELECT_V2 (equal shapes);
- types: CAST, QUANTIZE, DEQUANTIZE (of float16: CAST), DENSIFY;
- shapes and data movement: RESHAPE, SQUEEZE, EXPAND_DIMS, CONCATENATION, PACK, UNPACK
  (SPLIT + SQUEEZE), SPLIT, SPLIT_V (SLICE), PAD, PADV2, MIRROR_PAD, SLICE, STRIDED_SLICE,
  GATHER, TRANSPOSE, TILE, REVERSE_V2 (one axis), SPACE_TO_DEPTH, DEPTH_TO_SPACE,
  SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND (no crops), EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, FILL, TOPK_V2,
  RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR;
- reductions: MEAN, SUM, PROD, REDUCE_MAX/MIN/ANY/ALL, ARG_MAX ARG_MIN (int32 output);
- recurrent (float32, or hybrid int8 weights): RNN, SVDF, UNIDIRECTIONAL_SEQUENCE_RNN,
  BIDIRECTIONAL_SEQUENCE_RNN, LSTM (full kernel),
  UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM;
- control flow and state: IF, WHILE, VAR_HANDLE READ_VARIABLE ASSIGN_VARIABLE CALL_ONCE;
- subgraph calls, mapped in place: CALL, STABLEHLO_COMPOSITE (by its decomposition).

Everything else, custom ops included, is rejected with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from nnrt._log import get_logger, vlog_enabled
from nnrt.errors import InvalidArgumentError
from nnrt.importers import _tflite_control, _tflite_ops_elementwise, _tflite_ops_nn, _tflite_ops_rnn, _tflite_ops_shape
from nnrt.importers._common import Rejections, check_operations
from nnrt.importers._tflite_control import State, record_state, state_variables
from nnrt.importers._tflite_graph import MAPPERS, Graph, Unsupported
from nnrt.importers._tflite_schema import TflFile, TflOp, TflSubgraph, parse_tflite
from nnrt.model import Model
from nnrt.types import OperandLifeTime as L
from nnrt.types import OperandType as T

__all__ = ["load_tflite"]

_log = get_logger("importers")

# The op mapper modules register themselves with ``MAPPERS`` when imported.
_MAPPER_MODULES = (_tflite_control, _tflite_ops_elementwise, _tflite_ops_nn, _tflite_ops_rnn, _tflite_ops_shape)
_CUSTOM, _RESHAPE = 32, 22
#: Operators that matter without consuming outputs: state (variables, CALL_ONCE), control flow.
_STATEFUL = frozenset({118, 119, 129, 142, 143, 144})
#: Control flow nested deeper than this is refused (a hostile file could nest thousands).
_MAX_NESTING = 32


def load_tflite(data: memoryview, *, name: str, input_shapes: Mapping[str, tuple[int, ...]]) -> Model:
    """Import a ``TFL3`` flatbuffer (see the module docstring for the rules)."""
    file = parse_tflite(data, name)
    model = _Importer(file, name).run(dict(input_shapes))
    if vlog_enabled("model"):
        _log.debug("model.imported", model=name, format="tflite", operators=len(file.subgraphs[0].operators),
                   operations=len(model.operations), subgraphs=len(file.subgraphs),
                   state=len(state_variables(model)))
    return model


def _live_operators(sub: TflSubgraph) -> set[int]:
    """The operators whose results reach an output or that change state; the others are not
    imported (nor refused). A RESHAPE never reads a computed shape input (it takes the shape
    from ``new_shape`` or its output), so a SHAPE / STRIDED_SLICE / PACK chain that only
    computes one, as converters emit for dynamic batches, is dead here."""
    live_tensors = set(sub.outputs)
    live: set[int] = set()
    for op in reversed(sub.operators):
        inputs = [i for i in op.inputs if i >= 0]
        stateful = op.code in _STATEFUL or any(sub.tensors[i].is_variable for i in inputs)
        if not stateful and not any(t in live_tensors for t in op.outputs):
            continue
        live.add(op.index)
        if op.code == _RESHAPE and len(inputs) > 1 and sub.tensors[inputs[1]].data is None:
            inputs = inputs[:1]
        live_tensors.update(inputs)
    return live


class _Importer:
    def __init__(self, file: TflFile, name: str) -> None:
        self.file = file
        self.name = name
        self.rejections = Rejections("tflite")
        self.models: dict[int, Model] = {}
        self.building: set[int] = set()
        self.resized = False

    def run(self, input_shapes: dict[str, tuple[int, ...]]) -> Model:
        main = self.file.subgraphs[0]
        names = {main.tensors[i].name: i for i in main.inputs}
        for key, dims in input_shapes.items():
            if key not in names:
                raise InvalidArgumentError(f"load: {self.name}: input_shapes names {key!r}, which is not an input "
                                           f"(inputs: {', '.join(map(repr, names))})")
            rank = len(main.tensors[names[key]].shape)
            if len(dims) != rank and (rank or len(dims) != 1):
                raise InvalidArgumentError(f"load: {self.name}: input_shapes[{key!r}] = {list(dims)} has rank "
                                           f"{len(dims)}; the input has rank {rank}")
        model = self._build(0, State(self.file), input_shapes)
        self.rejections.raise_if_any(self.name)
        return model

    def subgraph_model(self, index: int) -> Model:
        """The finished model of subgraph ``index`` (an IF branch or a WHILE condition/body)."""
        self._enter(index)
        if index not in self.models:
            before = len(self.rejections.items)
            model = self._build(index, None, {})
            if len(self.rejections.items) > before or not model.finished:
                raise Unsupported(f"subgraph {index} has nodes that cannot be expressed (listed)")
            self.models[index] = model
        return self.models[index]

    def _enter(self, index: int) -> None:
        if not 0 < index < len(self.file.subgraphs):
            raise Unsupported(f"subgraph index {index} is not a subgraph other than the main one")
        if index in self.building:
            raise Unsupported(f"subgraph {index} refers to itself (recursion has no NNAPI form)")
        if len(self.building) >= _MAX_NESTING:
            raise Unsupported(f"subgraphs nested more than {_MAX_NESTING} deep")

    def inline(self, g: Graph, index: int, inputs: list[int]) -> list[int]:
        """Map subgraph ``index``'s operators into ``g``'s model with its inputs bound to
        ``inputs``; return the operands of its outputs."""
        self._enter(index)
        sub = self.file.subgraphs[index]
        if len(inputs) != len(sub.inputs):
            raise Unsupported(f"{len(inputs)} inputs for subgraph {index}, which takes {len(sub.inputs)}")
        child = Graph(sub, g.model, self.subgraph_model, g.state, {}, self.inline)
        child.operand.update(zip(sub.inputs, inputs))
        child.resized = g.resized  # the caller's shapes changed: so did those computed here
        before = len(self.rejections.items)
        self.building.add(index)
        try:
            self._map_all(child, index)
            outputs = [child.input(ti) for ti in sub.outputs]
        finally:
            self.building.discard(index)
        if len(self.rejections.items) > before:
            raise Unsupported(f"subgraph {index} has nodes that cannot be expressed (listed)")
        return outputs

    def _build(self, index: int, state: State | None, input_shapes: dict[str, tuple[int, ...]]) -> Model:
        sub = self.file.subgraphs[index]
        label = self.name if index == 0 else f"{self.name}#subgraph{index}"
        model = Model(name=label)
        g = Graph(sub, model, self.subgraph_model, state, input_shapes, self.inline)
        if index == 0:
            self.resized = g.resized
        else:
            g.resized = self.resized  # the main graph's shapes changed: so did those its branches see
        before = len(self.rejections.items)
        self.building.add(index)
        try:
            inputs = [g.out(ti) for ti in sub.inputs]
            self._map_all(g, index)
            outputs = self._outputs(g, state)
            variables = state.finish(g, inputs, outputs) if state is not None else ()
        except Unsupported as err:
            self.rejections.add(f"subgraph {index}", "<graph>", str(err))
            return model
        finally:
            self.building.discard(index)
        if len(self.rejections.items) > before:
            return model
        try:
            model.identify_inputs_and_outputs(inputs, outputs)
            model.finish()
        except InvalidArgumentError as err:
            raise InvalidArgumentError(f"load: {self.name}: subgraph {index} is not a valid graph: {err}") from None
        record_state(model, variables)
        return model

    def _map_all(self, g: Graph, index: int) -> None:
        """Map every live operator of ``g``'s subgraph, in order."""
        live = _live_operators(g.sub)
        for op in g.sub.operators:
            if op.index in live:
                self._map(g, op, index)

    def _map(self, g: Graph, op: TflOp, index: int) -> None:
        out_name = g.tensor(op.outputs[0]).name if op.outputs else ""
        node = (f"subgraph {index} " if index else "") + f"op {op.index}" + (f" ({out_name})" if out_name else "")
        fn = MAPPERS.get(op.code)
        if op.code == _CUSTOM:
            reason = f"custom op {op.custom_code!r} has no NNAPI equivalent"
        elif fn is None:
            reason = "no NNAPI equivalent"
        else:
            start = len(g.model.operations)
            try:
                fn(g, op)
                g.flush()
                check_operations(g.model, start)
                return
            except (Unsupported, InvalidArgumentError) as err:
                reason = str(err)
            except (IndexError, ValueError) as err:  # too few inputs/outputs, a vector of the wrong length
                reason = f"malformed {op.name} node ({len(op.inputs)} inputs, {len(op.outputs)} outputs): {err}"
        g.discard()
        self.rejections.add(node, op.name, reason)
        for ti in op.outputs:  # placeholders, so later nodes are still checked
            if ti not in g.operand:
                g.operand[ti] = g.model.add_operand(T.TENSOR_FLOAT32)

    def _outputs(self, g: Graph, state: State | None) -> list[int]:
        """The operands of the subgraph's outputs, each copied (CAST to its own type) when NNAPI
        could not list it as is: a constant, an input (state inputs included), or listed twice."""
        inputs = {g.operand[i] for i in g.sub.inputs}
        if state is not None:
            inputs |= {v.state_in for v in state.vars.values() if v.state_in is not None}
        outputs: list[int] = []
        for ti in g.sub.outputs:
            operand = g.input(ti)
            o = g.model.operands[operand]
            if o.lifetime is not L.TEMPORARY_VARIABLE or operand in inputs or operand in outputs:
                operand = g.identity(operand, g.tensor(ti).name)
            outputs.append(operand)
        return outputs
