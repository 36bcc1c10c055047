"""Realistic inputs for the wheel models, made locally: printed pages and text lines rendered
with matplotlib's DejaVu fonts and roughed up like scans, and the real images that installed
packages ship (matplotlib's grace_hopper.jpg photograph, its Jacksboro fault elevation model
and its MRI slice), cropped, flipped, resized and recoloured.

Each *_batches(n, batch_size, seed) returns n float32 NCHW arrays of one fixed shape,
preprocessed as the model's owner does it (RapidOCR 1.4.4's and NudeNet 3.4.2's own code):

    det_batches   [bs, 3, 960, 736]  PP-OCRv4 det, input "x"
    det_square_batches [bs, 3, 640, 640] the same pages, padded to a square
    rec_batches   [bs, 3, 48, 320]   PP-OCRv4 rec, input "x"
    cls_batches   [bs, 3, 48, 192]   PP-OCR mobile v2.0 cls, input "x"
    yolo_batches  [bs, 3, 320, 320]  NudeNet 320n (YOLOv8n), input "images"

Sample i of a seed is the same whatever the batch size. write_npz_folder() writes batches
as the pipeline reads calibration and reference data: .npz files keyed by input name, axis 0
counting samples. No OpenCV: resize_linear() is cv2.resize's INTER_LINEAR in numpy.
"""

from __future__ import annotations

import gzip
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

DET_SHAPE = (3, 960, 736)
REC_SHAPE = (3, 48, 320)
CLS_SHAPE = (3, 48, 192)
YOLO_SHAPE = (3, 320, 320)
INPUT_NAMES = {"det": "x", "rec": "x", "cls": "x", "yolo": "images"}
FONTS = ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf")

# Prose for pages and lines (ASCII, all in PP-OCR's dictionary).
PROSE = (
    "Grace Hopper joined the Harvard Computation Lab in 1944 and wrote the manual for the "
    "Mark I. Her team built the first compiler, A-0, in 1952, and later the FLOW-MATIC "
    "language, which shaped COBOL. The report lists 24 machines, their cost per hour and the "
    "time each job took. Please return the signed form by 15 March 2024 to the office on "
    "the second floor. Total due: $1,284.50 (tax included). Invoice No. 00731, order "
    "ref. KX-4471. Call 555-0142 between 9:00 and 17:30. Results were within 0.5% of the "
    "expected values, see Table 3 and Fig. 2 for details. The river rises about 3 m each "
    "spring; the bridge was closed on 12/04/2023. Keep this page for your records."
)
WORDS = PROSE.split()


# -- images -----------------------------------------------------------------------------------


@cache
def font(name: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts/ttf" / name), size)


def resize_linear(img: np.ndarray, width: int, height: int) -> np.ndarray:
    """cv2.resize(img, (width, height)) with INTER_LINEAR: half-pixel centres, edge clamp,
    no antialiasing when shrinking; uint8 in, uint8 out (rounded)."""

    def taps(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        i0 = np.floor(x).astype(np.int64)
        f = (x - i0).astype(np.float32)
        f[i0 < 0], i0[i0 < 0] = 0, 0
        f[i0 >= n_in - 1], i0[i0 >= n_in - 1] = 0, n_in - 1
        return i0, np.minimum(i0 + 1, n_in - 1), f

    y0, y1, fy = taps(height, img.shape[0])
    x0, x1, fx = taps(width, img.shape[1])
    a = img.astype(np.float32)
    fy = fy.reshape(-1, 1, *([1] * (a.ndim - 2)))
    fx = fx.reshape(1, -1, *([1] * (a.ndim - 2)))
    rows = a[y0] * (1 - fy) + a[y1] * fy
    out = rows[:, x0] * (1 - fx) + rows[:, x1] * fx
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


def scanned(img: Image.Image, rng: np.random.Generator, angle: float = 0.0) -> np.ndarray:
    """A printed image as a scanner or phone returns it: a slight skew, blur, sensor noise,
    uneven light and JPEG compression. RGB uint8 out."""
    img = img.convert("RGB")
    if angle:
        img = img.rotate(angle, resample=Image.Resampling.BILINEAR, fillcolor=(236, 236, 232))
    img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.9)))
    a = np.asarray(img, np.float32)
    light = np.linspace(rng.uniform(0.88, 1), rng.uniform(0.92, 1), a.shape[1], dtype=np.float32)
    a = a * light[None, :, None] + rng.normal(0, rng.uniform(2, 6), a.shape).astype(np.float32)
    buf = io.BytesIO()
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(
        buf, "JPEG", quality=int(rng.integers(55, 90))
    )
    return np.asarray(Image.open(buf).convert("RGB"))


