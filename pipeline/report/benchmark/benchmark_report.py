"""The benchmark for people (a Markdown table) and for DVC plots (rows of backend,
batch, latency, throughput). Both are pure functions of metrics/benchmark.json."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline.core import tables
from pipeline.core.numbers import fmt

if TYPE_CHECKING:
    from pipeline.records.benchmark_file import BenchConditions, BenchmarkRecord


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    return [
        tables.markdown(
            header, [[c if isinstance(c, str) else fmt(c) for c in row] for row in rows]
        ),
        "",
    ]


def _accuracy_cells(result: dict[str, Any]) -> list[Any]:
    acc = result.get("accuracy")
    if not acc or acc.get("status") == "skipped":
        return ["–", "–", "–"]
    worst = {
        "max_abs_error": max(m["max_abs_error"] for m in acc.values()),
        "mean_rel_error": max(m["mean_rel_error"] for m in acc.values()),
        "cosine": min(m["cosine"] for m in acc.values()),
    }
    return [
        f"{worst['max_abs_error']:.3g}",
        f"{worst['mean_rel_error']:.3g}",
        f"{worst['cosine']:.6f}",
    ]


def _inputs_lines(inputs: dict[str, Any] | None) -> list[str]:
    """Where the inputs came from: the user's reference data, the factory's sampler, or RANDOM."""
    if not inputs:
        return []
    ref = inputs.get("reference") or {}
    line = f"Reference inputs: {ref.get('source', 'unknown')}" + (
        f" ({ref['path']})" if ref.get("path") else ""
    )
    if ref.get("random"):
        line += " — RANDOM inputs, not representative of real ones (set model.reference_data)"
    if ref.get("source") == "folder":
        line += (
            f"; timed on them at {', '.join(inputs.get('from_reference_data') or []) or 'no shape'}"
        )
    return [line + ".", ""]


def to_markdown(metrics: BenchmarkRecord) -> str:
    results = metrics["results"]
    out = _intro_lines(metrics)
    ok = {k: r for k, r in results.items() if r["status"] == "ok"}
    out += _results_lines(metrics, ok)
    out += _by_shape_lines(metrics)
    out += _decoder_lines(metrics.get("decoder"))
    out += _gpu_stage_lines(ok)
    out += _slowest_layers_lines(ok)
    out += ["## Conditions", "", *_conditions(metrics["conditions"]), ""]
    return "\n".join(out)


def _intro_lines(metrics: BenchmarkRecord) -> list[str]:
    """The title and how to read the numbers (what latency, speed-up and accuracy measure)."""
    baseline = metrics["baseline"]
    shapes = ", ".join(f"`{n}={s}`" for n, s in metrics["shapes"].items())
    return [
        f"# Benchmark: {metrics.get('model', '?')}, {metrics.get('precision', '?')}",
        "",
        f"Headline shape {shapes} (profile `{metrics['profile']}`). Latency is host wall-clock per iteration; "
        f"speed-up is {baseline}'s median over the backend's median (above 1 is faster). Accuracy is against the "
        "fp32 ONNX Runtime reference outputs (worst output).",
        "",
        *_inputs_lines(metrics.get("inputs")),
    ]


def _results_lines(metrics: BenchmarkRecord, ok: dict[str, Any]) -> list[str]:
    """The headline table of the backends that ran, then the skipped ones and thin percentiles."""
    speed = f"speedup_vs_{metrics['baseline']}"
    out = _table(
        [
            "backend",
            "runs as",
            "median ms",
            "p90",
            "p95",
            "p99",
            "mean ± std",
            "min",
            "max",
            "samples/s",
            "speed-up",
            "iterations",
            "max abs err",
            "mean rel err",
            "cosine",
        ],
        [
            [
                k,
                r["label"],
                r["median_ms"],
                r["p90_ms"],
                r["p95_ms"],
                r["p99_ms"],
                f"{fmt(r['mean_ms'])} ± {fmt(r['std_ms'])}",
                r["min_ms"],
                r["max_ms"],
                r["throughput_per_s"],
                r.get(speed),
                r["iterations"],
                *_accuracy_cells(r),
            ]
            for k, r in ok.items()
        ],
    )
    for k, r in metrics["results"].items():
        if r["status"] != "ok":
            out.append(f"- `{k}` skipped: {r['reason']}")
    out += _low_sample_lines(metrics, ok)
    out.append("")
    return out


def _low_sample_lines(metrics: BenchmarkRecord, ok: dict[str, Any]) -> list[str]:
    flagged = [
        f"{k} {', '.join(r['low_sample_percentiles'])}"
        for k, r in ok.items()
        if r["low_sample_percentiles"]
    ]
    if not flagged:
        return []
    return [
        f"- Percentiles resting on too few samples (fewer than {metrics['method']['min_tail_samples']} "
        f"beyond them): {'; '.join(flagged)}"
    ]


def _by_shape_lines(metrics: BenchmarkRecord) -> list[str]:
    speed = f"speedup_vs_{metrics['baseline']}"
    rows = [
        [_point(r), k, r["median_ms"], r["p99_ms"], r["throughput_per_s"], r.get(speed)]
        for by in metrics["by_shape"].values()
        for k, r in by.items()
    ]
    if not rows:
        return []
    out = ["## Against batch size", ""]
    out += _table(["shape", "backend", "median ms", "p99 ms", "samples/s", "speed-up"], rows)
    # Written beside this file by the same stage; static SVG, so it shows offline.
    out += [
        "![latency against batch size](benchmark_latency.svg)",
        "![throughput against batch size](benchmark_throughput.svg)",
        "",
    ]
    return out


def _decoder_lines(decoder: Mapping[str, Any] | None) -> list[str]:
    """A decoder's phases: time to first token by prompt length, time per output token by
    past length, each with its tokens per second; the KV cache's size."""
    if not decoder:
        return []
    if "skipped" in decoder:
        return ["## A decoder's phases", "", decoder["skipped"] + ".", ""]
    kv, batch = decoder["kv_cache"], decoder["batch"]
    rows = []
    for backend, f in decoder["backends"].items():
        for n, ms in f["ttft_ms"].items():
            rows.append([backend, f"prefill, {n} tokens", ms, f["prefill_tokens_per_s"][n]])
        for n, ms in f["tpot_ms"].items():
            rows.append([backend, f"decode, past {n}", ms, f["decode_tokens_per_s"][n]])
    out = ["## A decoder's phases", ""]
    out += [
        f"Batch {batch}. Time to first token is a prefill's time; time per output token a "
        f"decode step's. The KV cache holds {kv['bytes_per_token']} bytes per token of one "
        f"sequence over {kv['tensors']} tensors: {kv['bytes_at_max'] / 2**20:.4g} MiB at "
        f"batch {kv['max_batch']} and past {kv['max_past']}, the profiles' largest.",
        "",
    ]
    table = _table(["backend", "step", "median ms", "tokens/s"], rows)
    picture = ["", "![a decoder's phases by length](benchmark_phases.svg)", ""]
    return out + table + picture + _generation_lines(decoder.get("generation"))


