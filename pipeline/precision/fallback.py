"""FallbackSearch: accuracy-driven mixed precision for a Q/DQ graph that misses its
gate (precision.fallback=auto), on the CPU before any build, so it serves every
TensorRT flavour alike (Polygraphy's `debug precision` needs a GPU and an engine).

ModelOpt quantizes once. A quantized node is a MatMul/Gemm/Conv that reads at least
one DequantizeLinear; "keeping it in fp32" rewires those inputs to the tensors before
their Q/DQ pair (weights included) and drops Q/DQ nodes nobody reads any more, so the
rest of the graph keeps ModelOpt's scales exactly. Then, on the held-out reference
batches with ONNX Runtime:

1. the all-high-precision graph (every quantized node kept) must pass, else no subset
   can and the search stops with that graph's failing metrics;
2. sensitivity of a node = how much the gate score worsens when only that node is
   quantized, every other one kept in fp32 (one graph per node): its own error, free
   of the cancellations between nodes that make "leave one out" unreliable;
3. most sensitive first, nodes are kept one by one until the gate passes;
4. then each kept node but the last (least sensitive first) is tried back in int8/fp8
   and stays quantized if the gate still passes: fewer nodes where errors interact.

The gate score is one number per graph: the worst of every gated metric's distance
to its threshold, scaled so that 1.0 is the threshold (<= 1 passes). The search is
cached by content (the Q/DQ graph, the reference data, the gate, the task, ONNX
Runtime's version) in the calibration cache, with the final graph's judgement: a rerun
copies both and runs no ONNX Runtime."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core import fileio, hashing
from pipeline.core import gate as gate_lib
from pipeline.core.config import to_dict
from pipeline.core.errors import PipelineError
from pipeline.export import export, onnx_model
from pipeline.export.array_folder import data_sha256
from pipeline.precision import accuracy

SEARCH_VERSION = 4
QUANTIZABLE = ("MatMul", "Gemm", "Conv", "ConvTranspose")
MATMULS = ("MatMul", "Gemm")


class SearchFailed(PipelineError):
    """No graph the search may build passes; `record` says what was measured, `plain`
    (set by run) is the plain Q/DQ graph's judgement for the metrics file."""

    def __init__(self, line: str, record: dict) -> None:
        super().__init__(line)
        self.record, self.plain = record, {}


def quantized_nodes(model) -> list[Any]:
    producer = {o: n for n in model.graph.node for o in n.output}
    return [
        n
        for n in model.graph.node
        if n.op_type in QUANTIZABLE
        and any(
            producer.get(i) is not None and producer[i].op_type == "DequantizeLinear"
            for i in n.input
        )
    ]


