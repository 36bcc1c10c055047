"""ONNX Runtime's GroupQueryAttention (com.microsoft), as ONNX Runtime GenAI's model builder
writes it for its CPU and CUDA targets, in standard ONNX ops that TensorRT parses (its
importer wants a plugin TensorRT-RTX does not ship: "failed to load GroupQueryAttention
plugin").

What the op does, written out (ONNX Runtime's contrib-op spec and CPU kernel):
- the query (Q, K and V packed on the last axis when `key` is empty) split into heads;
- rotary embedding (`do_rotary`) on Q and the new K, positions read from `position_ids`
  when given, else from `seqlens_k`: `0..S-1` on the first prompt (the total length equals
  the new tokens'), `seqlens_k + 1 - S + i` after it;
- the present cache: the past with the new K/V appended (contiguous per batch, which is
  what every run of this tool feeds: prompts are never padded);
- `kv_num_heads` heads shared by `num_heads / kv_num_heads` query heads each, attended
  causally within each sequence's length (`seqlens_k + 1`) and `local_window_size`;
- `scale` (0: 1/sqrt(head size)) and `softcap`.
Not written out, refused in one line: `smooth_softmax`, `head_sink`, `attention_bias`,
`qk_output` and `sliding_window_cache` (GenAI's Gemma 2 and 3: a windowed layer's cache
kept at the window's length)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.graph.node_emitter import FLOAT, INT64, Emitter, attributes, float_type, onnx_type

if TYPE_CHECKING:
    from onnx import NodeProto, TensorProto

GQA = "GroupQueryAttention"
# input slots of the op, in its spec's order
QUERY, KEY, VALUE, PAST_KEY, PAST_VALUE, SEQLENS_K, TOTAL_LEN, COS, SIN = range(9)
POSITION_IDS, ATTENTION_BIAS, HEAD_SINK = 9, 10, 11
INT64_MAX = np.iinfo(np.int64).max
# sliding_window_cache: a windowed layer's cache held at the window's length (GenAI's Gemma 2
# and 3), a layout other than the past-plus-new this rewrite appends.
UNWRITTEN_ATTRIBUTES = ("smooth_softmax", "qk_output", "sliding_window_cache")


@dataclass(frozen=True)
class Heads:
    query: int  # num_heads
    kv: int  # kv_num_heads
    size: int | None  # head size where the graph says it (else found at run time)

    @property
    def group(self) -> int:
        return self.query // self.kv


def heads_of(node: NodeProto, size: int | None = None) -> Heads:
    """The op's query and KV heads (its attributes), with the head size where known."""
    attrs = attributes(node)
    return Heads(int(attrs["num_heads"]), int(attrs.get("kv_num_heads", attrs["num_heads"])), size)


def lower(node: NodeProto, inits: dict[str, TensorProto], head_size: int | None) -> Emitter:
    """`node` written out: the emitter's nodes write its outputs under their names."""
    attrs = attributes(node)
    ins = [*node.input, *[""] * (12 - len(node.input))]
    _refuse_unwritten(node, attrs, ins)
    heads = heads_of(node, head_size)
    e = Emitter(node.name or f"{GQA}_{node.output[0]}")
    cos = inits.get(ins[COS])
    if attrs.get("do_rotary", 0) and cos is None:
        raise PipelineError(f"{GQA} {node.name}: its cos_cache is not a weight of the graph")
    dtype = float_type(cos)
    q, k, v = _split_heads(e, ins, heads)  # [B,Hk,G,S,D], [B,Hk,S,D], [B,Hk,S,D]
    positions = _query_positions(e, ins[QUERY], ins[SEQLENS_K], ins[TOTAL_LEN])
    if attrs.get("do_rotary", 0):
        assert cos is not None
        pos = e.op("Cast", ins[POSITION_IDS], to=INT64) if ins[POSITION_IDS] else positions.query
        rotary = Rotary(e, ins[COS], ins[SIN], pos, 2 * int(cos.dims[1]), heads.size)
        interleaved = bool(attrs.get("rotary_interleaved", 0))
        q, k = rotary.apply(q, 5, interleaved), rotary.apply(k, 4, interleaved)
    present_k = _appended(e, ins[PAST_KEY], k, node.output[1] if len(node.output) > 1 else "")
    present_v = _appended(e, ins[PAST_VALUE], v, node.output[2] if len(node.output) > 2 else "")
    scores = _scores(e, q, present_k, float(attrs.get("scale", 0.0)), heads, dtype)
    if float(attrs.get("softcap", 0.0)) > 0:
        cap = e.const(attrs["softcap"], dtype)
        scores = e.op("Mul", e.op("Tanh", e.op("Div", scores, cap)), cap)
    window = int(attrs.get("local_window_size", -1))
    allowed = _allowed(e, positions, present_k, window)
    # An additive mask, as exporters write one: TensorRT-RTX's builder finds Q K^T, an Add,
    # Softmax and the product with V to be self-attention (its fused kernel), and does not
    # with a Where over the scores (its log says "part of self-attention pattern" or not).
    masked = e.const(np.finfo(dtype).min, dtype)
    scores = e.op("Add", scores, e.op("Where", allowed, e.const(0.0, dtype), masked))
    probs = e.op("Softmax", scores, axis=-1)
    out = e.op("MatMul", probs, e.op("Unsqueeze", present_v, e.const([2])))  # [B,Hk,G,S,D]
    out = e.op("Transpose", out, perm=[0, 3, 1, 2, 4])  # [B,S,Hk,G,D]
    e.op("Reshape", out, e.const([0, 0, -1]), out=node.output[0])
    return e


