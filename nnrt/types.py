"""Foundation types: NNAPI's enums with NNAPI's numbers, and the small value objects.

Everything here is plain data with no behaviour beyond validation of its own fields. The
numbers follow the AIDL HAL (``android.hardware.neuralnetworks``) so that tools that speak
NNAPI can map values one to one. Types used by several layers (``OutputShape``, ``Timing``,
``Capabilities``) live here so that no layer has to import a higher one to name them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Capabilities",
    "ErrorStatus",
    "ExecutionPreference",
    "FuseCode",
    "OperandLifeTime",
    "OperandType",
    "OperationType",
    "OutputShape",
    "PaddingCode",
    "PerformanceInfo",
    "Priority",
    "Timing",
    "TIMING_UNAVAILABLE",
]


class ErrorStatus(enum.IntEnum):
    """NNAPI ``ErrorStatus`` (identical numbers in HIDL and AIDL; DEAD_OBJECT from the canonical type)."""

    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4
    MISSED_DEADLINE_TRANSIENT = 5
    MISSED_DEADLINE_PERSISTENT = 6
    RESOURCE_EXHAUSTED_TRANSIENT = 7
    RESOURCE_EXHAUSTED_PERSISTENT = 8
    DEAD_OBJECT = 10000


class OperandType(enum.IntEnum):
    """NNAPI operand types. Scalars have rank 0; ``TENSOR_*`` types have a shape."""

    FLOAT32 = 0
    INT32 = 1
    UINT32 = 2
    TENSOR_FLOAT32 = 3
    TENSOR_INT32 = 4
    TENSOR_QUANT8_ASYMM = 5
    BOOL = 6
    TENSOR_QUANT16_SYMM = 7
    TENSOR_FLOAT16 = 8
    TENSOR_BOOL8 = 9
    FLOAT16 = 10
    TENSOR_QUANT8_SYMM_PER_CHANNEL = 11
    TENSOR_QUANT16_ASYMM = 12
    TENSOR_QUANT8_SYMM = 13
    TENSOR_QUANT8_ASYMM_SIGNED = 14
    SUBGRAPH = 15

    @property
    def is_scalar(self) -> bool:
        return self in _SCALAR_TYPES

    @property
    def is_tensor(self) -> bool:
        return not self.is_scalar and self is not OperandType.SUBGRAPH

    @property
    def is_quantized(self) -> bool:
        return self in _QUANT_TYPES

    @property
    def dtype(self) -> np.dtype[np.generic]:
        """The numpy dtype nnrt uses to hold values of this type."""
        return np.dtype(_DTYPES[self])

    @property
    def feature_level(self) -> int:
        if self <= OperandType.TENSOR_QUANT8_ASYMM:
            return 1
        if self <= OperandType.TENSOR_QUANT8_SYMM:
            return 3
        return 4


_SCALAR_TYPES = frozenset(
    {OperandType.FLOAT32, OperandType.INT32, OperandType.UINT32, OperandType.BOOL, OperandType.FLOAT16}
)
_QUANT_TYPES = frozenset(
    {
        OperandType.TENSOR_QUANT8_ASYMM,
        OperandType.TENSOR_QUANT8_ASYMM_SIGNED,
        OperandType.TENSOR_QUANT8_SYMM,
        OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL,
        OperandType.TENSOR_QUANT16_SYMM,
        OperandType.TENSOR_QUANT16_ASYMM,
    }
)
_DTYPES: dict[OperandType, type[np.generic]] = {
    OperandType.FLOAT32: np.float32,
    OperandType.INT32: np.int32,
    OperandType.UINT32: np.uint32,
    OperandType.TENSOR_FLOAT32: np.float32,
    OperandType.TENSOR_INT32: np.int32,
    OperandType.TENSOR_QUANT8_ASYMM: np.uint8,
    OperandType.BOOL: np.bool_,
    OperandType.TENSOR_QUANT16_SYMM: np.int16,
    OperandType.TENSOR_FLOAT16: np.float16,
    OperandType.TENSOR_BOOL8: np.bool_,
    OperandType.FLOAT16: np.float16,
    OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8,
    OperandType.TENSOR_QUANT16_ASYMM: np.uint16,
    OperandType.TENSOR_QUANT8_SYMM: np.int8,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
    OperandType.SUBGRAPH: np.int32,
}

#: First operation value of each feature level (FL1 starts at 0).
_FL_STARTS = ((102, 6), (95, 4), (38, 3), (29, 2), (0, 1))
#: Experimental operations, outside the numbered feature levels.
EXPERIMENTAL_FEATURE_LEVEL = 0


class OperationType(enum.IntEnum):
    """The 106 NNAPI operations (values 0 to 105) plus the experimental DENSIFY.

    Each operation's inputs, outputs, operand types and parameters are in the operation
    reference (``docs/operations.md``), generated from the signature tables that
    ``Model.add_operation`` checks (``nnrt/model/_sig_nn.py``, ``_sig_tensor.py``).
    """

    ADD = 0
    AVERAGE_POOL_2D = 1
    CONCATENATION = 2
    CONV_2D = 3
    DEPTHWISE_CONV_2D = 4
    DEPTH_TO_SPACE = 5
    DEQUANTIZE = 6
    EMBEDDING_LOOKUP = 7
    FLOOR = 8
    FULLY_CONNECTED = 9
    HASHTABLE_LOOKUP = 10
    L2_NORMALIZATION = 11
    L2_POOL_2D = 12
    LOCAL_RESPONSE_NORMALIZATION = 13
    LOGISTIC = 14
    LSH_PROJECTION = 15
    LSTM = 16
    MAX_POOL_2D = 17
    MUL = 18
    RELU = 19
    RELU1 = 20
    RELU6 = 21
    RESHAPE = 22
    RESIZE_BILINEAR = 23
    RNN = 24
    SOFTMAX = 25
    SPACE_TO_DEPTH = 26
    SVDF = 27
    TANH = 28
    BATCH_TO_SPACE_ND = 29
    DIV = 30
    MEAN = 31
    PAD = 32
    SPACE_TO_BATCH_ND = 33
    SQUEEZE = 34
    STRIDED_SLICE = 35
    SUB = 36
    TRANSPOSE = 37
    ABS = 38
    ARGMAX = 39
    ARGMIN = 40
    AXIS_ALIGNED_BBOX_TRANSFORM = 41
    BIDIRECTIONAL_SEQUENCE_LSTM = 42
    BIDIRECTIONAL_SEQUENCE_RNN = 43
    BOX_WITH_NMS_LIMIT = 44
    CAST = 45
    CHANNEL_SHUFFLE = 46
    DETECTION_POSTPROCESSING = 47
    EQUAL = 48
    EXP = 49
    EXPAND_DIMS = 50
    GATHER = 51
    GENERATE_PROPOSALS = 52
    GREATER = 53
    GREATER_EQUAL = 54
    GROUPED_CONV_2D = 55
    HEATMAP_MAX_KEYPOINT = 56
    INSTANCE_NORMALIZATION = 57
    LESS = 58
    LESS_EQUAL = 59
    LOG = 60
    LOGICAL_AND = 61
    LOGICAL_NOT = 62
    LOGICAL_OR = 63
    LOG_SOFTMAX = 64
    MAXIMUM = 65
    MINIMUM = 66
    NEG = 67
    NOT_EQUAL = 68
    PAD_V2 = 69
    POW = 70
    PRELU = 71
    QUANTIZE = 72
    QUANTIZED_16BIT_LSTM = 73
    RANDOM_MULTINOMIAL = 74
    REDUCE_ALL = 75
    REDUCE_ANY = 76
    REDUCE_MAX = 77
    REDUCE_MIN = 78
    REDUCE_PROD = 79
    REDUCE_SUM = 80
    ROI_ALIGN = 81
    ROI_POOLING = 82
    RSQRT = 83
    SELECT = 84
    SIN = 85
    SLICE = 86
    SPLIT = 87
    SQRT = 88
    TILE = 89
    TOPK_V2 = 90
    TRANSPOSE_CONV_2D = 91
    UNIDIRECTIONAL_SEQUENCE_LSTM = 92
    UNIDIRECTIONAL_SEQUENCE_RNN = 93
    RESIZE_NEAREST_NEIGHBOR = 94
    QUANTIZED_LSTM = 95
    IF = 96
    WHILE = 97
    ELU = 98
    HARD_SWISH = 99
    FILL = 100
    RANK = 101
    BATCH_MATMUL = 102
    PACK = 103
    MIRROR_PAD = 104
    REVERSE = 105
    DENSIFY = 20000

    @property
    def feature_level(self) -> int:
        """NNAPI feature level the operation appeared in (FL1..FL7), 0 for experimental ones."""
        if self is OperationType.DENSIFY:
            return EXPERIMENTAL_FEATURE_LEVEL
        if self >= OperationType.MIRROR_PAD:
            return 7
        for start, level in _FL_STARTS:
            if self >= start:
                return level
        raise AssertionError("unreachable")  # pragma: no cover


class FuseCode(enum.IntEnum):
    """NNAPI ``FuseCode``: the activation an operation applies to its result (an INT32 scalar input
    of ADD, MUL, SUB, DIV, CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, the pools, ...)."""

    NONE = 0
    RELU = 1
    #: Clamp to [-1, 1].
    RELU1 = 2
    #: Clamp to [0, 6].
    RELU6 = 3


class PaddingCode(enum.IntEnum):
    """NNAPI ``PaddingCode``: the implicit padding scheme of convolutions and pools (an INT32 input).

    SAME pads so that the output has ceil(input / stride) elements along each spatial axis
    (the extra element, if any, goes at the end); VALID does not pad.
    """

    SAME = 1
    VALID = 2


class OperandLifeTime(enum.IntEnum):
    """AIDL ``OperandLifeTime``. CONSTANT_POOL is HIDL 1.3's CONSTANT_REFERENCE."""

    TEMPORARY_VARIABLE = 0
    SUBGRAPH_INPUT = 1
    SUBGRAPH_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_POOL = 4
    NO_VALUE = 5
    SUBGRAPH = 6


