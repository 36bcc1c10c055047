"""Graphs as Hugging Face `transformers` models export them (random init: their structure is
the point, not their weights). Nothing here imports the pipeline.

    bert(path)   # BertModel: input_ids, attention_mask, token_type_ids -> mean-pooled embedding
    gpt2(path)   # GPT2LMHeadModel with a KV cache: past_key_values.{i}.key|value in, present out

Both go through torch.onnx.export's TorchScript path with the model under an attribute `m`,
as a user's wrapper does, so node names read `/m/encoder/layer.0/...` and the graph holds
what the exporter writes for a real checkpoint: the attention mask's `Where`, its `Expand`
and `Cast` chains, `Gather` embeddings, `Erf` GELU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

VOCAB = 1000
OUTLIER_DIMS = (7, 42, 99)
# The attention as written in PyTorch (not SDPA): what an ONNX export of it shows. Passed
# as a mapping: transformers' config classes take it through **kwargs, untyped.
EAGER: dict[str, Any] = {"attn_implementation": "eager"}
GPT2_PAST = "past_key_values"


def bert(
    path: str | Path,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    vocab: int = VOCAB,
    outliers: bool = False,
) -> Path:
    """A BertModel (MiniLM's shape at hidden=384, layers=6, heads=12, vocab=30522,
    intermediate 4x) with mean pooling over the attention mask, as sentence-transformers
    computes an embedding. Inputs [batch, seq] int64; output `embedding` [batch, hidden].
    `outliers`: three residual-stream dimensions with 30x LayerNorm gains in every layer, as
    pretrained BERTs carry them (random init has none)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=128,
        **EAGER,
    )

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = BertModel(config, add_pooling_layer=False).eval()
            if outliers:
                with torch.no_grad():
                    for layer in self.m.encoder.layer:
                        layer.output.LayerNorm.weight[list(OUTLIER_DIMS)] *= 30.0

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden_states = self.m(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
            return (hidden_states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    feeds = bert_feeds(2, 16)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        torch.onnx.export(
            Pooled(),
            tuple(torch.from_numpy(feeds[n]) for n in names),
            str(path),
            input_names=names,
            output_names=["embedding"],
            dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names}, "embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    return Path(path)


def bert_feeds(batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids with padding at the end of every other row, as a tokenizer pads a batch."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[1::2, seq // 2 :] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def sentence_feeds(n: int, length: int, seed: int = 0, vocab: int = VOCAB) -> dict[str, np.ndarray]:
    """n tokenized "sentences" of 6 to `length - 2` words ([CLS] ... [SEP]), padded to
    `length` as a tokenizer pads a batch, with their attention masks."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((n, length), np.int64)
    mask = np.zeros((n, length), np.int64)
    for i in range(n):
        words = rng.integers(1000, vocab, size=int(rng.integers(6, length - 1)))
        row = [101, *words.tolist(), 102][:length]
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def gpt2(
    path: str | Path, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0
) -> Path:
    """A GPT2LMHeadModel taking and returning its KV cache, with optimum's names:
    input_ids [batch, seq], attention_mask [batch, past+seq], past_key_values.{i}.key|value
    [batch, heads, past, head_dim] -> logits [batch, seq, vocab], present.{i}.key|value."""
    import torch
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        n_positions=128,
        **EAGER,
    )

    class WithCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = GPT2LMHeadModel(config).eval()

        def forward(self, input_ids, attention_mask, *past):
            cache = DynamicCache(config=config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache)
            present = out.past_key_values
            flat = []
            for i in range(layers):
                layer = present.layers[i]
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    feeds = gpt2_feeds(layers, heads, hidden // heads, batch=1, seq=4, past=3)
    past_names = [f"{GPT2_PAST}.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    present_names = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    names = ["input_ids", "attention_mask", *past_names]
    axes = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total_seq"},
        **{n: {0: "batch", 2: "past_seq"} for n in past_names},
        "logits": {0: "batch", 1: "seq"},
        **{n: {0: "batch", 2: "total_seq"} for n in present_names},
    }
    with torch.no_grad():
        torch.onnx.export(
            WithCache(),
            tuple(torch.from_numpy(feeds[n]) for n in names),
            str(path),
            input_names=names,
            output_names=["logits", *present_names],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return Path(path)


def gpt2_feeds(
    layers: int, heads: int, head_dim: int, batch: int, seq: int, past: int, seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {
        "input_ids": rng.integers(1, VOCAB, size=(batch, seq), dtype=np.int64),
        "attention_mask": np.ones((batch, past + seq), dtype=np.int64),
    }
    for i in range(layers):
        for kv in ("key", "value"):
            shape = (batch, heads, past, head_dim)
            out[f"{GPT2_PAST}.{i}.{kv}"] = rng.standard_normal(shape).astype(np.float32)
    return out