def without_qdq(model, keep: set[str]):
    """A copy of `model` with the nodes named in `keep` reading unquantized inputs."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    producer = {o: n for n in m.graph.node for o in n.output}
    inits = {i.name: i for i in m.graph.initializer}
    for node in m.graph.node:
        if node.name not in keep:
            continue
        for idx, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            q = producer.get(dq.input[0])
            if q is not None and q.op_type == "QuantizeLinear":
                node.input[idx] = q.input[0]
            elif dq.input[0] in inits:  # a weight stored quantized: its dequantized values, in fp32
                fp32 = f"{dq.output[0]}_fp32"
                if fp32 not in inits:
                    inits[fp32] = numpy_helper.from_array(
                        _dequantize(dq, inits, numpy_helper), fp32
                    )
                    m.graph.initializer.append(inits[fp32])
                node.input[idx] = fp32
    _prune(m)
    return m


def _dequantize(dq, inits: dict, numpy_helper) -> np.ndarray:
    x = numpy_helper.to_array(inits[dq.input[0]]).astype(np.float32)
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float32)
    zero = (
        numpy_helper.to_array(inits[dq.input[2]]).astype(np.float32)
        if len(dq.input) > 2 and dq.input[2]
        else np.zeros_like(scale)
    )
    if scale.ndim == 1 and scale.size > 1:
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
        shape = [1] * x.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (x - zero) * scale


def _prune(m) -> None:
    """Drop Q/DQ nodes whose outputs nobody reads, then initializers nobody reads."""
    outputs = {o.name for o in m.graph.output}
    while True:
        used = {i for n in m.graph.node for i in n.input} | outputs
        dead = [
            n
            for n in m.graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear")
            and not any(o in used for o in n.output)
        ]
        if not dead:
            break
        for n in dead:
            m.graph.node.remove(n)
    used = {i for n in m.graph.node for i in n.input}
    for init in [i for i in m.graph.initializer if i.name not in used]:
        m.graph.initializer.remove(init)


def score(results: list[dict]) -> float:
    """1.0 at the threshold, below passes: max over gated metrics of value/threshold
    (upper bounds) or (1 - value)/(1 - threshold) (lower bounds such as cosine)."""
    worst = 0.0
    for r in results:
        if not r["enabled"]:
            continue
        value, threshold = r["value"], r["threshold"]
        if r["direction"] == "max":
            s = value / threshold if threshold > 0 else (0.0 if value <= threshold else math.inf)
        elif r["direction"] == "min":
            s = (
                (1 - value) / (1 - threshold)
                if threshold < 1
                else (0.0 if value >= threshold else math.inf)
            )
        else:
            s = 0.0 if r["passed"] else math.inf
        worst = max(worst, s)
    return worst


class Evaluator:
    """Runs graphs on the held-out batches and judges them against the gate."""

    def __init__(self, pairs: list[tuple[dict, dict]], gate_cfg: Any, task: str) -> None:
        self.pairs, self.gate_cfg, self.task = pairs, gate_cfg, task
        self.runs = 0

    def __call__(self, model) -> dict:
        got = export.run_batches(
            model.SerializeToString(), [p[0] for p in self.pairs], basic_optimizations=True
        )
        self.runs += 1
        figures = accuracy.compare([p[1] for p in self.pairs], got, self.task)
        return judged(accuracy.check_gate(figures, self.gate_cfg))


def _gated(results: list[dict]) -> dict:
    out: dict[str, dict] = {}
    for r in results:
        out.setdefault(r["subject"], {})[r["metric"]] = r["value"]
    return out


def search(
    model, pairs: list[tuple[dict, dict]], gate_cfg: Any, task: str, plain: dict
) -> tuple[Any, dict]:
    """The graph with the fewest most-sensitive quantized nodes kept in fp32 that
    passes, and the record of how it was found. `plain`: the Q/DQ graph's result."""
    nodes = quantized_nodes(model)
    if not nodes:
        raise SearchFailed(
            "precision.fallback=auto: the Q/DQ graph has no quantized MatMul, Gemm or Conv node "
            "to keep in higher precision",
            {"quantized_nodes": 0},
        )
    names = [n.name for n in nodes]
    if len(set(names)) != len(names) or not all(names):
        raise PipelineError(
            "precision.fallback=auto needs unique, non-empty node names for the quantized nodes"
        )
    evaluate = Evaluator(pairs, gate_cfg, task)
    everything = evaluate(without_qdq(model, set(names)))
    if not everything["passed"]:
        raise SearchFailed(
            f"precision.fallback=auto: even with all {len(names)} quantized nodes kept in fp32 "
            f"the graph misses the gate ({'; '.join(everything['failing'])}); the layers "
            f"ModelOpt quantizes besides them (or the gate) are the problem, not these nodes",
            {"quantized_nodes": len(names), "all_high_precision": everything},
        )
    ranked = []
    for node in nodes:
        alone = evaluate(without_qdq(model, set(names) - {node.name}))
        ranked.append(
            {
                "node": node.name,
                "op_type": node.op_type,
                "sensitivity": round(alone["score"] - everything["score"], 6),
                "score_quantized_alone": alone["score"],
                "metrics_quantized_alone": alone["metrics"],
            }
        )
    ranked.sort(key=lambda r: -r["sensitivity"])
    kept: list[str] = []
    steps = []
    for r in ranked:
        kept.append(r["node"])
        step = evaluate(without_qdq(model, set(kept)))
        steps.append(
            {"kept": len(kept), "added": r["node"], "sensitivity": r["sensitivity"], **step}
        )
        if step["passed"]:
            break
    prune = []
    for node in reversed(kept[:-1]):
        trial = [n for n in kept if n != node]
        step = evaluate(without_qdq(model, set(trial)))
        prune.append({"node": node, "requantized": step["passed"], **step})
        if step["passed"]:
            kept = trial
    runs = evaluate.runs
    matmuls = [n for n in nodes if n.op_type in MATMULS]
    record = {
        "mode": "auto",
        "needed": True,
        "quantized_nodes": len(nodes),
        "quantized_matmuls": len(matmuls),
        "kept_fp32": kept,
        "kept_sensitivity": {r["node"]: r["sensitivity"] for r in ranked if r["node"] in kept},
        "matmuls_still_quantized": sum(1 for n in matmuls if n.name not in kept),
        "plain": {k: plain[k] for k in ("score", "metrics", "failing")},
        "all_high_precision": {k: everything[k] for k in ("score", "metrics")},
        "sensitivity": ranked,
        "steps": steps,
        "prune": prune,
        "graphs_evaluated": runs,
    }
    return without_qdq(model, set(kept)), record