def _sample(name: str) -> Path:
    """A file of matplotlib's sample data (mpl-data/sample_data, installed with it)."""
    return Path(matplotlib.get_data_path()) / "sample_data" / name


@cache
def _grace_hopper() -> np.ndarray:
    """Matplotlib's photograph of Grace Hopper, 512x600."""
    return np.asarray(Image.open(_sample("grace_hopper.jpg")).convert("RGB"))


@cache
def _terrain() -> np.ndarray:
    """Matplotlib's Jacksboro fault elevation model (a real survey), hill-shaded."""
    from matplotlib import colormaps
    from matplotlib.colors import LightSource

    with np.load(_sample("jacksboro_fault_dem.npz")) as z:
        dem = z["elevation"].astype(float)
    rgb = LightSource(azdeg=315, altdeg=45).shade(dem, cmap=colormaps["gist_earth"])
    return (rgb[..., :3] * 255).astype(np.uint8)


@cache
def _mri() -> np.ndarray:
    """Matplotlib's MRI head slice (256x256, 16-bit), windowed to 8 bits."""
    raw = gzip.decompress(_sample("s1045.ima.gz").read_bytes())
    im = np.frombuffer(raw, np.uint16).reshape(256, 256).astype(np.float32)
    im = np.clip(im / np.percentile(im, 99.5), 0, 1) * 255
    return np.repeat(im.astype(np.uint8)[..., None], 3, axis=2)


SOURCES = {"grace_hopper": _grace_hopper, "terrain": _terrain, "mri": _mri}


def photo(rng: np.random.Generator, source: str | None = None) -> np.ndarray:
    """One RGB uint8 picture of `source` (default: Grace Hopper 3 times in 5, else terrain
    or the MRI slice), randomly cropped, flipped, rescaled and recoloured."""
    pick = ["grace_hopper"] * 3 + ["terrain", "mri"]
    src = SOURCES[source or pick[rng.integers(len(pick))]]()
    h, w = src.shape[:2]
    area, aspect = rng.uniform(0.35, 1.0), math.exp(rng.uniform(-0.4, 0.4))
    ch = min(h, round(math.sqrt(area * h * w / aspect)))
    cw = min(w, round(math.sqrt(area * h * w * aspect)))
    y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
    im = src[y : y + ch, x : x + cw]
    if rng.random() < 0.5:
        im = im[:, ::-1]
    scale = math.exp(rng.uniform(-0.5, 0.9))
    im = resize_linear(im, max(8, round(cw * scale)), max(8, round(ch * scale)))
    a = im.astype(np.float32)
    gray = a.mean(axis=2, keepdims=True)
    a = gray + (a - gray) * rng.uniform(0.5, 1.3)  # saturation
    a = (a - 128) * rng.uniform(0.75, 1.25) + 128 + rng.uniform(-25, 25)  # contrast, light
    return np.clip(a, 0, 255).astype(np.uint8)


# -- text ------------------------------------------------------------------------------------


def phrase(rng: np.random.Generator, max_words: int) -> str:
    """Consecutive words of PROSE: a line a detector would crop."""
    k = int(rng.integers(1, max_words + 1))
    start = int(rng.integers(0, len(WORDS) - k + 1))
    return " ".join(WORDS[start : start + k])


