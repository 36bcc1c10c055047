"""InspectFromBuild: what went into the engine and what TensorRT did with it,
as report.json (for tools) and report.md (for people)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import fileio, onnx_model
from pipeline.errors import PipelineError


def onnx_summary(path: Path) -> dict:
    model = onnx_model.load(path, check=False)
    return {
        "opset": onnx_model.opset(model),
        "nodes": len(model.graph.node),
        "parameters": onnx_model.parameter_count(model),
        "ops": onnx_model.op_histogram(model),
        "inputs": [{"name": s.name, "dtype": s.dtype, "dims": list(s.dims)} for s in onnx_model.inputs(model)],
        "outputs": [{"name": s.name, "dtype": s.dtype, "dims": list(s.dims)} for s in onnx_model.outputs(model)],
    }


def make_report(export_onnx: Path, built_onnx: Path, engine_dir: Path, inspect_cfg: Any) -> dict:
    manifest_path = engine_dir / "manifest.json"
    if not manifest_path.exists():
        raise PipelineError(f"no build for this machine in {engine_dir}; run the build stage first")
    manifest = fileio.read_json(manifest_path, "build manifest")
    network = fileio.read_json(engine_dir / "network.json", "network dump")
    summary = fileio.read_json(engine_dir / "build_summary.json", "build summary")
    dtype_hist: dict[str, int] = {}
    for layer in network:
        for out in layer["outputs"]:
            dtype_hist[out["dtype"]] = dtype_hist.get(out["dtype"], 0) + 1
    return {
        "model": {"exported": onnx_summary(export_onnx), "built": onnx_summary(built_onnx)},
        "network": {
            "layers": network if inspect_cfg.network_layers else [],
            "layer_count": len(network),
            "output_dtypes": dtype_hist,
        },
        "engine": {
            **manifest["engine"],
            "backend": manifest["backend"],
            "fingerprint": manifest["fingerprint"]["id"],
            "target": manifest["fingerprint"]["target"],
            "layers": summary["engine_layers"],
            "fused_layers": summary["fused_layers"],
        },
        "build_log": {k: summary[k] for k in ("counts", "warnings", "errors", "layer_passes", "layers_original",
                                              "layers_final", "fusion_ratio", "memory")},
        "build_seconds": manifest["build_seconds"],
        "precision": manifest["config"]["precision"]["name"],
    }


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(report: dict, max_rows: int) -> str:
    exp, built, eng, log = report["model"]["exported"], report["model"]["built"], report["engine"], report["build_log"]
    md = [f"# Engine report: {report['precision']}", "",
          f"- backend: {eng['backend']['flavour']} {eng['backend']['version']}",
          f"- target: {eng['target']} (fingerprint `{eng['fingerprint']}`)",
          f"- engine: {eng['bytes']:,} bytes, sha256 `{eng['sha256'][:16]}…`, built in {report['build_seconds']} s",
          f"- layers: {log['layers_original']} after parsing → {log['layers_final']} after optimization "
          f"(fusion ratio {log['fusion_ratio']})", "",
          "## ONNX model", "",
          _table(["", "exported", "built"], [
              ["opset", exp["opset"], built["opset"]],
              ["nodes", exp["nodes"], built["nodes"]],
              ["parameters", f"{exp['parameters']:,}", f"{built['parameters']:,}"]]), "",
          _table(["op", "exported", "built"],
                 [[op, exp["ops"].get(op, 0), built["ops"].get(op, 0)]
                  for op in sorted(set(exp["ops"]) | set(built["ops"]),
                                   key=lambda o: -(exp["ops"].get(o, 0) + built["ops"].get(o, 0)))]), "",
          "## Build log", "",
          _table(["severity", "count"], [[k, v] for k, v in log["counts"].items()]), ""]
    if log["memory"]:
        md += [_table(["memory", "value"], [[k, f"{v:,}"] for k, v in log["memory"].items()]), ""]
    if log["layer_passes"]:
        md += [_table(["optimizer pass", "layers"], [[p["pass"], p["layers"]] for p in log["layer_passes"]]), ""]
    md += ["### Warnings", ""] + ([f"- {w}" for w in log["warnings"]] or ["none"]) + [""]
    if eng["fused_layers"]:
        md += ["## Fusions", "", _table(["engine layer", "ONNX nodes"],
                                        [[f["layer"], ", ".join(f["onnx_nodes"])] for f in eng["fused_layers"][:max_rows]]), ""]
    if eng["layers"]:
        md += ["## Engine layers (from the build log)", "",
               _table(["kind", "name", "tactic"], [[l["kind"], l["name"], l["tactic"]] for l in eng["layers"][:max_rows]]), ""]
    layers = report["network"]["layers"]
    if layers:
        md += ["## TensorRT network after parsing", "",
               _table(["#", "layer", "type", "outputs"],
                      [[l["index"], l["name"], l["type"],
                        "; ".join(f"{o['dtype']}{o['shape']}" for o in l["outputs"])] for l in layers[:max_rows]])]
        if len(layers) > max_rows:
            md.append(f"\n… {len(layers) - max_rows} more layers in report.json")
    return "\n".join(md) + "\n"
