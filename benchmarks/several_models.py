"""Several models in one project (issue 39), measured in one run on RapidOCR's three wheel
models (PP-OCRv4 detector and recognizer, the v2.0 angle classifier), fp32, as
docs/tutorials/ocr-service.md sets them up:

- a no-op `dvc repro` of the three-model project against DVC's own no-op on as many
  trivial stages (one always-run stage feeding the rest): goal <= 1.3x;
- after editing one model's precision (the classifier to fp16), `dvc repro` against a cold
  `dvc repro` of a project of that model alone at fp16, each with an empty engine store:
  goal <= 1.2x (nothing of the other models runs again).

    python benchmarks/several_models.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from repro_noop import installed_env, trivial_repo  # noqa: E402  (a sibling script: benchmarks/ is sys.path[0])

from tests.wild import fetch  # noqa: E402  (after the path is set)

SHAPES = {
    "det": ("dense", "1x3x416x320, 1x3x416x320, 1x3x416x320"),
    "cls": ("classification", "1x3x48x192, 4x3x48x192, 8x3x48x192"),
    "rec": ("sequence", "1x3x48x320, 4x3x48x320, 8x3x48x320"),
}
FILES = {
    "det": "ch_PP-OCRv4_det_infer.onnx",
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "rec": "ch_PP-OCRv4_rec_infer.onnx",
}


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} in {cwd} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return time.perf_counter() - t0, r.stdout + r.stderr


def project(dest: Path, names: list[str], env: dict[str, str], precision: str = "fp32") -> None:
    """A git repository with `names` of the OCR models, set up as the tutorial does."""
    models = fetch.rapidocr()
    (dest / "models").mkdir(parents=True)
    run(["git", "init", "-q"], dest, env)
    for name in names:
        shutil.copy(models[name], dest / "models" / f"{name}.onnx")
    paths = [f"models/{n}.onnx" for n in names]
    run(["trt-pipeline", "init", *[a for p in paths for a in ("--model", p)]], dest, env)
    for name in names:
        task, shapes = SHAPES[name]
        own = f"  task: {task}\nprofile:\n  shapes: {{x: [{shapes}]}}\n"
        if len(names) == 1:  # one model: conf/config.yaml's own
            conf = dest / "conf/config.yaml"
            conf.write_text(conf.read_text().split("# Each dynamic")[0] + own)
            if precision != "fp32":
                conf.write_text(
                    conf.read_text().replace(
                        "_self_", f"override precision: {precision}\n  - _self_", 1
                    )
                )
        else:
            conf = dest / f"conf/models/{name}.yaml"
            conf.write_text(conf.read_text().split("# Each dynamic")[0] + own)
    with (dest / "conf/config.yaml").open("a") as f:
        f.write("benchmark:\n  min_duration_s: 0.5\n")
    run(["trt-pipeline", "params"], dest, env)
    run(["git", "add", "-A"], dest, env)
    run(["git", "commit", "-qm", "project"], dest, env)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    repro = [sys.executable, "-m", "dvc", "repro"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        env = {
            **installed_env(),
            "TRT_PIPELINE_STORE": str(tmp_path / "store"),
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@b",
            "GIT_COMMITTER_NAME": "b",
            "GIT_COMMITTER_EMAIL": "b@b",
        }
        three, base = tmp_path / "three", tmp_path / "trivial"
        project(three, ["det", "cls", "rec"], env)
        cold, out = run(repro, three, env)
        stages = len(re.findall(r"^Running stage", out, re.M))
        trivial_repo(base, stages)
        run(repro, base, env)
        ours, theirs = [], []
        for _ in range(args.rounds):  # alternate, so load changes hit both alike
            ours.append(run(repro, three, env)[0])
            theirs.append(run(repro, base, env)[0])
        noop = statistics.median(ours) / statistics.median(theirs)
        run(["git", "add", "-A"], three, env)
        run(["git", "commit", "-qm", "built"], three, env)
        conf = three / "conf/models/cls.yaml"
        conf.write_text(
            conf.read_text().replace("/precision@precision: fp32", "/precision@precision: fp16")
        )
        run(["trt-pipeline", "params"], three, env)
        edited, out = run(repro, three, env)
        reran = re.findall(r"^Running stage '([^']+)'", out, re.M)
        alone = tmp_path / "alone"
        project(alone, ["cls"], {**env, "TRT_PIPELINE_STORE": str(tmp_path / "store2")}, "fp16")
        single, _ = run(repro, alone, {**env, "TRT_PIPELINE_STORE": str(tmp_path / "store2")})
    edit = edited / single
    print(f"three models, cold dvc repro:             {cold:6.2f} s ({stages} stages)")
    print(
        f"no-op dvc repro, three models:            {statistics.median(ours):6.2f} s (median of {args.rounds})"
    )
    print(f"no-op dvc repro, {stages} trivial stages:        {statistics.median(theirs):6.2f} s")
    print(f"ratio: {noop:.2f}x (goal <= 1.3x)")
    print(f"one model's precision edited, dvc repro:  {edited:6.2f} s (reran: {', '.join(reran)})")
    print(f"that model alone, cold dvc repro:         {single:6.2f} s")
    print(f"ratio: {edit:.2f}x (goal <= 1.2x)")
    others = [s for s in reran if "@" in s and not s.endswith(("@cls",))]
    sys.exit(0 if noop <= 1.3 and edit <= 1.2 and not others else 1)


if __name__ == "__main__":
    main()
