"""The one line a failed ONNX parse ends in: which node (index, name, op type, domain),
the parser's own words, and what to do about it.

The parser's error object names the node and op but not its domain or the model's
opset, so those are read from the graph (without its weights) once the parse failed."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    from onnx import ModelProto

STANDARD = ("", "ai.onnx")
# Where ops of well-known non-standard domains come from, for the way out.
DOMAIN_ORIGIN = {
    "com.microsoft": "an ONNX Runtime contrib op (its transformers optimizer or an ORT export "
    "wrote it): export from the source model without ONNX Runtime's graph optimizations",
    "ai.onnx.ml": "an ONNX-ML op (scikit-learn and similar converters write them): TensorRT "
    "imports none of them, so run this part outside the engine",
    "ai.onnx.preview.training": "a training op: export the model for inference",
    "trt.plugins": "a TensorRT plugin op: build.plugins must name the library that registers it",
}
# `creator && "Plugin not found..."`: the text of a failed C++ assertion, quoted.
ASSERTION = re.compile(r'^[\w.\->()]+ && "(.*)"$')
# "NonZero plugin creator version 1 was not found in plugin registry."
PLUGIN_MISSING = re.compile(r"plugin.*not found|not found in plugin registry", re.IGNORECASE)


def describe(trt: ModuleType, parser: Any, onnx_path: Path, logged: list[str]) -> str:
    """'TensorRT cannot parse <file>: ...' for a parse that returned False."""
    errors = [parser.get_error(i) for i in range(parser.num_errors)]
    head = f"TensorRT cannot parse {onnx_path.name}"
    if not errors:
        return f"{head}: {logged[0] if logged else 'no detail from the parser'}"
    graph = _graph(onnx_path)
    first = errors[0]
    op = str(_call(first, "node_operator") or "")
    node = _find_node(graph, _call(first, "node"), op, str(_call(first, "node_name") or ""))
    said = _parser_text(first)
    line = f"{head}: {_where(first, node, graph, op)}: parser says {said}"
    if op:
        line += "; " + way_out(trt, parser, op, node, graph, said)
    others = sorted({str(_call(e, "node_operator") or "?") for e in errors[1:]})
    if others:
        line += f" (+{len(errors) - 1} more error(s), ops: {', '.join(others)})"
    return line


def way_out(trt: ModuleType, parser: Any, op: str, node: Any, graph: Any, said: str = "") -> str:
    domain = getattr(node, "domain", "") or ""
    plugin = f"or name a plugin library that implements {op} in build.plugins"
    if domain not in STANDARD:
        origin = DOMAIN_ORIGIN.get(
            domain,
            "it comes from whatever wrote the model (a custom exporter, a symbolic "
            "function or a graph rewrite): export without it",
        )
        return f"{op} is not an ONNX op (domain {domain}); {origin}, {plugin}"
    runtime = f"{trt.__name__} {trt.__version__}"
    newer = _newer_version(op, _opset(graph, ""))
    opset = (
        f"re-export at a newer opset (model.opset={newer}, where {op} changed), " if newer else ""
    )
    if PLUGIN_MISSING.search(said):
        # The importer exists but builds the op from a plugin no loaded library registers.
        return (
            f"{runtime} imports {op} through a plugin that no loaded library registers: "
            f"{opset}name the plugin library that provides it in build.plugins, or replace "
            f"{op} in the model"
        )
    supports = getattr(parser, "supports_operator", None)
    if callable(supports) and not supports(op):
        return (
            f"{runtime} has no importer for the ONNX op {op}: {opset}compute it outside the "
            f"engine, rewrite it in supported ops at export, {plugin}"
        )
    return (
        f"{runtime} imports {op} but not this node (its attributes, input types or shapes): "
        f"{opset}change how the model uses {op}, {plugin}"
    )


def _graph(onnx_path: Path) -> Any:
    """The model without its weights, or None where it cannot be read (the parse
    error is then reported with what the parser said alone)."""
    from pipeline.graph import onnx_model

    try:
        return onnx_model.load(onnx_path, check=False, weights=False)
    except PipelineError:  # the parser's own text still goes out
        return None


def _call(err: Any, name: str) -> Any:
    fn = getattr(err, name, None)  # older parsers lack some accessors
    return fn() if callable(fn) else None


def _find_node(model: ModelProto, index: Any, op: str, name: str) -> Any:
    """The failing node of the graph: by the parser's index where that node is the one
    it names, else by name and op type (a node inside a local function)."""
    if model is None:
        return None
    nodes = list(model.graph.node)
    if isinstance(index, int) and 0 <= index < len(nodes) and nodes[index].op_type == op:
        return nodes[index]
    for n in nodes + [n for f in model.functions for n in f.node]:
        if n.op_type == op and (not name or n.name == name):
            return n
    return None


def _where(err: Any, node: Any, model: ModelProto, op: str) -> str:
    index, name = _call(err, "node"), _call(err, "node_name")
    if not op and (not isinstance(index, int) or index < 0):
        return "the graph"
    label = f"node {index}" if isinstance(index, int) and index >= 0 else "node"
    if name:
        label += f" '{name}'"
    stack = _call(err, "local_function_stack") or []
    if stack:  # the node lies inside local functions, called from these nodes
        label += f" inside local function {' > '.join(str(s) for s in stack)}"
    domain = getattr(node, "domain", None)
    if domain is None:
        return f"{label} (op {op})"
    shown = domain if domain not in STANDARD else "ai.onnx"
    version = _opset(model, domain)
    return f"{label} (op {op}, domain {shown}{f', opset {version}' if version else ''})"


def _parser_text(err: Any) -> str:
    desc = " ".join(str(_call(err, "desc") or "").split())
    quoted = ASSERTION.match(desc)
    text = quoted.group(1) if quoted else desc
    code = str(_call(err, "code") or "").rsplit(".", 1)[-1]
    func = _call(err, "func")
    detail = " in ".join(str(x) for x in (code, func) if x)
    return f'"{text}"' + (f" ({detail})" if detail else "")


def _opset(model: ModelProto, domain: str) -> int | None:
    if model is None:
        return None
    for imp in model.opset_import:
        if imp.domain == domain or (domain in STANDARD and imp.domain in STANDARD):
            return int(imp.version)
    return None


def _newer_version(op: str, opset: int | None) -> int | None:
    """The opset of op's newest ONNX version where that is past the model's, else None."""
    if opset is None:
        return None
    try:
        import onnx.defs

        latest = onnx.defs.get_schema(op, "").since_version
    except Exception:  # not a registered ONNX op: no opset helps
        return None
    return int(latest) if latest > opset else None
