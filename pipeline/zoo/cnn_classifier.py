"""A small image classifier: 3x32x32 images, dynamic batch, 10 classes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported by build() only: a factory module loads without torch
    import torch

INPUT_NAMES = ["images"]
OUTPUT_NAMES = ["logits"]
DYNAMIC_AXES = {"images": {0: "batch"}, "logits": {0: "batch"}}
NUM_CLASSES = 10


def build(seed: int = 0) -> torch.nn.Module:
    import torch
    from torch import nn

    def block(cin: int, cout: int, stride: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    class CnnClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                block(3, 16, 1), block(16, 32, 2), block(32, 64, 2), block(64, 64, 1)
            )
            self.head = nn.Linear(64, NUM_CLASSES)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            features: torch.Tensor = self.features(images)
            logits: torch.Tensor = self.head(features.mean(dim=(2, 3)))
            return logits

    torch.manual_seed(seed)
    model = CnnClassifier()
    # Non-trivial batch-norm statistics, so folding them into the convolution is exercised.
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                assert m.running_mean is not None and m.running_var is not None
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return model.eval()


def sample_inputs(dims: dict[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    batch = int(dims.get("batch", 1))
    return {"images": rng.standard_normal((batch, 3, 32, 32), dtype=np.float32)}


# A stream of its own, so calibration samples never coincide with the export's
# reference batches (seeded model.seed + 1000) that the accuracy gate holds out.
CALIBRATION_STREAM = 0xCA1B


def calibration_batches(
    num_samples: int, batch_size: int = 8, seed: int = 0
) -> Iterator[dict[str, np.ndarray]]:
    """Yield {input name: array} batches from the distribution sample_inputs draws
    from; the last batch is smaller when batch_size does not divide num_samples."""
    rng = np.random.default_rng([seed, CALIBRATION_STREAM])
    for start in range(0, num_samples, batch_size):
        yield sample_inputs({"batch": min(batch_size, num_samples - start)}, rng)
