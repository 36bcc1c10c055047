"""precision=auto's sensitivity phase with and without checkpoints, in one run: each GEMM
alone in each low type judged on the ranking batches, once from the whole graph and once
from the latest checkpoint before it (pipeline/precision/common/checkpoints.py). Prints both
times, their ratio, whether cuts were taken, and the peak RSS.

    python benchmarks/sensitivity_checkpoints.py [--size small|minilm|ocr_rec]

small is the bundled outlier transformer (9 GEMMs), minilm the bundled BERT-shaped model
widened to MiniLM's size (37 GEMMs with a weight); both are synthetic stand-ins with random
weights and outlier channels. ocr_rec is a real model: the PP-OCRv4 recognizer from the
rapidocr-onnxruntime 1.4.4 wheel (47 GEMMs), on as many printed text lines as the
detector-and-OCR tutorial renders (benchmarks/frontier.py makes its folder; the wheel is
fetched once from PyPI and cached).

Goals, exit status 1 if missed: the same figures to float rounding (1e-5 relative), and
never more than 5% slower where the checkpoints are not worth their sessions (then unused)."""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from calibrate_cache import compose  # a sibling script: benchmarks/ is sys.path[0]
from fallback_search import resize

MODELS = {"small": "outlier_transformer", "minilm": "outlier_bert", "ocr_rec": "onnx_file"}


def model_overrides(size: str, root: Path) -> tuple[str, ...]:
    """The config of the model `size` names; a wheel's model is written under root first."""
    if size != "ocr_rec":
        resize(size)
        return (f"model={MODELS[size]}", "model.task=embedding")
    from frontier import MODELS as REAL  # puts the repository on sys.path for tests.wild

    folder = root / "ocr_rec"
    folder.mkdir()
    # as many lines as the tutorial's make_data.py: 32 to calibrate, 64 to judge
    model, common = REAL["ocr_rec"](folder, lines=(32, 64))
    return (
        "model=onnx_file",
        f"model.onnx_path={model}",
        f"model.source={folder}",
        f"model.reference_data={folder / 'reference'}",
        "calibration=directory",
        f"calibration.path={folder / 'calibration'}",
        "model.task=sequence",
        *common,
    )


def main() -> int:
    from pipeline.core import memory
    from pipeline.core.layout import Layout
    from pipeline.flow import stages
    from pipeline.inputs import reference_file
    from pipeline.precision.common import checkpoints
    from pipeline.precision.gate import accuracy
    from pipeline.precision.int4.graphs import Int4Graphs
    from pipeline.precision.mixed import make, search
    from pipeline.precision.mixed.graphs import MixedGraphs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=list(MODELS), default="minilm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sensitivity.") as tmp:
        root = Path(tmp)
        cfg = compose(
            *model_overrides(args.size, root),
            "precision=auto",
            f"calibration.cache_dir={root / 'cache'}",
        )
        layout = Layout(root)
        stages.export(cfg, layout)
        source_path, source = make._common_source(layout.export_graph, root, fp8=False)
        done = {
            t: make._transform(t, source_path, root, cfg.precision, cfg.calibration, cfg.model)
            for t in ("int4", "int8")
        }
        int4 = cast("Int4Graphs", done["int4"].graphs)
        graphs = MixedGraphs(source, int4, {"int8": done["int8"].graphs.plan}, True)
        pairs = reference_file.read(layout.reference)
        criteria = accuracy.Criteria.of(cfg.precision, cfg.model)
        options = {n: graphs.options(n) for n in graphs.candidates()}
        timed, figures = {}, {}
        built = []  # what each checkpointed phase built (None: no cuts taken)
        build = checkpoints.build

        def recording(*args: Any, **kwargs: Any) -> Any:
            built.append(build(*args, **kwargs))
            return built[-1]

        checkpoints.build = recording
        peak = memory.StagePeak()
        for way in ("whole graph", "checkpoints"):
            board = graphs.switchboard([p[0] for p in pairs], narrow=False)
            if way == "whole graph":
                board.resume = None
            judge = search.Judge(board.outputs, pairs, criteria)
            t0 = time.perf_counter()
            figures[way] = search._figures(judge, options, board)
            timed[way] = time.perf_counter() - t0
    same = close(figures["whole graph"], figures["checkpoints"])
    ratio = timed["checkpoints"] / timed["whole graph"]
    runs = sum(len(o) - 1 for o in options.values())
    cuts = [len(c.cuts) for c in built if c is not None]
    print(
        f"{args.size}: {len(options)} GEMMs, {runs} sensitivity runs: whole graph "
        f"{timed['whole graph']:.1f} s, with checkpoints {timed['checkpoints']:.1f} s "
        f"({ratio:.2f}x; cuts taken: {cuts[0] if cuts else 'none, not worth their sessions'}); "
        f"same figures: {same}; peak RSS {peak.bytes() / 2**20:.0f} MiB"
    )
    goals = {
        "the same figures to float rounding": same,
        "faster with cuts, within 5% without": ratio < 1.0 if cuts else ratio <= 1.05,
    }
    for goal, met in goals.items():
        print(f"  {'met   ' if met else 'MISSED'} {goal}")
    return 0 if all(goals.values()) else 1


def close(a: object, b: object) -> bool:
    """Equal structure, numbers within 1e-5 relative (1e-9 absolute)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9)
    return a == b


if __name__ == "__main__":
    sys.exit(main())