@dataclass
class Page:
    image: np.ndarray  # RGB uint8 [H, W, 3]
    boxes: list[tuple[int, int, int, int]]  # text lines, x0 y0 x1 y1 in image pixels


def page(rng: np.random.Generator) -> Page:
    """A printed page (title, paragraphs, sometimes a figure with a caption), scanned.
    Width 460..736 and aspect 23:30, so RapidOCR's resize makes it 736x960."""
    w = int(rng.choice([460, 552, 644, 736]))
    h = w * 30 // 23
    paper = tuple(int(v) for v in rng.integers(236, 256, 3))
    img = Image.new("RGB", (w, h), paper)
    draw = ImageDraw.Draw(img)
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    margin, size = int(w * rng.uniform(0.06, 0.1)), int(w * rng.uniform(0.024, 0.036))
    name = FONTS[rng.integers(3)]
    boxes: list[tuple[int, int, int, int]] = []
    y = margin

    def line(text: str, f: ImageFont.FreeTypeFont, x: int) -> None:
        nonlocal y
        x0, y0, x1, y1 = draw.textbbox((x, y), text, font=f)
        draw.text((x, y), text, font=f, fill=ink)
        boxes.append((int(x0), int(y0), math.ceil(x1), math.ceil(y1)))
        y += int(f.size * rng.uniform(1.4, 1.8))

    line(phrase(rng, 5), font("DejaVuSans-Bold.ttf", int(size * 1.6)), margin)
    y += size
    while y < h - margin - 2 * size:
        if rng.random() < 0.25 and y < h / 2:  # a figure with its caption
            fig = photo(rng)
            fw = int(rng.uniform(0.4, 0.8) * (w - 2 * margin))
            fh = min(int(fw * fig.shape[0] / fig.shape[1]), h // 3)
            img.paste(Image.fromarray(resize_linear(fig, fw, fh)), (margin, y))
            y += fh + size // 2
            line(f"Fig. {rng.integers(1, 9)}: " + phrase(rng, 4), font(name, size - 2), margin)
        words = WORDS[rng.integers(len(WORDS)) :] + WORDS
        f = font(name, size)
        for _ in range(int(rng.integers(2, 7))):
            text = ""
            while words and draw.textlength(text + " " + words[0], font=f) < w - 2 * margin:
                text = (text + " " + words.pop(0)).strip()
            if y > h - margin - size:
                break
            line(text, f, margin)
        y += size
    angle = float(rng.uniform(-0.6, 0.6))
    return Page(scanned(img, rng, angle), [_rotated_box(b, angle, w, h) for b in boxes])


def _rotated_box(box: tuple[int, ...], angle: float, w: int, h: int) -> tuple[int, int, int, int]:
    """The bounding box of `box` after PIL's rotate(angle) about the image centre."""
    cx, cy, t = w / 2, h / 2, math.radians(angle)
    xs, ys = [], []
    for x, y in ((box[0], box[1]), (box[2], box[1]), (box[0], box[3]), (box[2], box[3])):
        xs.append(cx + (x - cx) * math.cos(t) + (y - cy) * math.sin(t))
        ys.append(cy - (x - cx) * math.sin(t) + (y - cy) * math.cos(t))
    return int(min(xs)), int(min(ys)), math.ceil(max(xs)), math.ceil(max(ys))


@dataclass
class Line:
    image: np.ndarray  # RGB uint8 [h, w, 3], a detector-style crop around one line of text
    text: str


def text_line(rng: np.random.Generator, max_ratio: float = REC_SHAPE[2] / REC_SHAPE[1]) -> Line:
    """One line of text cropped with a margin, as RapidOCR cuts it from a page, no wider than
    max_ratio times its height (so it fits the recognizer's width without squeezing)."""
    size = int(rng.integers(22, 44))
    f = font(FONTS[rng.integers(len(FONTS))], size)
    bg = int(rng.integers(200, 256))
    fg = tuple(int(v) for v in rng.integers(0, 90, 3))
    if rng.random() < 0.3:  # blue or red ink
        fg = (20, 40, 150) if rng.random() < 0.7 else (150, 20, 20)
    while True:
        text = phrase(rng, 4)
        x0, y0, x1, y1 = (int(v) for v in f.getbbox(text))
        px, py = int(rng.integers(2, 12)), int(rng.integers(3, 10))
        w, h = x1 - x0 + 2 * px, y1 - y0 + 2 * py
        if w <= max_ratio * h:
            break
    img = Image.new("RGB", (w, h), (bg, bg, bg - int(rng.integers(0, 12))))
    ImageDraw.Draw(img).text((px - x0, py - y0), text, font=f, fill=fg)
    return Line(scanned(img, rng, float(rng.uniform(-1.5, 1.5))), text)


# -- preprocessing, as the owners' code does it ---------------------------------------------------


def det_preprocess(rgb: np.ndarray, limit_side_len: int = 736) -> np.ndarray:
    """RapidOCR DetPreProcess (limit_type "min"): scale so the short side is at least 736,
    round both sides to multiples of 32, cv2 linear resize; BGR (RapidOCR reads with cv2),
    (x / 255 - 0.5) / 0.5; [1, 3, H, W] float32."""
    h, w = rgb.shape[:2]
    ratio = limit_side_len / min(h, w) if min(h, w) < limit_side_len else 1.0
    rh, rw = round(int(h * ratio) / 32) * 32, round(int(w * ratio) / 32) * 32
    bgr = resize_linear(rgb[..., ::-1], rw, rh)
    return ((bgr.astype(np.float32) / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None]


def line_preprocess(rgb: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """RapidOCR's rec and cls resize_norm_img: height to shape[1] keeping the aspect (width
    capped at shape[2]), cv2 linear resize, BGR, (x / 255 - 0.5) / 0.5, zero-padded on the
    right to shape[2]; [1, 3, h, W] float32. For rec, RapidOCR widens W to the widest line of
    the batch; lines made by text_line() fit 320, so W stays 320."""
    c, th, tw = shape
    h, w = rgb.shape[:2]
    rw = min(tw, math.ceil(th * w / h))
    x = resize_linear(rgb[..., ::-1], rw, th).astype(np.float32).transpose(2, 0, 1) / 255
    out = np.zeros((1, c, th, tw), np.float32)
    out[0, :, :, :rw] = (x - 0.5) / 0.5
    return out


def yolo_preprocess(rgb: np.ndarray, size: int = 320, bgr: bool = False) -> np.ndarray:
    """NudeNet's _read_image: pad right and bottom with black to a square, cv2.dnn
    blobFromImage (linear resize to size x size, x / 255); [1, 3, size, size] float32, RGB
    as Ultralytics trains YOLOv8. NudeNet 3.4.2 itself feeds BGR: its cvtColor(RGBA2BGR) on
    a 3-channel BGR image swaps to RGB and blobFromImage(swapRB=True) swaps back. bgr=True
    reproduces that; the model scores faces higher with RGB (validate.check_yolo)."""
    h, w = rgb.shape[:2]
    sq = np.zeros((max(h, w), max(h, w), 3), np.uint8)
    sq[:h, :w] = rgb[..., ::-1] if bgr else rgb
    return (resize_linear(sq, size, size).astype(np.float32) / 255).transpose(2, 0, 1)[None]


# -- batches ---------------------------------------------------------------------------------

STREAMS = {"det": 1, "rec": 2, "cls": 3, "yolo": 4}


def _rng(role: str, seed: int, i: int) -> np.random.Generator:
    return np.random.default_rng([seed, STREAMS[role], i])


def _batches(n: int, batch_size: int, sample: Callable[[int], np.ndarray]) -> list[np.ndarray]:
    """n batches of batch_size samples; sample(i) is one preprocessed [1, ...] array."""
    return [
        np.concatenate([sample(b * batch_size + k) for k in range(batch_size)]) for b in range(n)
    ]


def pages(count: int, seed: int = 0) -> list[Page]:
    return [page(_rng("det", seed, i)) for i in range(count)]


def text_lines(count: int, seed: int = 0, role: str = "rec") -> list[Line]:
    return [text_line(_rng(role, seed, i)) for i in range(count)]


def photos(count: int, seed: int = 0) -> list[np.ndarray]:
    return [photo(_rng("yolo", seed, i)) for i in range(count)]


def det_batches(n: int, batch_size: int = 1, seed: int = 0, width: int = 736) -> list[np.ndarray]:
    """n batches of [batch_size, 3, 960, 736]: scanned pages (page()). A smaller `width`
    scales each page down first: [batch_size, 3, H, width] with H the page's 30:23 height
    rounded to 32 (320 gives 416), for tests that must be quick."""
    height = round(width * 30 / 23 / 32) * 32

    def sample(i: int) -> np.ndarray:
        img = page(_rng("det", seed, i)).image
        if width != DET_SHAPE[2]:
            img = resize_linear(img, width, height)
        x = det_preprocess(img, limit_side_len=width)
        assert x.shape[1:] == (3, height, width), x.shape
        return x

    return _batches(n, batch_size, sample)


def det_square_batches(
    n: int, batch_size: int = 1, seed: int = 0, size: int = 640
) -> list[np.ndarray]:
    """n batches of [batch_size, 3, size, size]: scanned pages (page()) scaled so the page
    fits the square and padded on the right with white paper, as a detector served at one
    fixed square shape (640x640) is fed; normalised as det_preprocess does."""

    def sample(i: int) -> np.ndarray:
        img = page(_rng("det", seed, i)).image
        width = round(size * img.shape[1] / img.shape[0])
        square = np.full((size, size, 3), 255, np.uint8)
        square[:, :width] = resize_linear(img, width, size)
        return ((square[..., ::-1].astype(np.float32) / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None]

    return _batches(n, batch_size, sample)


def rec_batches(n: int, batch_size: int = 1, seed: int = 0) -> list[np.ndarray]:
    """n batches of [batch_size, 3, 48, 320]: text lines (text_line(); texts via
    text_lines(n * batch_size, seed))."""
    sample = lambda i: line_preprocess(text_line(_rng("rec", seed, i)).image, REC_SHAPE)
    return _batches(n, batch_size, sample)


def cls_batches(n: int, batch_size: int = 1, seed: int = 0) -> list[np.ndarray]:
    """n batches of [batch_size, 3, 48, 192]: text lines, odd samples turned 180 degrees
    (label 1, "180"; even ones are label 0, "0")."""

    def sample(i: int) -> np.ndarray:
        im = text_line(_rng("cls", seed, i)).image
        return line_preprocess(im[::-1, ::-1] if i % 2 else im, CLS_SHAPE)

    return _batches(n, batch_size, sample)


def yolo_batches(n: int, batch_size: int = 1, seed: int = 0) -> list[np.ndarray]:
    """n batches of [batch_size, 3, 320, 320]: photos (photo()); every fifth is a page."""

    def sample(i: int) -> np.ndarray:
        rng = _rng("yolo", seed, i)
        return yolo_preprocess(page(rng).image if i % 5 == 4 else photo(rng))

    return _batches(n, batch_size, sample)


def write_npz_folder(dest: str | Path, name: str, batches: list[np.ndarray]) -> Path:
    """batch_0000.npz, ... in dest, each {name: batch}: the folder format the pipeline reads
    for calibration.path and model.reference_data (files stack along axis 0)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for i, b in enumerate(batches):
        arrays: dict[str, Any] = {name: b}
        np.savez(dest / f"batch_{i:04d}.npz", **arrays)
    return dest
