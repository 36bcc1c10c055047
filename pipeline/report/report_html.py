"""report.html: the inspect report as one self-contained page (inline CSS and SVG,
no scripts, no external assets), rendered from report.json alone."""

from __future__ import annotations

import html
from typing import Any

from pipeline.report import graph_svg
from pipeline.report.report import (ACCURACY_HEADERS, SENSITIVITY_HEADERS, STEP_HEADERS, accuracy_rows,
                                    reference_line)
from pipeline.analysis.buildlog import SEVERITIES
from pipeline.analysis.report_layers import PRECISION_COLOURS

CSS = """
body{font:14px/1.45 Helvetica,Arial,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
p.warn{background:#fff3cd;border:1px solid #e0b84c;padding:6px 10px;border-radius:4px}
main{max-width:1320px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:24px;margin:6px 0 2px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:2px solid #dde1e6;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}.sub{color:#5b6270;margin:0 0 12px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:10px}
.card{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:8px 12px}
.card b{display:block;font-size:20px}.card span{color:#5b6270;font-size:12px}
table{border-collapse:collapse;background:#fff;margin:6px 0 10px;font-size:12.5px}
th,td{border:1px solid #dde1e6;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:11.5px;font-weight:600}
.graph{overflow:auto;max-height:1100px;background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:6px}
.legend{margin:6px 0}.swatch{margin-right:14px;font-size:12.5px}
.swatch i{display:inline-block;width:12px;height:12px;border:1px solid #555;margin-right:4px;vertical-align:-1px}
.note{background:#fff8e1;border:1px solid #f0d58c;border-radius:6px;padding:6px 10px}
.bad{color:#b3261e;font-weight:600}.ok{color:#1b7f3b;font-weight:600}
.cols{display:flex;gap:28px;flex-wrap:wrap;align-items:flex-start}
code{font-size:12px;background:#eef1f5;padding:0 3px;border-radius:3px}
details>summary{cursor:pointer;font-weight:600;margin:6px 0}
"""


def e(value: Any) -> str:
    return html.escape(str(value))


def _tag(precision: str) -> str:
    fill = PRECISION_COLOURS.get(precision, PRECISION_COLOURS["unknown"])
    fg = "#fff" if precision in ("fp32", "fp64", "fp8") else "#111"
    return f'<span class="tag" style="background:{fill};color:{fg}">{e(precision)}</span>'


