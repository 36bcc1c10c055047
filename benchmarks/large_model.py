"""A BERT-shaped encoder past protobuf's 2 GB through the pipeline's stages, each its own
process as DVC runs it, against a bare TensorRT-RTX build of the same file (parse_from_file,
the build stage's own profiles and settings) and against the model's bytes.

    python benchmarks/large_model.py [--layers 24 --hidden 1408] [--precisions fp32,fp16]
        [--modelopt] [--transforms-only]

The default (24 layers x 1408 hidden, FFN 4x, vocabulary 30522: 614 M parameters) is
exported by torch.onnx.export the usual way, 2.46 GB in a graph plus one external-data
file per weight. Goals (issue 22): export and calibrate-fp32 <= 1.5x the model's bytes in
peak RSS, fp16 AutoCast and int8 Q/DQ <= 3x, the build <= 1.2x the bare build's time and
peak RSS; inspect and the benchmark stage (short timing) <= 0.25x and 1.5x, what their
work needs. Each figure is one run (the stages take minutes at this size); the bare build
runs right after the build stage, so both see the same machine load.

--decoder takes a Llama instead (tests/wild/hf.py: grouped-query attention, RoPE, tied
embeddings, its KV cache as optimum names it; --layers 12 --hidden 2048 --vocab 32000 by
default there: 607 M parameters, 2.43 GB), judged and calibrated on prompts of random
token ids through its prefill and decode profiles (issue 48: a decoder past 2 GB through
every stage within the same bounds).

Issue 30 asks more of the transforms: fp16, int8 and int4 each <= 2.5x the model's bytes,
precision=auto <= 3x. They stream (calibration.streaming=auto: the file keeps its weights
in external data); int8/fp8 calibrate by the default method, entropy (max streams too).
--modelopt also runs each transform with calibration.streaming=never (ModelOpt's
whole-model path), so both figures come from one run; --transforms-only skips the build,
the bare build, inspect and benchmark."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from build_overhead import BARE  # noqa: E402  (the same bare build as build_overhead.py)

EXPORT = r"""
import sys, numpy as np, torch
from pipeline.zoo import transformer_encoder
layers, hidden, heads, vocab, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
transformer_encoder.D_MODEL, transformer_encoder.HEADS = hidden, heads
transformer_encoder.D_FF, transformer_encoder.LAYERS = 4 * hidden, layers
transformer_encoder.VOCAB = vocab
model = transformer_encoder.build(0)
feeds = transformer_encoder.sample_inputs({"batch": 2, "seq": 16}, np.random.default_rng(0))
names = transformer_encoder.INPUT_NAMES
with torch.no_grad():
    torch.onnx.export(model, tuple(torch.from_numpy(feeds[k]) for k in names), out,
                      input_names=names, output_names=transformer_encoder.OUTPUT_NAMES,
                      dynamic_axes=transformer_encoder.DYNAMIC_AXES, opset_version=17, dynamo=False)
