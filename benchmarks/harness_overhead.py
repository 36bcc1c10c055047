"""The benchmark harness's own overhead, measured in one run.

The harness (the benchmark's ONNX Runtime runner, pipeline.bench.ort_runner: its session,
pipeline.bench.timing and the stage's progress bar) and a bare loop (t0; session.run; t1) time the same
session on the same inputs, in alternating rounds whose order flips every round,
so drift and a neighbour's load fall on both alike. Passes when the harness's
median is within 5% of the bare loop's.

    python benchmarks/harness_overhead.py [--model cnn|tiny_mlp] [--batch 1] [--rounds 20] [--round-s 0.25]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.bench import benchmark, measuring
from pipeline.bench.ort_runner import OrtRunner
from pipeline.bench.runner import TimingJob
from pipeline.core import config
from pipeline.core.config import PipelineConfig
from pipeline.export import export
from pipeline.graph import onnx_model
from pipeline.inputs import samples

LIMIT = 1.05


def timed_model(name: str, tmp: Path) -> tuple[Path, PipelineConfig]:
    if name == "tiny_mlp":
        cfg = config.validate(
            {
                "model": {
                    "name": "onnx_file",
                    "factory": None,
                    "onnx_path": "pipeline/zoo/onnx/tiny_mlp.onnx",
                }
            }
        )
        return Path(__file__).resolve().parents[1] / "pipeline/zoo/onnx/tiny_mlp.onnx", cfg
    cfg = config.validate({})  # the default model: the CNN from models/
    dims = samples.factory_dims(cfg.model, cfg.profile)
    export.export_torch(cfg.model, dims, tmp / "model.onnx")
    return tmp / "model.onnx", cfg


def bare_loop(run, names, feeds, iterations: int) -> np.ndarray:
    clock = time.perf_counter_ns
    out = np.empty(iterations)
    for i in range(iterations):
        t0 = clock()
        run(names, feeds)
        out[i] = clock() - t0
    return out / 1e6


def main() -> int:
    p = argparse.ArgumentParser(
        description="harness median against a bare loop, same session and inputs"
    )
    p.add_argument("--model", choices=("cnn", "tiny_mlp"), default="cnn")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--round-s", type=float, default=0.25, help="harness min_duration_s per round")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="ONNX Runtime intra-op threads (1: steadier on a shared box)",
    )
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path, cfg = timed_model(args.model, Path(tmp))
        bench_cfg = config.validate(
            {
                "model": config.to_dict(cfg.model),
                "benchmark": {
                    "warmup_s": 0.0,
                    "min_duration_s": args.round_s,
                    "min_iterations": 1,
                    "intra_op_threads": args.threads,
                },
            }
        ).benchmark
        specs = onnx_model.inputs(onnx_model.load(path, check=False))
        # the harness's two models have a named `batch` and fixed sizes otherwise
        shapes = {
            s.name: [args.batch if d == "batch" else int(cast(int, d)) for d in s.dims]
            for s in specs
        }
        feeds = benchmark.bench_inputs(cfg.model, specs, shapes, seed=0)
        harness = OrtRunner(path, bench_cfg, "cpu", "harness overhead check")
        session = harness.session
        names = [o.name for o in session.get_outputs()]
        bare_loop(session.run, names, feeds, 200)  # warm-up for both: same session

        samples: dict[str, list[np.ndarray]] = {"harness": [], "bare": []}
        ratios = []
        for r in range(args.rounds):
            order = ("harness", "bare") if r % 2 == 0 else ("bare", "harness")
            got = {}
            for who in order:
                if who == "harness":
                    bar, update = measuring.progress_bar("overhead")
                    try:
                        times, _ = harness.time(TimingJob(feeds, 0, bench_cfg, update))
                    finally:
                        bar.close()
                    got[who] = times["host"]
                else:  # as many iterations as the harness ran in this round, or the last one when bare goes first
                    n = len(got["harness"]) if "harness" in got else len(samples["harness"][-1])
                    got[who] = bare_loop(session.run, names, feeds, n)
            for who, v in got.items():
                samples[who].append(v)
            ratios.append(float(np.median(got["harness"]) / np.median(got["bare"])))

    med = {k: float(np.median(np.concatenate(v))) for k, v in samples.items()}
    counts = {k: int(sum(len(x) for x in v)) for k, v in samples.items()}
    ratio = med["harness"] / med["bare"]
    print(
        f"model {args.model} batch {args.batch}, {args.rounds} alternating rounds, "
        f"ONNX Runtime threads {args.threads}"
    )
    print(f"harness median {med['harness'] * 1e3:.2f} us over {counts['harness']} iterations")
    print(f"bare    median {med['bare'] * 1e3:.2f} us over {counts['bare']} iterations")
    print(
        f"ratio harness/bare {ratio:.4f} (per-round ratios: median {np.median(ratios):.4f}, "
        f"min {min(ratios):.4f}, max {max(ratios):.4f}); limit {LIMIT}"
    )
    print(
        json.dumps(
            {
                "model": args.model,
                "batch": args.batch,
                "harness_median_ms": med["harness"],
                "bare_median_ms": med["bare"],
                "ratio": ratio,
                "iterations": counts,
                "passed": ratio <= LIMIT,
            }
        )
    )
    return 0 if ratio <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
