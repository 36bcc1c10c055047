"""Small ONNX graphs, one per failure class seen in models shipped in the wild. Each function
writes its model to `path` and returns the path; FEEDS[name](batch) gives inputs it runs on.
All run in ONNX Runtime fp32 except jax_unk(broken=True), which ORT itself refuses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
Dims = list[int | str | None]


def _vi(name: str, dims: Dims, dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    """dims: int -> dim_value, str -> dim_param, None -> neither (an unknown, unnamed dim)."""
    return helper.make_tensor_value_info(name, dtype, dims)


def _init(name: str, a: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(a, name)


def _weights(*shape: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([seed, *shape])
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def _save(
    path: str | Path,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: Sequence[onnx.TensorProto] = (),
    value_info: Sequence[onnx.ValueInfoProto] = (),
    name: str = "wild",
    check: bool = True,
) -> Path:
    graph = helper.make_graph(
        nodes, name, inputs, outputs, list(inits), value_info=list(value_info)
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # what ONNX Runtime builds of the last few years all read
    if check:
        onnx.checker.check_model(model, full_check=True)
    path = Path(path)
    onnx.save(model, str(path))
    return path


def if_sample_rate(path: str | Path) -> Path:
    """Silero-VAD style: a rank-0 int64 input `sr` (sample rate) picks one of two branches
    of an If on x [batch, 512]: sr == 16000 -> relu(x @ A), else tanh(x @ B); y [batch, 256].
    Exercises scalar (rank-0) integer inputs that calibration and profile code must not
    batch, data-dependent control flow (If subgraphs reading outer-scope tensors), and
    reference data that only covers one branch."""
    a, b = _weights(512, 256, seed=1), _weights(512, 256, seed=2)

    def branch(op: str, w: str) -> onnx.GraphProto:
        nodes = [helper.make_node("MatMul", ["x", w], ["mm"]), helper.make_node(op, ["mm"], ["y"])]
        return helper.make_graph(nodes, f"{op.lower()}_branch", [], [_vi("y", ["batch", 256])])

    nodes = [
        helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
        helper.make_node(
            "If", ["is16k"], ["y"], then_branch=branch("Relu", "A"), else_branch=branch("Tanh", "B")
        ),
    ]
    inits = [_init("A", a), _init("B", b), _init("sr16k", np.array(16000, np.int64))]
    inputs = [_vi("x", ["batch", 512]), _vi("sr", [], TensorProto.INT64)]
    return _save(path, nodes, inputs, [_vi("y", ["batch", 256])], inits, name="if_sample_rate")


def lstm(path: str | Path) -> Path:
    """PyTorch nn.LSTM(64, 32, batch_first=True) as exported: x [batch, seq, 64] and state
    h, c [1, batch, 32] (layers first, batch second); outputs y [batch, seq, 32], hn, cn
    [1, batch, 32]. Exercises the ONNX LSTM op, recurrent state inputs whose batch axis is
    axis 1 (not 0: batching and calibration code that assumes axis 0 splits them wrongly),
    and a `seq` dim that profiles must cover. Matches torch.nn.LSTM given the same weights
    (gates reordered from ONNX's i, o, f, c to torch's i, f, c, o)."""
    hidden, feat = 32, 64
    w = _weights(1, 4 * hidden, feat, seed=3)
    r = _weights(1, 4 * hidden, hidden, seed=4)
    bias = np.zeros((1, 8 * hidden), np.float32)
    nodes = [
        helper.make_node("Transpose", ["x"], ["x_tbf"], perm=[1, 0, 2]),
        helper.make_node(
            "LSTM", ["x_tbf", "W", "R", "B", "", "h", "c"], ["y4", "hn", "cn"], hidden_size=hidden
        ),
        helper.make_node("Squeeze", ["y4", "axis1"], ["y_tbh"]),
        helper.make_node("Transpose", ["y_tbh"], ["y"], perm=[1, 0, 2]),
    ]
    inits = [_init("W", w), _init("R", r), _init("B", bias), _init("axis1", np.array([1]))]
    inputs = [_vi("x", ["batch", "seq", feat]), _vi("h", [1, "batch", hidden])]
    inputs.append(_vi("c", [1, "batch", hidden]))
    outputs = [_vi("y", ["batch", "seq", hidden]), _vi("hn", [1, "batch", hidden])]
    outputs.append(_vi("cn", [1, "batch", hidden]))
    return _save(path, nodes, inputs, outputs, inits, name="lstm")


def _tiny_cls(path: str | Path, batch: int | str | None, name: str, check: bool = True) -> Path:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax on x [batch, 3, 48, 192]:
    the shape of PP-OCR's angle classifier."""
    nodes = [
        helper.make_node("Conv", ["x", "Wc", "Bc"], ["c"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "Wg", "Bg"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    inits = [
        _init("Wc", _weights(8, 3, 3, 3, seed=5)),
        _init("Bc", np.zeros(8, np.float32)),
        _init("Wg", _weights(8, 2, seed=6)),
        _init("Bg", np.zeros(2, np.float32)),
    ]
    x, y = _vi("x", [batch, 3, 48, 192]), _vi("y", [batch, 2])
    return _save(path, nodes, [x], [y], inits, name=name, check=check)


def unnamed_batch(path: str | Path, minus_one: bool = False) -> Path:
    """x [?, 3, 48, 192] whose batch dim has neither dim_value nor dim_param (an unknown,
    unnamed dim, as many exporters write it); minus_one=True stores dim_value -1 instead,
    as PaddlePaddle's own exporter did for ch_ppocr_mobile_v2.0_cls_infer.onnx (the ONNX
    checker lets it pass; ORT reports both as None). Exercises code that reads dims as
    `dim_param or dim_value` (None / 0 / -1), profile shapes for a dim with no name, and
    output shapes that cannot be tied back to the input."""
    if not minus_one:
        return _tiny_cls(path, None, "unnamed_batch")
    p = _tiny_cls(path, "batch", "minus_one_batch")
    model = onnx.load(str(p))
    for vi in (model.graph.input[0], model.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_value = -1  # clears dim_param (a oneof)
    onnx.save(model, str(p))
    return p


def p2o_dims(path: str | Path) -> Path:
    """paddle2onnx naming: x [p2o.DynamicDimension.0, 3, 32, p2o.DynamicDimension.1] ->
    Conv(stride 2) -> Relu -> y [p2o.DynamicDimension.2, 8, 16, p2o.DynamicDimension.3]. The
    output's dims get fresh names though they follow from the input's (y's batch is x's).
    Exercises dim names with dots (config keys, shape strings such as "name:1x3x32x64") and
    outputs whose symbolic dims match no input's."""
    nodes = [
        helper.make_node(
            "Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    inits = [_init("W", _weights(8, 3, 3, 3, seed=7)), _init("B", np.zeros(8, np.float32))]
    x = _vi("x", ["p2o.DynamicDimension.0", 3, 32, "p2o.DynamicDimension.1"])
    y = _vi("y", ["p2o.DynamicDimension.2", 8, 16, "p2o.DynamicDimension.3"])
    return _save(path, nodes, [x], [y], inits, name="p2o_dims")


def question_dims(path: str | Path) -> Path:
    """dim_param "?" (PaddlePaddle's and some converters' way of saying "unknown") on two
    inputs whose "?" axes differ at run time: a [?, 16] and b [?, 16] (say 3 and 5 rows),
    y = concat(a @ W, b @ W) [?, 8]. "?" is a placeholder, not a symbol: code that treats
    equal dim_params as equal sizes ties a's and b's rows together and builds profiles or
    calibration batches that cannot exist (PP-OCRv4 rec uses "?" for its height too)."""
    nodes = [
        helper.make_node("MatMul", ["a", "W"], ["aw"]),
        helper.make_node("MatMul", ["b", "W"], ["bw"]),
        helper.make_node("Concat", ["aw", "bw"], ["y"], axis=0),
    ]
    inputs = [_vi("a", ["?", 16]), _vi("b", ["?", 16])]
    return _save(path, nodes, inputs, [_vi("y", ["?", 8])], [_init("W", _weights(16, 8, seed=8))])


def jax_unk(path: str | Path, broken: bool = True) -> Path:
    """tf2onnx / jax2tf naming: input x [unk__214, 8], output y [unk, 8]; y = |sigmoid(
    concat(-relu(x), x))|. The graph carries value_info for its intermediates in which
    `unk` stands for two different sizes (N rows for relu/neg, 2N for concat/sigmoid).
    ONNX Runtime trusts equal dim_params to mean equal sizes, plans concat's output into
    neg's freed buffer and fails at run time: "Shape mismatch attempting to re-use buffer.
    {3,8} != {6,8}". broken=False gives each intermediate its own name (unk__215,
    unk__216) and the model runs. Exercises tools that copy or trust value_info (shape
    inference, onnxslim, Polygraphy) and reference runs that must survive an ORT failure."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="jax2tf_f_/relu"),
        helper.make_node("Neg", ["a"], ["a2"], name="jax2tf_f_/neg"),
        helper.make_node("Concat", ["a2", "x"], ["b"], axis=0, name="jax2tf_f_/concatenate"),
        helper.make_node("Sigmoid", ["b"], ["c"], name="jax2tf_f_/logistic"),
        helper.make_node("Abs", ["c"], ["y"], name="jax2tf_f_/abs"),
    ]
    n, n2 = ("unk", "unk") if broken else ("unk__215", "unk__216")
    value_info = [_vi("a", [n, 8]), _vi("a2", [n, 8]), _vi("b", [n2, 8]), _vi("c", [n2, 8])]
    x, y = _vi("x", ["unk__214", 8]), _vi("y", ["unk", 8])
    return _save(path, nodes, [x], [y], value_info=value_info, name="jax2tf_f")


def dynamic_quant(path: str | Path) -> Path:
    """onnxruntime.quantization.quantize_dynamic of x [batch, 64] -> MatMul 64x128 -> Add ->
    Relu -> MatMul 128x16: int8 weights, activations quantized at run time
    (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul). Exercises an already-quantized
    input model: integer ops TensorRT has no kernel for, uint8 activations, and a
    precision step that must not quantize twice."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["m1"]),
        helper.make_node("Add", ["m1", "B1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "W2"], ["y"]),
    ]
    inits = [
        _init("W1", _weights(64, 128, seed=9)),
        _init("B1", np.full(128, 0.1, np.float32)),
        _init("W2", _weights(128, 16, seed=10)),
    ]
    path = Path(path)
    fp32 = path.with_name(path.stem + ".fp32.onnx")
    _save(fp32, nodes, [_vi("x", ["batch", 64])], [_vi("y", ["batch", 16])], inits)
    quantize_dynamic(fp32, path, weight_type=QuantType.QInt8)
    fp32.unlink()
    return path


def _feeds_cls(batch: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).uniform(-1, 1, (batch, 3, 48, 192)).astype("f4")}


def _randn(*shape: int) -> np.ndarray:
    return np.random.default_rng(list(shape)).standard_normal(shape).astype(np.float32)


# Inputs each model runs on, for a given batch size.
FEEDS: dict[str, Callable[[int], dict[str, np.ndarray]]] = {
    "if_sample_rate": lambda b: {"x": _randn(b, 512), "sr": np.array(16000, np.int64)},
    "lstm": lambda b: {"x": _randn(b, 10, 64), "h": _randn(1, b, 32), "c": _randn(1, b, 32)},
    "unnamed_batch": _feeds_cls,
    "p2o_dims": lambda b: {"x": _randn(b, 3, 32, 64)},
    "question_dims": lambda b: {"a": _randn(b, 16), "b": _randn(b + 2, 16)},
    "jax_unk": lambda b: {"x": _randn(b, 8)},
    "dynamic_quant": lambda b: {"x": _randn(b, 64)},
}
BUILDERS: dict[str, Callable[[str | Path], Path]] = {
    "if_sample_rate": if_sample_rate,
    "lstm": lstm,
    "unnamed_batch": unnamed_batch,
    "p2o_dims": p2o_dims,
    "question_dims": question_dims,
    "jax_unk": jax_unk,
    "dynamic_quant": dynamic_quant,
}
