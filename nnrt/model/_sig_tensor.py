"""Signatures of the tensor operations: elementwise arithmetic and logic, shape and layout,
reductions, lookups, quantization, detection post-processing and control flow.

Written from NNAPI's operation documentation (``NeuralNetworksTypes.h``), in our own words;
the notation is explained in ``_sigspec.py``. ``_sig_nn.py`` holds the network layers.
"""

# ruff: noqa: E501  (tables of prose: one argument's description per line reads better than wrapped)

from __future__ import annotations

from nnrt.model._sigspec import Signature, sig, variant
from nnrt.types import OperationType as Op

__all__ = ["SIGNATURES"]

_BROADCAST = "Shapes broadcast NumPy-style (from the trailing dimensions)."


def _binary(op: Op, summary: str, types: str) -> Signature:
    return sig(op, summary, (f"input1:{types} input2:{types} fuse:int", f"output:{types}"), notes=_BROADCAST,
               input2="same type as input1, shape broadcastable against it")


def _unary(op: Op, summary: str, types: str) -> Signature:
    return sig(op, summary, (f"input:{types}", f"output:{types}"), output="same shape and type as the input")


def _compare(op: Op, summary: str) -> Signature:
    return sig(op, summary, ("input1:BFIQ input2:BFIQ", "output:B"), notes=_BROADCAST)


def _reduce(op: Op, summary: str, types: str) -> Signature:
    return sig(op, summary, (f"input:{types} axes:I keep_dims:bool", f"output:{types}"))


_NHWC = "4-D [batches, height, width, channels] (NHWC, or NCHW when `nchw` is true)"
_ROI = "[num_rois, 4] boxes as (x1, y1, x2, y2) in the original image's coordinates"
_SIZE = "output width, or (as a float) the scale factor applied to the input width"
_HSIZE = "output height, or (as a float) the scale factor applied to the input height"

