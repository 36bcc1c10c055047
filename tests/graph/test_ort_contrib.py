"""ONNX Runtime's contrib ops written in standard ONNX (graph/ort_contrib.py): each rewrite
computes what ONNX Runtime's own kernel computes on the same feeds, in both phases of a
decoder; TensorRT-RTX parses the rewritten graph; what is not rewritten is refused in one
line."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pipeline.core.errors import PipelineError
from pipeline.graph import ort_contrib

HEADS, KV, HEAD = 4, 2, 32
MAX_POS = 64


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _rewritten(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    assert ort_contrib.lower(copy, "test.onnx")
    assert not ort_contrib.contrib_nodes(copy)
    onnx.checker.check_model(copy, full_check=True)
    return copy


def _agree(model: onnx.ModelProto, feeds: dict[str, np.ndarray], atol: float = 1e-5) -> None:
    expected = _session(model).run(None, feeds)
    got = _session(_rewritten(model)).run(None, feeds)
    for name, e, g in zip([o.name for o in model.graph.output], expected, got, strict=True):
        assert e.shape == g.shape, name
        np.testing.assert_allclose(g, e, atol=atol, rtol=1e-4, err_msg=name)


def gqa_model(
    rotary_dim: int = HEAD, packed: bool = True, fp16: bool = False, **attrs: object
) -> onnx.ModelProto:
    """One GroupQueryAttention as GenAI's builder writes it: packed QKV, the cache in and
    out, seqlens_k and the total length from the attention mask, cos/sin caches."""
    rng = np.random.default_rng(0)
    width = (HEADS + 2 * KV) * HEAD
    np_type, onnx_type = (
        (np.float16, TensorProto.FLOAT16) if fp16 else (np.float32, TensorProto.FLOAT)
    )
    cos = rng.uniform(-1, 1, (MAX_POS, rotary_dim // 2)).astype(np_type)
    sin = rng.uniform(-1, 1, (MAX_POS, rotary_dim // 2)).astype(np_type)
    mask_nodes = [
        helper.make_node("ReduceSum", ["attention_mask", "one"], ["len"], keepdims=0),
        helper.make_node("Sub", ["len", "one"], ["seqlens64"]),
        helper.make_node("Cast", ["seqlens64"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
        helper.make_node("Gather", ["mask_shape", "one_scalar"], ["total64"], axis=0),
        helper.make_node("Cast", ["total64"], ["total"], to=TensorProto.INT32),
    ]
    if packed:
        q_ins = ["qkv", "", ""]
        inputs = [helper.make_tensor_value_info("qkv", onnx_type, ["B", "S", width])]
    else:
        q_ins = ["q", "k", "v"]
        inputs = [
            helper.make_tensor_value_info(n, onnx_type, ["B", "S", h * HEAD])
            for n, h in (("q", HEADS), ("k", KV), ("v", KV))
        ]
    gqa = helper.make_node(
        "GroupQueryAttention",
        [*q_ins, "past_key", "past_value", "seqlens_k", "total", "cos_cache", "sin_cache"],
        ["out", "present_key", "present_value"],
        name="gqa",
        domain="com.microsoft",
        num_heads=HEADS,
        kv_num_heads=KV,
        do_rotary=1,
        **attrs,
    )
    cache = ["B", KV, "P", "kv_cache_dim"]
    graph = helper.make_graph(
        [*mask_nodes, gqa],
        "gqa",
        [
            *inputs,
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["B", "T"]),
            helper.make_tensor_value_info("past_key", onnx_type, cache),
            helper.make_tensor_value_info("past_value", onnx_type, cache),
        ],
        [
            helper.make_tensor_value_info("out", onnx_type, ["B", "S", HEADS * HEAD]),
            helper.make_tensor_value_info("present_key", onnx_type, ["B", KV, "T", "kv_cache_dim"]),
            helper.make_tensor_value_info(
                "present_value", onnx_type, ["B", KV, "T", "kv_cache_dim"]
            ),
        ],
        [
            numpy_helper.from_array(cos, "cos_cache"),
            numpy_helper.from_array(sin, "sin_cache"),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
            numpy_helper.from_array(np.array(1, np.int64), "one_scalar"),
        ],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def gqa_feeds(
    batch: int, past: int, new: int, packed: bool = True, fp16: bool = False
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(past * 10 + new)
    np_type = np.float16 if fp16 else np.float32
    feeds = {"attention_mask": np.ones((batch, past + new), np.int64)}
    if packed:
        feeds["qkv"] = rng.standard_normal((batch, new, (HEADS + 2 * KV) * HEAD)).astype(np_type)
    else:
        for name, heads in (("q", HEADS), ("k", KV), ("v", KV)):
            feeds[name] = rng.standard_normal((batch, new, heads * HEAD)).astype(np_type)
    for name in ("past_key", "past_value"):
        feeds[name] = rng.standard_normal((batch, KV, past, HEAD)).astype(np_type)
    return feeds


# The phases a decoder's runs feed: a prefill (batched), a decode step (batched) and a
# later prompt over a cache (ONNX Runtime takes one sequence there).
PHASES = [(2, 0, 7), (2, 9, 1), (1, 6, 3)]


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"rotary_interleaved": 1},
        {"local_window_size": 3},
        {"softcap": 2.0, "scale": 0.3},
        {"rotary_dim": HEAD // 2},
        {"packed": False},
        {"fp16": True},
    ],
    ids=["builder", "interleaved", "window", "softcap", "partial-rotary", "unpacked", "fp16"],
)
def test_group_query_attention_written_out_computes_what_onnx_runtime_does(attrs):
    attrs = dict(attrs)
    packed, fp16 = bool(attrs.pop("packed", True)), bool(attrs.pop("fp16", False))
    rotary = int(attrs.pop("rotary_dim", HEAD))
    model = gqa_model(rotary_dim=rotary, packed=packed, fp16=fp16, **attrs)
    for batch, past, new in PHASES:
        _agree(model, gqa_feeds(batch, past, new, packed, fp16), atol=4e-3 if fp16 else 1e-5)


def test_the_cache_dims_the_builder_leaves_named_are_fixed_from_the_projection():
    """GenAI's builder names the head size `kv_cache_dim`; a profile needs it a number."""
    model = gqa_model()
    rewritten = _rewritten(model)
    past = next(i for i in rewritten.graph.input if i.name == "past_key")
    dims = past.type.tensor_type.shape.dim
    # no past dim nor projection says it here: the rewrite works without it and leaves it
    assert dims[1].dim_value == KV and dims[3].dim_param == "kv_cache_dim"
    weight = numpy_helper.from_array(np.zeros((8, (HEADS + 2 * KV) * HEAD), np.float32), "w")
    model.graph.initializer.append(weight)
    model.graph.input[0].name = "x"
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 8
    model.graph.node.insert(0, helper.make_node("MatMul", ["x", "w"], ["qkv"]))
    past = next(i for i in _rewritten(model).graph.input if i.name == "past_key")
    assert past.type.tensor_type.shape.dim[3].dim_value == HEAD


