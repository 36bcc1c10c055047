"""Calibrate step, cold (empty calibration cache) against warm (same key), for
precision=int8 on the bundled models, in one run. Each run is a fresh process, as
`dvc repro` runs `python -m stages.calibrate`; the step's own time (imports it does
included) and the whole process's wall time are both reported, as medians.

    python benchmarks/calibrate_cache.py [--repeats 3] [--models cnn transformer]

Exit status 1 if the warm step is not at least --min-ratio (5) times faster."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from pipeline.core import config

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return config.validate(hydra_compose("config", overrides=list(overrides)))


def child(root: str, model: str, cache: str) -> None:
    """One calibrate step; prints its own duration as JSON."""
    from pipeline.core.layout import Layout
    from pipeline.flow import stages

    cfg = compose(f"model={model}", "precision=int8", f"calibration.cache_dir={cache}")
    t0 = time.perf_counter()
    summary = stages.calibrate(cfg, Layout(Path(root)))
    print(
        json.dumps(
            {"step_s": time.perf_counter() - t0, "hit": summary["calibration"]["cache"]["hit"]}
        )
    )


def run_child(root: Path, model: str, cache: Path) -> dict:
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, __file__, "--child", str(root), model, str(cache)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"calibrate failed for {model}: {r.stderr.strip()}")
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "process_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", nargs="+", default=["cnn", "transformer"])
    ap.add_argument("--min-ratio", type=float, default=5.0)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from pipeline.core.layout import Layout
    from pipeline.export import export

    ok = True
    with tempfile.TemporaryDirectory(prefix="calib-bench.") as tmp:
        for model in args.models:
            root = Path(tmp) / model
            cfg = compose(f"model={model}")
            export.export_model(cfg.model, cfg.profile, Layout(root).export_dir)
            cold, warm = [], []
            for i in range(args.repeats):
                cache = Path(tmp) / f"cache-{model}-{i}"
                cold.append(run_child(root, model, cache))
                warm.append(run_child(root, model, cache))
                shutil.rmtree(cache)
            assert not any(c["hit"] for c in cold) and all(w["hit"] for w in warm), (
                "cache did not behave"
            )
            med = {
                k: (statistics.median(c[k] for c in cold), statistics.median(w[k] for w in warm))
                for k in ("step_s", "process_s")
            }
            ratio = med["step_s"][0] / med["step_s"][1]
            ok &= ratio >= args.min_ratio
            print(
                f"{model:12s} calibrate step  cold {med['step_s'][0]:7.3f} s  warm {med['step_s'][1]:7.3f} s  "
                f"ratio {ratio:5.1f}x   (whole process: cold {med['process_s'][0]:.2f} s, warm "
                f"{med['process_s'][1]:.2f} s, ratio {med['process_s'][0] / med['process_s'][1]:.1f}x; "
                f"median of {args.repeats})"
            )
    print(f"warm at least {args.min_ratio:g}x faster than cold: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        sys.path.insert(0, str(REPO))
        child(*sys.argv[2:])
    else:
        sys.exit(main())
