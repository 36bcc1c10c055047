"""Engine store: the build stage on a hit against a cold build, measured in one run, each
in a fresh process: of the bundled transformer, or with --size-mib of a model whose
engine is that large (a Gather over an embedding table in external data, compute tiny:
pipeline.zoo.large_table), where a hit must not re-read the engine.

    python benchmarks/store_hit.py [--repeats 3] [--size-mib 1500]

Reports the time inside the build step (what the store changes), the whole process
(interpreter and config loading included), each process's peak RSS, and whether the
hit imported TensorRT. Target: hit <= 1/10 of the cold build, and no TensorRT import."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHILD = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from pipeline.flow import stages
from pipeline.core import config
from pipeline.core.layout import Layout
cfg = config.load(Path(sys.argv[1]) / "params.yaml")
t1 = time.perf_counter()
stages.build(cfg, Layout(Path(sys.argv[1])), progress=False)
t2 = time.perf_counter()
from pipeline.core import memory  # its own peak, as the stages record it (VmHWM)
print(json.dumps({"step_s": t2 - t1, "trt_imported": any(m.split(".")[0] in ("tensorrt", "tensorrt_rtx")
                                                     for m in sys.modules),
                  "peak_rss_mib": memory.peak_rss_bytes() / 2**20}))
"""


def engine_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "artifacts" / "build").glob("*/engine.plan"))


def run_build(root: Path, store: Path) -> dict:
    env = {**os.environ, "TRT_PIPELINE_STORE": str(store), "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)], cwd=REPO, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(r.stderr)
    return {
        **json.loads(r.stdout.strip().splitlines()[-1]),
        "process_s": wall,
        "log": r.stderr.strip(),
    }


def model_overrides(root: Path, size_mib: int) -> list[str]:
    if not size_mib:
        return ["model=transformer"]
    # The table model's module, wherever the model zoo keeps it.
    name = next(
        n for n in ("pipeline.zoo.large_table", "models.large_table") if importlib.util.find_spec(n)
    )
    large_table = importlib.import_module(name)

    onnx_path = large_table.write(root / "model", mib=size_mib)
    return [
        "model=onnx_file",
        f"model.onnx_path={onnx_path}",
        f"model.source={onnx_path.parent}",
        "model.task=regression",
        f"model.int_high={large_table.rows_per_file(size_mib, 1)}",
        "model.sample_dims={batch: 2, seq: 8}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=0, help="a model of this many MiB of weights")
    args = ap.parse_args()
    from omegaconf import OmegaConf

    from pipeline.core.layout import Layout
    from pipeline.flow import stages
    from tests.conftest import compose

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = compose(*model_overrides(root, args.size_mib))
        (root / "params.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        for name in ("fingerprint", "export", "calibrate"):
            stages.BY_NAME[name](cfg, Layout(root))
        cold, hit, rehash = [], [], []
        for i in range(args.repeats):
            store = root / f"store{i}"
            shutil.rmtree(root / "artifacts" / "build", ignore_errors=True)  # nothing to adopt
            cold.append(run_build(root, store))  # empty store: a real build
            hit.append(run_build(root, store))  # same key: served from the store
            hit[-1]["engine_mib"] = engine_bytes(root) / 2**20
            # For comparison, a hit that hashes every file again (its stat record gone).
            for record in store.glob("entries/*/.verified"):
                record.unlink()
            rehash.append(run_build(root, store))
            shutil.rmtree(store)
            assert "miss, built" in cold[-1]["log"] and "store hit" in hit[-1]["log"], (
                cold[-1]["log"],
                hit[-1]["log"],
            )
    med = lambda rows, k: statistics.median(r[k] for r in rows)
    step_ratio = med(hit, "step_s") / med(cold, "step_s")
    proc_ratio = med(hit, "process_s") / med(cold, "process_s")
    model = f"{args.size_mib} MiB table model" if args.size_mib else "transformer"
    engine_mib = med(hit, "engine_mib")
    print(f"{model} build step ({engine_mib:.0f} MiB engine), median of {args.repeats}:")
    print(
        f"  cold build   {med(cold, 'step_s') * 1e3:8.1f} ms in the step   {med(cold, 'process_s') * 1e3:8.1f} ms whole process"
    )
    print(
        f"  store hit    {med(hit, 'step_s') * 1e3:8.1f} ms in the step   {med(hit, 'process_s') * 1e3:8.1f} ms whole process"
    )
    print(
        f"  hit, re-hash {med(rehash, 'step_s') * 1e3:8.1f} ms in the step   {med(rehash, 'process_s') * 1e3:8.1f} ms whole process  (no stat record: every file hashed)"
    )
    print(
        f"  peak RSS     cold {med(cold, 'peak_rss_mib'):8.0f} MiB   hit {med(hit, 'peak_rss_mib'):8.0f} MiB   hit, re-hash {med(rehash, 'peak_rss_mib'):6.0f} MiB"
    )
    print(
        f"  ratio        {step_ratio:8.3f}  (target <= 0.100)      {proc_ratio:8.3f} (process start included)"
    )
    imported = any(h["trt_imported"] for h in hit)
    print(f"  hit imported TensorRT: {'yes' if imported else 'no'}")
    ok = step_ratio <= 0.1 and not imported
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
