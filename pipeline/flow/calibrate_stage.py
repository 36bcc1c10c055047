"""The calibrate stage: the precision transform of the exported graph (pipeline/precision/
transform.py), its accuracy judged against the gate and written as metrics, pass or fail,
and the stage's table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline.core import console, kv_cache, memory, metrics_files
from pipeline.core.layout import Layout
from pipeline.core.metrics_files import AccuracyMetrics
from pipeline.flow import output_folder
from pipeline.records import calibration_file
from pipeline.records.calibration_file import CalibrationRecord

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig


def run(cfg: PipelineConfig, layout: Layout) -> CalibrationRecord:
    """The precision-transformed graph, and its accuracy as a DVC metrics file, written
    pass or fail: every output, every metric, each gate result."""
    from pipeline.flow import engine_sizes, provenance
    from pipeline.precision import transform
    from pipeline.precision.gate import accuracy

    provenance.require(layout.export_dir, cfg, "export")
    peak = memory.StagePeak()
    with output_folder.writing(layout, layout.calibrate_dir, stage="calibrate"):
        try:
            summary = transform.transform(
                layout.export_dir,
                layout.calibrate_dir,
                cfg.precision,
                cfg.calibration,
                cfg.model,
                engine_sizes.for_calibrate(cfg, layout),
            )
        except accuracy.GateFailed as e:
            # the gate writes every metric, pass or fail, before the stage stops
            metrics_files.write_accuracy(layout.accuracy_metrics, accuracy_metrics(cfg, e.summary))
            raise
        provenance.write(
            layout.calibrate_dir, cfg, "calibrate", source_sha256=summary["source_sha256"]
        )
        rss = memory.record(layout.metrics_dir, "calibrate", peak)
        summary[memory.PEAK_KEY] = rss
    metrics = accuracy_metrics(cfg, summary)
    metrics_files.write_accuracy(layout.accuracy_metrics, metrics)
    console.table(
        f"calibrate: {cfg.model.name} {cfg.precision.name}",
        [
            *gate_rows(metrics, accuracy.judged_on_random(summary)),
            *_phase_rows(metrics.get("accuracy") or {}),
            *(
                [("fallback", f"kept {calibration_file.kept_types(summary['fallback'])}")]
                if summary.get("fallback", {}).get("needed")
                else []
            ),
            *_weight_rows(summary.get("calibration") or {}),
            ("graph", str(layout.calibrated_graph)),
            memory.row(rss),
        ],
    )
    return summary


def gate_rows(metrics: AccuracyMetrics, random: bool) -> list[tuple[str, str]]:
    """The gate's verdict and each gated figure; where a search chose the graph, the figure
    on the held-out samples first and the search's own beside it."""
    from pipeline.precision.gate import accuracy

    on_random, each = (f", {accuracy.ON_RANDOM}", ", random inputs") if random else ("", "")
    verdict = "passed" if metrics["gate_passed"] else "FAILED"
    split, search = metrics.get("holdout"), metrics.get("search") or {}
    rows = [("accuracy gate", verdict + on_random)]
    if split:
        rows.append(("held out", holdout_line(split)))
    gate = kv_cache.folded(metrics["gate"], _value)
    search = kv_cache.folded(search, _value)
    for subject, by in gate.items():
        for metric, r in by.items():
            if not isinstance(_value(r), (int, float)):
                continue
            text = f"{r['value']:.4g} (gate {r['threshold']}{each})"
            if subject == kv_cache.CACHE:
                text += f"; worst of {by['tensors']}: {by['worst'][metric]}"
            mine = search.get(subject, {}).get(metric)
            if mine is not None and split:
                text += f"; search {mine['value']:.4g} on {split['search_samples']}"
            rows.append((f"{subject} {metric}", text))
    return rows


def _value(entry: Any) -> Any:
    """A gate entry's figure (None for what is not an entry)."""
    return entry.get("value") if isinstance(entry, Mapping) else None


def holdout_line(split: Mapping[str, Any]) -> str:
    """How the reference samples split between the search and the verdict."""
    if split["verdict_samples"] == split["search_samples"] and split.get("note"):
        return str(split["note"])  # nothing held out: the note says why
    line = (
        f"verdict on {split['verdict_samples']} samples the search never judged; the search "
        f"judged {split['search_samples']}, {split.get('margin', 0):g} inside each threshold"
    )
    return f"{line} ({split['note']})" if split.get("note") else line


def _phase_rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """A decoder's logits by phase: the gate takes the worse, the table shows both."""
    rows = []
    for name, f in figures.items():
        for phase, p in (f.get("by_phase") or {}).items():
            count = "positions" if phase == "prefill" else "steps"
            rows.append(
                (
                    f"{name} {phase}",
                    f"top-1 {p.get('top1_agreement', float('nan')):.4g}, cosine "
                    f"{p.get('cosine', float('nan')):.4g} ({p.get('rows', 0)} {count})",
                )
            )
    return rows


def _weight_rows(calibration: dict[str, Any]) -> list[tuple[str, str]]:
    """What a quantized graph's GEMMs hold: their weights' bytes by stored type, and the
    share of GEMM FLOPs that reads a quantized input (a count of quantized nodes hides that
    one FFN projection outweighs ten attention MatMuls)."""
    weights, flops = calibration.get("gemm_weights"), calibration.get("gemm_flops") or {}
    if not weights or not weights["bytes"]:
        return []
    by_share = sorted(weights["share"].items(), key=lambda kv: -kv[1])
    text = " · ".join(f"{kind} {share:.0%}" for kind, share in by_share)
    text += f" of {sum(weights['bytes'].values()) / 1e6:.3g} MB"
    if flops.get("quantized_fraction") is not None:
        text += f"; quantized GEMM FLOPs {flops['quantized_fraction']:.0%}"
    return [("GEMM weights", text)]


def gate_table(results: list[Any]) -> dict[str, dict[str, Any]]:
    """Gate results as output -> metric -> value, threshold, passed."""
    gate: dict[str, dict[str, Any]] = {}
    for r in results:
        gate.setdefault(str(r["subject"]), {})[r["metric"]] = {
            k: r[k] for k in ("value", "threshold", "passed")
        }
    return gate


def accuracy_metrics(cfg: PipelineConfig, summary: Mapping[str, Any]) -> AccuracyMetrics:
    gate = gate_table(summary["gate"])
    data = summary.get("calibration", {}).get("data") or summary.get("weak_typing", {}).get("data")
    metrics: AccuracyMetrics = {
        "model": cfg.model.name,
        "precision": cfg.precision.name,
        "held_out_batches": summary["held_out_batches"],
        "accuracy": summary["accuracy"],
        "gate": gate,
        "gate_passed": all(r["passed"] for r in summary["gate"]),
        "failing": [r for r in summary["gate"] if not r["passed"]],
        "evaluated_with": summary.get("evaluated_with"),
        "reference_inputs": summary.get("reference"),
    }
    if data:
        metrics["calibration_data"] = {
            k: data[k] for k in ("source", "random", "num_samples") if k in data
        }
    if "reference_overlap" in summary:
        metrics["reference_overlap"] = summary["reference_overlap"]
    if "fallback" in summary:
        fb = summary["fallback"]
        metrics["fallback"] = {k: fb[k] for k in calibration_file.FALLBACK_METRICS if k in fb}
    if "search_judgement" in summary:
        metrics["search"] = gate_table(summary["search_judgement"]["gate"])
    if "holdout" in summary:
        metrics["holdout"] = summary["holdout"]
    return metrics
