"""Nodes written in a row under one name prefix, with the small constants they read: what
a rewrite of one node into several standard ONNX nodes needs (graph/ort_contrib.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from onnx import NodeProto, TensorProto

# ONNX's element types a rewrite casts to (TensorProto.FLOAT, TensorProto.INT64), named here
# so the modules that emit nodes need not import onnx at import time.
FLOAT, INT64 = 1, 7


class Emitter:
    """Appends nodes and constants named `<prefix>/<op>_<n>`: unique within the graph as
    long as the prefix is (the rewritten node's own name)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list[NodeProto] = []
        self.constants: list[TensorProto] = []
        self._count = 0

    def _name(self, what: str) -> str:
        self._count += 1
        return f"{self.prefix}/{what}_{self._count}"

    def op(self, op_type: str, *inputs: str, out: str = "", **attrs: Any) -> str:
        """One node with one output (named `out` when given); its output's name."""
        return self.multi(op_type, list(inputs), [out or ""], **attrs)[0]

    def multi(self, op_type: str, inputs: list[str], outs: list[str], **attrs: Any) -> list[str]:
        """One node with several outputs; an empty name in `outs` gets a fresh one."""
        from onnx import helper

        name = self._name(op_type)
        outs = [o or f"{name}_out{i}" for i, o in enumerate(outs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs

    def const(self, values: Any, dtype: Any = np.int64) -> str:
        """A constant tensor (an initializer) of `values` in `dtype`."""
        from onnx import numpy_helper

        name = self._name("const")
        self.constants.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def shape_dim(self, tensor: str, axis: int) -> str:
        """The size of one axis as a 1-D int64 tensor of one element."""
        if axis == -1:
            return self.op("Shape", tensor, start=-1)
        return self.op("Shape", tensor, start=axis, end=axis + 1)

    def scalar(self, one_element: str) -> str:
        """A 1-element 1-D tensor as a scalar (Range reads scalars)."""
        return self.op("Squeeze", one_element, self.const([0]))


def onnx_type(dtype: np.dtype) -> int:
    """ONNX's element type for a numpy dtype (Cast's `to`)."""
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(dtype))


def float_type(tensor: TensorProto | None) -> np.dtype:
    """The numpy type of a weight the rewrite reads its float type from (fp32 where the
    graph has none): the type of the nodes written around it."""
    from onnx import helper

    if tensor is None:
        return np.dtype(np.float32)
    return np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))


# Open shape: ONNX attributes differ per op type; each caller reads the names its op defines.
def attributes(node: NodeProto) -> dict[str, Any]:
    """A node's attributes by name, as Python values."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}
