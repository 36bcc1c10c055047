"""InspectFromBuild: what went into the engine and what TensorRT did with it, as
report.json (for tools), report.md (for people) and report.html (report_html.py).

Engine layers come from the best source there is: the EngineInspector on a GPU that
can load the engine, else the ProfilingVerbosity.DETAILED dump in the build log, else
the log's `Engine Layer Information` lines (a Myelin region and its I/O only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.analysis import buildlog, node_precision, report_layers
from pipeline.core import fileio, tables
from pipeline.export import onnx_model
from pipeline.report import report_graph
from pipeline.report.templating import first
from pipeline.core.errors import PipelineError

LOG_KEYS = ("counts", "warnings", "errors", "phases", "layer_passes", "layers_original", "layers_final",
            "fusion_ratio", "fusion_basis", "optimizer", "memory", "layer_memory", "peak_memory_mib", "timing_cache",
            "fusion_event_count")


def onnx_summary(path: Path, model=None) -> dict:
    model = model if model is not None else onnx_model.load(path, check=False)
    return {
        "opset": onnx_model.opset(model),
        "nodes": len(model.graph.node),
        "parameters": onnx_model.parameter_count(model),
        "ops": onnx_model.op_histogram(model),
        "inputs": [{"name": s.name, "dtype": s.dtype, "dims": list(s.dims)} for s in onnx_model.inputs(model)],
        "outputs": [{"name": s.name, "dtype": s.dtype, "dims": list(s.dims)} for s in onnx_model.outputs(model)],
    }


def _onnx_dtypes(model) -> dict[str, str]:
    import onnx

    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is a nicety here; the node list is what matters
        pass
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input):
        name = onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()
        out[vi.name] = "fp8" if name.startswith("float8") else report_layers.dtype(name)
    return out


def engine_layers(summary: dict, inspection: dict | None) -> tuple[list[dict], list[dict], str, bool]:
    """(layers, I/O tensors, where they came from, whether they are the engine's real layers)."""
    if inspection and inspection.get("available"):
        where = f"engine inspector on the GPU, {inspection['layout']}"
        return inspection["layers"], inspection["io_tensors"], where, True
    plan = summary.get("engine_plan")
    if plan and plan.get("layers"):
        return plan["layers"], plan.get("io_tensors", []), plan["source"], True
    return summary.get("engine_layers", []), [], "build log (Engine Layer Information: regions and their I/O)", False


def fusion_table(layers: list[dict], detailed: bool, summary: dict, live_onnx: list[str]) -> dict:
    rows = [{"engine_layer": l["name"], "type": l["type"], "precision": l["precision"], "onnx_nodes": l["onnx_nodes"]}
            for l in layers if l["onnx_nodes"]]
    source = "engine layers' metadata" if detailed else "ForeignNode metadata in the build log"
    if not rows:
        prec = {l["name"]: l["precision"] for l in layers}
        rows = [{"engine_layer": f["layer"], "type": "ForeignNode", "precision": prec.get(f["layer"], "unknown"),
                 "onnx_nodes": f["onnx_nodes"]} for f in summary.get("fused_layers", [])]
    mapped = {n for r in rows for n in r["onnx_nodes"]}
    unmapped = [n for n in live_onnx if n not in mapped]
    return {"source": source if rows else "none: the build log names no ONNX layers", "rows": rows,
            "onnx_nodes_mapped": len(mapped), "onnx_nodes_live": len(live_onnx), "unmapped": unmapped}


def make_report(export_onnx: Path, built_onnx: Path, engine_dir: Path, inspect_cfg: Any,
                inspection: dict | None = None) -> dict:
    manifest_path = engine_dir / "manifest.json"
    if not manifest_path.exists():
        raise PipelineError(f"no build for this machine in {engine_dir}; run the build stage first")
    manifest = fileio.read_json(manifest_path, "build manifest")
    network = fileio.read_json(engine_dir / "network.json", "network dump")
    summary = buildlog.load_summary(engine_dir)
    built_model = onnx_model.load(built_onnx, check=False)
    network = [{**l, "precision": report_layers.network_precision(l)} for l in network]
    dtype_hist: dict[str, int] = {}
    for layer in network:
        for out in layer["outputs"]:
            dtype_hist[out["dtype"]] = dtype_hist.get(out["dtype"], 0) + 1
    layers, io_tensors, source, detailed = engine_layers(summary, inspection)
    live = [n.name for n in report_graph.live_nodes(built_model)]
    precision_of = node_precision.resolver({n.name: n.op_type for n in built_model.graph.node}, layers, detailed,
                                           {l["name"]: l["precision"] for l in network},
                                           summary.get("onnx_nodes") or {}, _onnx_dtypes(built_model))
    max_nodes = int(getattr(inspect_cfg, "graph_max_nodes", 150))
    inspector = ({k: v for k, v in inspection.items() if k not in ("layers", "io_tensors")}
                 if inspection else {"available": False, "reason": "not attempted"})
    return {
        "model": {"exported": onnx_summary(export_onnx), "built": onnx_summary(built_onnx, built_model)},
        "network": {
            "layers": network if inspect_cfg.network_layers else [],
            "layer_count": len(network),
            "output_dtypes": dtype_hist,
            "precisions": report_layers.histogram(network),
        },
        "engine": {
            **manifest["engine"],
            "backend": manifest["backend"],
            "fingerprint": manifest["fingerprint"]["id"],
            "target": manifest["fingerprint"]["target"],
            "layers_source": source,
            "layers_detailed": detailed,
            "layers": layers,
            "io_tensors": io_tensors,
            "precisions": report_layers.histogram(layers) if layers else {},
            "inspector": inspector,
        },
        "fusion": fusion_table(layers, detailed, summary, live),
        "build_log": {k: summary.get(k) for k in LOG_KEYS},
        "build_seconds": manifest["build_seconds"],
        "precision": manifest["config"]["precision"]["name"],
        "graph": report_graph.onnx_graph(built_model, precision_of, max_nodes),
        "engine_graph": report_graph.engine_graph(layers, io_tensors, max_nodes) if detailed else None,
    }


def _optimizer_line(opt: dict) -> list[str]:
    if not opt.get("layers_parsed"):
        return []
    regions = f"; {opt['regions']} Myelin region(s), each compiled into many kernels" if opt.get("regions") else ""
    return [f"- optimizer log: {opt['layers_parsed']} network layers → {opt['layers_after']}{regions}"]


def precision_transform(calibration: dict) -> dict:
    """What the calibrate stage did to the graph, and on which data: a report that
    hides random calibration data or a fallback would not be honest."""
    calib = calibration.get("calibration") or {}
    data = calib.get("data") or {}
    return {
        "precision": calibration.get("precision"),
        "transform": calibration.get("transform"),
        "accuracy": calibration.get("accuracy", {}),
        "gate_passed": all(g.get("passed", True) for g in calibration.get("gate", [])),
        "held_out_batches": calibration.get("held_out_batches"),
        "evaluated_with": calibration.get("evaluated_with"),
        "calibration_data": {k: data[k] for k in ("source", "num_samples", "random", "note", "fallback", "path",
                                                  "factory") if data.get(k) not in (None, "")} or None,
        "calibration_cache_hit": (calib.get("cache") or {}).get("hit"),
        "reference": calibration.get("reference"),
        "reference_overlap": calibration.get("reference_overlap"),
        "fallback": _fallback(calibration.get("fallback")),
    }


def _fallback(fb: dict | None) -> dict | None:
    """precision.fallback=auto: the sensitivity table and the search's steps."""
    if not fb or not fb.get("needed"):
        return fb
    return {"needed": True, "kept_fp32": fb["kept_fp32"], "quantized_matmuls": fb["quantized_matmuls"],
            "matmuls_still_quantized": fb["matmuls_still_quantized"], "plain": fb["plain"],
            "cache_hit": (fb.get("cache") or {}).get("hit"),
            "sensitivity": [[r["node"], r["op_type"], r["sensitivity"], "kept fp32" if r["node"] in fb["kept_fp32"]
                             else "quantized"] for r in fb["sensitivity"]],
            "steps": [[s["kept"], s["added"], s["score"], "pass" if s["passed"] else "fail"] for s in fb["steps"]]
            + [["", f"{p['node']} quantized again?", p["score"],
                "pass: quantized again" if p["passed"] else "fail: stays fp32"] for p in fb.get("prune", [])]}


SENSITIVITY_HEADERS = ["node", "op", "sensitivity (gate score added when quantized alone)", "result"]
STEP_HEADERS = ["nodes kept", "last kept", "gate score (<= 1 passes)", "gate"]


def mark_kept_nodes(report: dict) -> None:
    """Outline the nodes precision.fallback kept in fp32 in the graph picture."""
    kept = set(((report.get("precision_transform") or {}).get("fallback") or {}).get("kept_fp32") or [])
    for g in [report["graph"], *report["graph"].get("details", [])]:
        for node in g["nodes"]:
            if node.get("name") in kept:
                node["marked"] = True
                node["tooltip"] = f"{node.get('tooltip', '')}\nkept in fp32 by precision.fallback=auto"


ACCURACY_HEADERS = ["output", "max abs error", "mean rel error", "cosine", "top-1 agreement"]


def accuracy_rows(figures: dict) -> list[list]:
    """One row per output; an embedding's cosine is its worst row, with the mean beside it."""
    return [[out, f"{m['max_abs_error']:.3g}", f"{m['mean_rel_error']:.3g}",
             f"{m['cosine']:.6f}" + (f" (worst row; mean {m['cosine_mean']:.6f})" if "cosine_mean" in m else ""),
             m.get("top1_agreement", "")] for out, m in figures.items()]


def reference_line(t: dict) -> str:
    ref = t.get("reference") or {}
    line = f"- reference inputs: {ref.get('source', 'unknown')}" + (f" ({ref['path']})" if ref.get("path") else "")
    if ref.get("random"):
        line += " — RANDOM inputs, not representative of real inputs"
    overlap = t.get("reference_overlap")
    if overlap:
        line += (f"; {overlap['overlapping_samples']} of {overlap['reference_samples']} reference samples are also "
                 f"calibration samples and were left out")
    return line


def _fallback_markdown(fb: dict | None) -> list[str]:
    if not fb:
        return []
    if not fb.get("needed"):
        return ["- precision.fallback=auto: not needed, the plain graph passed", ""]
    return [f"### precision.fallback=auto: {len(fb['kept_fp32'])} nodes kept in fp32, "
            f"{fb['matmuls_still_quantized']} of {fb['quantized_matmuls']} matrix multiplies still quantized", "",
            f"The plain graph missed the gate: {'; '.join(fb['plain']['failing'])}.", "",
            tables.markdown(SENSITIVITY_HEADERS, fb["sensitivity"]), "", tables.markdown(STEP_HEADERS, fb["steps"]), ""]


def _transform_markdown(t: dict) -> list[str]:
    md = ["## Precision transform", "", f"- {t['precision']}: {t['transform']}", reference_line(t)]
    data = t.get("calibration_data")
    if data:
        md.append(f"- calibration data: {data.get('source')}, {data.get('num_samples')} samples"
                  + (" — RANDOM data, not representative of real inputs" if data.get("random") else "")
                  + (f" ({data['fallback']})" if data.get("fallback") else "")
                  + (f"; {data['note']}" if data.get("note") else ""))
        md.append(f"- calibration cache: {'hit' if t.get('calibration_cache_hit') else 'miss'}")
    rows = accuracy_rows(t["accuracy"])
    md += ["", f"Against the fp32 reference on {t['held_out_batches']} held-out batches, run by "
           f"{t.get('evaluated_with') or 'onnxruntime'} (gate {'passed' if t['gate_passed'] else 'FAILED'}):", "",
           tables.markdown(ACCURACY_HEADERS, rows), ""]
    return md + _fallback_markdown(t.get("fallback"))


def to_markdown(report: dict, max_rows: int) -> str:
    exp, built, eng, log = report["model"]["exported"], report["model"]["built"], report["engine"], report["build_log"]
    fusion, insp = report["fusion"], eng["inspector"]
    md = [f"# Engine report: {report['precision']}", "",
          f"- backend: {eng['backend']['flavour']} {eng['backend']['version']}",
          f"- target: {eng['target']} (fingerprint `{eng['fingerprint']}`)",
          f"- engine: {eng['bytes']:,} bytes, sha256 `{eng['sha256'][:16]}…`, built in {report['build_seconds']} s",
          f"- fusion ratio {log['fusion_ratio']}: {log.get('fusion_basis')}",
          *_optimizer_line(log.get("optimizer") or {}),
          f"- peak memory: {log['peak_memory_mib']} MiB; warnings: {len(log['warnings'])}",
          f"- engine layers from: {eng['layers_source']}",
          "- engine inspector: " + (f"available ({insp.get('layout')})" if insp.get("available")
                                    else f"absent: {insp.get('reason')}"), "",
          *(_transform_markdown(report["precision_transform"]) if report.get("precision_transform") else []),
          "## ONNX model", "",
          tables.markdown(["", "exported", "built"], [
              ["opset", exp["opset"], built["opset"]],
              ["nodes", exp["nodes"], built["nodes"]],
              ["parameters", f"{exp['parameters']:,}", f"{built['parameters']:,}"],
              ["inputs", "; ".join(f"{i['name']} {i['dtype']}{i['dims']}" for i in exp["inputs"]),
               "; ".join(f"{i['name']} {i['dtype']}{i['dims']}" for i in built["inputs"])],
              ["outputs", "; ".join(f"{o['name']} {o['dtype']}{o['dims']}" for o in exp["outputs"]),
               "; ".join(f"{o['name']} {o['dtype']}{o['dims']}" for o in built["outputs"])]]), "",
          tables.markdown(["op", "exported", "built"],
                 [[op, exp["ops"].get(op, 0), built["ops"].get(op, 0)]
                  for op in sorted(set(exp["ops"]) | set(built["ops"]),
                                   key=lambda o: (-(exp["ops"].get(o, 0) + built["ops"].get(o, 0)), o))]), "",
          "## Precision", "",
          tables.markdown(["precision", "engine layers", "network layers"],
                 [[p, eng["precisions"].get(p, 0), report["network"]["precisions"].get(p, 0)]
                  for p in dict.fromkeys(list(eng["precisions"]) + list(report["network"]["precisions"]))]), "",
          "## Build log", "",
          tables.markdown(["severity", "count"], [[k, v] for k, v in log["counts"].items()]), ""]
    if log["memory"]:
        md += [tables.markdown(["memory", "value"], [[k, f"{v:,}"] for k, v in log["memory"].items()]), ""]
    if log["layer_passes"]:
        md += [tables.markdown(["optimizer pass", "layers"], [[p["pass"], p["layers"]] for p in log["layer_passes"]]), ""]
    if log["timing_cache"]:
        md += ["### Timing cache", ""] + [f"- {t}" for t in log["timing_cache"]] + [""]
    md += ["### Warnings", ""] + ([f"- {w}" for w in log["warnings"]] or ["none"]) + [""]
    md += ["## Fusions", "", f"From the {fusion['source']}: {fusion['onnx_nodes_mapped']} of "
           f"{fusion['onnx_nodes_live']} running ONNX nodes mapped to engine layers.", ""]
    if fusion["rows"]:
        md += [tables.markdown(["engine layer", "type", "precision", "ONNX nodes"],
                      [[r["engine_layer"], r["type"], r["precision"],
                        f"{len(r['onnx_nodes'])}: {first(r['onnx_nodes'], 6)}"]
                       for r in fusion["rows"][:max_rows]]), ""]
    if fusion["unmapped"]:
        md += [f"ONNX nodes in no engine layer (folded or removed): {first(fusion['unmapped'], 20)}", ""]
    if eng["layers"]:
        md += [f"## Engine layers ({eng['layers_source']})", "",
               tables.markdown(["name", "type", "precision", "tactic", "ONNX nodes"],
                      [[l["name"], l["type"], l["precision"], l["tactic"], first(l["onnx_nodes"], 3)]
                       for l in eng["layers"][:max_rows]]), ""]
    layers = report["network"]["layers"]
    if layers:
        md += ["## TensorRT network after parsing", "",
               tables.markdown(["#", "layer", "type", "precision", "outputs"],
                      [[l["index"], l["name"], l["type"], l["precision"],
                        "; ".join(f"{o['dtype']}{o['shape']}" for o in l["outputs"])] for l in layers[:max_rows]])]
        if len(layers) > max_rows:
            md.append(f"\n… {len(layers) - max_rows} more layers in report.json")
    return "\n".join(md) + "\n"
