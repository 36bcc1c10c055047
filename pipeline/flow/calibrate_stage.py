"""The calibrate stage: the precision transform of the exported graph (pipeline/precision/
transform.py), its accuracy judged against the gate and written as metrics, pass or fail,
and the stage's table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline.core import calibration_file, console, memory, metrics_files
from pipeline.core.calibration_file import CalibrationSummary
from pipeline.core.layout import Layout
from pipeline.core.metrics_files import AccuracyMetrics
from pipeline.flow import output_folder

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig


def run(cfg: PipelineConfig, layout: Layout) -> CalibrationSummary:
    """The precision-transformed graph, and its accuracy as a DVC metrics file, written
    pass or fail: every output, every metric, each gate result."""
    from pipeline.flow import provenance
    from pipeline.precision import transform as precision
    from pipeline.precision.gate import accuracy

    provenance.require(layout.export_dir, cfg, "export")
    peak = memory.StagePeak()
    with output_folder.writing(layout, layout.calibrate_dir, stage="calibrate"):
        try:
            summary = precision.transform(
                layout.export_dir, layout.calibrate_dir, cfg.precision, cfg.calibration, cfg.model
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
    random = accuracy.judged_on_random(summary)
    on_random, each = (f", {accuracy.ON_RANDOM}", ", random inputs") if random else ("", "")
    console.table(
        f"calibrate: {cfg.model.name} {cfg.precision.name}",
        [
            ("accuracy gate", ("passed" if metrics["gate_passed"] else "FAILED") + on_random),
            *[
                (f"{subject} {metric}", f"{r['value']:.4g} (gate {r['threshold']}{each})")
                for subject, by in metrics["gate"].items()
                for metric, r in by.items()
                if isinstance(r.get("value"), (int, float))
            ],
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


def accuracy_metrics(cfg: PipelineConfig, summary: Mapping[str, Any]) -> AccuracyMetrics:
    gate: dict[str, dict[str, Any]] = {}
    for r in summary["gate"]:
        gate.setdefault(str(r["subject"]), {})[r["metric"]] = {
            k: r[k] for k in ("value", "threshold", "passed")
        }
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
    return metrics
