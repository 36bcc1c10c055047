"""Run a low-precision graph where ONNX Runtime's CPU build has no kernel for it
(bf16 Conv and MatMul, some fp16 ops), so the accuracy gate still measures it.

Every fp16/bf16 tensor becomes fp32 rounded through a real Cast to its type and
back: operands and results hold exactly the low-precision values, and each op
computes in fp32 in between, as tensor cores accumulate. What this cannot show is
a kernel that also accumulates in the narrow type; summaries say "emulated"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from onnx import ModelProto

TYPE_ATTRS = ("to", "dtype")


def emulated_fp32(model: ModelProto) -> Any:
    import onnx
    from onnx import TensorProto

    low: set[int] = {TensorProto.FLOAT16, TensorProto.BFLOAT16}
    m = onnx.shape_inference.infer_shapes(model, strict_mode=False)  # types of every intermediate
    g = m.graph
    low_type = _widen_value_infos(g, low)
    _widen_initializers(g, low)
    nodes = []
    for node in g.node:
        _widen_attributes(node, low, low_type)
        nodes += _rounded_through_low(node, low_type)
    del g.node[:]
    g.node.extend(nodes)
    return m


def _widen_value_infos(g: Any, low: set[int]) -> dict[str, int]:
    """Graph inputs, outputs and intermediates of a low type become fp32; returns the
    low type each of them had, by tensor name."""
    from onnx import TensorProto

    low_type: dict[str, int] = {}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type in low:
            low_type[vi.name] = vi.type.tensor_type.elem_type
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    return low_type


def _widen_initializers(g: Any, low: set[int]) -> None:
    from onnx import numpy_helper

    for i, init in enumerate(g.initializer):
        if init.data_type in low:
            # exact: fp16 and bf16 values are all representable in fp32
            g.initializer[i].CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name)
            )


def _widen_attributes(node: Any, low: set[int], low_type: dict[str, int]) -> None:
    """A type attribute (Cast's `to`, a `dtype`) or a tensor attribute (a Constant's value)
    of a low type becomes fp32; the node's outputs are recorded as of that low type unless
    their type is known already."""
    import onnx
    from onnx import TensorProto, numpy_helper

    for attr in node.attribute:
        if attr.name in TYPE_ATTRS and attr.type == onnx.AttributeProto.INT and attr.i in low:
            for out in node.output:
                low_type.setdefault(out, attr.i)
            attr.i = TensorProto.FLOAT
        elif attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in low:
            for out in node.output:
                low_type.setdefault(out, attr.t.data_type)
            attr.t.CopyFrom(
                numpy_helper.from_array(
                    numpy_helper.to_array(attr.t).astype(np.float32), attr.t.name
                )
            )


def _rounded_through_low(node: Any, low_type: dict[str, int]) -> list[Any]:
    """The node, its low-type outputs renamed, then for each of them a Cast to its low
    type and back to fp32 under the original name."""
    from onnx import TensorProto, helper

    rounded = [o for o in node.output if o in low_type]
    for i, out in enumerate(node.output):
        if out in low_type:
            node.output[i] = f"{out}__fp32"
    nodes = [node]
    for out in rounded:
        nodes.append(
            helper.make_node(
                "Cast",
                [f"{out}__fp32"],
                [f"{out}__low"],
                to=low_type[out],
                name=f"{out}__round",
            )
        )
        nodes.append(
            helper.make_node(
                "Cast", [f"{out}__low"], [out], to=TensorProto.FLOAT, name=f"{out}__widen"
            )
        )
    return nodes


def low_precision_types(model: ModelProto) -> list[str]:
    from onnx import TensorProto

    names = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}
    found = {
        vi.type.tensor_type.elem_type
        for vi in list(model.graph.value_info) + list(model.graph.input)
    }
    found |= {i.data_type for i in model.graph.initializer}
    for node in model.graph.node:
        found |= {a.i for a in node.attribute if a.name == "to"}
    return sorted(names[t] for t in found if t in names)
