"""A decoder's two optimization profiles from three numbers (profile.decoder): prefill
(context: a prompt of 1..max_input_len tokens over an empty or short past) and decode
(generation: one token over a past of 1..max_seq_len-1), as deployments build them and as
trtexec users write by hand, one --minShapes entry per `past_key_values.N.key|value`.

Each input is sized by its role, read from its name and rank as `transformers`/optimum and
onnxruntime-genai export decoders, whatever their dims are called:

    input_ids, position_ids, token_type_ids   [batch, seq]
    attention_mask                            [batch, past + seq]
    past_key_values.N.key|value (past.N...)   [batch, heads, past, head_dim]

A prefill's past starts at 0: TensorRT and TensorRT-RTX take a zero-length dim in a profile
(tests/engine/test_decoder_profiles.py builds one), and every first prompt runs so."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError
from pipeline.core.shape_forms import POINTS
from pipeline.graph.onnx_model import TensorSpec

if TYPE_CHECKING:
    from pipeline.core.config import DecoderProfile

# What a KV-cache input is called: optimum's past_key_values.0.key, older past.0.key,
# onnxruntime-genai's past_key_values.0.value, Paddle's cache_kvs.0.
KV_INPUT = re.compile(r"(^|[._])(past|cache)", re.I)
TOKEN_INPUTS = ("input_ids", "position_ids", "token_type_ids")
MASK_INPUT = "attention_mask"


def kv_inputs(inputs: list[TensorSpec]) -> list[TensorSpec]:
    """The KV-cache inputs of a decoder's graph ([batch, heads, past, head_dim]); [] for
    a graph that is no decoder with a cache."""
    return [t for t in inputs if KV_INPUT.search(t.name) and len(t.dims) == 4]


def profiles(numbers: DecoderProfile, inputs: list[TensorSpec]) -> list[dict[str, Any]]:
    """[prefill, decode] (or [generate] with one_profile), each {"name", "inputs": {input:
    {"min", "opt", "max"}}}."""
    batch, prompt = int(numbers.max_batch), int(numbers.max_input_len)
    total = int(numbers.max_seq_len)
    if not kv_inputs(inputs):
        raise PipelineError(
            "profile.decoder is for a decoder with a KV cache, and the model has no "
            f"past_key_values.* input (inputs: {', '.join(t.name for t in inputs)}); give "
            "profile.shapes instead"
        )
    if not 1 <= prompt < total or batch < 1:
        raise PipelineError(
            f"profile.decoder: needs max_batch >= 1 and 1 <= max_input_len < max_seq_len, got "
            f"max_batch={batch}, max_input_len={prompt}, max_seq_len={total}"
        )
    opt_prompt, opt_past = max(1, prompt // 2), max(1, total // 2)
    # (seq, past) as [min, opt, max] per phase; a prefill's past leaves room for its prompt
    phases = {
        "prefill": ([1, opt_prompt, prompt], [0, 0, total - prompt]),
        "decode": ([1, 1, 1], [1, opt_past, total - 1]),
    }
    if numbers.one_profile:  # opt at a decode step: what a generation runs most
        phases = {"generate": ([1, 1, prompt], [0, opt_past, total - 1])}
    return [
        {"name": name, "inputs": {t.name: _shapes(t, batch, seq, past) for t in inputs}}
        for name, (seq, past) in phases.items()
    ]


def _shapes(t: TensorSpec, batch: int, seq: list[int], past: list[int]) -> dict[str, list[int]]:
    """min/opt/max of one input by its role; one line where the role is unknown."""
    b = [1, 1, batch]
    if kv_inputs([t]):
        heads, head_dim = kv_dims(t, "give its shapes in profile.shapes")
        return {p: [b[i], heads, past[i], head_dim] for i, p in enumerate(POINTS)}
    if t.name == MASK_INPUT and len(t.dims) == 2:
        return {p: [b[i], past[i] + seq[i]] for i, p in enumerate(POINTS)}
    if t.name in TOKEN_INPUTS and len(t.dims) == 2:
        return {p: [b[i], seq[i]] for i, p in enumerate(POINTS)}
    fixed = [d for d in t.dims if isinstance(d, int)]
    if len(fixed) == len(t.dims):  # a flag or a fixed table: as it is
        return {p: list(fixed) for p in POINTS}
    raise PipelineError(
        f"profile.decoder sizes input_ids, attention_mask, position_ids and the KV cache; "
        f"input '{t.name}' {list(t.dims)} is none of them: give its shapes in profile.shapes"
    )


def kv_dims(t: TensorSpec, way_out: str) -> tuple[int, int]:
    """(heads, head size) of a KV input [batch, heads, past, head_dim]; where the graph
    leaves them symbolic, one line ending in `way_out`."""
    heads, size = t.dims[1], t.dims[3]
    if not (isinstance(heads, int) and isinstance(size, int)):
        raise PipelineError(
            f"input '{t.name}' has symbolic heads or head size {list(t.dims)}; a decoder's "
            f"KV cache needs them fixed: {way_out}"
        )
    return heads, size