def table(headers: list[str], rows: list[list[Any]], raw_cols: tuple[int, ...] = (),
          num_cols: tuple[int, ...] = ()) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            text = v if i in raw_cols else e(v)
            cells.append(f'<td class="num">{text}</td>' if i in num_cols else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def bar_chart(counts: dict[str, int], colours: bool = True, width: int = 360) -> str:
    """Horizontal bars as inline SVG, one per key."""
    if not counts:
        return "<p>none</p>"
    counts = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))  # JSON sorts keys; re-rank
    top = max(counts.values()) or 1
    row, label_w = 22, 110
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + label_w + 50}" height="{row * len(counts) + 6}" '
             f'font-family="Helvetica, Arial, sans-serif" font-size="12">']
    for i, (k, v) in enumerate(counts.items()):
        w = max(1.0, width * v / top)
        fill = PRECISION_COLOURS.get(k, "#8a94a6") if colours else "#8a94a6"
        y = i * row + 3
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{e(k)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{row - 6}" fill="{fill}" stroke="#555" '
                     f'stroke-width="0.5"/><text x="{label_w + w + 5:.1f}" y="{y + 14}">{v}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _first(names: list[str], n: int) -> str:
    return ", ".join(names[:n]) + (f" … +{len(names) - n}" if len(names) > n else "")


def _mib(n: Any) -> str:
    return f"{n / (1 << 20):,.2f} MiB" if isinstance(n, (int, float)) else "–"


def _cards(r: dict) -> str:
    eng, log = r["engine"], r["build_log"]
    items = [
        (r["precision"], "precision"),
        (f"{eng['backend']['flavour']} {eng['backend']['version']}", "TensorRT"),
        (_mib(eng["bytes"]), "engine size"),
        (f"{r['build_seconds']} s", "build time"),
        (f"{log['layers_original']} → {log['layers_final']}", "layers parsed → optimized"),
        (log["fusion_ratio"], "fusion ratio"),
        (f"{log['peak_memory_mib']} MiB", "peak memory"),
        (len(log["warnings"]), "warnings"),
        (len(eng["layers"]), "engine layers"),
    ]
    return '<div class="cards">' + "".join(f'<div class="card"><b>{e(v)}</b><span>{e(k)}</span></div>'
                                           for v, k in items) + "</div>"


def _graph_section(r: dict) -> str:
    g = r["graph"]
    precisions = list(dict.fromkeys(n["precision"] for n in g["nodes"] if n.get("precision")))
    out = ["<h2>Graph</h2>",
           '<p class="sub">The ONNX graph TensorRT parsed (constants folded away), each node coloured by the '
           "precision it runs at (engine layer where known, else the parsed TensorRT network). "
           "Hover a box for its full name.</p>", graph_svg.legend(precisions)]
    for f in g["folded"]:
        out.append(f'<p class="note">Folded {len(f["instances"])} repeats of <code>{e(f["family"])}</code> '
                   f'({", ".join(str(n) for n in f["nodes_each"])} nodes each) into one box each; the bar under a '
                   "box is its precision mix. The first repeat is drawn in full below.</p>")
    if g.get("truncated"):
        out.append(f'<p class="note">{g["truncated"]} more boxes not drawn (inspect.graph_max_nodes).</p>')
    out.append(f'<div class="graph">{graph_svg.render(g["nodes"], g["edges"], "onnx-graph")}</div>')
    for i, d in enumerate(g["details"]):
        out.append(f"<h3>{e(d['title'])}</h3>"
                   f'<div class="graph">{graph_svg.render(d["nodes"], d["edges"], f"detail-{i}")}</div>')
    eg = r.get("engine_graph")
    if eg and eg["nodes"]:
        out.append("<h3>Engine layers after fusion</h3>"
                   f'<p class="sub">The engine\'s own layers ({e(r["engine"]["layers_source"])}), joined by the '
                   "tensors they pass.</p>"
                   f'<div class="graph">{graph_svg.render(eg["nodes"], eg["edges"], "engine-graph")}</div>')
    return "".join(out)


def _transform_section(r: dict) -> str:
    t = r.get("precision_transform")
    if not t:
        return ""
    out = [f"<h2>Precision transform</h2><p>{e(t['precision'])}: {e(t['transform'])}</p>"]
    data = t.get("calibration_data")
    if data:
        warn = " class=\"warn\"" if data.get("random") else ""
        out.append(f"<p{warn}>calibration data: {e(data.get('source'))}, {e(data.get('num_samples'))} samples"
                   + (" — <b>random data, not representative of real inputs</b>" if data.get("random") else "")
                   + (f" ({e(data['fallback'])})" if data.get("fallback") else "")
                   + f"; cache {'hit' if t.get('calibration_cache_hit') else 'miss'}</p>")
    rows = accuracy_rows(t["accuracy"])
    out.append(f"<p class=\"sub\">Against the fp32 reference on {e(t['held_out_batches'])} held-out batches, "
               f"run by {e(t.get('evaluated_with') or 'onnxruntime')}; "
               f"gate {'passed' if t['gate_passed'] else 'FAILED'}.</p>")
    out.append(table(ACCURACY_HEADERS, rows))
    ref = t.get("reference") or {}
    warn = ' class="warn"' if ref.get("random") else ""
    out.append(f"<p{warn}>{e(reference_line(t)[2:])}</p>")
    fb = t.get("fallback")
    if fb and fb.get("needed"):
        out.append(f"<h3>precision.fallback=auto: {len(fb['kept_fp32'])} nodes kept in fp32 (outlined in the graph), "
                   f"{e(fb['matmuls_still_quantized'])} of {e(fb['quantized_matmuls'])} matrix multiplies still "
                   f"quantized</h3><p class=\"sub\">The plain graph missed the gate: "
                   f"{e('; '.join(fb['plain']['failing']))}.</p>")
        out.append(table(SENSITIVITY_HEADERS, fb["sensitivity"]) + table(STEP_HEADERS, fb["steps"]))
    elif fb:
        out.append("<p>precision.fallback=auto: not needed, the plain graph passed.</p>")
    return "".join(out)


def _precision_section(r: dict) -> str:
    eng, net = r["engine"]["precisions"], r["network"]["precisions"]
    return ("<h2>Precision</h2><div class=\"cols\">"
            f"<div><h3>Engine layers ({len(r['engine']['layers'])})</h3>{bar_chart(eng)}</div>"
            f"<div><h3>TensorRT network layers ({r['network']['layer_count']})</h3>{bar_chart(net)}</div></div>")


def _fusion_section(r: dict, max_rows: int) -> str:
    f = r["fusion"]
    rows = [[e(x["engine_layer"]), e(x["type"]), _tag(x["precision"]), len(x["onnx_nodes"]),
             "<br>".join(e(n) for n in x["onnx_nodes"][:40]) + (f"<br>… +{len(x['onnx_nodes']) - 40}"
                                                                 if len(x["onnx_nodes"]) > 40 else "")]
            for x in f["rows"][:max_rows]]
    out = [f"<h2>Fusions: ONNX nodes → engine layers</h2><p class=\"sub\">From the {e(f['source'])}: "
           f"{f['onnx_nodes_mapped']} of {f['onnx_nodes_live']} running ONNX nodes mapped.</p>"]
    if rows:
        out.append(table(["engine layer", "type", "precision", "nodes", "ONNX nodes"], rows, (0, 1, 2, 4), (3,)))
    if f["unmapped"]:
        out.append(f"<details><summary>{len(f['unmapped'])} ONNX nodes in no engine layer (folded or removed)"
                   f"</summary><p>{e(', '.join(f['unmapped']))}</p></details>")
    return "".join(out)


def _engine_section(r: dict, max_rows: int) -> str:
    eng, insp = r["engine"], r["engine"]["inspector"]
    out = ["<h2>Engine</h2>",
           table(["", ""], [["file", eng["file"]], ["bytes", f"{eng['bytes']:,}"], ["sha256", eng["sha256"]],
                            ["fingerprint", eng["fingerprint"]], ["target", eng["target"]],
                            ["layers from", eng["layers_source"]]])]
    if insp.get("available"):
        out.append(f'<p class="ok">Engine inspector: loaded on the GPU ({e(insp.get("layout"))}).</p>')
    else:
        out.append(f'<p class="note">Engine inspector (per-layer details from the loaded engine) is absent: '
                   f'{e(insp.get("reason"))}. The layers below come from the {e(eng["layers_source"])}.</p>')
    if eng["io_tensors"]:
        out.append(table(["I/O tensor", "mode", "dtype", "shape"],
                         [[t["name"], t.get("mode"), t["dtype"], t["shape"]] for t in eng["io_tensors"]]))
    rows = [[e(l["name"]), e(l["type"]), _tag(l["precision"]),
             e("; ".join(f"{t['dtype']}{t['shape']}" for t in l["inputs"])),
             e("; ".join(f"{t['dtype']}{t['shape']}" for t in l["outputs"])), e(l["tactic"]),
             e(_first(l["onnx_nodes"], 6))]
            for l in eng["layers"][:max_rows]]
    if rows:
        out.append(table(["layer", "type", "precision", "inputs", "outputs", "tactic", "ONNX nodes"], rows,
                         tuple(range(7))))
    return "".join(out)


def _log_section(r: dict) -> str:
    log = r["build_log"]
    passes = log["layer_passes"] or []
    top = max([p["layers"] for p in passes] + [1])
    pass_rows = [[e(p["pass"]), p["layers"],
                  f'<svg width="160" height="10"><rect width="{max(1, 160 * p["layers"] / top):.0f}" height="10" '
                  f'fill="#4e79a7"/></svg>'] for p in passes]
    out = ["<h2>Build log</h2><div class=\"cols\">",
           "<div><h3>Records by severity</h3>" + table(["severity", "count"], [[k, log["counts"].get(k, 0)]
                                                                                 for k in SEVERITIES],
                                                       num_cols=(1,)) + "</div>",
           "<div><h3>Memory</h3>" + table(["figure", "value"], [[k, f"{v:,}"] for k, v in sorted(log["memory"].items())]
                                          + [["peak memory (MiB)", log["peak_memory_mib"]]], num_cols=(1,)) + "</div>",
           "<div><h3>Optimizer passes</h3>" + table(["pass", "layers", ""], pass_rows, (0, 2), (1,)) + "</div></div>"]
    warn = log["warnings"]
    out.append(f"<h3>Warnings ({len(warn)})</h3>" + ("<ul>" + "".join(f"<li><code>{e(w)}</code></li>" for w in warn)
                                                       + "</ul>" if warn else "<p class=\"ok\">none</p>"))
    if log["errors"]:
        out.append("<h3>Errors</h3><ul>" + "".join(f'<li class="bad">{e(x)}</li>' for x in log["errors"]) + "</ul>")
    if log["timing_cache"]:
        out.append("<h3>Timing cache</h3><ul>" + "".join(f"<li>{e(t)}</li>" for t in log["timing_cache"]) + "</ul>")
    return "".join(out)


def _network_section(r: dict, max_rows: int) -> str:
    layers = r["network"]["layers"]
    if not layers:
        return ""
    rows = [[l["index"], e(l["name"]), e(l["type"]), _tag(l["precision"]),
             e("; ".join(f"{o['dtype']}{o['shape']}" for o in l["outputs"]))] for l in layers[:max_rows]]
    more = f"<p>… {len(layers) - max_rows} more layers in report.json</p>" if len(layers) > max_rows else ""
    return (f"<h2>TensorRT network after parsing</h2><details open><summary>{len(layers)} layers</summary>"
            + table(["#", "layer", "type", "precision", "outputs (dtype, shape)"], rows, (1, 2, 3, 4), (0,))
            + more + "</details>")


def _onnx_section(r: dict) -> str:
    exp, built = r["model"]["exported"], r["model"]["built"]

    def io(specs):
        return "<br>".join(e(f"{s['name']} {s['dtype']} {s['dims']}") for s in specs)

    ops = sorted(set(exp["ops"]) | set(built["ops"]),
                 key=lambda o: (-(exp["ops"].get(o, 0) + built["ops"].get(o, 0)), o))
    return ("<h2>ONNX model</h2><div class=\"cols\"><div>"
            + table(["", "exported", "built (after precision transform)"],
                    [["opset", e(exp["opset"]), e(built["opset"])], ["nodes", exp["nodes"], built["nodes"]],
                     ["parameters", f"{exp['parameters']:,}", f"{built['parameters']:,}"],
                     ["inputs", io(exp["inputs"]), io(built["inputs"])],
                     ["outputs", io(exp["outputs"]), io(built["outputs"])]], (1, 2))
            + "</div><div>"
            + table(["op", "exported", "built"], [[op, exp["ops"].get(op, 0), built["ops"].get(op, 0)] for op in ops],
                    num_cols=(1, 2))
            + "</div></div>")


def to_html(report: dict, max_rows: int = 400) -> str:
    eng = report["engine"]
    title = f"Engine report: {report['precision']} · {eng['backend']['flavour']} {eng['backend']['version']}"
    body = [f"<h1>{e(title)}</h1>",
            f'<p class="sub">target: {e(eng["target"])} · fingerprint <code>{e(eng["fingerprint"])}</code> · '
            f'sha256 <code>{e(eng["sha256"][:16])}…</code></p>',
            _cards(report), _graph_section(report), _transform_section(report), _precision_section(report), _fusion_section(report, max_rows),
            _engine_section(report, max_rows), _log_section(report), _network_section(report, max_rows),
            _onnx_section(report)]
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>\n")
