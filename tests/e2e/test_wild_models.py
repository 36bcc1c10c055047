"""Production ONNX files from PyPI wheels (PaddleOCR's PP-OCRv4 detector and recognizer and
its angle classifier from rapidocr-onnxruntime 1.4.4; NudeNet 3.4.2's YOLOv8n), each with one
shape statement, through fp32, fp16 and int8 (realistic inputs made in tests/wild,
precision.fallback=auto) to a TensorRT-RTX engine. int8 must pass a task gate keeping at
least half of the convolutions and matrix multiplies in int8. The streamed transforms
(int8 by entropy, int4_awq) must give what ModelOpt gives on the same model."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.precision.int4 import rtn
from tests.conftest import compose
from tests.helpers import int4_tensors
from tests.wild import fetch, inputs

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

OCR_METRIC = """
import numpy as np

KEYS = ["", *open(__file__.replace("metrics.py", "ppocr_keys.txt"), encoding="utf-8").read().splitlines(), " "]


def _texts(batches):
    out = []
    for batch in batches:
        for row in next(iter(batch.values())).argmax(-1):
            keep = (row != 0) & np.r_[True, row[1:] != row[:-1]]
            out.append("".join(KEYS[i] for i in row[keep]))
    return out


def _distance(a, b):
    d = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, cb in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (ca != cb))
    return d[-1]


def cer(fp32, candidate, labels):
    refs, hyps = _texts(fp32), _texts(candidate)
    return sum(map(_distance, refs, hyps)) / max(1, sum(map(len, refs)))
