"""A decoder's engine bytes per parameter by precision, against the ideal of its types
(core/engine_sizes.py), in one run: a Llama of SmolLM-135M's shape (GQA 9/3 heads, RoPE,
30 layers, a 49,152-token vocabulary, tied embeddings) exported by `transformers` with its
KV cache (random weights: a stand-in for size, not accuracy), through export, calibrate
and a TensorRT-RTX build, with the decoder's two profiles and with one.

    python benchmarks/decoder_bytes.py [--size smollm|small|large] [--precisions fp16,int4_rtn]

Prints a JSON line per engine and a table. Goal (issue 48): fp16 within 1.1x of 2 bytes
per parameter; exit status 1 if the one-profile fp16 engine misses it. The gate is opened
wide: random weights say nothing of accuracy, and the point is the bytes."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.records.calibration_file import CalibrationRecord

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SIZES = {
    "smollm": {"hidden": 576, "layers": 30, "heads": 9, "kv_heads": 3, "intermediate": 1536,
               "vocab": 49152},
    "small": {"hidden": 256, "layers": 4, "heads": 8, "kv_heads": 2, "intermediate": 768,
              "vocab": 8000},
    # benchmarks/large_model.py --decoder's: 607 M parameters, 2.4 GB in fp32
    "large": {"hidden": 2048, "layers": 12, "heads": 16, "kv_heads": 4, "intermediate": 5632,
              "vocab": 32000},
}  # fmt: skip
GOAL = 1.1
PROFILES = {"both": (False, True), "one": (True,), "two": (False,)}
OPEN_GATE = (
    "precision.gate.min_cosine=0.0",
    "precision.gate.min_top1_agreement=0.0",
    "precision.gate.max_rel_error=null",
    "precision.gate.max_abs_error=null",
    "precision.gate.max_perplexity_increase=null",
    "precision.holdout=0",
    "precision.search_margin=0",  # the tables' trial judges by the searching gate
)


# AWQ, int8 and fp8 calibrate on prompts of their own (main() writes calibration.npy beside
# the reference prompts, other tokens); round-to-nearest and fp16 need none.
NEEDS_CALIBRATION = ("int4_awq", "int8", "fp8")


def engine(
    root: Path, model: Path, prompts: Path, precision: str, one_profile: bool, targets: str
) -> dict:
    from calibrate_cache import compose  # a sibling script: benchmarks/ is sys.path[0]

    from pipeline.core import memory
    from pipeline.core.layout import Layout
    from pipeline.flow import stages

    name = f"{precision}_{'one' if one_profile else 'two'}"
    calibration_set = ("calibration=prompts", f"calibration.path={root / 'calibration.npy'}")
    cfg = compose(
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"model.source={model.parent}",
        f"model.prompts={prompts}",
        "model.decode_steps=2",
        "profile.decoder={max_batch: 2, max_input_len: 32, max_seq_len: 64, "
        f"one_profile: {str(one_profile).lower()}}}",
        f"precision={precision}",
        *OPEN_GATE,
        *(calibration_set if precision in NEEDS_CALIBRATION else ()),
        f"calibration.cache_dir={root / 'cache'}",
        f"build.store_dir={root / 'store'}",
        "build.reference_engines=never",
        f"build.compute_capabilities=[{targets}]",
    )
    layout = Layout(root / f"{name}_{targets or 'default'}")
    stages.fingerprint(cfg, layout)
    stages.export(cfg, layout)
    peak = memory.StagePeak()
    t0 = time.perf_counter()
    calibrated = stages.calibrate(cfg, layout)
    calibrate_s = time.perf_counter() - t0
    built = stages.build(cfg, layout, progress=False)
    return {
        "engine": name,
        "engine_mib": round(built["engine"]["bytes"] / 2**20, 2),
        **built["per_parameter"],
        "calibrate_s": round(calibrate_s, 1),
        "calibrate_peak_mib": round(peak.bytes() / 2**20),
        "table": _table_type(calibrated),
    }


def _table_type(calibrated: CalibrationRecord) -> str:
    """The embedding table's type as the calibrate stage left it (int4, fp16 or fp32)."""
    tables = calibrated.get("tables") or calibrated.get("autocast", {}).get("tables") or {}
    return next((k for k in ("int4", "fp16", "fp32") if tables.get(k)), "-")


def main() -> int:
    import numpy as np

    from tests.wild import hf

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=list(SIZES), default="smollm")
    ap.add_argument("--precisions", default="fp16,int4_rtn")
    ap.add_argument("--profiles", choices=["both", "one", "two"], default="both")
    ap.add_argument(
        "--targets",
        default="",
        help="build.compute_capabilities, e.g. SM89 (TensorRT-RTX's default: every one it supports)",
    )
    args = ap.parse_args()
    dims = SIZES[args.size]
    rows = []
    with tempfile.TemporaryDirectory(prefix="decoder-bytes.") as tmp:
        root = Path(tmp)
        (root / "model").mkdir()
        model = hf.llama(
            root / "model" / "model.onnx",
            hidden=dims["hidden"],
            layers=dims["layers"],
            heads=dims["heads"],
            kv_heads=dims["kv_heads"],
            intermediate=dims["intermediate"],
            vocab=dims["vocab"],
            tied=True,
        )
        prompts = root / "prompts.npy"
        np.save(prompts, np.random.default_rng(0).integers(1, dims["vocab"], (4, 16)))
        np.save(
            root / "calibration.npy", np.random.default_rng(1).integers(1, dims["vocab"], (8, 16))
        )
        for precision in args.precisions.split(","):
            for one_profile in PROFILES[args.profiles]:
                rows.append(engine(root, model, prompts, precision, one_profile, args.targets))
                print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.size}-shaped Llama, tied embeddings, random weights (TensorRT-RTX plans)")
    print(f"{'engine':<16}{'MiB':>9}{'B/param':>9}{'ideal':>7}{'ratio':>7}  table")
    for r in rows:
        print(
            f"{r['engine']:<16}{r['engine_mib']:>9}{r['bytes']:>9}{r['ideal']:>7}{r['ratio']:>7}"
            f"  {r['table']}"
        )
    fp16 = [r for r in rows if r["engine"] == "fp16_one"]
    return 0 if fp16 and fp16[0]["ratio"] <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
