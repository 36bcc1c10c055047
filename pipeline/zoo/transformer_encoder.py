"""A small transformer encoder classifier over int64 token ids with an attention
mask; batch and sequence length are dynamic. Attention is written out by hand so
the ONNX export is plain MatMul/Softmax that every TensorRT parser accepts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where the model is made or run: a factory module loads without torch
    import torch
    from torch import nn

INPUT_NAMES = ["input_ids", "attention_mask"]
OUTPUT_NAMES = ["logits"]
DYNAMIC_AXES = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "seq"},
    "logits": {0: "batch"},
}
VOCAB = 1000
MAX_LEN = 256
D_MODEL, HEADS, D_FF, LAYERS, NUM_CLASSES = 64, 4, 128, 2, 4


def embed(
    tokens: nn.Embedding,
    positions: nn.Embedding,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token plus position embeddings, the float mask and the additive attention bias."""
    import torch

    pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
    x: torch.Tensor = tokens(input_ids) + positions(pos)
    mask = attention_mask.to(x.dtype)
    # -1e4 rather than -inf keeps fp16 free of NaN on fully padded rows.
    return x, mask, (1.0 - mask)[:, None, None, :] * -1e4


def self_attention(
    x: torch.Tensor, qkv: nn.Linear, bias: torch.Tensor, heads: int, d: int
) -> torch.Tensor:
    """Multi-head attention from one fused qkv projection, written out as MatMul/Softmax;
    d (the model width) is a Python int, so the export holds constants, not shape arithmetic."""
    b, s, _ = x.shape
    projected: torch.Tensor = qkv(x)
    q, k, v = projected.reshape(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) * (d // heads) ** -0.5 + bias
    attended: torch.Tensor = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
    return attended


def mean_pool(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)


def build(seed: int = 0) -> torch.nn.Module:
    import torch
    from torch import nn

    class EncoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)
            self.norm1 = nn.LayerNorm(D_MODEL)
            self.ff = nn.Sequential(nn.Linear(D_MODEL, D_FF), nn.GELU(), nn.Linear(D_FF, D_MODEL))
            self.norm2 = nn.LayerNorm(D_MODEL)

        def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            x = self.norm1(x + self.proj(self_attention(x, self.qkv, bias, HEADS, D_MODEL)))
            out: torch.Tensor = self.norm2(x + self.ff(x))
            return out

    class TransformerClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, D_MODEL)
            self.positions = nn.Embedding(MAX_LEN, D_MODEL)
            self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
            self.head = nn.Linear(D_MODEL, NUM_CLASSES)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            x, mask, bias = embed(self.tokens, self.positions, input_ids, attention_mask)
            for layer in self.layers:
                x = layer(x, bias)
            logits: torch.Tensor = self.head(mean_pool(x, mask))
            return logits

    torch.manual_seed(seed)
    return TransformerClassifier().eval()


def sample_inputs(dims: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    batch, seq = int(dims.get("batch", 1)), int(dims.get("seq", 16))
    ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
    # Each row keeps a random-length prefix, like right-padded real batches.
    lengths = rng.integers(max(1, seq // 2), seq + 1, size=batch)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask}


# A stream of its own, so calibration samples never coincide with the export's
# reference batches (seeded model.seed + 1000) that the accuracy gate holds out.
CALIBRATION_STREAM = 0xCA1B


def calibration_batches(
    num_samples: int, batch_size: int = 8, seed: int = 0, seq: int = 32
) -> Iterator[dict[str, np.ndarray]]:
    """Yield {input name: array} batches of right-padded token ids; seq defaults to the
    reference length (conf/model/transformer.yaml sample_dims) so one set fits the
    whole calibration and stacks into one .npz."""
    rng = np.random.default_rng([seed, CALIBRATION_STREAM])
    for start in range(0, num_samples, batch_size):
        yield sample_inputs({"batch": min(batch_size, num_samples - start), "seq": seq}, rng)