def norm_model(op: str, dtype: int = TensorProto.FLOAT, bias: bool = False) -> onnx.ModelProto:
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(1)
    hidden = 32
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, hidden).astype(np_type), "gamma")]
    ins = ["x", "skip", "gamma"]
    outs = ["y", "", "", "sum"]
    if op == "SkipLayerNormalization":
        inits.append(numpy_helper.from_array(rng.standard_normal(hidden).astype(np_type), "beta"))
        ins.append("beta")
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(hidden).astype(np_type), "bias"))
        ins.append("bias")
    if op == "SimplifiedLayerNormalization":
        ins, outs = ["x", "gamma"], ["y"]
    domain = "" if op == "SimplifiedLayerNormalization" else "com.microsoft"
    node = helper.make_node(op, ins, outs, name="norm", domain=domain, epsilon=1e-6)
    value = [helper.make_tensor_value_info(n, dtype, ["B", "S", hidden]) for n in ("x", "skip")]
    graph = helper.make_graph(
        [node],
        "norm",
        value[: 1 if op == "SimplifiedLayerNormalization" else 2],
        [helper.make_tensor_value_info(n, dtype, ["B", "S", hidden]) for n in outs if n],
        inits,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


@pytest.mark.parametrize(
    "op, dtype, bias",
    [
        ("SimplifiedLayerNormalization", TensorProto.FLOAT, False),
        ("SimplifiedLayerNormalization", TensorProto.FLOAT16, False),
        ("SkipSimplifiedLayerNormalization", TensorProto.FLOAT, True),
        ("SkipSimplifiedLayerNormalization", TensorProto.FLOAT16, False),
        ("SkipLayerNormalization", TensorProto.FLOAT, True),
    ],
)
def test_norms_written_out_compute_what_onnx_runtime_does(op, dtype, bias):
    rng = np.random.default_rng(2)
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    feeds = {n: (3 * rng.standard_normal((2, 5, 32))).astype(np_type) for n in ("x", "skip")}
    model = norm_model(op, dtype, bias)
    feeds = {i.name: feeds[i.name] for i in model.graph.input}
    _agree(model, feeds, atol=1e-5 if dtype == TensorProto.FLOAT else 2e-2)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "BiasGelu", "QuickGelu"])