class Priority(enum.IntEnum):
    """Relative priority of a prepared model within its app. Default MEDIUM."""

    LOW = 0
    MEDIUM = 1
    HIGH = 2


class ExecutionPreference(enum.IntEnum):
    """What a preparation should optimise for. Default FAST_SINGLE_ANSWER."""

    LOW_POWER = 0
    FAST_SINGLE_ANSWER = 1
    SUSTAINED_SPEED = 2


@dataclass(frozen=True, slots=True)
class Timing:
    """Durations of one execution in nanoseconds; ``None`` means unavailable.

    ``time_on_device`` (kernels running) never exceeds ``time_in_driver`` (the whole call,
    including time queued or preempted). Timing is unavailable unless it was asked for and
    the execution succeeded.
    """

    time_on_device_ns: int | None = None
    time_in_driver_ns: int | None = None

    def __post_init__(self) -> None:
        on, drv = self.time_on_device_ns, self.time_in_driver_ns
        if on is not None and drv is not None and on > drv:
            raise ValueError(f"time on device ({on} ns) exceeds time in driver ({drv} ns)")

    @property
    def available(self) -> bool:
        return self.time_on_device_ns is not None or self.time_in_driver_ns is not None


#: The explicit "no timing" value.
TIMING_UNAVAILABLE = Timing()