"""

EXPORT_DECODER = r"""
import sys
from tests.wild import hf
layers, hidden, heads, vocab, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
hf.llama(out, hidden=hidden, layers=layers, heads=heads, kv_heads=max(1, heads // 4),
         intermediate=hidden * 11 // 4 // 128 * 128, vocab=vocab, tied=True)
"""
DECODER_DEFAULTS = {"layers": 12, "hidden": 2048, "heads": 16, "vocab": 32000}


# int8/fp8 and AWQ calibrate on random token ids (the file has no factory): 16 samples,
# batches of 2, int8/fp8 by the default method (entropy)
CALIBRATION = {
    q: [
        "calibration.source=random",
        "calibration.num_samples=16",
        "calibration.batch_size=2",
    ]
    for q in ("int8", "fp8", "int4_awq", "auto")
}
# The memory of a transform is measured, not the accuracy of a random model's int8 on random
# ids: the gate is off for the quantized types (it would stop the stage before its end).
NO_GATE = [
    f"precision.gate.{k}=null"
    for k in (
        "max_abs_error",
        "max_rel_error",
        "min_cosine",
        "min_top1_agreement",
        "max_perplexity_increase",  # a decoder's
    )
]


def timed(cmd: list[str], cwd: Path, env: dict) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes, the process and any child it waited for) of cmd.
    The peak is wait4's ru_maxrss, into which exec carries the parent's own peak: it is
    cmd's only while this process stays small (here it only starts processes); a caller
    that ran heavy work first reads the child's VmHWM instead (decoder_int8.py)."""
    with tempfile.TemporaryFile() as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, with its rusage
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            log.seek(0)
            sys.exit(f"{' '.join(cmd)} failed:\n{log.read().decode()[-3000:]}")
    return seconds, usage.ru_maxrss * 1024


def _encoder_inputs(vocab: int) -> list[str]:
    return [
        "model.sample_dims.batch=2",
        "+model.sample_dims.seq=16",
        f"model.int_high={vocab}",
        "model.num_reference_batches=2",
    ]


def _decoder_inputs(work: Path, vocab: int) -> list[str]:
    """4 prompts of random token ids through a prefill and 2 decode steps each to judge by,
    8 others to calibrate on (calibration=prompts); profiles small, as the memory is the
    point."""
    import numpy as np

    prompts, calibration = work / "prompts.npy", work / "calibration.npy"
    rng = np.random.default_rng(0)
    np.save(prompts, rng.integers(1, vocab, (4, 12)))
    np.save(calibration, rng.integers(1, vocab, (8, 12)))  # other prompts than the gate's
    for q in CALIBRATION:
        CALIBRATION[q] = ["calibration=prompts", f"calibration.path={calibration}"]
    return [
        f"model.prompts={prompts}",
        "model.decode_steps=2",
        "profile.decoder={max_batch: 2, max_input_len: 16, max_seq_len: 32}",
    ]


def model_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def prepare(repo: Path, overrides: list[str], env: dict) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for f in files:
        if not f.startswith(("artifacts/", "metrics/")) and (REPO / f).is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, repo / f)
    params(repo, overrides, env)


def params(repo: Path, overrides: list[str], env: dict) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "params", *overrides],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        sys.exit(f"pipeline params {' '.join(overrides)} failed: {r.stderr.strip()}")


def bare_build(repo: Path, env: dict) -> tuple[float, int]:
    fp = json.loads((repo / "artifacts/fingerprint.json").read_text())["id"]
    manifest = json.loads((repo / "artifacts/build" / fp / "manifest.json").read_text())
    profiles = repo / "profiles.json"
    profiles.write_text(json.dumps(manifest["config"]["profiles"]))
    build = manifest["config"]["build"]
    plan = repo / "bare.plan"
    result = timed(
        [
            sys.executable,
            "-c",
            BARE,
            str(repo / "artifacts/calibrate/model.onnx"),
            str(profiles),
            str(plan),
            str(build["workspace_mib"]),
            str(build["optimization_level"]),
        ],
        repo,
        env,
    )
    plan.unlink()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1408)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--precisions", default="fp32", help="comma-separated; fp32 always runs")
    ap.add_argument("--workdir", type=Path, help="keep everything here (default: a temp folder)")
    ap.add_argument("--modelopt", action="store_true", help="each transform unstreamed as well")
    ap.add_argument("--transforms-only", action="store_true", help="no build, inspect, benchmark")
    ap.add_argument("--decoder", action="store_true", help="a Llama with its KV cache instead")
    args = ap.parse_args()
    if args.decoder:
        given = {a.lstrip("-").split("=")[0] for a in sys.argv[1:]}
        for key, value in DECODER_DEFAULTS.items():
            if key not in given:
                setattr(args, key, value)
    precisions = ["fp32", *[p for p in args.precisions.split(",") if p and p != "fp32"]]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="large_model."))
    work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "TRT_PIPELINE_STORE": str(work / "store"),
        "TRT_PIPELINE_CALIB_CACHE": str(work / "calib"),
    }
    rows: list[tuple[str, float, int]] = []
    try:
        folder = work / "model"
        size = (args.layers, args.hidden, args.heads, args.vocab)
        if args.workdir is None or not (folder / "model.onnx").is_file():
            # a kept --workdir's model is reused (same options assumed): minutes saved
            folder.mkdir(exist_ok=True)
            script = EXPORT_DECODER if args.decoder else EXPORT
            export = [sys.executable, "-c", script, *map(str, size), str(folder / "model.onnx")]
            rows.append(("torch.onnx.export", *timed(export, REPO, env)))
        # every transform and search cold: a kept calibration cache would serve them
        for kept in ("repo", "store", "calib"):
            shutil.rmtree(work / kept, ignore_errors=True)
        weights = model_bytes(folder)
        files = len(list(folder.iterdir()))
        repo = work / "repo"
        base = [
            "model=onnx_file",
            f"model.onnx_path={folder / 'model.onnx'}",
            f"model.source={folder}",
            *(_decoder_inputs(work, args.vocab) if args.decoder else _encoder_inputs(args.vocab)),
            # the benchmark stage is here for its memory: a short timing will do
            "benchmark.warmup_s=0.05",
            "benchmark.min_duration_s=0.2",
            "benchmark.min_iterations=10",
        ]
        prepare(repo, base, env)
        stage = [sys.executable, "-m"]
        first = ("fingerprint", "export", "calibrate")
        for name in first if args.transforms_only else (*first, "build"):
            label = f"{name} (fp32)" if name in ("calibrate", "build") else name
            rows.append((label, *timed([*stage, f"stages.{name}"], repo, env)))
        if not args.transforms_only:
            rows.append(("bare TensorRT-RTX build", *bare_build(repo, env)))
            for name in ("inspect", "benchmark"):
                rows.append((name, *timed([*stage, f"stages.{name}"], repo, env)))
        ways = ["auto", "never"] if args.modelopt else ["auto"]
        for p in precisions[1:]:
            for way in ways:
                # precision=auto searches under its gate; its int4 is the one that streams
                gate = NO_GATE if p not in ("fp16", "bf16", "auto") else []
                gate += ["precision.int4_method=rtn_dq"] if p == "auto" else []
                over = [*base, f"precision={p}", *CALIBRATION.get(p, []), *gate]
                # the transform's memory: the reference engines (quantized precisions build
                # the fp16 and fp32 engines inside this stage) are TensorRT-RTX builds, bound
                # by a bare build's memory (7.77 GB, 2.9x, for the 2.69 GB decoder's fp32 graph)
                over.append("build.reference_engines=never")
                params(repo, [*over, f"calibration.streaming={way}"], env)
                label = f"calibrate ({p}{', ModelOpt' if way == 'never' else ''})"
                rows.append((label, *timed([*stage, "stages.calibrate"], repo, env)))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    report(rows, weights, files, size, args.decoder)


