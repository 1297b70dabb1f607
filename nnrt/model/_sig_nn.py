"""Signatures of the neural-network operations: convolutions, pooling, dense layers,
activations, normalizations and the recurrent cells.

Written from NNAPI's operation documentation (``NeuralNetworksTypes.h``), in our own words;
the notation is explained in ``_sigspec.py``. ``_sig_tensor.py`` holds the rest.
"""

# ruff: noqa: E501  (tables of prose: one argument's description per line reads better than wrapped)

from __future__ import annotations

from nnrt.model._sigspec import Signature, sig, variant
from nnrt.types import OperationType as Op

__all__ = ["SIGNATURES"]

_ACT = "input:FQ"
_NHWC = "4-D [batches, height, width, channels] (NHWC, or NCHW when `nchw` is true)"
_CONV_DOCS = {
    "input": f"{_NHWC}",
    "output": "4-D [batches, out_height, out_width, out_channels], same type as the input",
    "bias": "1-D [out_channels]; float for float inputs, TENSOR_INT32 with scale input_scale * filter_scale (zero point 0) for quantized ones",
}
_IMPLICIT = "padding:int stride_w:int stride_h:int"
_EXPLICIT = "pad_left:int pad_right:int pad_top:int pad_bottom:int stride_w:int stride_h:int"
_DILATION = "[dilation_w:int dilation_h:int]"
_POOL_DOCS = {"input": _NHWC, "output": "4-D, the pooled input, same type"}


def _pool(op: Op, summary: str, types: str) -> Signature:
    return sig(
        op,
        summary,
        variant("implicit padding", f"input:{types} {_IMPLICIT} filter_w:int filter_h:int fuse:int [nchw:bool]", f"output:{types}"),
        variant("explicit padding", f"input:{types} {_EXPLICIT} filter_w:int filter_h:int fuse:int [nchw:bool]", f"output:{types}"),
        **_POOL_DOCS,
    )


def _activation(op: Op, summary: str) -> Signature:
    return sig(op, summary, (_ACT, "output:FQ"), output="same shape and type as the input (fixed scale and zero point for quantized LOGISTIC and TANH)")


_LSTM_WEIGHTS = (
    "input_to_input_weights?:F input_to_forget_weights:F input_to_cell_weights:F input_to_output_weights:F "
    "recurrent_to_input_weights?:F recurrent_to_forget_weights:F recurrent_to_cell_weights:F recurrent_to_output_weights:F "
    "cell_to_input_weights?:F cell_to_forget_weights?:F cell_to_output_weights?:F "
    "input_gate_bias?:F forget_gate_bias:F cell_bias:F output_gate_bias:F projection_weights?:F projection_bias?:F"
)
_LAYER_NORM = "input_layer_norm_weights?:F forget_layer_norm_weights?:F cell_layer_norm_weights?:F output_layer_norm_weights?:F"
_LSTM_DOCS = {
    "input": "[batch, input_size] (LSTM) or [max_time, batch, input_size] / [batch, max_time, input_size] (sequence forms)",
    "input_to_input_weights": "[num_units, input_size]; omitted for a cell with coupled input and forget gates (CIFG)",
    "recurrent_to_input_weights": "[num_units, output_size]; omitted with CIFG",
    "cell_to_input_weights": "peephole weights [num_units]; omitted without peepholes or with CIFG",
    "cell_to_forget_weights": "peephole weights [num_units]; omitted without peepholes",
    "cell_to_output_weights": "peephole weights [num_units]; omitted without peepholes",
    "input_gate_bias": "[num_units]; omitted with CIFG",
    "projection_weights": "[output_size, num_units]; omitted without a projection layer",
    "projection_bias": "[output_size]; optional",
    "output_state_in": "[batch, output_size]: the previous output state",
    "cell_state_in": "[batch, num_units]: the previous cell state",
    "cell_clip": "clip the cell state to [-cell_clip, cell_clip]; 0 disables",
    "proj_clip": "clip the projection output to [-proj_clip, proj_clip]; 0 disables",
    "scratch_buffer": "[batch, num_units * 3 or 4]: intermediate gate values",
    "output_state_out": "[batch, output_size]",
    "cell_state_out": "[batch, num_units]",
}


def _bidi_lstm_inputs() -> str:
    fw = " ".join(f"fw_{w}" for w in _LSTM_WEIGHTS.split())
    bw = " ".join(f"bw_{w}" for w in _LSTM_WEIGHTS.split())
    aux = " ".join(f"{d}_aux_input_to_{g}_weights?:F" for d in ("fw", "bw") for g in ("input", "forget", "cell", "output"))
    norms = " ".join(f"{d}_{w}" for d in ("fw", "bw") for w in _LAYER_NORM.split())
    states = "fw_output_state_in:F fw_cell_state_in:F bw_output_state_in:F bw_cell_state_in:F"
    return f"input:F {fw} {bw} {states} aux_input?:F {aux} activation:int cell_clip:float proj_clip:float " \
           f"merge_outputs:bool time_major:bool {norms}"


