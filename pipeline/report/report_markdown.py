"""report.md: the report for people, in Markdown (report.html is report_html.py)."""

from __future__ import annotations

from pipeline.core import tables
from pipeline.report import precision_view
from pipeline.report.templating import first


def _optimizer_line(opt: dict) -> list[str]:
    if not opt.get("layers_parsed"):
        return []
    regions = (
        f"; {opt['regions']} Myelin region(s), each compiled into many kernels"
        if opt.get("regions")
        else ""
    )
    return [
        f"- optimizer log: {opt['layers_parsed']} network layers → {opt['layers_after']}{regions}"
    ]


def to_markdown(report: dict, max_rows: int) -> str:
    exp, built, eng, log = (
        report["model"]["exported"],
        report["model"]["built"],
        report["engine"],
        report["build_log"],
    )
    fusion, insp = report["fusion"], eng["inspector"]
    md = [
        f"# Engine report: {report['precision']}",
        "",
        f"- backend: {eng['backend']['flavour']} {eng['backend']['version']}",
        f"- target: {eng['target']} (fingerprint `{eng['fingerprint']}`)",
        f"- engine: {eng['bytes']:,} bytes, sha256 `{eng['sha256'][:16]}…`, built in {report['build_seconds']} s",
        f"- fusion ratio {log['fusion_ratio']}: {log.get('fusion_basis')}",
        *_optimizer_line(log.get("optimizer") or {}),
        f"- peak memory: {log['peak_memory_mib']} MiB; warnings: {len(log['warnings'])}",
        f"- engine layers from: {eng['layers_source']}",
        "- engine inspector: "
        + (
            f"available ({insp.get('layout')})"
            if insp.get("available")
            else f"absent: {insp.get('reason')}"
        ),
        "",
        *(
            precision_view.transform_markdown(report["precision_transform"])
            if report.get("precision_transform")
            else []
        ),
        "## ONNX model",
        "",
        tables.markdown(
            ["", "exported", "built"],
            [
                ["opset", exp["opset"], built["opset"]],
                ["nodes", exp["nodes"], built["nodes"]],
                ["parameters", f"{exp['parameters']:,}", f"{built['parameters']:,}"],
                [
                    "inputs",
                    "; ".join(f"{i['name']} {i['dtype']}{i['dims']}" for i in exp["inputs"]),
                    "; ".join(f"{i['name']} {i['dtype']}{i['dims']}" for i in built["inputs"]),
                ],
                [
                    "outputs",
                    "; ".join(f"{o['name']} {o['dtype']}{o['dims']}" for o in exp["outputs"]),
                    "; ".join(f"{o['name']} {o['dtype']}{o['dims']}" for o in built["outputs"]),
                ],
            ],
        ),
        "",
        tables.markdown(
            ["op", "exported", "built"],
            [
                [op, exp["ops"].get(op, 0), built["ops"].get(op, 0)]
                for op in sorted(
                    set(exp["ops"]) | set(built["ops"]),
                    key=lambda o: (-(exp["ops"].get(o, 0) + built["ops"].get(o, 0)), o),
                )
            ],
        ),
        "",
        "## Precision",
        "",
        tables.markdown(
            ["precision", "engine layers", "network layers"],
            [
                [p, eng["precisions"].get(p, 0), report["network"]["precisions"].get(p, 0)]
                for p in dict.fromkeys(
                    list(eng["precisions"]) + list(report["network"]["precisions"])
                )
            ],
        ),
        "",
        "## Build log",
        "",
        tables.markdown(["severity", "count"], [[k, v] for k, v in log["counts"].items()]),
        "",
    ]
    if log["memory"]:
        md += [
            tables.markdown(["memory", "value"], [[k, f"{v:,}"] for k, v in log["memory"].items()]),
            "",
        ]
    if log["layer_passes"]:
        md += [
            tables.markdown(
                ["optimizer pass", "layers"],
                [[p["pass"], p["layers"]] for p in log["layer_passes"]],
            ),
            "",
        ]
    if log["timing_cache"]:
        md += ["### Timing cache", ""] + [f"- {t}" for t in log["timing_cache"]] + [""]
    md += ["### Warnings", ""] + ([f"- {w}" for w in log["warnings"]] or ["none"]) + [""]
    md += [
        "## Fusions",
        "",
        f"From the {fusion['source']}: {fusion['onnx_nodes_mapped']} of "
        f"{fusion['onnx_nodes_live']} running ONNX nodes mapped to engine layers.",
        "",
    ]
    if fusion["rows"]:
        md += [
            tables.markdown(
                ["engine layer", "type", "precision", "ONNX nodes"],
                [
                    [
                        r["engine_layer"],
                        r["type"],
                        r["precision"],
                        f"{len(r['onnx_nodes'])}: {first(r['onnx_nodes'], 6)}",
                    ]
                    for r in fusion["rows"][:max_rows]
                ],
            ),
            "",
        ]
    if fusion["unmapped"]:
        md += [
            f"ONNX nodes in no engine layer (folded or removed): {first(fusion['unmapped'], 20)}",
            "",
        ]
    if eng["layers"]:
        md += [
            f"## Engine layers ({eng['layers_source']})",
            "",
            tables.markdown(
                ["name", "type", "precision", "tactic", "ONNX nodes"],
                [
                    [l["name"], l["type"], l["precision"], l["tactic"], first(l["onnx_nodes"], 3)]
                    for l in eng["layers"][:max_rows]
                ],
            ),
            "",
        ]
    layers = report["network"]["layers"]
    if layers:
        md += [
            "## TensorRT network after parsing",
            "",
            tables.markdown(
                ["#", "layer", "type", "precision", "outputs"],
                [
                    [
                        l["index"],
                        l["name"],
                        l["type"],
                        l["precision"],
                        "; ".join(f"{o['dtype']}{o['shape']}" for o in l["outputs"]),
                    ]
                    for l in layers[:max_rows]
                ],
            ),
        ]
        if len(layers) > max_rows:
            md.append(f"\n… {len(layers) - max_rows} more layers in report.json")
    return "\n".join(md) + "\n"