def cache_inputs(qdq_sha256: str, pairs: list[tuple[dict, dict]], gate_cfg: Any, task: str) -> dict:
    from pipeline.machine.fingerprint import package_version

    return {
        "search_version": SEARCH_VERSION,
        "qdq_sha256": qdq_sha256,
        "reference_inputs_sha256": data_sha256([p[0] for p in pairs]),
        "reference_outputs_sha256": data_sha256([p[1] for p in pairs]),
        "gate": to_dict(gate_cfg),
        "task": task,
        "onnxruntime": package_version("onnxruntime"),
    }


def judged(results: list[dict]) -> dict:
    """A graph's gate results in the search's terms: score, gated metrics, failures."""
    return {
        "score": round(score(results), 6),
        "passed": accuracy.passed(results),
        "metrics": _gated(results),
        "failing": [gate_lib.describe(r) for r in gate_lib.failures(results)],
    }


def run(
    dest: Path,
    qdq_sha256: str,
    pairs: list[tuple[dict, dict]],
    precision_cfg: Any,
    calibration_cfg: Any,
    task: str,
    judge: Callable[[], dict],
) -> tuple[dict, dict]:
    """dest holds the plain Q/DQ graph (sha256 given); judge() runs whatever dest holds
    against the gate (transform.judge). If the plain graph fails, dest becomes the
    search's result. Returns the search record and the final judgement (with the final
    graph's onnx_sha256). Cached by content, the judgement too: the key covers every
    input of it (graph, reference data, gate, task, ONNX Runtime), so a rerun copies the
    graph and runs no ONNX Runtime at all."""
    from pipeline.precision.quantize import cached

    inputs = cache_inputs(qdq_sha256, pairs, precision_cfg.gate, task)
    key = hashing.sha256_json(inputs)
    started = time.perf_counter()

    def make() -> tuple[dict[str, bytes], dict, str]:
        final = judge()
        record: dict[str, Any] = {"mode": "auto", "needed": not final["gate_passed"]}
        if record["needed"]:
            print(
                f"precision.fallback=auto: {precision_cfg.name} misses the gate; measuring each quantized "
                f"node's sensitivity",
                file=sys.stderr,
            )
            try:
                graph, record = search(
                    onnx_model.load(dest, check=False),
                    pairs,
                    precision_cfg.gate,
                    task,
                    judged(final["gate"]),
                )
            except SearchFailed as e:
                e.plain = final
                raise
            fileio.write_bytes(dest, graph.SerializeToString())
            final = judge()
        files = {
            "model.onnx": dest.read_bytes(),
            "search.json": fileio.to_json({"record": record, "final": final}).encode(),
        }
        return (
            files,
            {"kind": "fallback search", **{k: v for k, v in inputs.items() if k != "gate"}},
            "miss",
        )

    got, cache = cached(
        calibration_cfg, key, make, "fallback search", required=("model.onnx", "search.json")
    )
    if got.hit:
        fileio.write_bytes(dest, got.read("model.onnx"))
    cached = json.loads(got.read("search.json"))
    record, final = cached["record"], cached["final"]
    final["onnx_sha256"] = (
        got.entry.meta["files"]["model.onnx"]["sha256"]
        if got.entry is not None
        else hashing.sha256_bytes(got.read("model.onnx"))
    )
    record["cache"] = {**cache, "seconds": round(time.perf_counter() - started, 3)}
    return record, final
