"""Compare two builds: `python -m pipeline diff A B`. Each side is a build folder
(manifest.json, build_summary.json, network.json) or an inspect folder (report.json).
B is judged against baseline A: a lower fusion ratio, or a layer that runs at a wider
precision than it did in A, is a regression."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.analysis import buildlog, engine_layers
from pipeline.analysis.diff_record import (
    BuildHeader,
    BuildView,
    Delta,
    DiffFigures,
    DiffResult,
    PrecisionChange,
)
from pipeline.core import fileio, tables
from pipeline.core.errors import PipelineError
from pipeline.core.numbers import fmt
from pipeline.engine import manifest
from pipeline.records import inspect_file
from pipeline.records.inspect_file import InspectRecord


def _build_folder(path: Path) -> Path | None:
    if (path / "manifest.json").exists():
        return path
    found = sorted(p.parent for p in path.glob("*/manifest.json"))  # artifacts/build/<fingerprint>/
    if len(found) > 1:
        raise PipelineError(
            f"{path} holds builds for several machines ({', '.join(p.name for p in found)}); "
            f"name one of them"
        )
    return found[0] if found else None


def load(path: str | Path) -> BuildView:
    path = Path(path)
    if not path.is_dir():
        raise PipelineError(
            f"diff: {path} is not a folder (give a build folder or an inspect folder)"
        )
    if (path / inspect_file.NAME).exists():
        return _from_report(path, inspect_file.read(path))
    folder = _build_folder(path)
    if folder is None:
        raise PipelineError(
            f"diff: {path} is neither a build folder (manifest.json) nor an inspect folder "
            f"(report.json)"
        )
    return _from_build(folder)


def _from_build(folder: Path) -> BuildView:
    record = manifest.load(folder)
    has_log = (folder / "build.log").exists() or (folder / "build_summary.json").exists()
    summary = buildlog.load_summary(folder) if has_log else record.get("log", {})
    network = (
        fileio.read_json(folder / "network.json", "network dump")
        if (folder / "network.json").exists()
        else []
    )
    return _view(
        str(folder),
        "build",
        record["config"]["precision"]["name"],
        f"{record['backend']['flavour']} {record['backend']['version']}",
        record["engine"]["bytes"],
        record.get("build_seconds"),
        summary,
        network,
        summary.get("engine_precisions") or {},
    )


def _from_report(folder: Path, r: InspectRecord) -> BuildView:
    eng = r["engine"]
    return _view(
        str(folder),
        "inspect",
        r["precision"],
        f"{eng['backend']['flavour']} {eng['backend']['version']}",
        eng["bytes"],
        r.get("build_seconds"),
        r["build_log"],
        r["network"]["layers"],
        eng.get("precisions") or {},
        r["network"].get("precisions"),
    )


def _view(
    path: str,
    kind: str,
    precision: str,
    trt: str,
    engine_bytes: int,
    seconds: float | None,
    log: Mapping[str, Any],
    network: list[dict[str, Any]],
    engine_prec: dict[str, int],
    network_prec: dict[str, int] | None = None,
) -> BuildView:
    layers = {l["name"]: l.get("precision") or engine_layers.network_precision(l) for l in network}
    memory = log.get("memory") or {}
    # Older summaries (no fusion_basis) divided by the optimizer's region count: not comparable.
    fused = log if "fusion_basis" in log else {}
    return {
        "path": path,
        "kind": kind,
        "precision": precision,
        "tensorrt": trt,
        "engine_bytes": engine_bytes,
        "build_seconds": seconds,
        "layers_original": fused.get("layers_original"),
        "layers_final": fused.get("layers_final"),
        "fusion_ratio": fused.get("fusion_ratio"),
        "peak_memory_mib": log.get("peak_memory_mib"),
        "weights_bytes": memory.get("weights_bytes"),
        "activation_bytes": memory.get("activation_bytes"),
        "warnings": list(log.get("warnings") or []),
        "engine_precisions": engine_prec,
        "network_precisions": network_prec
        if network_prec is not None
        else engine_layers.histogram({"precision": p} for p in layers.values()),
        "layer_precisions": layers,
    }


def _rank(precision: str | None) -> int | None:
    return (
        engine_layers.COMPUTE_ORDER.index(precision)
        if precision in engine_layers.COMPUTE_ORDER
        else None
    )


def _mean_rank(hist: dict[str, int]) -> float | None:
    ranked = [(r, n) for p, n in hist.items() if (r := _rank(p)) is not None]
    total = sum(n for _, n in ranked)
    return sum(r * n for r, n in ranked) / total if total else None


def _header(v: BuildView) -> BuildHeader:
    return {
        "path": v["path"],
        "kind": v["kind"],
        "precision": v["precision"],
        "tensorrt": v["tensorrt"],
    }


def compare(a: BuildView, b: BuildView) -> DiffResult:
    changed: list[PrecisionChange] = []
    for name, pa in a["layer_precisions"].items():
        pb = b["layer_precisions"].get(name)
        if pb is not None and pb != pa:
            ra, rb = _rank(pa), _rank(pb)
            way = (
                "wider"
                if ra is not None and rb is not None and rb > ra
                else "narrower"
                if ra is not None and rb is not None and rb < ra
                else "other"
            )
            changed.append({"layer": name, "a": pa, "b": pb, "change": way})

    def delta(key: str) -> Delta:
        va, vb = a.get(key), b.get(key)
        return {
            "a": va,
            "b": vb,
            "change": round(vb - va, 3)
            if isinstance(va, (int, float)) and isinstance(vb, (int, float))
            else None,
        }

    metrics = {
        k: delta(k)
        for k in (
            "engine_bytes",
            "build_seconds",
            "layers_original",
            "layers_final",
            "fusion_ratio",
            "peak_memory_mib",
            "weights_bytes",
            "activation_bytes",
        )
    }
    metrics["warnings"] = {
        "a": len(a["warnings"]),
        "b": len(b["warnings"]),
        "change": len(b["warnings"]) - len(a["warnings"]),
    }
    out: DiffFigures = {
        "a": _header(a),
        "b": _header(b),
        "metrics": metrics,
        "engine_precisions": {"a": a["engine_precisions"], "b": b["engine_precisions"]},
        "network_precisions": {"a": a["network_precisions"], "b": b["network_precisions"]},
        "layers_compared": len(set(a["layer_precisions"]) & set(b["layer_precisions"])),
        "precision_changes": changed,
        "warnings_added": [w for w in b["warnings"] if w not in a["warnings"]],
        "warnings_removed": [w for w in a["warnings"] if w not in b["warnings"]],
    }
    return {**out, "regressions": regressions(out)}


def regressions(d: DiffFigures) -> list[str]:
    found = []
    fr = d["metrics"]["fusion_ratio"]
    if (
        isinstance(fr["a"], (int, float))
        and isinstance(fr["b"], (int, float))
        and fr["b"] < fr["a"]
    ):
        found.append(f"fusion ratio {fr['a']} → {fr['b']}")
    wider = [c for c in d["precision_changes"] if c["change"] == "wider"]
    if wider:
        c = wider[0]
        found.append(
            f"{len(wider)} layer(s) at a wider precision (e.g. {c['layer']} {c['a']}→{c['b']})"
        )
    elif not d["layers_compared"]:  # no common layer names: judge the engine's precision mix
        ma, mb = (_mean_rank(d["engine_precisions"][k]) for k in ("a", "b"))
        if ma is not None and mb is not None and mb > ma:
            ea, eb = d["engine_precisions"]["a"], d["engine_precisions"]["b"]
            found.append(f"engine precision mix widened ({ea} → {eb})")
    return found


def format_table(d: DiffResult) -> str:
    rows = [
        ("", "A", "B", "change"),
        ("precision", d["a"]["precision"], d["b"]["precision"], ""),
        ("TensorRT", d["a"]["tensorrt"], d["b"]["tensorrt"], ""),
        *_metric_rows(d["metrics"]),
        *_precision_mix_rows(d),
    ]
    lines = [
        f"A: {d['a']['path']} ({d['a']['kind']})",
        f"B: {d['b']['path']} ({d['b']['kind']})",
        "",
        tables.text(rows, max_width=60),
    ]
    lines += _precision_change_lines(d)
    for title, warnings in (
        ("warnings added", d["warnings_added"]),
        ("warnings removed", d["warnings_removed"]),
    ):
        if warnings:
            lines += ["", f"{title}:"] + [f"  {w}" for w in warnings]
    lines += ["", "regressions: " + ("; ".join(d["regressions"]) if d["regressions"] else "none")]
    return "\n".join(lines)


_METRIC_LABELS = {
    "engine_bytes": "engine bytes",
    "build_seconds": "build time (s)",
    "layers_original": "ONNX compute nodes",
    "layers_final": "engine layers",
    "fusion_ratio": "fusion ratio",
    "peak_memory_mib": "peak memory (MiB)",
    "weights_bytes": "weights bytes",
    "activation_bytes": "activation bytes",
    "warnings": "warnings",
}


def _metric_rows(metrics: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    for key, label in _METRIC_LABELS.items():
        m = metrics[key]
        ch = m["change"]
        shown = "" if ch in (None, 0) else (f"+{fmt(ch)}" if ch > 0 else fmt(ch))
        rows.append((label, fmt(m["a"]), fmt(m["b"]), shown))
    return rows


def _precision_mix_rows(d: DiffResult) -> list[tuple[str, str, str, str]]:
    """Layers per precision, engine then network, each precision either side has."""
    rows = []
    for what in ("engine_precisions", "network_precisions"):
        ha, hb = d[what]["a"], d[what]["b"]
        for p in dict.fromkeys(list(ha) + list(hb)):
            na, nb = ha.get(p, 0), hb.get(p, 0)
            rows.append(
                (
                    f"{what.split('_')[0]} layers {p}",
                    fmt(na),
                    fmt(nb),
                    "" if na == nb else f"{nb - na:+d}",
                )
            )
    return rows


def _precision_change_lines(d: DiffResult) -> list[str]:
    """The layers whose precision changed, counted by direction, the first 12 listed."""
    changes = d["precision_changes"]
    if not changes:
        return []
    kinds = {k: sum(1 for c in changes if c["change"] == k) for k in ("narrower", "wider", "other")}
    lines = [
        "",
        f"precision per layer: {len(changes)} of {d['layers_compared']} layers changed "
        f"({kinds['narrower']} narrower, {kinds['wider']} wider, {kinds['other']} other)",
    ]
    lines += [f"  {c['layer']}: {c['a']} → {c['b']}" for c in changes[:12]]
    if len(changes) > 12:
        lines.append(f"  … {len(changes) - 12} more (--json lists them all)")
    return lines


def gate(d: DiffResult) -> None:
    """--fail-on-regression: one line, exit 1 (through the CLI's PipelineError handling)."""
    if d["regressions"]:
        raise PipelineError(f"B regresses against baseline A: {'; '.join(d['regressions'])}")