def _refuse_unwritten(node: NodeProto, attrs: dict[str, object], ins: list[str]) -> None:
    unwritten = [
        *[f"attribute {a}" for a in UNWRITTEN_ATTRIBUTES if attrs.get(a, 0)],
        *[
            f"input {n}"
            for n, i in (("attention_bias", ATTENTION_BIAS), ("head_sink", HEAD_SINK))
            if ins[i]
        ],
    ]
    if unwritten:
        raise PipelineError(
            f"{GQA} {node.name} uses {', '.join(unwritten)}, which this tool does not write in "
            f"standard ONNX for TensorRT"
        )


def _split_heads(e: Emitter, ins: list[str], heads: Heads) -> tuple[str, str, str]:
    """Q as [B, Hk, G, S, D] (each KV head's query heads together), K and V as
    [B, Hk, S, D]; the head size is left to Reshape (-1) where the graph does not say it."""
    if ins[KEY]:
        q, k, v = ins[QUERY], ins[KEY], ins[VALUE]
        q = e.op("Reshape", q, e.const([0, 0, heads.kv, heads.group, -1]))
        k = e.op("Reshape", k, e.const([0, 0, heads.kv, -1]))
        v = e.op("Reshape", v, e.const([0, 0, heads.kv, -1]))
    else:
        packed = e.op("Reshape", ins[QUERY], e.const([0, 0, heads.query + 2 * heads.kv, -1]))
        sizes = e.const([heads.query, heads.kv, heads.kv])
        q, k, v = e.multi("Split", [packed, sizes], ["", "", ""], axis=2)
        q = e.op("Reshape", q, e.const([0, 0, heads.kv, heads.group, -1]))
    q = e.op("Transpose", q, perm=[0, 2, 3, 1, 4])
    k = e.op("Transpose", k, perm=[0, 2, 1, 3])
    v = e.op("Transpose", v, perm=[0, 2, 1, 3])
    return q, k, v


@dataclass(frozen=True)
class Positions:
    query: str  # [B, S] int64: each new token's place in its sequence
    length: str  # [B] int64: each sequence's length, past and new (seqlens_k + 1)


def _query_positions(e: Emitter, query: str, seqlens_k: str, total: str) -> Positions:
    new = e.shape_dim(query, 1)  # S, [1]
    length = e.op("Add", e.op("Cast", seqlens_k, to=INT64), e.const(1))
    first_prompt = e.op("Equal", e.op("Cast", total, to=INT64), new)
    zero = e.const([0])
    offset = e.op("Where", first_prompt, zero, e.op("Sub", length, new))  # [B]
    steps = e.op("Range", e.const(0), e.scalar(new), e.const(1))  # [S]
    query_pos = e.op("Add", e.op("Unsqueeze", offset, e.const([1])), e.op("Unsqueeze", steps, zero))
    return Positions(query_pos, length)