def report(
    rows: list[tuple[str, float, int]], weights: int, files: int, size: tuple, decoder: bool
) -> None:
    bare = next((r for r in rows if r[0].startswith("bare")), ("", float("nan"), 1))
    layers, hidden, _, vocab = size
    shape = "Llama-shaped decoder (tied embeddings)" if decoder else "BERT-shaped encoder"
    print(
        f"\n{shape}: {layers} layers x {hidden} hidden, vocabulary {vocab}; ONNX "
        f"{weights / 1e9:.2f} GB in {files} files"
    )
    print(
        f"{'stage':<32}{'s':>8}{'peak RSS GB':>13}{'x model':>9}{'x bare t':>10}{'x bare RSS':>12}"
    )
    for name, seconds, rss in rows:
        vs_bare = f"{seconds / bare[1]:10.2f}{rss / bare[2]:12.2f}" if bare[0] else ""
        print(f"{name:<32}{seconds:8.1f}{rss / 1e9:13.2f}{rss / weights:9.2f}{vs_bare}")
    goals = {"export": 1.5, "calibrate (fp32)": 1.5}
    # issue 30: every transform streamed
    goals |= {
        f"calibrate ({p})": 2.5 for p in ("fp16", "bf16", "int8", "fp8", "int4_rtn", "int4_awq")
    }
    goals["calibrate (auto)"] = 3.0
    # inspect and benchmark: what their work needs (no weights; ONNX Runtime's one copy)
    goals |= {"inspect": 0.25, "benchmark": 1.5}
    verdicts = [
        f"{name} {'PASS' if rss / weights <= goals[name] else 'FAIL'} (<= {goals[name]}x model)"
        for name, _, rss in rows
        if name in goals
    ]
    build = next((r for r in rows if r[0] == "build (fp32)"), None)
    if build is not None:
        verdicts.append(
            f"build time {'PASS' if build[1] <= 1.2 * bare[1] else 'FAIL'} (<= 1.2x bare), "
            f"build RSS {'PASS' if build[2] <= 1.2 * bare[2] else 'FAIL'} (<= 1.2x bare)"
        )
    print("goals: " + "; ".join(verdicts))


if __name__ == "__main__":
    main()
