"""The build stage against a bare TensorRT(-RTX) build of the same ONNX with the same
builder settings and profiles, each a whole process, in one run. Goal: at most 1.2x
on a transformer of about 90 MB of weights.

    python benchmarks/build_overhead.py [--rounds 7]

The stage's own work beyond TensorRT: reading params, hashing the inputs, the cache
key, the store's lock/put, parsing the build log into the manifest, the gates and
linking the engine into artifacts/. The bare build is the least a script must do:
import TensorRT, parse, configure, build, write the plan."""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(REPO))  # models/ (the big transformer is made from its architecture)

BARE = r"""
import json, sys
import tensorrt_rtx as trt
onnx_path, profiles_json, out, workspace_mib, level = sys.argv[1:6]
logger = trt.Logger(trt.Logger.WARNING)
builder = trt.Builder(logger)
network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
                                 if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED") else 0)
parser = trt.OnnxParser(network, logger)
assert parser.parse_from_file(onnx_path)
config = builder.create_builder_config()
config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mib) << 20)
config.builder_optimization_level = int(level)
for prof in json.loads(open(profiles_json).read()):
    p = builder.create_optimization_profile()
    for name, s in prof["inputs"].items():
        p.set_shape(name, s["min"], s["opt"], s["max"])
    config.add_optimization_profile(p)
plan = builder.build_serialized_network(network, config)
open(out, "wb").write(bytes(plan))
"""


def big_transformer(path: Path) -> None:
    """The bundled transformer's architecture at about 90 MB of random fp32 weights:
    6 layers, d_model 512, FFN 2560, vocabulary 2000 (its dynamic batch and seq export cleanly)."""
    import torch

    from pipeline.zoo import transformer_encoder

    (
        transformer_encoder.D_MODEL,
        transformer_encoder.HEADS,
        transformer_encoder.D_FF,
        transformer_encoder.LAYERS,
        transformer_encoder.VOCAB,
    ) = 512, 8, 2560, 6, 2000
    model = transformer_encoder.build(0)
    feeds = transformer_encoder.sample_inputs(
        {"batch": 2, "seq": 16}, __import__("numpy").random.default_rng(0)
    )
    args = tuple(torch.from_numpy(feeds[k]) for k in transformer_encoder.INPUT_NAMES)
    torch.onnx.export(
        model,
        args,
        str(path),
        input_names=transformer_encoder.INPUT_NAMES,
        output_names=transformer_encoder.OUTPUT_NAMES,
        dynamic_axes=transformer_encoder.DYNAMIC_AXES,
        opset_version=17,
        dynamo=False,
    )


def run(cmd: list[str], cwd: Path, env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0


def prepare(repo: Path, overrides: list[str], env: dict) -> None:
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in files:
        if not f.startswith(("artifacts/", "metrics/")) and (REPO / f).is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, repo / f)
    run([sys.executable, "-m", "pipeline", "params", *overrides], repo, env)
    for stage in ("fingerprint", "export", "calibrate"):
        run([sys.executable, "-m", f"stages.{stage}"], repo, env)


def measure(name: str, repo: Path, env: dict, rounds: int) -> float:
    stage, bare = [], []
    for i in range(rounds):  # alternate, so machine load falls on both alike
        store = repo / f".store{i}"
        # cold every round: no store entry, and no engine in artifacts/ to adopt
        shutil.rmtree(repo / "artifacts" / "build", ignore_errors=True)
        stage.append(
            run(
                [sys.executable, "-m", "stages.build"],
                repo,
                {**env, "TRT_PIPELINE_STORE": str(store)},
            )
        )
        fp = json.loads((repo / "artifacts/fingerprint.json").read_text())["id"]
        manifest = json.loads((repo / "artifacts/build" / fp / "manifest.json").read_text())
        profiles = repo / "profiles.json"
        profiles.write_text(json.dumps(manifest["config"]["profiles"]))
        build = manifest["config"]["build"]
        bare.append(
            run(
                [
                    sys.executable,
                    "-c",
                    BARE,
                    str(repo / "artifacts/calibrate/model.onnx"),
                    str(profiles),
                    str(repo / "bare.plan"),
                    str(build["workspace_mib"]),
                    str(build["optimization_level"]),
                ],
                repo,
                env,
            )
        )
        shutil.rmtree(store, ignore_errors=True)
    # Each round's stage and bare run back to back, so the ratio within a round sees the
    # same machine load; the median over rounds is the figure, the spread shows the noise.
    ratios = sorted(st / ba for st, ba in zip(stage, bare))
    ratio = statistics.median(ratios)
    mib = (repo / "artifacts/calibrate/model.onnx").stat().st_size / 2**20
    print(
        f"{name:<28} ONNX {mib:6.1f} MiB  stage {statistics.median(stage):5.2f} s (min {min(stage):.2f})  "
        f"bare {statistics.median(bare):5.2f} s (min {min(bare):.2f})  ratio {ratio:.2f}x, median of {rounds} "
        f"paired rounds (range {ratios[0]:.2f}-{ratios[-1]:.2f}; of the minima {min(stage) / min(bare):.2f}x)"
    )
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        env = {**os.environ, "TRT_PIPELINE_CALIB_CACHE": str(tmp / "calib")}
        small = tmp / "small"
        prepare(small, ["model=transformer"], env)
        measure("bundled transformer", small, env, args.rounds)
        model = tmp / "big" / "model.onnx"
        model.parent.mkdir()
        big_transformer(model)
        large = tmp / "large"
        prepare(
            large,
            [
                "model=onnx_file",
                f"model.onnx_path={model}",
                f"model.source={model}",
                "model.sample_dims.batch=2",
                "+model.sample_dims.seq=16",
                "model.int_high=2000",
                "benchmark.backends=[onnxruntime]",
            ],
            env,
        )
        ratio = measure("transformer, ~90 MB weights", large, env, args.rounds)
    print(f"goal: at most 1.2x on the ~90 MB model: {'PASS' if ratio <= 1.2 else 'FAIL'}")
    sys.exit(0 if ratio <= 1.2 else 1)


if __name__ == "__main__":
    main()