def _generation_lines(generated: dict[str, Any] | None) -> list[str]:
    """Greedy generation through each backend: its tokens against the fp32 graph's on the
    reference prompts, and the times of that run (bench/generation.py)."""
    if not generated:
        return []
    rows = []
    for backend, g in generated.items():
        parted = "never" if g["first_difference"] is None else f"step {g['first_difference']}"
        rows.append(
            [backend, g["tokens"], g["fp32_tokens_agree"], parted]
            + ["-" if g[k] is None else g[k] for k in ("ttft_ms", "tpot_ms", "tokens_per_s")]
        )
    head = [
        "### Generation",
        "",
        f"Greedy generation of the {next(iter(generated.values()))['runs']} reference prompt "
        "batches through each backend, each as long as the fp32 graph's run: the share of "
        "its tokens that are the fp32 graph's, the first step where one differs, and the "
        "run's own times (first token, median step, tokens per second).",
        "",
    ]
    columns = ["backend", "tokens", "fp32's", "first difference", "TTFT ms", "TPOT ms", "tokens/s"]
    return head + _table(columns, rows) + [""]


def decoder_rows(metrics: BenchmarkRecord) -> list[tuple[str, str]]:
    """The stage table's rows for a decoder: per backend, its phases at the middle lengths."""
    from pipeline.report.benchmark.headline import middle

    decoder = metrics.get("decoder") or {}
    rows = []
    for backend, f in decoder.get("backends", {}).items():
        n, p = middle(f["ttft_ms"]), middle(f["tpot_ms"])
        rows.append(
            (
                f"{backend} (decoder)",
                f"TTFT {f['ttft_ms'][n]:.4g} ms ({n} tokens), TPOT {f['tpot_ms'][p]:.4g} ms "
                f"(past {p}), {f['decode_tokens_per_s'][p]:.4g} tokens/s",
            )
        )
    return rows


