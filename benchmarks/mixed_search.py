"""precision=auto against the single types, in one run: the GEMM weight bytes the search's
choice takes against the cheapest single type that passes the same gate, the search's time
cold (sensitivities measured), under another gate (the sensitivities' figures from the cache,
the search run again) and on a rerun (the choice from the cache), and the whole calibrate
step's time and peak RSS (ModelOpt's int4 and int8 calibrations included).

    python benchmarks/mixed_search.py [--size small|minilm] [--min-cosine 0.998]

--size minilm widens the bundled BERT-shaped model with outliers (pipeline/zoo/outlier_bert.py)
to a MiniLM/BERT-small sentence encoder (6 layers, d_model 384, FFN 1536: 37 GEMMs with a
weight; 48 MatMuls with attention's); small is the bundled outlier transformer (9 GEMMs).

The single types are judged by the search itself, on the same held-out batches and gate:
every GEMM in int4, in int8, in fp16 (what the search could have chosen for all of them).

Goals (issue 30), exit status 1 if missed: the chosen graph passes with fewer GEMM weight bytes
than the cheapest single type that passes; the search within 60 s cold and within 5 s with
the sensitivities cached (under another gate)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from calibrate_cache import compose  # a sibling script: benchmarks/ is sys.path[0]
from fallback_search import resize

if TYPE_CHECKING:
    from pipeline.records.calibration_file import CalibrationRecord

MODELS = {"small": "outlier_transformer", "minilm": "outlier_bert"}


def calibrate(
    root: Path, layout_dir: str, size: str, min_cosine: float
) -> tuple[CalibrationRecord, float]:
    from pipeline.core.layout import Layout
    from pipeline.flow import stages

    layout = Layout(root / layout_dir)
    cfg = compose(
        f"model={MODELS[size]}",
        "model.task=embedding",
        "precision=auto",
        f"precision.gate.min_cosine={min_cosine}",
        f"calibration.cache_dir={root / 'cache'}",
    )
    if not layout.export_graph.exists():
        stages.export(cfg, layout)
    t0 = time.perf_counter()
    summary = stages.calibrate(cfg, layout)
    return summary, time.perf_counter() - t0


def main() -> int:
    from pipeline.core import memory

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=list(MODELS), default="small")
    ap.add_argument("--min-cosine", type=float, default=0.998)
    args = ap.parse_args()
    resize(args.size)
    with tempfile.TemporaryDirectory(prefix="mixed-search.") as tmp:
        root = Path(tmp)
        peak = memory.StagePeak()
        cold, cold_s = calibrate(root, "a", args.size, args.min_cosine)
        cold_peak = round(peak.bytes() / 2**20)
        warm, warm_s = calibrate(root, "a", args.size, args.min_cosine)
        other, _ = calibrate(root, "a", args.size, args.min_cosine - 0.001)
    m, again, regate = cold["mixed"], warm["mixed"], other["mixed"]
    singles = {g["graph"]: g for g in m["graphs"] if g["graph"].startswith("all ")}
    passing = {k: g["weight_bytes"] for k, g in singles.items() if g["passed"]}
    best_name = min(passing, key=lambda k: passing[k])
    ratio = m["weight_bytes"] / passing[best_name]
    goals = {
        "the chosen graph passes the gate": cold["gate_passed"],
        f"fewer GEMM weight bytes than {best_name}, the cheapest single type that passes": ratio
        < 1.0,
        "search within 60 s cold": m["seconds"] <= 60,
        "search within 5 s with cached sensitivities (another gate)": regate["seconds"] <= 5
        and regate["figures_cache_hit"],
    }
    print(json.dumps({k: m[k] for k in ("counts", "graphs", "pareto")}, indent=1))
    print(
        f"{args.size}, gate cosine >= {args.min_cosine}: {m['candidates']} GEMMs as "
        f"{ {t: n for t, n in m['counts'].items() if n} }; GEMM weights {m['weight_bytes']:,} B "
        f"= {ratio:.3f}x {best_name}'s {passing[best_name]:,} B (fp32 {m['fp32_weight_bytes']:,} B)"
    )
    print(
        f"  search {m['seconds']:.2f} s cold ({m['graphs_judged']} graphs judged), "
        f"{regate['seconds']:.2f} s under cosine >= {args.min_cosine - 0.001:g} with the "
        f"figures cached ({regate['graphs_judged']} judged), {again['seconds']:.2f} s rerun "
        f"(choice cached); calibrate step {cold_s:.1f} s cold, {warm_s:.1f} s rerun; "
        f"peak RSS {cold_peak} MiB"
    )
    for goal, met in goals.items():
        print(f"  {'met   ' if met else 'MISSED'} {goal}")
    return 0 if all(goals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
