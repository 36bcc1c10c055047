"""int8/fp8 Q/DQ by real ModelOpt PTQ (ONNX Runtime CPU calibration), real TensorRT-RTX
builds of the result, the calibration cache and the accuracy gate."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.engine import backend, build, weak_typing
from pipeline.flow import stages
from pipeline.graph import onnx_runtime
from pipeline.inputs import reference_file
from pipeline.store import CALIBRATION
from tests.conftest import REPO, compose

BUILT = {"cnn": "built_cnn", "transformer": "built_transformer"}


def layout_with_export(request, tmp_path, model):
    layout = Layout(tmp_path / model)
    shutil.copytree(request.getfixturevalue(BUILT[model])[1].export_dir, layout.export_dir)
    return layout


@pytest.fixture(scope="module")
def int8_runs(request, tmp_path_factory):
    """precision=int8 alone (calibration=none: the model factory's data) for both models,
    run twice against one cache folder."""
    runs = {}
    for model in BUILT:
        tmp = tmp_path_factory.mktemp(f"int8_{model}")
        layout = layout_with_export(request, tmp, model)
        cfg = compose(f"model={model}", "precision=int8", f"calibration.cache_dir={tmp / 'cache'}")
        cold = stages.calibrate(cfg, layout)
        cold_bytes = (layout.calibrate_dir / "model.onnx").read_bytes()
        stages.calibrate(cfg, layout)
        warm = fileio.read_json(layout.calibrate_dir / "calibration.json")
        runs[model] = cfg, layout, cold, warm, cold_bytes
    return runs


def build_qdq(cfg, onnx_path, precision_cfg=None):
    resolved = build.resolve_profiles(cfg.profile, onnx_path)
    return build.build_engine(
        onnx_path,
        precision_cfg or cfg.precision,
        cfg.build,
        resolved,
        "tensorrt_rtx",
        progress=False,
    )


@pytest.mark.parametrize("model", list(BUILT))
def test_int8_qdq_graph_builds_with_tensorrt_rtx(int8_runs, model):
    cfg, layout, cold, _, _ = int8_runs[model]
    calib = cold["calibration"]
    assert (
        calib["quantize_linear_nodes"] > 0
        and cold["ops"]["QuantizeLinear"] == calib["quantize_linear_nodes"]
    )
    assert calib["data"]["source"] == "factory" and "calibration=none" in calib["data"]["fallback"]
    assert all(r["passed"] for r in cold["gate"])
    # 4 held-out batches: where an embedding table's type is searched, 1 is the verdict's
    split = cold.get("holdout")
    assert cold["held_out_batches"] == (split["verdict_batches"] if split else 4)
    if split:
        assert split["search_batches"] + split["verdict_batches"] == 4
        assert cold["search_judgement"]["gate_passed"]
    result = build_qdq(cfg, layout.calibrate_dir / "model.onnx")
    assert len(result.engine) > 10_000
    assert {"quantize", "dequantize"} <= {layer["type"] for layer in result.network}


@pytest.mark.parametrize("model", list(BUILT))
def test_second_run_hits_the_cache(int8_runs, model):
    _, layout, cold, warm, cold_bytes = int8_runs[model]
    assert cold["calibration"]["cache"]["hit"] is False
    assert warm["calibration"]["cache"] == {"key": cold["calibration"]["cache"]["key"], "hit": True}
    assert (layout.calibrate_dir / "model.onnx").read_bytes() == cold_bytes
    # the calibration's own result (the plain Q/DQ graph), the same both runs; the graph
    # written may hold more (an embedding table in fp16: tables.py)
    assert warm["calibration"]["result_sha256"] == cold["calibration"]["result_sha256"]
    assert warm["onnx_sha256"] == cold["onnx_sha256"]


def test_accuracy_metrics_file(int8_runs):
    _, layout, cold, _, _ = int8_runs["transformer"]
    metrics = fileio.read_json(layout.metrics_dir / "accuracy.json")
    assert metrics["gate_passed"] is True and metrics["precision"] == "int8"
    assert metrics["gate"]["logits"]["cosine"]["threshold"] == 0.999
    assert metrics["accuracy"] == cold["accuracy"]
    assert metrics["calibration_data"] == {"source": "factory", "random": False, "num_samples": 64}


def test_corrupt_cache_entry_is_reported_and_recomputed(int8_runs, capsys):
    cfg, layout, cold, _, cold_bytes = int8_runs["cnn"]
    key = cold["calibration"]["cache"]["key"]
    entry = Path(cfg.calibration.cache_dir) / "entries" / key / "model.onnx"
    entry.write_bytes(entry.read_bytes()[:-10] + b"0123456789")
    summary = stages.calibrate(cfg, layout)
    assert summary["calibration"]["cache"] == {
        "key": key,
        "hit": False,
        "replaced_corrupt_entry": "model.onnx sha256 mismatch",
    }
    assert "damaged" in capsys.readouterr().err
    # the entry holds ModelOpt's graph; the graph written from it is the cold run's again
    assert (layout.calibrate_dir / "model.onnx").read_bytes() == cold_bytes
    assert stages.calibrate(cfg, layout)["calibration"]["cache"]["hit"] is True


@pytest.mark.parametrize("model", list(BUILT))
def test_fp8_qdq_graph_passes_its_gate_and_builds(request, tmp_path, model):
    layout = layout_with_export(request, tmp_path, model)
    cfg = compose(
        f"model={model}",
        "precision=fp8",
        f"calibration={model}_samples",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    summary = stages.calibrate(cfg, layout)
    assert summary["calibration"]["data"]["source"] == "directory"
    assert summary["ops"]["QuantizeLinear"] > 0
    result = build_qdq(cfg, layout.calibrate_dir / "model.onnx")
    assert len(result.engine) > 10_000


def test_bad_calibration_set_fails_the_gate_naming_the_metric(request, tmp_path):
    """All-zero images calibrate the first convolution's input range to nothing."""
    layout = layout_with_export(request, tmp_path, "cnn")
    fileio.write_npz(
        tmp_path / "zeros" / "z.npz", {"images": np.zeros((16, 3, 32, 32), np.float32)}
    )
    cfg = compose(
        "model=cnn",
        "precision=int8",
        "calibration=cnn_samples",
        f"calibration.path={tmp_path / 'zeros'}",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    needle = r"gate failed for int8 ONNX: (cosine|max_abs_error|top1_agreement) of output 'logits' \(classification\) is [0-9.e-]+, needs"
    with pytest.raises(PipelineError, match=needle) as failed:
        stages.calibrate(cfg, layout)
    # no graph is left behind, but every metric is, pass or fail, and the line names each failure
    assert not layout.calibrate_dir.exists()
    metrics = fileio.read_json(layout.metrics_dir / "accuracy.json")
    assert metrics["gate_passed"] is False and set(metrics["gate"]["logits"]) == {
        "max_abs_error",
        "cosine",
        "top1_agreement",
    }
    failing = [f"{r['metric']} of output 'logits' (classification) is" for r in metrics["failing"]]
    assert (
        failing
        and all(f in str(failed.value) for f in failing)
        and "more)" not in str(failed.value)
    )


def test_reference_batches_used_for_calibration_are_not_held_out(request, tmp_path):
    layout = layout_with_export(request, tmp_path, "cnn")
    pairs = reference_file.read(layout.export_dir / "reference.npz")
    fileio.write_npz(tmp_path / "leak" / "first.npz", pairs[0][0])
    cfg = compose(
        "model=cnn",
        "precision=int8",
        "calibration=cnn_samples",
        f"calibration.path={tmp_path / 'leak'}",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    assert stages.calibrate(cfg, layout)["held_out_batches"] == len(pairs) - 1


def test_percentile_is_refused_by_name_before_any_work():
    """Neither ModelOpt's ONNX PTQ nor TensorRT 10's calibrators have it: the config says so."""
    with pytest.raises(
        PipelineError,
        match=r"calibration.method: Invalid value 'percentile', expected one of \[entropy, max, minmax\]",
    ):
        compose("model=cnn", "precision=int8", "calibration.method=percentile")


def test_exclusions_are_checked_against_the_graph(request, tmp_path):
    layout = layout_with_export(request, tmp_path, "cnn")
    for override, needle in (
        ("calibration.exclude_op_types=[Convv]", "no Convv node"),
        ("calibration.exclude_nodes=[/nothing/.*]", "matches no node"),
    ):
        cfg = compose(
            "model=cnn", "precision=int8", override, f"calibration.cache_dir={tmp_path / 'cache'}"
        )
        with pytest.raises(PipelineError, match=needle):
            stages.calibrate(cfg, layout)


def run_stage(repo, stage):
    return subprocess.run(
        [sys.executable, "-m", f"stages.{stage}"], cwd=repo, capture_output=True, text=True
    )


def test_bad_input_through_the_stage_cli(in_tmp_repo_copy):
    """One line on stderr, exit 1, no artifacts/calibrate, cache untouched."""
    repo = in_tmp_repo_copy
    assert run_stage(repo, "export").returncode == 0
    fileio.write_npz(
        repo / "wrong_names" / "a.npz",
        {
            "pixels": np.zeros((8, 3, 32, 32), np.float32),
            "images": np.zeros((8, 3, 32, 32), np.float32),
        },
    )
    (repo / "empty").mkdir()
    cases = [
        (
            ["precision=int8", "calibration=cnn_samples", "calibration.path=wrong_names"],
            "unknown input 'pixels'",
        ),
        (
            ["precision=int8", "calibration=cnn_samples", "calibration.path=empty"],
            "no .npz or .npy files",
        ),
        (
            ["precision=int8", "calibration=cnn_samples", "calibration.num_samples=1000"],
            "holds only 32 samples",
        ),
        (["precision=int8", "calibration=transformer_samples"], "another model"),
        (["precision=fp8", "precision.mode=weak"], "precision.mode=strong"),
    ]
    cache = Path(os.environ["TRT_PIPELINE_CALIB_CACHE"])
    before = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    for overrides, needle in cases:
        subprocess.run(
            [sys.executable, "-m", "pipeline", "params", *overrides],
            cwd=repo,
            check=True,
            capture_output=True,
        )
        r = run_stage(repo, "calibrate")
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
        assert needle in lines[0], lines[0]
        assert not (repo / "artifacts/calibrate").exists()
        assert (sorted(p.name for p in cache.iterdir()) if cache.exists() else []) == before
    # precision=int8 alone works, quietly (no TTY: no progress bar, no ModelOpt logs): the
    # stage's own summary table is all it prints.
    subprocess.run(
        [sys.executable, "-m", "pipeline", "params", "precision=int8"], cwd=repo, check=True
    )
    r = run_stage(repo, "calibrate")
    assert r.returncode == 0 and r.stdout.strip() == "", r.stderr + r.stdout
    assert r.stderr.lstrip().startswith("calibrate: cnn int8"), r.stderr
    lines = [line.strip().lower() for line in r.stderr.splitlines()]
    assert not any(
        line.startswith(("warning", "error:", "[w]", "[e]"))
        or "did not find" in line
        or "%|" in line
        for line in lines
    ), r.stderr
    summary = fileio.read_json(repo / "artifacts/calibrate/calibration.json")
    assert (cache / "entries" / summary["calibration"]["cache"]["key"] / "entry.json").is_file()
    assert fileio.read_json(repo / "metrics/accuracy.json")["gate_passed"] is True


def test_weak_int8_prepares_inputs_and_is_refused_on_rtx(request, tmp_path):
    layout = layout_with_export(request, tmp_path, "cnn")
    cfg = compose("model=cnn", "precision=int8", "precision.mode=weak", "calibration=cnn_samples")
    summary = stages.calibrate(cfg, layout)
    weak = summary["weak_typing"]
    assert weak["flags"] == ["INT8"] and weak["calibrator"] == "IInt8EntropyCalibrator2"
    assert (layout.calibrate_dir / weak["inputs_file"]).is_file() and weak["batches_used"] == 4
    trt = backend.import_flavour("tensorrt_rtx")
    with pytest.raises(PipelineError, match="precision.mode=strong"):
        weak_typing.configure(trt, None, None, None, layout.calibrate_dir)
    with pytest.raises(PipelineError, match="precision.mode=strong"):
        build_qdq(cfg, layout.calibrate_dir / "model.onnx")


@pytest.mark.gpu
def test_weak_int8_calibrates_implicitly_on_tensorrt_10(request, tmp_path):
    trt = pytest.importorskip("tensorrt")
    if not hasattr(trt.BuilderFlag, "INT8"):
        pytest.skip(f"tensorrt {trt.__version__} is strongly typed only")
    layout = layout_with_export(request, tmp_path, "cnn")
    cfg = compose(
        "model=cnn",
        "precision=int8",
        "precision.mode=weak",
        "calibration=cnn_samples",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    stages.calibrate(cfg, layout)
    onnx_path = layout.calibrate_dir / "model.onnx"
    from pipeline.engine import interrupt
    from pipeline.engine.trt_hooks import make_logger

    with interrupt.tensorrt_scope():  # as the build does (interrupt.py)
        logger = make_logger(trt)
        builder = trt.Builder(logger)
        network, _parser = build.parse_onnx(trt, builder, logger, onnx_path, strongly_typed=False)
        config = build.configure(
            trt,
            builder,
            network,
            cfg.build,
            cfg.precision,
            build.resolve_profiles(cfg.profile, onnx_path),
        )
        first = weak_typing.configure(trt, builder, network, config, layout.calibrate_dir)
        assert config.get_flag(trt.BuilderFlag.INT8) and first["calibration_cache_hit"] is False
        assert builder.build_serialized_network(network, config) is not None
        again = weak_typing.configure(trt, builder, network, config, layout.calibrate_dir)
        assert again["calibration_cache_hit"] is True


def test_cache_location_config_then_env_then_user_cache_folder(monkeypatch, tmp_path):

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CALIBRATION.env, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert (
        CALIBRATION.root(compose().calibration.cache_dir)
        == tmp_path / "xdg" / "trt-pipeline" / "calibration"
    )
    monkeypatch.setenv(CALIBRATION.env, str(tmp_path / "env"))
    assert CALIBRATION.root(compose().calibration.cache_dir) == tmp_path / "env"
    assert CALIBRATION.root(compose("calibration.cache_dir=mine").calibration.cache_dir) == Path(
        "mine"
    )


def test_int8_and_fp8_configs_compose():
    for name in ("int8", "fp8"):
        cfg = compose(f"precision={name}")
        assert cfg.precision.transform == "qdq" and cfg.precision.quantize_mode == name
    assert (REPO / "conf/calibration/cnn_samples.yaml").is_file()


def test_emulation_of_fp32_is_exact_and_of_bf16_rounds(tmp_path, built_cnn):
    """The bf16 fallback evaluator: identity on an fp32 graph, real rounding on bf16."""
    import onnx
    from onnx import TensorProto, helper

    from pipeline.precision.gate import emulate

    _, layout = built_cnn
    pairs = reference_file.read(layout.export_dir / "reference.npz")
    fp32 = onnx.load(layout.export_dir / "model.onnx")
    fileio.write_bytes(tmp_path / "same.onnx", emulate.emulated_fp32(fp32).SerializeToString())
    [out] = onnx_runtime.run_batches(tmp_path / "same.onnx", [pairs[0][0]])
    np.testing.assert_array_equal(out["logits"], pairs[0][1]["logits"])

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    nodes = [
        helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
        helper.make_node("Add", ["xb", "xb"], ["s"]),
        helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    fileio.write_bytes(tmp_path / "bf16.onnx", emulate.emulated_fp32(model).SerializeToString())
    [got] = onnx_runtime.run_batches(
        tmp_path / "bf16.onnx", [{"x": np.array([1.0, 1.00390625, 3.14159], np.float32)}]
    )
    # bf16 keeps 8 mantissa bits: 1 + 2**-8 rounds to 1, pi to 3.140625
    np.testing.assert_array_equal(got["y"], np.array([2.0, 2.0, 6.28125], np.float32))


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_bf16_passes_its_gate_on_both_models(tmp_path, model):
    cfg = compose(f"model={model}", "precision=bf16")
    layout = Layout(tmp_path)
    stages.export(cfg, layout)
    summary = stages.calibrate(cfg, layout)
    assert all(g["passed"] for g in summary["gate"])
    assert summary["ops"].get("Cast", 0) > 0
    # ONNX Runtime's CPU build lacks bf16 Conv/MatMul: the gate ran on the honest emulation
    assert "onnxruntime" in summary["evaluated_with"]


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_modelopt_asked_for_the_gemms_alone_gives_the_gemm_scales_of_every_op_type(
    request, tmp_path, model
):
    """qdq_placement=gemm_inputs keeps the GEMMs' edges only, so ModelOpt is asked for those
    op types alone: the edges kept and their scales are the ones ModelOpt's calibration of
    every op type gives (it still places a pair on a tensor a GEMM shares with an Add)."""
    import onnx

    from pipeline.graph import onnx_model
    from pipeline.inputs import calibration_data
    from pipeline.precision.common.ops import GEMMS
    from pipeline.precision.qdq import plan, quantize
    from pipeline.precision.qdq.modelopt_run import run_modelopt

    layout = layout_with_export(request, tmp_path, model)
    cfg = compose(f"model={model}", "precision=int8")
    src = layout.export_dir / "model.onnx"
    data = calibration_data.load(cfg.calibration, cfg.model, src)
    source = quantize.qdq_source(onnx_model.load(src), "int8")
    plans, q_nodes = {}, {}
    for way, op_types in (("every op type", None), ("gemms", sorted(GEMMS))):
        work = tmp_path / way
        work.mkdir()
        files, ops = run_modelopt(
            source, src.parent, work, "int8", "entropy", cfg.calibration, data, op_types
        )
        graph = onnx.load_from_string(files["model.onnx"])
        plans[way] = plan.extract(graph, source, "gemm_inputs").admitted()
        q_nodes[way] = ops["QuantizeLinear"]
    assert plans["gemms"].keys() == plans["every op type"].keys() and plans["gemms"]
    for edge, spec in plans["gemms"].items():
        np.testing.assert_array_equal(spec.scale, plans["every op type"][edge].scale)
    assert q_nodes["gemms"] <= q_nodes["every op type"], q_nodes


def test_an_entry_of_every_op_type_serves_a_run_of_the_gemms_alone(request, tmp_path):
    """A calibration made for ModelOpt's own placement (every op type), or by a version of
    before the GEMMs were asked for alone, is a hit for the default placement."""
    layout = layout_with_export(request, tmp_path, "cnn")
    cache = f"calibration.cache_dir={tmp_path / 'cache'}"
    whole = stages.calibrate(
        compose("model=cnn", "precision=int8", "precision.qdq_placement=modelopt", cache), layout
    )
    assert whole["calibration"]["cache"]["hit"] is False
    gemms = stages.calibrate(compose("model=cnn", "precision=int8", cache), layout)
    assert gemms["calibration"]["cache"] == {
        "key": whole["calibration"]["cache"]["key"],
        "hit": True,
    }
