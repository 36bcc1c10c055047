"""The config's choices, each written once as an enum: the schema (pipeline/core/config.py)
types its fields with them, so OmegaConf refuses any other value when the config is merged
("Invalid value 'fp17', expected one of [...]"), and the code compares against members.
StrEnums: a member is its own value, in f-strings, JSON, cache keys and comparisons with
plain strings alike. No OmegaConf here: the always-run fingerprint stage reads BACKENDS."""

from __future__ import annotations

from enum import StrEnum


class Task(StrEnum):
    """What an output is, and so what the accuracy gate judges (pipeline/precision/gate/tasks.py)."""

    auto = "auto"
    classification = "classification"
    regression = "regression"
    embedding = "embedding"
    detection = "detection"
    dense = "dense"
    sequence = "sequence"
    next_token = "next_token"  # a decoder's logits [batch, seq, vocab]: top-1 per position
    state = "state"  # a KV cache or recurrent state: the cosine of each row


class Precision(StrEnum):
    """The conf/precision options."""

    fp32 = "fp32"
    tf32 = "tf32"
    fp16 = "fp16"
    bf16 = "bf16"
    int8 = "int8"
    fp8 = "fp8"
    int4_awq = "int4_awq"
    int4_rtn = "int4_rtn"
    auto = "auto"  # a type per GEMM, searched under the gate (pipeline/precision/mixed/make.py)


class Transform(StrEnum):
    """The graph transform before the build."""

    none = "none"
    autocast = "autocast"
    qdq = "qdq"
    int4 = "int4"
    auto = "auto"


class SearchType(StrEnum):
    """The types precision=auto may give a GEMM (fp32 is always one)."""

    int4 = "int4"
    int8 = "int8"
    fp8 = "fp8"
    fp16 = "fp16"


class Typing(StrEnum):
    strong = "strong"  # TensorRT 11, TensorRT-RTX: the graph's types decide
    weak = "weak"  # TensorRT 10: builder flags decide


class LowPrecision(StrEnum):
    fp16 = "fp16"
    bf16 = "bf16"


class QuantizeMode(StrEnum):
    int8 = "int8"
    fp8 = "fp8"
    int4 = "int4"


class Int4Method(StrEnum):
    awq_clip = "awq_clip"  # ModelOpt's AWQ with clip search
    rtn_dq = "rtn_dq"  # ModelOpt's round to nearest, DequantizeLinear only


class Activations(StrEnum):
    fp32 = "fp32"
    fp16 = "fp16"


class Fallback(StrEnum):
    none = "none"
    auto = "auto"  # the nodes the search keeps go to fp16 where the gate holds, else fp32
    fp32 = "fp32"  # the nodes the search keeps stay in fp32


class Objective(StrEnum):
    """What precision=auto makes smallest, and what a quantized engine is held against."""

    engine_bytes = "engine_bytes"  # the plan TensorRT writes, measured by builds on this machine
    weight_bytes = "weight_bytes"  # the GEMM weights' bytes by type: no build needed


class ReferenceEngines(StrEnum):
    """When a run measures the fp16 and fp32 engines of its graph to stand its own beside."""

    auto = "auto"  # quantized precisions (int8, fp8, int4, auto)
    always = "always"
    never = "never"


class QdqPlacement(StrEnum):
    gemm_inputs = "gemm_inputs"
    modelopt = "modelopt"


class Smoothing(StrEnum):
    none = "none"
    smoothquant = "smoothquant"
    auto = "auto"


class CalibrationSource(StrEnum):
    none = "none"
    directory = "directory"
    factory = "factory"
    random = "random"
    prompts = "prompts"  # a decoder's prompts run through prefill and decode steps


class CalibrationMethod(StrEnum):
    """What ModelOpt's ONNX PTQ and TensorRT 10's calibrators both take (minmax = max)."""

    entropy = "entropy"
    max = "max"
    minmax = "minmax"


class Streaming(StrEnum):
    """Whether a transform reads the weights one tensor at a time (pipeline/precision/common/streamed.py)."""

    auto = "auto"  # when the model keeps its weights in external-data files
    always = "always"
    never = "never"


class Backend(StrEnum):
    auto = "auto"
    tensorrt = "tensorrt"
    tensorrt_rtx = "tensorrt_rtx"


class HardwareCompatibility(StrEnum):
    none = "none"
    ampere_plus = "ampere_plus"
    same_compute_capability = "same_compute_capability"


class TimingCacheMode(StrEnum):
    off = "off"
    read = "read"
    readwrite = "readwrite"
    strict = "strict"


class BenchBackend(StrEnum):
    onnxruntime = "onnxruntime"
    onnxruntime_calibrated = "onnxruntime_calibrated"
    torch = "torch"
    tensorrt = "tensorrt"


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class ProfilePoint(StrEnum):
    min = "min"
    opt = "opt"
    max = "max"
