"""Graphs as Hugging Face `transformers` models export them (random init: their structure is
the point, not their weights). Nothing here imports the pipeline.

    bert(path)   # BertModel: input_ids, attention_mask, token_type_ids -> mean-pooled embedding
    gpt2(path)   # GPT2LMHeadModel with a KV cache: past_key_values.{i}.key|value in, present out
    llama(path)  # LlamaForCausalLM (GQA, RoPE, tied or not) with its cache and position_ids

Each goes through torch.onnx.export's TorchScript path with the model under an attribute `m`,
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
    return _export_with_cache(WithCache(), feeds, ["input_ids", "attention_mask"], layers, path)


def _export_with_cache(
    module: Any, feeds: dict[str, np.ndarray], tokens: list[str], layers: int, path: str | Path
) -> Path:
    """torch.onnx.export of a decoder taking `tokens` inputs and its cache under optimum's
    names (past_key_values.{i}.key|value in, present.{i}.key|value out), every length
    dynamic as optimum declares it."""
    import torch

    past_names = [f"{GPT2_PAST}.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    present_names = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    names = [*tokens, *past_names]
    axes = {
        **{n: {0: "batch", 1: "seq"} for n in tokens},
        "attention_mask": {0: "batch", 1: "total_seq"},
        **{n: {0: "batch", 2: "past_seq"} for n in past_names},
        "logits": {0: "batch", 1: "seq"},
        **{n: {0: "batch", 2: "total_seq"} for n in present_names},
    }
    with torch.no_grad():
        torch.onnx.export(
            module,
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


def llama(
    path: str | Path,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 176,
    vocab: int = VOCAB,
    tied: bool = True,
    seed: int = 0,
    outliers: bool = False,
) -> Path:
    """A LlamaForCausalLM (grouped-query attention: `kv_heads` for `heads`, RoPE) taking and
    returning its KV cache with optimum's names, position_ids among its inputs. `tied`: one
    matrix for the token table and the LM head (SmolLM, Llama 3.2), which the exporter
    writes twice. SmolLM-135M's shape: hidden 576, layers 30, heads 9, kv_heads 3,
    intermediate 1536, vocab 49152. `outliers`: three residual-stream dimensions with 20x
    RMSNorm gains in every layer, as trained decoders carry them (random init has none)."""
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        tie_word_embeddings=tied,
        **EAGER,
    )

    class WithCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = LlamaForCausalLM(config).eval()
            if outliers:
                with torch.no_grad():
                    for layer in self.m.model.layers:
                        layer.input_layernorm.weight[list(OUTLIER_DIMS)] *= 20.0
                        layer.post_attention_layernorm.weight[list(OUTLIER_DIMS)] *= 20.0

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache(config=config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
            )
            flat = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *flat)

    head_dim = hidden // heads
    feeds = gpt2_feeds(layers, kv_heads, head_dim, batch=1, seq=4, past=3)
    feeds["position_ids"] = np.arange(3, 7, dtype=np.int64)[None]
    tokens = ["input_ids", "attention_mask", "position_ids"]
    return _export_with_cache(WithCache(), feeds, tokens, layers, path)


def decoder_folder(folder: str | Path, genai: bool = False, **llama_args: Any) -> Path:
    """A folder as optimum writes one for a decoder (model.onnx, config.json, tokenizer.json)
    or, with `genai`, as ONNX Runtime GenAI's model builder does (model.onnx with its
    weights in model.onnx.data, genai_config.json, tokenizer.json; no config.json). The
    genai_config.json holds the builder's keys (onnxruntime-genai 0.18's output for a
    Llama); the graph is llama()'s: torch.onnx.export's, as optimum exports it."""
    import json

    import onnx
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    graph = llama(folder / "model.onnx", **llama_args)
    vocab = int(llama_args.get("vocab", VOCAB))
    words = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(SENTENCE_WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    if genai:
        model = onnx.load(graph)
        onnx.save(model, graph, save_as_external_data=True, location="model.onnx.data")
        config = {
            "model": {
                "context_length": 256,
                "decoder": {"filename": "model.onnx", "num_hidden_layers": 2},
                "type": "llama",
                "vocab_size": vocab,
            },
            "search": {"max_length": 64, "num_beams": 1, "do_sample": False},
        }
        (folder / "genai_config.json").write_text(json.dumps(config, indent=4))
    else:
        config = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 256,
                  "model_type": "llama", "vocab_size": vocab}  # fmt: skip
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


# A word-level vocabulary for decoder_folder's tokenizer.json: plain English words.
SENTENCE_WORDS = (
    "the a one every this that model engine graph layer token sentence server team cache "
    "builds runs reads writes keeps measures serves generates fast small large new old "
    "quickly again today with for on in to of and"
).split()