def _gpu_stage_lines(ok: dict[str, Any]) -> list[str]:
    gpu = {k: r for k, r in ok.items() if "gpu" in r}
    if not gpu:
        return []
    out = ["## GPU time per stage (CUDA events, median ms)", ""]
    stages = ["h2d_ms", "compute_ms", "d2h_ms", "gpu_total_ms"]
    out += _table(
        [
            "backend",
            "host-to-device",
            "compute",
            "device-to-host",
            "GPU total",
            "host latency",
            "CUDA graph",
        ],
        [
            [
                k,
                *[r["gpu"].get(s, {}).get("median_ms") for s in stages],
                r["median_ms"],
                str(r.get("cuda_graph", False)),
            ]
            for k, r in gpu.items()
        ],
    )
    return out


def _slowest_layers_lines(ok: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, r in ok.items():
        if r.get("layers"):
            out += [f"## Slowest layers: {k} (separate IProfiler pass)", ""]
            out += _table(
                ["layer", "mean ms", "% of engine"],
                [[x["layer"], x["mean_ms"], x["percent"]] for x in r["layers"]],
            )
    return out


def _point(r: dict[str, Any]) -> str:
    return f"batch {r['batch']}" + (f", seq {r['seq']}" if r.get("seq") is not None else "")


def _conditions(c: BenchConditions) -> list[str]:
    from pipeline.machine import gpu_conditions

    v = c["versions"]
    return [
        f"- fingerprint `{c['fingerprint']}` ({c.get('target')})",
        f"- CPU {c['cpu']}, {c['usable_cpus']} of {c['cpu_count']} CPUs usable, governor {c['cpu_governor']}",
        f"- threads: ONNX Runtime intra-op {c['intra_op_threads']} ({c.get('threads_from', 'config')}), "
        f"torch {c['torch_threads']}, OMP_NUM_THREADS {c['omp_num_threads']}",
        "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val),
        f"- GPU: {gpu_conditions.summary(c['gpu_before'], c['gpu_after'])}",
    ]


def plot_rows(metrics: BenchmarkRecord) -> list[dict[str, Any]]:
    """One row per backend and shape of the sweep; `series` names a line in the plot
    (the backend, with the sequence length where the sweep has several)."""
    seqs = {r.get("seq") for by in metrics["by_shape"].values() for r in by.values()}
    rows = []
    for by in metrics["by_shape"].values():
        for backend, r in by.items():
            seq = r.get("seq")
            rows.append(
                {
                    "series": backend + (f" seq={seq}" if len(seqs) > 1 else ""),
                    "backend": backend,
                    "batch": r["batch"],
                    "seq": seq,
                    "latency_ms": r["median_ms"],
                    "p99_ms": r["p99_ms"],
                    "throughput_per_s": r["throughput_per_s"],
                }
            )
    return sorted(rows, key=lambda x: (x["series"], x["batch"]))