@dataclass(frozen=True, slots=True)
class OutputShape:
    """Actual dimensions of one output and whether the buffer given for it was large enough."""

    dimensions: tuple[int, ...]
    is_sufficient: bool = True


@dataclass(frozen=True, slots=True)
class Partition:
    """One step of a prepared model: the device running it and the indexes of the model's
    operations it runs (in run order). ``fallback_from`` names the device that was chosen for
    the step but failed to prepare it (the step then runs on the CPU)."""

    device: str
    operations: tuple[int, ...]
    fallback_from: str = ""


@dataclass(frozen=True, slots=True)
class PerformanceInfo:
    """NNAPI ``PerformanceInfo``: time and power relative to the CPU reference (lower is better)."""

    exec_time: float = 1.0
    power_usage: float = 1.0


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a device reports about its speed, as NNAPI drivers do.

    The figures are measured on reference workloads, not assumed: ``relaxed_float32``
    applies to float32 computation with relaxed precision, ``operand_performance`` maps an
    operand type to its performance, and ``if_performance``/``while_performance`` cover
    control flow.
    """

    relaxed_float32_scalar: PerformanceInfo = PerformanceInfo()
    relaxed_float32_tensor: PerformanceInfo = PerformanceInfo()
    operand_performance: dict[OperandType, PerformanceInfo] = field(default_factory=dict)
    if_performance: PerformanceInfo = PerformanceInfo()
    while_performance: PerformanceInfo = PerformanceInfo()
    #: Measured reference figures (microseconds), for the curious and for cost models.
    measurements_us: dict[str, float] = field(default_factory=dict)