def test_gelus_written_out_compute_what_onnx_runtime_does(op):
    ins = ["x", "bias"] if op in ("FastGelu", "BiasGelu") else ["x"]
    node = helper.make_node(op, ins, ["y"], name="act", domain="com.microsoft")
    bias = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32), "bias")
    graph = helper.make_graph(
        [node],
        "act",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 16])],
        [bias] if len(ins) > 1 else [],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    feeds = {"x": np.random.default_rng(3).standard_normal((4, 16), np.float32) * 3}
    _agree(model, feeds)


def test_what_is_not_written_out_is_refused_in_one_line():
    node = helper.make_node("MatMulNBits", ["x", "b", "s"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "g", [], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(PipelineError, match="MatMulNBits.*precision=int4_awq") as refused:
        ort_contrib.lower(model, "model.onnx")
    assert "\n" not in str(refused.value)
    with pytest.raises(PipelineError, match="smooth_softmax"):
        ort_contrib.lower(gqa_model(smooth_softmax=1), "model.onnx")
    # GenAI's Gemma 2: the windowed layers' cache is kept at the window's length
    windowed = gqa_model(local_window_size=8, sliding_window_cache=1)
    with pytest.raises(PipelineError, match="sliding_window_cache"):
        ort_contrib.lower(windowed, "model.onnx")


def test_a_contrib_op_inside_a_branch_is_refused_in_one_line():
    gelu = helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")
    branch = helper.make_graph(
        [gelu], "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["z"])],
        "else",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])],
    )
    node = helper.make_node("If", ["c"], ["out"], then_branch=branch, else_branch=other)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(PipelineError, match=r"model.onnx has .* subgraph \(FastGelu\)"):
        ort_contrib.lower(model, "model.onnx")


def test_tensorrt_rtx_builds_the_rewritten_attention_as_self_attention():
    """Parsed (the original is not), and the builder's log finds Q K^T, the mask, Softmax
    and V to be self-attention, its fused kernel: with a Where over the scores it did not."""
    trt = pytest.importorskip("tensorrt_rtx")

    class Log(trt.ILogger):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def log(self, severity, msg) -> None:
            self.lines.append(msg)

    log = Log()
    builder = trt.Builder(log)
    strongly_typed = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    assert not trt.OnnxParser(builder.create_network(strongly_typed), log).parse(
        gqa_model().SerializeToString()
    ), "TensorRT-RTX parses GroupQueryAttention now: the rewrite may be needless"
    network = builder.create_network(strongly_typed)
    parser = trt.OnnxParser(network, log)
    ok = parser.parse(_rewritten(gqa_model(fp16=True)).SerializeToString())
    assert ok, [str(parser.get_error(i)) for i in range(parser.num_errors)]
    profile = builder.create_optimization_profile()
    width = (HEADS + 2 * KV) * HEAD
    profile.set_shape("qkv", (1, 1, width), (1, 8, width), (1, 16, width))
    profile.set_shape("attention_mask", (1, 1), (1, 16), (1, 32))
    for name in ("past_key", "past_value"):
        profile.set_shape(name, (1, KV, 0, HEAD), (1, KV, 8, HEAD), (1, KV, 16, HEAD))
    config = builder.create_builder_config()
    config.add_optimization_profile(profile)
    assert builder.build_serialized_network(network, config) is not None, log.lines[-5:]
    found = [line for line in log.lines if "part of self-attention pattern" in line]
    assert any("Softmax" in line for line in found), found
