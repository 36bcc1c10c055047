"""A small BERT-shaped sentence encoder whose residual stream carries outlier dimensions,
as trained BERT-family models do (Bondarenko et al. 2021, "Understanding and Overcoming
the Challenges of Efficient Transformer Quantization"; Wei et al. 2022, "Outlier
Suppression"): a few hidden dimensions are 20-100x larger than the rest in every
LayerNorm's output, and the residual Adds carry them into the next LayerNorm.

How it is made from random weights: for the OUTLIER_DIMS, every LayerNorm's gamma and
beta are multiplied by OUTLIER_SCALES (so its output has the outliers), and every Linear
that reads a LayerNorm's output divides the matching input columns by the same factor
(so the matrix multiplies see an ordinary function). The residual path is left alone:
it carries the outliers, exactly where real models carry them.

What that does to int8 (the reason this model ships): a Q/DQ pair on a LayerNorm output
that feeds both the Q/K/V MatMuls and the residual Add (ModelOpt's placement) rounds
the residual stream itself with a scale spent on the outliers, so the graph misses the
gate even with every MatMul in fp32. With Q/DQ on the MatMul inputs only
(precision.qdq_placement=gemm_inputs) the stream stays exact, and keeping a few
MatMuls in fp32 (precision.fallback=auto) or smoothing the outliers into the weights
(precision.smoothing=smoothquant) passes.

Layout as Hugging Face's BERT exports it: separate query, key and value projections
reading one LayerNorm output, post-LayerNorm residual blocks, GELU FFN; output one
L2-normalised embedding per row (model.task=embedding). Inputs as
pipeline.zoo.transformer_encoder (right-padded token ids and a 0/1 mask)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pipeline.zoo.transformer_encoder import DYNAMIC_AXES as _AXES
from pipeline.zoo.transformer_encoder import (  # noqa: F401  (re-exported: the factory's interface)
    INPUT_NAMES,
    MAX_LEN,
    VOCAB,
    calibration_batches,
    mean_pool,
    sample_inputs,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

OUTPUT_NAMES = ["embedding"]
DYNAMIC_AXES = {**{name: _AXES[name] for name in INPUT_NAMES}, "embedding": {0: "batch"}}
# benchmarks/fallback_search.py widens these to a MiniLM-sized model before export.
D_MODEL, HEADS, D_FF, LAYERS = 64, 4, 128, 2
# Residual-stream outliers: these hidden dimensions, this many times the rest.
OUTLIER_DIMS = (5, 37)
OUTLIER_SCALES = (30.0, 80.0)
# FFN hidden units that run this much larger than the rest (the FFN output projection's input).
FFN_OUTLIER_UNITS = 2
FFN_OUTLIER_SCALE = 20.0


def build(seed: int = 0) -> torch.nn.Module:
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(D_MODEL, D_MODEL) for _ in range(3))
            self.out = nn.Linear(D_MODEL, D_MODEL)
            self.norm1 = nn.LayerNorm(D_MODEL)
            self.ff1, self.ff2 = nn.Linear(D_MODEL, D_FF), nn.Linear(D_FF, D_MODEL)
            self.norm2 = nn.LayerNorm(D_MODEL)

        def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            d = D_MODEL // HEADS

            def heads(t: torch.Tensor) -> torch.Tensor:
                return t.reshape(b, s, HEADS, d).transpose(1, 2)

            q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
            scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d)) + bias
            context = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, D_MODEL)
            h = self.norm1(x + self.out(context))
            out: torch.Tensor = self.norm2(h + self.ff2(torch.nn.functional.gelu(self.ff1(h))))
            return out

    class OutlierBert(nn.Module):
        def __init__(self, gen: torch.Generator) -> None:
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, D_MODEL)
            self.positions = nn.Embedding(MAX_LEN, D_MODEL)
            self.norm = nn.LayerNorm(D_MODEL)
            layers = [Layer() for _ in range(LAYERS)]
            self.layers = nn.ModuleList(layers)
            self.pooler = nn.Linear(D_MODEL, D_MODEL)
            for norm in [self.norm] + [n for l in layers for n in (l.norm1, l.norm2)]:
                _randomise(norm, gen)
            for layer in layers:
                _residual_outliers([layer.out], layer.norm1)
                _residual_outliers([layer.ff2], layer.norm2)
                _hidden_outliers(layer.ff1, layer.ff2, gen)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            x: torch.Tensor = self.norm(self.tokens(input_ids) + self.positions(pos))
            mask = attention_mask.to(x.dtype)
            bias = (1.0 - mask)[:, None, None, :] * -1e4
            for layer in self.layers:
                x = layer(x, bias)
            out: torch.Tensor = self.pooler(mean_pool(x, mask))
            embedding: torch.Tensor = out / out.norm(dim=-1, keepdim=True).clamp(min=1e-6)
            return embedding

    torch.manual_seed(seed)
    return OutlierBert(torch.Generator().manual_seed(seed + 1)).eval()


def _residual_outliers(writers: list[nn.Linear], norm: nn.LayerNorm) -> None:
    """The sublayer outputs added into the residual stream carry the outlier
    dimensions; the LayerNorm after the Add scales them back (gamma, beta)."""
    import torch

    with torch.no_grad():
        for dim, scale in zip(OUTLIER_DIMS, OUTLIER_SCALES):
            for linear in writers:
                linear.weight[dim] *= scale
                linear.bias[dim] *= scale
            norm.weight[dim] /= scale
            norm.bias[dim] /= scale


def _hidden_outliers(ff1: nn.Linear, ff2: nn.Linear, gen: torch.Generator) -> None:
    import torch

    units = torch.randperm(D_FF, generator=gen)[:FFN_OUTLIER_UNITS]
    with torch.no_grad():
        ff1.weight[units] *= FFN_OUTLIER_SCALE
        ff1.bias[units] = ff1.bias[units].abs() * FFN_OUTLIER_SCALE  # GELU keeps them
        ff2.weight[:, units] /= FFN_OUTLIER_SCALE


def _randomise(norm: nn.LayerNorm, gen: torch.Generator) -> None:
    """Trained LayerNorms are not the identity: gamma near 1, beta near 0."""
    import torch

    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.1 * torch.randn(D_MODEL, generator=gen))
        norm.bias.copy_(0.05 * torch.randn(D_MODEL, generator=gen))