"""


@dataclass(frozen=True)
class Wild:
    package: Callable[[], dict[str, Path]]
    role: str
    input: str
    batches: Callable[..., list[np.ndarray]]
    shapes: str
    task: tuple[str, ...]  # the task gate's overrides
    batch: int = 4


MODELS = {
    "ocr_cls": Wild(
        fetch.rapidocr, "cls", "x", inputs.cls_batches,
        "{x: [1x3x48x192, 4x3x48x192, 8x3x48x192]}", ("model.task=classification",),
    ),
    "ocr_det": Wild(
        fetch.rapidocr, "det", "x", lambda n, bs, seed: inputs.det_batches(n, bs, seed, width=320),
        "{x: [1x3x416x320, 1x3x416x320, 1x3x416x320]}", ("model.task=dense",), batch=1,
    ),
    "ocr_rec": Wild(
        fetch.rapidocr, "rec", "x", inputs.rec_batches,
        "{x: [1x3x48x320, 4x3x48x320, 8x3x48x320]}",
        (
            "model.task=sequence",
            "precision.gate.metric=ocr_model.metrics:cer",
            "precision.gate.metric_max=0.01",
            "precision.gate.min_cosine=null",
            "precision.gate.max_rel_error=null",
        ),
    ),
    "yolov8n": Wild(
        fetch.nudenet, "det", "images", inputs.yolo_batches,
        "{images: [1x3x320x320, 4x3x320x320, 8x3x320x320]}", ("model.task=detection",),
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def wild_root(tmp_path_factory):
    return tmp_path_factory.mktemp("wild")


def prepared(root: Path, name: str, wild: Wild) -> tuple[Path, Path, Path]:
    """The model in a folder of its own (with the OCR metric beside it) and its data."""
    try:
        files = wild.package()
    except fetch.FetchError as e:
        pytest.skip(str(e))
    folder = root / name / "ocr_model"
    if not folder.exists():
        folder.mkdir(parents=True)
        shutil.copy(files[wild.role], folder / "model.onnx")
        if "rec_keys" in files:
            shutil.copy(files["rec_keys"], folder / "ppocr_keys.txt")
            (folder / "metrics.py").write_text(OCR_METRIC)
        bs = wild.batch
        inputs.write_npz_folder(root / name / "cal", wild.input, wild.batches(16 // bs, bs, 1))
        inputs.write_npz_folder(root / name / "ref", wild.input, wild.batches(8 // bs, bs, 2))
    return folder, root / name / "cal", root / name / "ref"


# YOLOv8n in fp32, fp16 and int8 and the recognizer in fp32 and int8 (and precision=auto)
# run through DVC in docs/tutorials/detector-and-ocr.md's test, on inputs of its own.
CASES = [
    (name, precision)
    for name in MODELS
    for precision in ("fp32", "fp16", "int8")
    if name != "yolov8n" and (name, precision) not in {("ocr_rec", "fp32"), ("ocr_rec", "int8")}
]


def wild_cfg(wild: Wild, folder: Path, cal: Path, ref: Path, cache: Path, *extra: str) -> Any:
    """The config of a run on a wheel model in `folder`, its data in `cal` and `ref`."""
    return compose(
        "model=onnx_file",
        f"model.onnx_path={folder / 'model.onnx'}",
        f"model.source={folder}",
        f"model.reference_data={ref}",
        f"profile.shapes={wild.shapes}",
        "calibration=directory",
        f"calibration.path={cal}",
        f"calibration.batch_size={wild.batch}",
        f"calibration.cache_dir={cache}",
        # gates on real models are the point here; their engines against fp16's are
        # benchmarks/frontier.py's and the detector tutorial's
        "build.reference_engines=never",
        *extra,
    )


@pytest.mark.parametrize(("name", "precision"), CASES)
def test_a_wheel_model_passes_its_task_gate(wild_root, name, precision, monkeypatch):
    wild = MODELS[name]
    folder, cal, ref = prepared(wild_root, name, wild)
    monkeypatch.chdir(wild_root / name)  # the metric imports as ocr_model.metrics from here
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(wild_root / "store"))
    cfg = wild_cfg(
        wild,
        folder,
        cal,
        ref,
        wild_root / "cache",
        f"model.reference_source={ref}",
        f"precision={precision}",
        "build.backend=tensorrt_rtx",
        # 8 reference pages are too few to hold some out (a verdict on 2 shows little: the
        # detector's misses 0.05 at 0.059 there) or to keep a margin on (0.025 keeps 40 of
        # its 64 convolutions): this is the search reaching the gate on real models; held-
        # out verdicts are judged where there is data for them (tests/e2e/test_tutorials*)
        *(
            ["precision.fallback=auto", "precision.holdout=0", "precision.search_margin=0"]
            if precision == "int8"
            else []
        ),
        *wild.task,
    )
    layout = Layout(wild_root / name / precision)
    stages.fingerprint(cfg, layout)
    stages.export(cfg, layout)
    summary = stages.calibrate(cfg, layout)
    assert summary["gate_passed"]
    fb = summary.get("fallback") or {}
    if fb.get("needed"):
        assert 2 * fb["gemms_still_quantized"] >= fb["quantized_gemms"], fb
    if precision == "int8":
        assert summary["calibration"]["data"]["random"] is False
    stages.build(cfg, layout, progress=False)
    assert list(layout.build_dir.glob("*/engine.plan"))


def test_a_wheel_model_in_external_data_streams_modelopts_scales(wild_root, tmp_path, monkeypatch):
    """PP-OCRv4's detector saved with its weights in external data, as a large export comes
    (the inline limit lowered so that the export keeps them there, as past 256 MiB): int8
    streams by default (entropy, the default method) and lands on the Q/DQ edges and scales
    ModelOpt's whole-model calibration gives it. Paddle exports its convolution weights as
    Constant nodes: they are weights here too, scaled per tensor."""
    import onnx

    from pipeline.graph import onnx_model
    from pipeline.precision.common import ops

    monkeypatch.setenv(onnx_model.INLINE_LIMIT_ENV, "1024")

    wild = MODELS["ocr_det"]
    folder, cal, ref = prepared(wild_root, "ocr_det", wild)
    external = tmp_path / "external"
    external.mkdir()
    model = onnx.load(folder / "model.onnx")
    onnx.save(model, external / "model.onnx", save_as_external_data=True, size_threshold=0)
    ours, theirs = both_ways(wild, external, cal, ref, tmp_path, "int8", "auto")
    assert ours.summary["calibrated_by"].startswith("streamed entropy")
    assert theirs.summary["calibrated_by"] == "modelopt"
    a, b = ours.graphs.plan.edges, theirs.graphs.plan.edges
    gemms = {e for e in b if theirs.graphs.plan.op_types[e[0]] in ops.GEMMS}
    assert set(a) == gemms and len(a) >= 100
    for edge in a:
        np.testing.assert_allclose(
            np.asarray(onnx.numpy_helper.to_array(a[edge].scale)),
            np.asarray(onnx.numpy_helper.to_array(b[edge].scale)),
            rtol=1e-5,
            err_msg=str(edge),
        )


def test_a_wheel_model_streams_modelopts_int4_awq_weights(wild_root, tmp_path):
    """PP-OCRv4's recognizer (its MatMul weights in Constant nodes, as Paddle exports them)
    in int4_awq, calibrated on rendered text lines: streamed, ModelOpt's own clip search
    one weight at a time on the tokens it samples gives ModelOpt's int4 weights and
    scales, bit for bit, wherever the blocks are the same: where the reduction axis is no
    multiple of the block (240 here), ModelOpt pads the last block, which TensorRT reads
    as blocks of another length, and the streamed weights take a block that divides it
    (rtn.fitting_block)."""
    wild = MODELS["ocr_rec"]
    folder, cal, ref = prepared(wild_root, "ocr_rec", wild)
    ours, theirs = both_ways(wild, folder, cal, ref, tmp_path, "int4_awq", "always")
    assert ours.summary["calibrated_by"] != "modelopt" == theirs.summary["calibrated_by"]
    assert ours.graphs.plan.weights.keys() == theirs.graphs.plan.weights.keys()
    assert len(ours.graphs.plan.weights) == 9
    a, b = int4_tensors(ours.graphs), int4_tensors(theirs.graphs)
    assert a.keys() == b.keys() and a
    rows = {n: a[n.rsplit("_", 1)[0] + "_i4"].shape[0] for n in a}  # each weight's axis
    same = [n for n in a if rtn.fitting_block(rows[n], 128) == 128]
    assert len(same) >= 2 * 6, sorted(a)  # weights and their scales
    for name in same:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    for name in set(a) - set(same):  # blocks of their own, each dividing the axis
        block = rtn.fitting_block(rows[name], 128)
        assert rows[name] % block == 0 and block < 128


def both_ways(
    wild: Wild, folder: Path, cal: Path, ref: Path, tmp_path: Path, precision: str, streaming: str
) -> tuple[Any, Any]:
    """`precision`'s transform of the model in `folder` with calibration.streaming set to
    `streaming`, and through ModelOpt (never), from one export."""
    from pipeline.precision.int4.quantize import quantize_int4
    from pipeline.precision.qdq import quantize

    layout = Layout(tmp_path / "run")
    make = quantize_int4 if precision.startswith("int4") else quantize.quantize
    results = []
    for way in (streaming, "never"):
        overrides = (f"precision={precision}", f"calibration.streaming={way}")
        cfg = wild_cfg(wild, folder, cal, ref, tmp_path / "cache", *overrides)
        if not layout.export_dir.exists():
            stages.export(cfg, layout)
        dest = tmp_path / way / "model.onnx"
        dest.parent.mkdir()
        results.append(
            make(layout.export_dir / "model.onnx", dest, cfg.precision, cfg.calibration, cfg.model)
        )
    return results[0], results[1]
