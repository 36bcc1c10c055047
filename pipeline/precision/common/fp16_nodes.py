"""Named nodes computing in fp16 inside an fp32 graph: the next type down for a node a
search kept out of int8 or int4 (fallback/), and a choice of precision=auto (mixed/)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.precision.common import ops

if TYPE_CHECKING:
    from onnx import ModelProto


def in_fp16(m: ModelProto, names: list[str], base_dir: Path | None) -> None:
    """Each named node computes in fp16: its constant inputs stored in fp16 (read from
    base_dir's files where they are kept), the others cast to it, its results cast back
    to fp32 under their own names."""
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.precision.common import streamed

    inits = {i.name: i for i in m.graph.initializer}
    wanted = set(names)
    copied: set[str] = set()
    for node in m.graph.node:
        if node.name not in wanted:
            continue
        for idx, x in enumerate(list(node.input)):
            if not x:
                continue
            half = f"{x}::fp16::{node.name}"
            if x in inits:
                value = streamed.weight(inits[x], base_dir).astype(np.float16)
                m.graph.initializer.append(numpy_helper.from_array(value, half))
                copied.add(x)
            else:
                m.graph.node.append(helper.make_node("Cast", [x], [half], to=TensorProto.FLOAT16))
            node.input[idx] = half
        for i, out in enumerate(list(node.output)):
            node.output[i] = f"{out}::fp16"
            m.graph.node.append(
                helper.make_node("Cast", [node.output[i]], [out], to=TensorProto.FLOAT)
            )
    # a weight every reader now reads in fp16 goes: a fallback that kept all 271 GEMMs of a
    # 653 MB decoder wrote their 405 MB of fp32 weights beside the fp16 copies, unread
    ops.drop_unread(m, copied)
    ops.reorder(m)
