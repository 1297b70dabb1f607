"""Operation signatures as data: the vocabulary the signature tables are written in.

An operation's signature is one or more *variants* (CONV_2D has an implicit-padding and an
explicit-padding form), each a list of input and output *arguments*. The tables in
``_sig_nn.py`` and ``_sig_tensor.py`` write a variant as one short string per side::

    "input:FQ filter:FQP bias:FI padding:int stride_w:int stride_h:int fuse:int [nchw:bool] [dilation_w:int dilation_h:int]"

Each word is ``name:types``. A name ending in ``?`` is an input that may be omitted (given
NO_VALUE), ``+`` one or more operands, ``*`` zero or more (at most one such argument per
list). ``[...]`` is a trailing optional group: present only when every group before it is.
Types are either a scalar word (``int``, ``bool``, ``float`` = FLOAT32 or FLOAT16, ``num`` =
INT32, FLOAT32 or FLOAT16, ``graph`` = a SUBGRAPH reference) or tensor letters:
``F`` float32/float16, ``Q`` quant8 asymmetric (unsigned and signed), ``U`` unsigned quant8
asymmetric only, ``I`` int32, ``B`` bool8, ``P`` quant8 symmetric per channel, ``Y`` quant8
symmetric, ``S`` quant16 symmetric, ``A`` quant16 asymmetric, ``*`` any tensor type.

This module is pure data handling (no model, no operands): ``_signatures.py`` matches a
model's operation against these specs, and the operation reference is rendered from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nnrt.types import OperandType, OperationType

__all__ = ["Arg", "Signature", "Variant", "describe_types", "sig", "variant"]

T = OperandType

_LETTERS: dict[str, tuple[OperandType, ...]] = {
    "F": (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16),
    "Q": (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED),
    "U": (T.TENSOR_QUANT8_ASYMM,),
    "I": (T.TENSOR_INT32,),
    "B": (T.TENSOR_BOOL8,),
    "P": (T.TENSOR_QUANT8_SYMM_PER_CHANNEL,),
    "Y": (T.TENSOR_QUANT8_SYMM,),
    "S": (T.TENSOR_QUANT16_SYMM,),
    "A": (T.TENSOR_QUANT16_ASYMM,),
    "*": tuple(t for t in OperandType if t.is_tensor),
}
_SCALARS: dict[str, tuple[OperandType, ...]] = {
    "int": (T.INT32,),
    "bool": (T.BOOL,),
    "float": (T.FLOAT32, T.FLOAT16),
    "f32": (T.FLOAT32,),
    "num": (T.INT32, T.FLOAT32, T.FLOAT16),
    "graph": (T.SUBGRAPH,),
}


@dataclass(frozen=True, slots=True)
class Arg:
    """One input or output of a variant."""

    name: str
    types: tuple[OperandType, ...]
    doc: str = ""
    #: The operand may be given NO_VALUE (an omitted optional input).
    omittable: bool = False
    #: "" for exactly one operand, "+" for one or more, "*" for zero or more.
    repeat: str = ""
    #: 0 for a required argument; k > 0 for the k-th trailing optional group.
    group: int = 0


@dataclass(frozen=True, slots=True)
class Variant:
    """One accepted form of an operation: its inputs and outputs in order."""

    label: str
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]

    def counts(self, side: str) -> frozenset[int] | None:
        """The accepted numbers of ``side`` ("inputs"/"outputs") operands; None when unbounded
        (then at least ``min_count``)."""
        args = self.inputs if side == "inputs" else self.outputs
        if any(a.repeat for a in args):
            return None
        groups = max((a.group for a in args), default=0)
        return frozenset(sum(1 for a in args if a.group <= g) for g in range(groups + 1))

    def min_count(self, side: str) -> int:
        args = self.inputs if side == "inputs" else self.outputs
        return sum(1 for a in args if a.group == 0 and a.repeat != "*")

    def accepts_count(self, side: str, n: int) -> bool:
        fixed = self.counts(side)
        return n >= self.min_count(side) if fixed is None else n in fixed

    def layout(self, side: str, n: int) -> list[Arg]:
        """The argument for each of ``n`` operands (``accepts_count`` must hold)."""
        args = self.inputs if side == "inputs" else self.outputs
        rep = [k for k, a in enumerate(args) if a.repeat]
        if rep:
            k = rep[0]
            extra = n - (len(args) - 1)
            return [*args[:k], *([args[k]] * extra), *args[k + 1 :]]
        return [a for a in args if a.group == 0 or sum(1 for b in args if b.group <= a.group) <= n][:n]

    def render(self, side: str) -> str:
        """``input, filter, bias[, nchw][, dilation_w, dilation_h]``: the names in order."""
        args = self.inputs if side == "inputs" else self.outputs
        out, group = "", 0
        for a in args:
            name = a.name + {"+": "...", "*": "..."}.get(a.repeat, "")
            if a.group != group:
                out += "]" if group else ""
                out += f"[, {name}" if out else f"[{name}"
                group = a.group
            else:
                out += f", {name}" if out else name
        return out + ("]" if group else "")


@dataclass(frozen=True, slots=True)
class Signature:
    """Everything the reference says about one operation, and what ``add_operation`` checks."""

    op: OperationType
    summary: str
    variants: tuple[Variant, ...]
    notes: str = ""
    docs: dict[str, str] = field(default_factory=dict)

    def count_text(self, side: str) -> str:
        """``7, 8, 10, 11 or 13``: every accepted count of ``side``."""
        exact: set[int] = set()
        at_least: list[int] = []
        for v in self.variants:
            c = v.counts(side)
            if c is None:
                at_least.append(v.min_count(side))
            else:
                exact |= c
        parts = [str(n) for n in sorted(exact)]
        text = ", ".join(parts[:-1]) + f" or {parts[-1]}" if len(parts) > 1 else "".join(parts)
        if at_least:
            low = f"{min(at_least)} or more"
            text = f"{text} or {low}" if text else low
        return text


    def takes(self, side: str) -> str:
        """``7, 8, 10, 11 or 13 inputs``, ``1 output``."""
        text = self.count_text(side)
        return f"{text} {side if text != '1' else side[:-1]}"


def describe_types(types: tuple[OperandType, ...]) -> str:
    if set(types) == set(_LETTERS["*"]):
        return "any tensor type"
    return ", ".join(t.name for t in types)


def _parse_types(code: str, where: str) -> tuple[OperandType, ...]:
    if code in _SCALARS:
        return _SCALARS[code]
    out: list[OperandType] = []
    for letter in code:
        if letter not in _LETTERS:
            raise ValueError(f"{where}: unknown type code {code!r}")  # a table bug, found at import
        out += [t for t in _LETTERS[letter] if t not in out]
    return tuple(out)


def _parse(spec: str, docs: dict[str, str], where: str) -> tuple[Arg, ...]:
    args: list[Arg] = []
    group = 0
    for raw in spec.replace("[", " [ ").replace("]", " ] ").split():
        if raw == "[":
            group += 1
            continue
        if raw == "]":
            continue
        name, _, code = raw.partition(":")
        repeat = name[-1] if name[-1] in "+*" else ""
        name = name.rstrip("+*")
        omittable = name.endswith("?")
        name = name.rstrip("?")
        base = name.removeprefix("fw_").removeprefix("bw_")  # the two cells of a bidirectional operation
        doc = docs.get(name) or docs.get(base) or GLOSSARY.get(name) or GLOSSARY.get(base, "")
        args.append(Arg(name, _parse_types(code, f"{where} {name}"), doc, omittable, repeat, group))
    return tuple(args)


def variant(label: str, inputs: str, outputs: str = "output:*") -> tuple[str, str, str]:
    """One named form of an operation (for operations with several)."""
    return (label, inputs, outputs)


def sig(
    op: OperationType,
    summary: str,
    *forms: tuple[str, str] | tuple[str, str, str],
    notes: str = "",
    **docs: str,
) -> Signature:
    """A signature from one ``(inputs, outputs)`` pair or several ``variant(...)`` forms."""
    variants = []
    for form in forms:
        label, ins, outs = form if len(form) == 3 else ("", *form)
        where = f"{op.name} {label}".strip()
        variants.append(Variant(label, _parse(ins, docs, where), _parse(outs, docs, where)))
    return Signature(op, summary, tuple(variants), notes, dict(docs))


#: What the common argument names mean, unless an operation says otherwise.
GLOSSARY: dict[str, str] = {
    "input": "the input tensor",
    "output": "the result",
    "fuse": "the activation fused to the result, a `FuseCode`: NONE 0, RELU 1, RELU1 2, RELU6 3",
    "padding": "implicit padding, a `PaddingCode`: SAME 1 (output size = ceil(input / stride)) or VALID 2 (no padding)",
    "pad_left": "padding added before the first column, in elements",
    "pad_right": "padding added after the last column, in elements",
    "pad_top": "padding added before the first row, in elements",
    "pad_bottom": "padding added after the last row, in elements",
    "stride_w": "step between two windows along the width",
    "stride_h": "step between two windows along the height",
    "dilation_w": "dilation factor along the width (default 1)",
    "dilation_h": "dilation factor along the height (default 1)",
    "nchw": "true when 4-D data is laid out [batch, channels, height, width] instead of the default NHWC",
    "filter_w": "pooling window width",
    "filter_h": "pooling window height",
    "axis": "the dimension to work along; negative values count from the end",
    "keep_dims": "when true, reduced dimensions are kept with size 1",
    "axes": "1-D tensor of dimensions to reduce; negative values count from the end, duplicates are ignored",
    "activation": "the activation applied inside the cell: 0 NONE, 1 RELU, 3 RELU6, 4 TANH or 6 SIGMOID",
    "time_major": "true when sequences are laid out [time, batch, ...] instead of [batch, time, ...]",
    "batch_split": "1-D int32 tensor: the batch index of each box or region",
    "image_info": "2-D [batches, 2] tensor of each image's height and width",
    "input1": "the first operand",
    "input2": "the second operand, of the same type",
    "inputs": "the operands passed on, in order",
    "outputs": "the results, in order",
    "base": "the bases",
    "exponent": "the exponents, of the same type",
    "input_true": "values taken where the condition holds",
    "input_false": "values taken elsewhere",
    # Recurrent cells: gate weights and biases (LSTM's, repeated per direction in bidirectional forms).
    "input_to_input_weights": "input gate weights [num_units, input_size]",
    "input_to_forget_weights": "forget gate weights [num_units, input_size]",
    "input_to_cell_weights": "cell gate weights [num_units, input_size]",
    "input_to_output_weights": "output gate weights [num_units, input_size]",
    "recurrent_to_input_weights": "recurrent input gate weights [num_units, output_size]",
    "recurrent_to_forget_weights": "recurrent forget gate weights [num_units, output_size]",
    "recurrent_to_cell_weights": "recurrent cell gate weights [num_units, output_size]",
    "recurrent_to_output_weights": "recurrent output gate weights [num_units, output_size]",
    "input_gate_bias": "input gate bias [num_units]",
    "forget_gate_bias": "forget gate bias [num_units]",
    "cell_bias": "cell gate bias [num_units]",
    "output_gate_bias": "output gate bias [num_units]",
    "input_layer_norm_weights": "layer normalisation weights of the input gate [num_units]",
    "forget_layer_norm_weights": "layer normalisation weights of the forget gate [num_units]",
    "cell_layer_norm_weights": "layer normalisation weights of the cell gate [num_units]",
    "output_layer_norm_weights": "layer normalisation weights of the output gate [num_units]",
    "aux_input": "an optional second input sequence fed to both directions",
    "aux_input_to_input_weights": "auxiliary input's input gate weights; omitted without aux_input",
    "aux_input_to_forget_weights": "auxiliary input's forget gate weights; omitted without aux_input",
    "aux_input_to_cell_weights": "auxiliary input's cell gate weights; omitted without aux_input",
    "aux_input_to_output_weights": "auxiliary input's output gate weights; omitted without aux_input",
    "aux_weights": "auxiliary input weights [num_units, aux_input_size]; omitted without aux_input",
    "weights": "input weights [num_units, input_size]",
    "recurrent_weights": "recurrent weights [num_units, num_units]",
    "bias": "bias [num_units]",
    "hidden_state_in": "the previous hidden state [batch, num_units]",
    "hidden_state_out": "the last hidden state [batch, num_units]",
    "state_out": "the updated state, shaped like state_in",
    "output_state_in": "the previous output state [batch, output_size]",
    "cell_state_in": "the previous cell state [batch, num_units]",
    "output_state_out": "the new output state [batch, output_size]",
    "cell_state_out": "the new cell state",
    "input_intermediate_scale": "scale of the input gate's intermediate result",
    "forget_intermediate_scale": "scale of the forget gate's intermediate result",
    "cell_intermediate_scale": "scale of the cell gate's intermediate result",
    "output_intermediate_scale": "scale of the output gate's intermediate result",
    # Detection.
    "scores": "per-box (or per-anchor) class scores",
    "scores_out": "the kept boxes' scores",
    "boxes_out": "the kept boxes",
    "classes_out": "the kept boxes' classes",
    "rois_out": "the proposed regions [num_rois, 4]",
    "batch_split_out": "the batch index of each kept box",
    "num_detections": "[batches]: how many detections are valid",
    "iou_threshold": "boxes overlapping a kept one by more than this (intersection over union) are suppressed",
    "score_threshold": "boxes scoring below this are dropped",
    "use_regular_nms": "true: non-maximum suppression per class; false: the faster class-agnostic variant",
    "max_num_detections": "detections kept per image",
    "max_classes_per_detection": "classes reported per detection (fast variant)",
    "max_num_detections_per_class": "detections kept per class (regular variant)",
    "scale_y": "divisor of the y offset in the box deltas",
    "scale_x": "divisor of the x offset in the box deltas",
    "scale_h": "divisor of the height term in the box deltas",
    "scale_w": "divisor of the width term in the box deltas",
    "height_stride": "image height / feature map height",
    "width_stride": "image width / feature map width",
    "output_height": "height of each output region",
    "output_width": "width of each output region",
    "height_ratio": "image height / feature map height",
    "width_ratio": "image width / feature map width",
    "sampling_points_h": "samples per bin in height (0: adaptive)",
    "sampling_points_w": "samples per bin in width (0: adaptive)",
    "dimensions": "1-D: the size of each stored dimension",
}