SIGNATURES: tuple[Signature, ...] = (
    _binary(Op.ADD, "Elementwise sum, then the fused activation.", "FQI"),
    _binary(Op.SUB, "Elementwise difference input1 - input2, then the fused activation.", "FQI"),
    _binary(Op.MUL, "Elementwise product, then the fused activation.", "FQI"),
    _binary(Op.DIV, "Elementwise quotient input1 / input2 (int32: rounded towards negative infinity), then the fused activation.", "FI"),
    sig(Op.MAXIMUM, "Elementwise maximum.", ("input1:FQI input2:FQI", "output:FQI"), notes=_BROADCAST),
    sig(Op.MINIMUM, "Elementwise minimum.", ("input1:FQI input2:FQI", "output:FQI"), notes=_BROADCAST),
    sig(Op.POW, "Elementwise base ** exponent.", ("base:F exponent:F", "output:F"), notes=_BROADCAST),
    _unary(Op.ABS, "Absolute value elementwise.", "FI"),
    _unary(Op.NEG, "Negation elementwise.", "FI"),
    _unary(Op.EXP, "Natural exponential elementwise.", "F"),
    _unary(Op.LOG, "Natural logarithm elementwise.", "F"),
    _unary(Op.SIN, "Sine elementwise.", "F"),
    _unary(Op.SQRT, "Square root elementwise.", "F"),
    _unary(Op.RSQRT, "1 / sqrt(x) elementwise.", "FQ"),
    _unary(Op.FLOOR, "Largest integer not greater than x, elementwise.", "F"),
    _compare(Op.EQUAL, "input1 == input2 elementwise."),
    _compare(Op.NOT_EQUAL, "input1 != input2 elementwise."),
    _compare(Op.GREATER, "input1 > input2 elementwise."),
    _compare(Op.GREATER_EQUAL, "input1 >= input2 elementwise."),
    _compare(Op.LESS, "input1 < input2 elementwise."),
    _compare(Op.LESS_EQUAL, "input1 <= input2 elementwise."),
    sig(Op.LOGICAL_AND, "Logical and elementwise.", ("input1:B input2:B", "output:B"), notes=_BROADCAST),
    sig(Op.LOGICAL_OR, "Logical or elementwise.", ("input1:B input2:B", "output:B"), notes=_BROADCAST),
    sig(Op.LOGICAL_NOT, "Logical not elementwise.", ("input:B", "output:B")),
    sig(
        Op.SELECT,
        "Picks input_true where the condition holds, input_false elsewhere.",
        ("condition:B input_true:FQI input_false:FQI", "output:FQI"),
        condition="same shape as the other inputs",
    ),
    sig(Op.CAST, "Converts between tensor types (values are rounded and saturated, not requantized).", ("input:FQIBYSA", "output:FQIBYSA")),
    sig(Op.QUANTIZE, "Quantizes float values: round(x / scale) + zero_point, saturated.", ("input:F", "output:Q")),
    sig(Op.DEQUANTIZE, "(q - zero_point) * scale.", ("input:QYP", "output:F"),
        notes="Per-channel inputs use each channel's own scale."),
    sig(
        Op.CONCATENATION,
        "Joins tensors along an axis.",
        ("inputs+:FQI axis:int", "output:FQI"),
        inputs="tensors of equal rank and type whose dimensions match except along the axis",
        notes="Quantized inputs may have different scales and zero points; they are requantized to the output's.",
    ),
    sig(Op.SPLIT, "Splits a tensor into equal parts along an axis.", ("input:FQI axis:int num_splits:int", "outputs+:FQI"),
        num_splits="number of outputs; must divide the axis' size"),
    sig(Op.PACK, "Stacks tensors of the same shape along a new axis.", ("axis:int inputs+:FQI", "output:FQI"),
        axis="position of the new dimension in the output", inputs="tensors of the same shape and type"),
    sig(Op.RESHAPE, "Gives the data a new shape.", ("input:FQI shape:I", "output:FQI"),
        shape="1-D: the new dimensions; one may be -1 (worked out from the others)"),
    sig(Op.SQUEEZE, "Removes dimensions of size 1.", ("input:FQI [axes?:I]", "output:FQI"),
        axes="1-D: the dimensions to remove; every size-1 dimension when omitted"),
    sig(Op.EXPAND_DIMS, "Inserts a dimension of size 1.", ("input:FQI axis:int", "output:FQI"),
        axis="position of the new dimension, in [-rank - 1, rank]"),
    sig(Op.TRANSPOSE, "Permutes the dimensions.", ("input:FQI [perm?:I]", "output:FQI"),
        perm="1-D permutation of [0, rank); reverses the dimensions when omitted"),
    sig(Op.SLICE, "Extracts a block.", ("input:FQI begin:I size:I", "output:FQI"),
        begin="1-D [rank]: the first index in each dimension", size="1-D [rank]: the block's size (-1: up to the end)"),
    sig(
        Op.STRIDED_SLICE,
        "Extracts a strided block, like Python's input[begin:end:stride] per dimension.",
        ("input:FQI begin:I end:I strides:I begin_mask:int end_mask:int shrink_axis_mask:int", "output:FQI"),
        begin="1-D [rank] starts", end="1-D [rank] stops (exclusive)", strides="1-D [rank] steps (non-zero)",
        begin_mask="bit i set: ignore begin[i] and start at the extreme", end_mask="bit i set: ignore end[i]",
        shrink_axis_mask="bit i set: drop dimension i (it must have size 1 after slicing)",
    ),
    sig(Op.TILE, "Repeats the tensor along each dimension.", ("input:FQI multiples:I", "output:FQI"), multiples="1-D [rank] repeat counts"),
    sig(Op.REVERSE, "Reverses the order of elements along an axis.", ("input:FQI axis:I", "output:FQI"), axis="1-D [1]: the dimension"),
    sig(Op.GATHER, "Picks slices along an axis by index.", ("input:FQI axis:int indices:I", "output:FQI"),
        indices="int32 indices into the axis", output="input's shape with the axis replaced by the indices' shape"),
    sig(Op.FILL, "A tensor of the given shape filled with one value.", ("dims:I value:num", "output:FI"),
        dims="1-D: the output's shape", value="scalar of the output's element type"),
    sig(Op.RANK, "The number of dimensions of the input.", ("input:*", "output:int"), output="INT32 scalar"),
    sig(Op.PAD, "Pads with zeros (the zero point for quantized tensors).", ("input:FQI paddings:I", "output:FQI"),
        paddings="2-D [rank, 2]: elements added before and after each dimension"),
    sig(Op.PAD_V2, "Pads with a given value.", ("input:FQ paddings:I pad_value:num", "output:FQ"),
        paddings="2-D [rank, 2]: elements added before and after each dimension",
        pad_value="FLOAT32/FLOAT16 for float inputs, INT32 (a quantized value) for quantized ones"),
    sig(Op.MIRROR_PAD, "Pads by mirroring the input at its edges.", ("input:FQI paddings:I mode:int", "output:FQI"),
        paddings="2-D [rank, 2]", mode="0 REFLECT (edge not repeated) or 1 SYMMETRIC (edge repeated)"),
    sig(Op.DEPTH_TO_SPACE, "Moves depth blocks into spatial blocks.", ("input:FQ block_size:int [nchw:bool]", "output:FQ"),
        input=_NHWC, block_size="spatial block edge (>= 1); depth must divide by block_size^2"),
    sig(Op.SPACE_TO_DEPTH, "Moves spatial blocks into depth.", ("input:FQ block_size:int [nchw:bool]", "output:FQ"),
        input=_NHWC, block_size="spatial block edge (>= 1); height and width must divide by it"),
    sig(Op.BATCH_TO_SPACE_ND, "Moves batch entries into spatial blocks.", ("input:FQ block_shape:I [nchw:bool]", "output:FQ"),
        input=_NHWC, block_shape="1-D [2]: block height and width"),
    sig(Op.SPACE_TO_BATCH_ND, "Moves spatial blocks into the batch, after padding.", ("input:FQ block_shape:I paddings:I [nchw:bool]", "output:FQ"),
        input=_NHWC, block_shape="1-D [2]: block height and width", paddings="2-D [2, 2]: padding of height and width"),
    sig(Op.CHANNEL_SHUFFLE, "Shuffles channels across groups (reshape to [groups, n], transpose, flatten).",
        ("input:FQ num_groups:int axis:int", "output:FQ"), num_groups="number of groups; must divide the axis' size"),
    sig(
        Op.RESIZE_BILINEAR,
        "Resizes images with bilinear interpolation.",
        ("input:FQ width:num height:num [nchw:bool] [align_corners:bool] [half_pixel_centers:bool]", "output:FQ"),
        input=_NHWC, width=_SIZE, height=_HSIZE,
        align_corners="align the corner pixels of input and output", half_pixel_centers="sample at pixel centres",
    ),
    sig(
        Op.RESIZE_NEAREST_NEIGHBOR,
        "Resizes images by picking the nearest input pixel.",
        ("input:FQ width:num height:num nchw:bool [align_corners:bool] [half_pixel_centers:bool]", "output:FQ"),
        input=_NHWC, width=_SIZE, height=_HSIZE,
        align_corners="align the corner pixels of input and output", half_pixel_centers="sample at pixel centres",
    ),
    sig(Op.MEAN, "Mean over the given axes.", ("input:FQ axes:I keep_dims:int", "output:FQ"),
        keep_dims="INT32: positive to keep reduced dimensions with size 1"),
    _reduce(Op.REDUCE_SUM, "Sum over the given axes.", "F"),
    _reduce(Op.REDUCE_PROD, "Product over the given axes.", "F"),
    _reduce(Op.REDUCE_MAX, "Maximum over the given axes.", "FQ"),
    _reduce(Op.REDUCE_MIN, "Minimum over the given axes.", "FQ"),
    _reduce(Op.REDUCE_ALL, "Logical and over the given axes.", "B"),
    _reduce(Op.REDUCE_ANY, "Logical or over the given axes.", "B"),
    sig(Op.ARGMAX, "Index of the largest value along an axis.", ("input:FQI axis:int", "output:I"), output="the input's shape without the axis"),
    sig(Op.ARGMIN, "Index of the smallest value along an axis.", ("input:FQI axis:int", "output:I"), output="the input's shape without the axis"),
    sig(Op.TOPK_V2, "The k largest values of the last dimension and their indices.", ("input:FQI k:int", "values:FQI indices:I"),
        k="how many values to keep", values="[..., k], largest first", indices="[..., k] positions in the last dimension"),
    sig(Op.EMBEDDING_LOOKUP, "Picks rows of a table by index.", ("lookups:I values:FQI", "output:FQI"),
        lookups="1-D row indices", values="rank >= 2 table; rows along dimension 0"),
    sig(Op.HASHTABLE_LOOKUP, "Picks rows of a table by key.", ("lookups:I keys:I values:FQI", "output:FQI hits:U"),
        lookups="1-D keys to find", keys="1-D sorted keys of the table's rows", values="the table; rows along dimension 0",
        hits="1-D: 1 where the key was found, 0 where its row is zeros"),
    sig(Op.LSH_PROJECTION, "Projects input through locality-sensitive hashing into bits.", ("hash:F input:FQI weight?:F type:int", "output:I"),
        hash="[num_hash, num_bits] seeds", input="the data to hash, rank >= 1", weight="1-D [input.shape[0]] weights; omitted for all 1",
        type="1 SPARSE (one index per hash function) or 2 DENSE (every bit)"),
    sig(Op.RANDOM_MULTINOMIAL, "Draws samples from categorical distributions given as logits.", ("input:F sample_count:int seeds:I", "output:I"),
        input="[batches, categories] logits", sample_count="samples per batch", seeds="1-D [2] random seeds", output="[batches, sample_count] class indices"),
    sig(
        Op.AXIS_ALIGNED_BBOX_TRANSFORM,
        "Applies box deltas (dx, dy, dw, dh) to regions of interest, clipped to the image.",
        ("roi:FA bbox_deltas:FQ batch_split:I image_info:FA", "output:FA"),
        roi=_ROI, bbox_deltas="[num_rois, num_classes * 4]", output="[num_rois, num_classes * 4] boxes",
    ),
    sig(
        Op.BOX_WITH_NMS_LIMIT,
        "Greedy non-maximum suppression per class, keeping at most a given number of detections per image.",
        ("scores:FQ roi:FA batch_split:I score_threshold:float max_detections:int nms_kernel:int iou_threshold:float "
         "sigma:float nms_score_threshold:float", "scores_out:FQ boxes_out:FA classes_out:I batch_split_out:I"),
        scores="[num_rois, num_classes]", roi="[num_rois, num_classes * 4]", score_threshold="boxes below are dropped first",
        max_detections="detections kept per image (negative: all)", nms_kernel="0 hard, 1 linear, 2 gaussian",
        sigma="gaussian kernel's sigma", nms_score_threshold="boxes whose score falls below after suppression are dropped",
    ),
    sig(
        Op.GENERATE_PROPOSALS,
        "Region proposals from anchors and box deltas (as in Faster R-CNN), with non-maximum suppression.",
        ("scores:FQ bbox_deltas:FQ anchors:FS image_info:FA height_stride:float width_stride:float pre_nms_max:int "
         "post_nms_max:int iou_threshold:float min_size:float nchw:bool", "scores_out:FQ rois_out:FA batch_split_out:I"),
        scores="4-D [batches, height, width, num_anchors]", bbox_deltas="4-D [batches, height, width, num_anchors * 4]",
        anchors="[num_anchors, 4]", pre_nms_max="boxes kept before suppression (<= 0: all)", post_nms_max="boxes kept after",
        min_size="smallest box side kept",
    ),
    sig(
        Op.DETECTION_POSTPROCESSING,
        "SSD-style detection output: decode boxes from anchors, then non-maximum suppression.",
        ("scores:F box_deltas:F anchors:F scale_y:float scale_x:float scale_h:float scale_w:float use_regular_nms:bool "
         "max_num_detections:int max_classes_per_detection:int max_num_detections_per_class:int iou_threshold:float "
         "score_threshold:float include_background:bool", "scores_out:F boxes_out:F classes_out:I num_detections:I"),
        scores="[batches, num_anchors, num_classes]", box_deltas="[batches, num_anchors, 4 or more]", anchors="[num_anchors, 4]",
        include_background="class 0 is background and is skipped",
    ),
    sig(
        Op.HEATMAP_MAX_KEYPOINT,
        "Locates the maximum of each keypoint heatmap, refined to sub-pixel precision, in image coordinates.",
        ("heatmaps:FQ boxes:FA nchw:bool", "scores:FQ keypoints:FA"),
        heatmaps="4-D [num_boxes, height, width, num_keypoints]", boxes="[num_boxes, 4]",
        keypoints="[num_boxes, num_keypoints, 2]: each keypoint's (x, y) in the image",
        scores="[num_boxes, num_keypoints]: each keypoint's heatmap maximum",
    ),
    sig(
        Op.ROI_ALIGN,
        "Crops each region of interest and resamples it to a fixed size by bilinear averaging.",
        ("input:FQ rois:FA batch_split:I output_height:int output_width:int height_ratio:float width_ratio:float "
         "sampling_points_h:int sampling_points_w:int nchw:bool", "output:FQ"),
        input=_NHWC, rois=_ROI, height_ratio="image height / feature map height", width_ratio="image width / feature map width",
        sampling_points_h="samples per bin in height (0: adaptive)",
    ),
    sig(
        Op.ROI_POOLING,
        "Crops each region of interest and max-pools it to a fixed size.",
        ("input:FQ rois:FA batch_split:I output_height:int output_width:int height_ratio:float width_ratio:float nchw:bool", "output:FQ"),
        input=_NHWC, rois=_ROI,
    ),
    sig(
        Op.IF,
        "Runs one of two referenced models depending on a boolean.",
        ("condition:B then_model:graph else_model:graph inputs*:*", "outputs*:*"),
        condition="TENSOR_BOOL8 of one element", then_model="model run when the condition is true",
        else_model="model run otherwise; both take the operation's inputs and produce its outputs",
    ),
    sig(
        Op.WHILE,
        "Runs a body model while a condition model returns true, carrying values between iterations.",
        ("condition_model:graph body_model:graph inputs+:*", "outputs+:*"),
        condition_model="takes the loop values and returns a one-element TENSOR_BOOL8",
        body_model="takes the loop values and returns the next loop-carried values",
        notes="A loop running longer than the execution's loop timeout (default 2 s) fails with MISSED_DEADLINE_TRANSIENT.",
    ),
    sig(
        Op.DENSIFY,
        "Expands a sparse tensor (TensorFlow Lite's sparsity format) to a dense one. Experimental.",
        variant("", "input:* traversal_order:I block_map:I dim_format:I dimensions:I metadata*:I", "output:*"),
        input="1-D: the stored non-zero values", traversal_order="1-D order in which the stored dimensions are visited",
        block_map="1-D: the dimension each block dimension subdivides", dim_format="1-D: 0 DENSE or 1 SPARSE_CSR per dimension",
        metadata="pairs of segment and index arrays, one pair per stored dimension",
    ),
)