_STATES_OUT = "fw_output_state_out:F fw_cell_state_out:F bw_output_state_out:F bw_cell_state_out:F"
_RNN_DOCS = {
    "weights": "[num_units, input_size]",
    "recurrent_weights": "[num_units, num_units]",
    "bias": "[num_units]",
    "hidden_state_in": "[batch, num_units]: the previous hidden state",
    "hidden_state_out": "[batch, num_units]",
}

SIGNATURES: tuple[Signature, ...] = (
    sig(
        Op.CONV_2D,
        "2-D convolution of an image batch with a filter bank, plus bias, then the fused activation.",
        variant("implicit padding", f"input:FQ filter:FQP bias:FI {_IMPLICIT} fuse:int [nchw:bool] {_DILATION}", "output:FQ"),
        variant("explicit padding", f"input:FQ filter:FQP bias:FI {_EXPLICIT} fuse:int [nchw:bool] {_DILATION}", "output:FQ"),
        notes="Per-channel quantized filters (TENSOR_QUANT8_SYMM_PER_CHANNEL, channel dimension 0) need an int32 bias "
        "whose per-channel scale is input_scale * filter_scale[c]. `nchw` arrived in feature level 3, dilation too.",
        filter="4-D [out_channels, filter_height, filter_width, in_channels]",
        **_CONV_DOCS,
    ),
    sig(
        Op.DEPTHWISE_CONV_2D,
        "Depthwise 2-D convolution: each input channel is convolved with its own `depth_multiplier` filters.",
        variant("implicit padding", f"input:FQ filter:FQP bias:FI {_IMPLICIT} depth_multiplier:int fuse:int [nchw:bool] {_DILATION}", "output:FQ"),
        variant("explicit padding", f"input:FQ filter:FQP bias:FI {_EXPLICIT} depth_multiplier:int fuse:int [nchw:bool] {_DILATION}", "output:FQ"),
        notes="out_channels = in_channels * depth_multiplier. Per-channel quantized filters use channel dimension 3.",
        filter="4-D [1, filter_height, filter_width, out_channels]",
        depth_multiplier="output channels per input channel",
        **_CONV_DOCS,
    ),
    sig(
        Op.GROUPED_CONV_2D,
        "Grouped 2-D convolution: the channels are split into `groups` independent convolutions.",
        variant("implicit padding", f"input:FQ filter:FQP bias:FI {_IMPLICIT} groups:int fuse:int nchw:bool", "output:FQ"),
        variant("explicit padding", f"input:FQ filter:FQP bias:FI {_EXPLICIT} groups:int fuse:int nchw:bool", "output:FQ"),
        notes="in_channels and out_channels must both be divisible by `groups`.",
        filter="4-D [out_channels, filter_height, filter_width, in_channels / groups]",
        groups="number of groups",
        **_CONV_DOCS,
    ),
    sig(
        Op.TRANSPOSE_CONV_2D,
        "Transposed 2-D convolution (the gradient of CONV_2D with respect to its input), plus bias and activation.",
        variant("implicit padding", "input:FQ filter:FQP bias:FI output_shape:I padding:int stride_w:int stride_h:int fuse:int nchw:bool", "output:FQ"),
        variant("explicit padding", f"input:FQ filter:FQP bias:FI {_EXPLICIT} fuse:int nchw:bool", "output:FQ"),
        filter="4-D [out_channels, filter_height, filter_width, in_channels]",
        output_shape="1-D [4]: the output's shape (implicit padding works it out from this)",
        **_CONV_DOCS,
    ),
    _pool(Op.AVERAGE_POOL_2D, "Average over each window of the input (padding excluded from the count).", "FQ"),
    _pool(Op.MAX_POOL_2D, "Maximum over each window of the input.", "FQ"),
    _pool(Op.L2_POOL_2D, "Square root of the mean of squares over each window of the input.", "F"),
    sig(
        Op.FULLY_CONNECTED,
        "Fully connected layer: output = activation(input x weights^T + bias).",
        ("input:FQ weights:FQ bias:FI fuse:int", "output:FQ"),
        input="rank 2 or more; flattened to [batch, input_size] where input_size is the weights' second dimension",
        weights="2-D [num_units, input_size]",
        bias="1-D [num_units]; TENSOR_INT32 with scale input_scale * weights_scale for quantized inputs",
        output="2-D [batch, num_units]",
    ),
    sig(
        Op.BATCH_MATMUL,
        "Batched matrix product of the last two dimensions, broadcasting the leading ones.",
        ("lhs:FIQ rhs:FIQ adj_x:bool adj_y:bool", "output:FIQ"),
        lhs="rank 2 to 4: [..., M, K]",
        rhs="same rank: [..., K, N]",
        adj_x="transpose lhs's last two dimensions first",
        adj_y="transpose rhs's last two dimensions first",
        output="[..., M, N]",
    ),
    _activation(Op.RELU, "max(0, x) elementwise."),
    _activation(Op.RELU1, "x clamped to [-1, 1] elementwise."),
    _activation(Op.RELU6, "x clamped to [0, 6] elementwise."),
    _activation(Op.LOGISTIC, "The sigmoid 1 / (1 + exp(-x)) elementwise; quantized outputs use scale 1/256."),
    _activation(Op.TANH, "Hyperbolic tangent elementwise; quantized outputs use scale 1/128."),
    _activation(Op.HARD_SWISH, "x * relu6(x + 3) / 6 elementwise."),
    sig(Op.ELU, "Exponential linear unit: x if x > 0, else alpha * (exp(x) - 1).", ("input:F alpha:float", "output:F"), alpha="scale of the negative part"),
    sig(Op.PRELU, "Parametric ReLU: x if x >= 0, else alpha * x, with alpha broadcast against x.", ("input:FQ alpha:FQ", "output:FQ"), alpha="slopes, broadcastable to the input's shape"),
    sig(
        Op.SOFTMAX,
        "exp(beta * x) normalised to sum 1 along an axis.",
        ("input:FQ beta:float [axis:int]", "output:FQ"),
        beta="scaling of the logits (> 0)",
        axis="default -1 (the last dimension)",
        output="same shape; quantized outputs use scale 1/256 (zero point 0, or -128 when signed)",
    ),
    sig(Op.LOG_SOFTMAX, "log(softmax(beta * x)) along an axis.", ("input:F beta:float axis:int", "output:F"), beta="scaling of the logits"),
    sig(
        Op.L2_NORMALIZATION,
        "Divides by the L2 norm along an axis.",
        ("input:FQ [axis:int]", "output:FQ"),
        axis="default -1",
        output="same shape; quantized outputs use scale 1/128",
    ),
    sig(
        Op.LOCAL_RESPONSE_NORMALIZATION,
        "Divides each element by a power of the sum of squares of its neighbours along an axis.",
        ("input:F radius:int bias:float alpha:float beta:float [axis:int]", "output:F"),
        radius="half-width of the window",
        bias="added to the scaled sum",
        alpha="scale of the sum",
        beta="exponent",
        axis="default -1",
    ),
    sig(
        Op.INSTANCE_NORMALIZATION,
        "Normalises each channel of each image to zero mean and unit variance, then scales and shifts.",
        ("input:F gamma:float beta:float epsilon:float nchw:bool", "output:F"),
        input=_NHWC,
        gamma="scale applied after normalisation",
        beta="offset applied after normalisation",
        epsilon="added to the variance",
    ),
    sig(
        Op.LSTM,
        "One step of a long short-term memory cell (optional peepholes, projection, CIFG, layer normalisation).",
        variant("", f"input:F {_LSTM_WEIGHTS} output_state_in:F cell_state_in:F activation:int cell_clip:float proj_clip:float [{_LAYER_NORM}]",
                "scratch_buffer:F output_state_out:F cell_state_out:F output:F"),
        notes="The 27-input form adds layer-normalisation weights (feature level 3).",
        **_LSTM_DOCS,
    ),
    sig(
        Op.UNIDIRECTIONAL_SEQUENCE_LSTM,
        "An LSTM cell run over every time step of a sequence.",
        variant("", f"input:F {_LSTM_WEIGHTS} output_state_in:F cell_state_in:F activation:int cell_clip:float proj_clip:float "
                f"time_major:bool [{_LAYER_NORM}]", "output:F [output_state_out:F cell_state_out:F]"),
        **_LSTM_DOCS,
    ),
    sig(
        Op.BIDIRECTIONAL_SEQUENCE_LSTM,
        "Two LSTM cells over a sequence, one forwards and one backwards, with an optional auxiliary input.",
        variant("separate outputs", _bidi_lstm_inputs(), f"fw_output:F bw_output:F [{_STATES_OUT}]"),
        variant("merged outputs", _bidi_lstm_inputs(), f"output:F [{_STATES_OUT}]"),
        notes="Inputs 1-17 are the forward cell's weights and biases in LSTM's order, 18-34 the backward cell's. With "
        "`merge_outputs` the two directions are concatenated into one output.",
        merge_outputs="concatenate both directions' outputs into one tensor",
        **_LSTM_DOCS,
    ),
    sig(
        Op.QUANTIZED_LSTM,
        "A quantized LSTM step (signed 8-bit activations, 16-bit cell state), with optional peepholes, projection and layer norm.",
        ("input:Q input_to_input_weights?:Y input_to_forget_weights:Y input_to_cell_weights:Y input_to_output_weights:Y "
         "recurrent_to_input_weights?:Y recurrent_to_forget_weights:Y recurrent_to_cell_weights:Y recurrent_to_output_weights:Y "
         "cell_to_input_weights?:S cell_to_forget_weights?:S cell_to_output_weights?:S "
         "input_gate_bias?:I forget_gate_bias:I cell_bias:I output_gate_bias:I projection_weights?:Y projection_bias?:I "
         "output_state_in:Q cell_state_in:S input_layer_norm_weights?:S forget_layer_norm_weights?:S "
         "cell_layer_norm_weights?:S output_layer_norm_weights?:S cell_clip:float proj_clip:float "
         "input_intermediate_scale:float forget_intermediate_scale:float cell_intermediate_scale:float "
         "output_intermediate_scale:float hidden_state_zero_point:int hidden_state_scale:float",
         "output_state_out:Q cell_state_out:S output:Q"),
        input_intermediate_scale="scale of the input gate's intermediate result",
        hidden_state_zero_point="zero point of the hidden state before projection",
        hidden_state_scale="scale of the hidden state before projection",
        **_LSTM_DOCS,
    ),
    sig(
        Op.QUANTIZED_16BIT_LSTM,
        "A quantized LSTM step with 8-bit unsigned activations and weights and a 16-bit cell state.",
        ("input:U input_to_input_weights:U input_to_forget_weights:U input_to_cell_weights:U input_to_output_weights:U "
         "recurrent_to_input_weights:U recurrent_to_forget_weights:U recurrent_to_cell_weights:U recurrent_to_output_weights:U "
         "input_gate_bias:I forget_gate_bias:I cell_bias:I output_gate_bias:I prev_cell_state:S prev_output:U",
         "cell_state_out:S output:U"),
        input="[num_batches, input_size], scale 1/128 and zero point 128",
        prev_cell_state="[num_batches, output_size], scale 2^-11",
        prev_output="[num_batches, output_size], scale 1/128 and zero point 128",
    ),
    sig(
        Op.RNN,
        "One step of a basic recurrent cell: h = activation(input x weights^T + h_prev x recurrent^T + bias).",
        ("input:F weights:F recurrent_weights:F bias:F hidden_state_in:F activation:int", "hidden_state_out:F output:F"),
        input="[batch, input_size]",
        **_RNN_DOCS,
    ),
    sig(
        Op.UNIDIRECTIONAL_SEQUENCE_RNN,
        "A basic recurrent cell run over every time step of a sequence.",
        ("input:F weights:F recurrent_weights:F bias:F hidden_state_in:F activation:int time_major:int", "output:F [hidden_state_out:F]"),
        input="[max_time, batch, input_size] or [batch, max_time, input_size]",
        time_major="INT32 here (not BOOL): non-zero when sequences are laid out [time, batch, ...]",
        **_RNN_DOCS,
    ),
    sig(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        "Two basic recurrent cells over a sequence, forwards and backwards, with an optional auxiliary input.",
        variant("separate outputs", "input:F fw_weights:F fw_recurrent_weights:F fw_bias:F fw_hidden_state_in:F bw_weights:F "
                "bw_recurrent_weights:F bw_bias:F bw_hidden_state_in:F aux_input?:F fw_aux_weights?:F bw_aux_weights?:F "
                "activation:int time_major:bool merge_outputs:bool", "fw_output:F bw_output:F [fw_hidden_state_out:F bw_hidden_state_out:F]"),
        variant("merged outputs", "input:F fw_weights:F fw_recurrent_weights:F fw_bias:F fw_hidden_state_in:F bw_weights:F "
                "bw_recurrent_weights:F bw_bias:F bw_hidden_state_in:F aux_input?:F fw_aux_weights?:F bw_aux_weights?:F "
                "activation:int time_major:bool merge_outputs:bool", "output:F [fw_hidden_state_out:F bw_hidden_state_out:F]"),
        merge_outputs="concatenate both directions' outputs into one tensor",
    ),
    sig(
        Op.SVDF,
        "Singular value decomposition filter: a low-rank, memory-bounded filter over time.",
        ("input:F weights_feature:F weights_time:F bias?:F state_in:F rank:int activation:int", "state_out:F output:F"),
        input="[batch, input_size]",
        weights_feature="[num_units, input_size]",
        weights_time="[num_units, memory_size]",
        bias="[num_units]; optional",
        state_in="[batch, (memory_size - 1) * num_units * rank]",
        rank="rank of the decomposition",
    ),
)
