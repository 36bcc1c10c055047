"""Which of the graph's attention TensorRT runs as self-attention, its fused kernel: the
builder's verbose log says `Found <node> to be part of self-attention pattern.` for each
node of Q K^T, the mask, Softmax and the product with V that it takes in. An attention
it does not name runs as separate GEMMs around a softmax kernel: what a mask written as a
Where over the scores gave (graph/ort_attention.py's first form).

Counted by Softmax, one per attention: a Softmax whose output a MatMul reads (a
classifier's closing Softmax is not attention)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pipeline.graph import onnx_model

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.records.inspect_file import AttentionFusion

FOUND = re.compile(r"^Found (.+?) to be part of self-attention pattern\.?$")
LISTED = 20  # unfused Softmax nodes named
PASS_THROUGH = frozenset({"Cast", "Dropout", "Identity"})  # between Softmax and its MatMul


def attention_softmax(model: ModelProto) -> list[str]:
    """The Softmax nodes a MatMul reads, directly or through a Cast (or Dropout, Identity)."""
    readers = onnx_model.readers(model)

    def reaches_matmul(tensor: str, hops: int = 3) -> bool:
        for node in readers.get(tensor, []):
            through = node.op_type in PASS_THROUGH and hops
            if node.op_type == "MatMul" or (through and reaches_matmul(node.output[0], hops - 1)):
                return True
        return False

    return [
        n.name for n in model.graph.node if n.op_type == "Softmax" and reaches_matmul(n.output[0])
    ]


def measure(softmax: list[str], found: list[str]) -> AttentionFusion | None:
    """None where the graph has no attention."""
    if not softmax:
        return None
    taken = set(found)
    unfused = [name for name in softmax if name not in taken]
    return {
        "softmax": len(softmax),
        "fused": len(softmax) - len(unfused),
        "unfused": unfused[:LISTED],
    }


def line(fusion: AttentionFusion) -> str:
    """One sentence for the report's pages."""
    said = f"{fusion['fused']} of {fusion['softmax']} attention Softmax run as TensorRT's fused self-attention"
    if fusion["unfused"]:
        more = " ..." if len(fusion["unfused"]) > 3 else ""
        said += f"; not: {', '.join(fusion['unfused'][:3])}{more}"
    return said
