"""A sentence-embedding transformer whose activations have the outlier channels that
real pretrained transformers grow (LLM.int8(), "outlier dimensions" in BERT): a few
channels of the attention values and of the FFN hidden layer are OUTLIER_SCALE times
larger than the rest, and the projections reading them (attention output, FFN output)
scale those channels back down, so the fp32 function is an ordinary one.

Per-tensor int8 activation scales then spend their whole range on the outliers and
round every other channel of those projections' inputs to a few levels: plain int8
misses the default gate, and keeping those few projections in higher precision
(precision.fallback=auto finds which) passes it. Output: one L2-normalised embedding
per row (model.task=embedding); inputs as pipeline.zoo.transformer_encoder."""

from __future__ import annotations

from typing import TYPE_CHECKING

# Same inputs as the bundled transformer: right-padded token ids and a 0/1 mask.
from pipeline.zoo.transformer_encoder import DYNAMIC_AXES as _AXES
from pipeline.zoo.transformer_encoder import (  # noqa: F401  (re-exported: the factory's interface)
    INPUT_NAMES,
    MAX_LEN,
    VOCAB,
    calibration_batches,
    embed,
    mean_pool,
    sample_inputs,
    self_attention,
)

if TYPE_CHECKING:  # imported by build() only: a factory module loads without torch
    import torch

OUTPUT_NAMES = ["embedding"]
DYNAMIC_AXES = {**{name: _AXES[name] for name in INPUT_NAMES}, "embedding": {0: "batch"}}
D_MODEL, HEADS, D_FF, LAYERS = 64, 4, 128, 2
OUTLIER_CHANNELS = 2
OUTLIER_SCALE = 60.0


def build(seed: int = 0) -> torch.nn.Module:
    import torch
    from torch import nn

    def outliers(
        producer: nn.Linear, consumer: nn.Linear, rows: slice, gen: torch.Generator
    ) -> None:
        """Scale `rows` of producer's output up and the matching input columns of the
        consumer down (its input i is producer output rows.start + i): the same
        function, with huge activations in between."""
        picked = torch.randperm(rows.stop - rows.start, generator=gen)[:OUTLIER_CHANNELS]
        with torch.no_grad():
            producer.weight[rows.start + picked] *= OUTLIER_SCALE
            producer.bias[rows.start + picked] *= OUTLIER_SCALE
            consumer.weight[:, picked] /= OUTLIER_SCALE

    class EncoderLayer(nn.Module):
        def __init__(self, gen: torch.Generator) -> None:
            super().__init__()
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)
            self.norm1 = nn.LayerNorm(D_MODEL)
            self.ff1, self.ff2 = nn.Linear(D_MODEL, D_FF), nn.Linear(D_FF, D_MODEL)
            self.norm2 = nn.LayerNorm(D_MODEL)
            # values (the third of qkv) feed attention-out; a ReLU hidden unit stays
            # huge after the activation and feeds the FFN's output projection
            outliers(self.qkv, self.proj, slice(2 * D_MODEL, 3 * D_MODEL), gen)
            outliers(self.ff1, self.ff2, slice(0, D_FF), gen)

        def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            x = self.norm1(x + self.proj(self_attention(x, self.qkv, bias, HEADS, D_MODEL)))
            out: torch.Tensor = self.norm2(x + self.ff2(torch.relu(self.ff1(x))))
            return out

    class OutlierEncoder(nn.Module):
        def __init__(self, gen: torch.Generator) -> None:
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, D_MODEL)
            self.positions = nn.Embedding(MAX_LEN, D_MODEL)
            self.layers = nn.ModuleList(EncoderLayer(gen) for _ in range(LAYERS))
            self.pooler = nn.Linear(D_MODEL, D_MODEL)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            x, mask, bias = embed(self.tokens, self.positions, input_ids, attention_mask)
            for layer in self.layers:
                x = layer(x, bias)
            out: torch.Tensor = self.pooler(mean_pool(x, mask))
            embedding: torch.Tensor = out / out.norm(dim=-1, keepdim=True).clamp(min=1e-6)
            return embedding

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    return OutlierEncoder(gen).eval()
