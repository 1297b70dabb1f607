"""The TFLite importer: a ``.tflite`` flatbuffer into a finished nnrt ``Model``.

``load_tflite`` parses the file (``_tflite_schema`` over the zero-copy reader ``_flatbuf``),
imports subgraph 0 as the model and any IF/WHILE subgraphs as referenced models, mapping every
operator with the ``_tflite_ops_*`` and ``_tflite_control`` mappers, which follow TFLite's
NNAPI delegate. Every node that cannot be expressed is recorded and ``load`` fails once, with
all of them. Constants are views of the loaded file (``set_operand_value_from_memory``):
nothing is copied except what must change (float16 weights widened to float32, int64
constants narrowed to int32, re-scaled biases keep their data).

Inputs and outputs are subgraph 0's, in its order, named after their tensors. Rank-0 tensors
become ``[1]``; ``shape_signature`` -1 dimensions are unknown (0) unless ``input_shapes``
fixes them. Stateful models get their state as extra inputs and outputs after the file's own:
``state_in/<key>`` and ``state_out/<key>`` (see ``_tflite_control`` and ``state_variables``).

Supported builtins (NNAPI op in brackets where the name differs):
ADD SUB MUL DIV (with fused activations; TANH as a separate op), CONV_2D (GROUPED_CONV_2D when
the filter has fewer input channels), DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED (also
keep_num_dims, hybrid), AVERAGE/MAX/L2_POOL_2D, SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION,
LOCAL_RESPONSE_NORMALIZATION, BATCH_MATMUL, RELU RELU_N1_TO_1 (RELU1) RELU6 LOGISTIC TANH
HARD_SWISH ELU, LEAKY_RELU (PRELU), PRELU, ABS EXP LOG NEG SQRT RSQRT SIN FLOOR, SQUARE and
SQUARED_DIFFERENCE (MUL/SUB), MAXIMUM MINIMUM POW, LESS LESS_EQUAL GREATER GREATER_EQUAL EQUAL
NOT_EQUAL, LOGICAL_AND/OR/NOT, SELECT and SELECT_V2 without broadcasting, CAST, QUANTIZE,
DEQUANTIZE (float16 constants folded), RESHAPE, SQUEEZE, EXPAND_DIMS, CONCATENATION, PACK,
UNPACK (SPLIT+SQUEEZE), SPLIT, SPLIT_V (SLICE), PAD, PADV2, MIRROR_PAD, SLICE, STRIDED_SLICE,
GATHER, TRANSPOSE, TILE, RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, MEAN, SUM PROD REDUCE_MAX
REDUCE_MIN REDUCE_ANY REDUCE_ALL, ARG_MAX ARG_MIN (int32 output), SPACE_TO_DEPTH,
DEPTH_TO_SPACE, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND (no crops), EMBEDDING_LOOKUP, FILL,
DENSIFY, RNN, SVDF, UNIDIRECTIONAL_SEQUENCE_RNN, UNIDIRECTIONAL_SEQUENCE_LSTM, LSTM (full kernel),
IF, WHILE, VAR_HANDLE READ_VARIABLE ASSIGN_VARIABLE CALL_ONCE (as state inputs and outputs).
Everything else, custom ops included, is rejected with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from nnrt.errors import InvalidArgumentError
from nnrt.importers import _tflite_control, _tflite_ops_elementwise, _tflite_ops_nn, _tflite_ops_rnn, _tflite_ops_shape
from nnrt.importers._common import Rejections, check_operations
from nnrt.importers._tflite_control import State, record_state
from nnrt.importers._tflite_graph import MAPPERS, Graph, Unsupported
from nnrt.importers._tflite_schema import TflFile, TflOp, parse_tflite
from nnrt.model import Model
from nnrt.types import OperandLifeTime as L
from nnrt.types import OperandType as T
from nnrt.types import OperationType as Op

__all__ = ["load_tflite"]

# The op mapper modules register themselves with ``MAPPERS`` when imported.
_MAPPER_MODULES = (_tflite_control, _tflite_ops_elementwise, _tflite_ops_nn, _tflite_ops_rnn, _tflite_ops_shape)
_CUSTOM = 32
#: Control flow nested deeper than this is refused (a hostile file could nest thousands).
_MAX_NESTING = 32


def load_tflite(data: memoryview, *, name: str, input_shapes: Mapping[str, tuple[int, ...]]) -> Model:
    """Import a ``TFL3`` flatbuffer (see the module docstring for the rules)."""
    file = parse_tflite(data, name)
    return _Importer(file, name).run(dict(input_shapes))


class _Importer:
    def __init__(self, file: TflFile, name: str) -> None:
        self.file = file
        self.name = name
        self.rejections = Rejections("tflite")
        self.models: dict[int, Model] = {}
        self.building: set[int] = set()

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
        if not 0 < index < len(self.file.subgraphs):
            raise Unsupported(f"subgraph index {index} is not a subgraph other than the main one")
        if index in self.building:
            raise Unsupported(f"subgraph {index} refers to itself (recursion has no NNAPI form)")
        if len(self.building) >= _MAX_NESTING:
            raise Unsupported(f"subgraphs nested more than {_MAX_NESTING} deep")
        if index not in self.models:
            before = len(self.rejections.items)
            model = self._build(index, None, {})
            if len(self.rejections.items) > before or not model.finished:
                raise Unsupported(f"subgraph {index} has nodes that cannot be expressed (listed)")
            self.models[index] = model
        return self.models[index]

    def _build(self, index: int, state: State | None, input_shapes: dict[str, tuple[int, ...]]) -> Model:
        sub = self.file.subgraphs[index]
        label = self.name if index == 0 else f"{self.name}#subgraph{index}"
        model = Model(name=label)
        g = Graph(sub, model, self.subgraph_model, state, input_shapes)
        before = len(self.rejections.items)
        self.building.add(index)
        try:
            inputs = [g.out(ti) for ti in sub.inputs]
            for op in sub.operators:
                self._map(g, op, index)
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
                copy = g.model.add_operand(o.type, o.dimensions, o.scale, o.zero_point, name=g.tensor(ti).name)
                g.op(Op.CAST, [operand], [copy])
                operand = copy
            outputs.append(operand)
        return outputs