class Rotary:
    """Rotary embedding of the first `dim` values of each head, the rest passed through;
    cos/sin rows picked by position ([B, S, dim/2])."""

    def __init__(self, e: Emitter, cos: str, sin: str, pos: str, dim: int, head: int | None):
        self.e, self.dim, self.whole = e, dim, head == dim
        self.cos = e.op("Gather", cos, pos)
        self.sin = e.op("Gather", sin, pos)

    def apply(self, x: str, rank: int, interleaved: bool) -> str:
        """x: [B, heads..., S, D] of `rank` axes."""
        e = self.e
        heads_axes = list(range(1, rank - 2))
        cos = e.op("Unsqueeze", self.cos, e.const(heads_axes))
        sin = e.op("Unsqueeze", self.sin, e.const(heads_axes))
        rot, rest = x, ""
        if not self.whole:
            rot = e.op("Slice", x, e.const([0]), e.const([self.dim]), e.const([-1]))
            rest = e.op("Slice", x, e.const([self.dim]), e.const([INT64_MAX]), e.const([-1]))
        if interleaved:
            pairs = e.op("Reshape", rot, e.const([0] * (rank - 1) + [self.dim // 2, 2]))
            x1, x2 = e.multi("Split", [pairs, e.const([1, 1])], ["", ""], axis=-1)
            x1, x2 = (e.op("Squeeze", t, e.const([-1])) for t in (x1, x2))
        else:
            half = e.const([self.dim // 2, self.dim // 2])
            x1, x2 = e.multi("Split", [rot, half], ["", ""], axis=-1)
        first = e.op("Sub", e.op("Mul", x1, cos), e.op("Mul", x2, sin))
        second = e.op("Add", e.op("Mul", x2, cos), e.op("Mul", x1, sin))
        if interleaved:
            first, second = (e.op("Unsqueeze", t, e.const([-1])) for t in (first, second))
            stacked = e.op("Concat", first, second, axis=-1)
            rotated = e.op("Reshape", stacked, e.const([0] * (rank - 1) + [self.dim]))
        else:
            rotated = e.op("Concat", first, second, axis=-1)
        return e.op("Concat", rotated, rest, axis=-1) if rest else rotated


def _appended(e: Emitter, past: str, new: str, present: str) -> str:
    """The present cache [B, Hk, past + S, D] under the op's own output name."""
    if not past:
        return e.op("Identity", new, out=present)
    return e.op("Concat", past, new, axis=2, out=present)


def _scores(e: Emitter, q: str, k: str, scale: float, heads: Heads, dtype: np.dtype) -> str:
    """Q K^T times the scale: [B, Hk, G, S, T]."""
    keys = e.op("Transpose", e.op("Unsqueeze", k, e.const([2])), perm=[0, 1, 2, 4, 3])
    scores = e.op("MatMul", q, keys)
    if scale == 0.0 and heads.size:
        scale = 1.0 / float(np.sqrt(heads.size))
    if scale:
        return e.op("Mul", scores, e.const(scale, dtype))
    size = e.op("Cast", e.shape_dim(q, -1), to=FLOAT)  # head size known only at run time
    root = e.op("Cast", e.op("Sqrt", size), to=onnx_type(dtype))
    return e.op("Div", scores, root)


def _allowed(e: Emitter, positions: Positions, present_k: str, window: int) -> str:
    """[B, 1, 1, S, T] bool: which keys each query may attend to."""
    total = e.shape_dim(present_k, 2)
    keys = e.op("Range", e.const(0), e.scalar(total), e.const(1))  # [T]
    query = e.op("Unsqueeze", positions.query, e.const([2]))  # [B, S, 1]
    length = e.op("Unsqueeze", positions.length, e.const([1, 2]))  # [B, 1, 1]
    allowed = e.op("And", e.op("LessOrEqual", keys, query), e.op("Less", keys, length))  # [B, S, T]
    if window > 0:
        since = e.op("Sub", query, e.const(window))  # the query and the window - 1 before it
        allowed = e.op("And", allowed, e.op("Greater", keys, since))
    return e.op("Unsqueeze", allowed, e.const([1, 2]))
