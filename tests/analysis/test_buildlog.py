"""Build-log analysis on real TensorRT-RTX logs: counts, optimizer passes, fusions,
memory, the DETAILED engine-layer dump, redaction, and a quiet console with a bar."""

import os
import sys
from collections import Counter

import pytest

from pipeline.analysis import buildlog, fusion
from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.numbers import MIB
from pipeline.engine import manifest
from pipeline.flow import stages
from tests.conftest import REPO

INT64_WARNING = "Make sure input input_ids has Int64 binding"


def test_summary_of_a_real_transformer_build(transformer_result):
    records = transformer_result.records
    s = buildlog.summarize(records)
    assert s["counts"] == {
        sev: Counter(r.severity for r in records).get(sev, 0) for sev in buildlog.SEVERITIES
    }
    assert s["counts"]["verbose"] > 1000 and s["counts"]["error"] == 0
    assert (
        any(INT64_WARNING in w for w in s["warnings"])
        and len(s["warnings"]) == s["counts"]["warning"]
    )
    passes = [p["pass"] for p in s["layer_passes"]]
    assert (
        passes[0] == "Original"
        and "After vertical fusions" in passes
        and "After Myelin optimization" in passes
    )
    # The optimizer's counts fall to the one Myelin region: kept, as what they are.
    original = next(r.message for r in records if r.message.startswith("Original:"))
    assert s["optimizer"] == {
        "layers_parsed": int(original.split()[1]),
        "layers_after": 1,
        "regions": 1,
    }
    # Fusion: ONNX compute nodes the parser imported per layer the engine lists.
    compute = [n for n, v in s["onnx_nodes"].items() if v["op"] not in fusion.NON_COMPUTE_OPS]
    assert (
        s["layers_original"]
        == len(compute)
        > s["layers_final"]
        == len(s["engine_plan"]["layers"])
        > 10
    )
    assert s["fusion_ratio"] == round(s["layers_original"] / s["layers_final"], 3)
    assert s["fusion_basis"].startswith(f"{len(compute)} ONNX compute nodes")
    region = s["fused_layers"][0]
    assert (
        region["layer"].startswith("{ForeignNode[")
        and "/layers.0/qkv/MatMul" in region["onnx_nodes"]
    )
    assert len(region["onnx_nodes"]) > 50  # every node of the region, not just the first
    # Builds run with DETAILED verbosity: the engine's own layers come from the plan dump.
    plan_layers = s["engine_plan"]["layers"]
    assert len(plan_layers) > 1 and s["engine_precisions"]
    inputs = [t for layer in plan_layers for t in layer["inputs"]]
    assert any(t["name"] == "input_ids" and t["dtype"] == "int64" for t in inputs)
    m = s["memory"]
    assert m["weights_bytes"] > 100_000 and m["activation_bytes"] > 0 and m["scratch_bytes"] > 0
    assert {"peak_cpu_mib", "peak_gpu_mib", "host_persistent_bytes"} <= set(m)
    assert s["peak_memory_mib"] >= (m["weights_bytes"] + m["activation_bytes"]) / MIB
    assert any("timing cache" in t.lower() for t in s["timing_cache"])
    assert any(e["event"] == "region" for e in s["fusion_events"])
    assert s["onnx_nodes"]["/layers.0/qkv/MatMul"] == {"op": "MatMul", "dtype": "fp32"}
    assert set(s["phases"]) == {"parse", "build"}


def test_detailed_build_log_holds_the_engine_layers(built_transformer_detailed):
    _, layout = built_transformer_detailed
    d = layout.engine_dir(stages.read_fingerprint(layout)["id"])
    s = buildlog.summarize(buildlog.parse_log((d / "build.log").read_text()))
    plan = s["engine_plan"]
    assert plan["source"] == "build log (ProfilingVerbosity.DETAILED)"
    types = Counter(l["type"] for l in plan["layers"])
    assert types["gemm"] >= 4 and types["kgen"] >= 4
    gemm = next(l for l in plan["layers"] if l["type"] == "gemm")
    assert gemm["precision"] == "fp32" and gemm["tactic"] and gemm["inputs"][0]["dtype"] == "fp32"
    assert any("/layers.1/qkv/MatMul" in l["onnx_nodes"] for l in plan["layers"])
    assert {t["name"]: (t["mode"], t["dtype"]) for t in plan["io_tensors"]} == {
        "input_ids": ("Input", "int64"),
        "attention_mask": ("Input", "int64"),
        "logits": ("Output", "fp32"),
    }
    assert s["engine_precisions"]["fp32"] >= 10


def test_saved_log_reads_back_exactly(transformer_result):
    text = buildlog.format_log(transformer_result.records)
    records = buildlog.parse_log(text)
    assert buildlog.format_log(records) == text
    assert (
        buildlog.summarize(records)["fused_layers"]
        == buildlog.summarize(transformer_result.records)["fused_layers"]
    )
    assert all(
        line[:9].strip() for line in text.splitlines() if line and not line.startswith(" " * 34)
    )


def test_redaction_scrubs_log_summary_and_manifest(transformer_result):
    records = buildlog.redacted(transformer_result.records, [r"input_ids", r"/tmp/\S+"])
    text = buildlog.format_log(records)
    assert "input_ids" not in text and "<redacted>" in text
    summary = buildlog.summarize(records)
    record = manifest.make(
        fingerprint={},
        inputs={},
        build_cfg={},
        precision_cfg={"name": "fp32"},
        profiles=[],
        result=transformer_result,
        summary=summary,
        engine_sha256="0",
    )
    assert record["log"]["warnings"] and not any(
        "input_ids" in w for w in record["log"]["warnings"]
    )
    assert "input_ids" not in buildlog.format_log(transformer_result.records, ["input_ids"])
    assert buildlog.redacted(transformer_result.records, []) == transformer_result.records


def test_bad_redaction_pattern_is_one_clear_error(transformer_result):
    with pytest.raises(
        PipelineError, match=r"build.log_redactions: '\(unclosed' is not a valid regex"
    ):
        buildlog.redacted(transformer_result.records, ["(unclosed"])


def test_manifest_carries_the_log_summary(transformer_result):
    summary = buildlog.summarize(transformer_result.records)
    m = manifest.make(
        fingerprint={},
        inputs={},
        build_cfg={},
        precision_cfg={"name": "fp32"},
        profiles=[],
        result=transformer_result,
        summary=summary,
        engine_sha256="0",
    )
    assert (
        m["precision"] == "fp32"
        and m["tensorrt"] == f"tensorrt_rtx {transformer_result.trt_version}"
    )
    log = m["log"]
    assert (
        log["layers_original"] > log["layers_final"]
        and log["fusion_ratio"] == summary["fusion_ratio"]
    )
    assert (
        log["peak_memory_mib"] == summary["peak_memory_mib"] and log["memory"]["weights_bytes"] > 0
    )
    assert any(INT64_WARNING in w for w in log["warnings"])
    fileio.to_json(m)  # serialisable as written


def test_classic_tensorrt_fusion_lines_count_as_events():
    records = [
        buildlog.Record("verbose", "build", 0.1, "Running: ConstShuffleFusion on onnx::MatMul_311"),
        buildlog.Record(
            "verbose",
            "build",
            0.1,
            "ConstShuffleFusion: Fusing onnx::MatMul_311 with (Unnamed Layer* 11) [Shuffle]",
        ),
        buildlog.Record("verbose", "build", 0.1, "Removing /Identity"),
    ]
    events = buildlog.summarize(records)["fusion_events"]
    assert [e["event"] for e in events] == ["ConstShuffleFusion", "ConstShuffleFusion", "removing"]


_BUILD_WITH_BAR = """
import sys
from pipeline.engine import build
from tests.conftest import compose
cfg = compose()
onnx = sys.argv[1]
build.build_engine(onnx, cfg.precision, cfg.build,
                   [{"name": "p", "inputs": {"features": {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}}}],
                   "tensorrt_rtx", progress=True)
print("built")
"""


def test_console_shows_a_progress_bar_and_no_log(tmp_path):
    """On a terminal the build draws TensorRT's progress as a bar; the verbose log never
    reaches the console (it goes to build.log)."""
    import fcntl
    import pty
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # child: a 120-column terminal, as a user would have
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.chdir(REPO)
        os.execv(
            sys.executable,
            [sys.executable, "-c", _BUILD_WITH_BAR, str(REPO / "pipeline/zoo/onnx/tiny_mlp.onnx")],
        )
    out = b""
    try:
        while chunk := os.read(fd, 65536):
            out += chunk
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "Building engine" in text and "step" in text and "built" in text
    assert "VERBOSE" not in text and "Original:" not in text and "ModelImporter" not in text


def test_build_without_a_terminal_prints_nothing(capfd):
    from pipeline.engine import build
    from tests.conftest import compose

    cfg = compose()
    build.build_engine(
        REPO / "pipeline/zoo/onnx/tiny_mlp.onnx",
        cfg.precision,
        cfg.build,
        [{"name": "p", "inputs": {"features": {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}}}],
        "tensorrt_rtx",
        progress=True,
    )
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_load_summary_reuses_a_current_summary_and_reanalyses_an_old_one(tmp_path, built_cnn):
    _, layout = built_cnn
    src = layout.engine_dir(stages.read_fingerprint(layout)["id"])
    d = tmp_path / "b"
    d.mkdir()
    (d / "build.log").write_text((src / "build.log").read_text())
    fresh = buildlog.summarize(buildlog.parse_log((d / "build.log").read_text()))
    fileio.write_json(d / "build_summary.json", {**fresh, "layers_final": -1})
    assert (
        buildlog.load_summary(d)["layers_final"] == -1
    )  # current version: the saved summary, no re-parse
    stale = {k: v for k, v in fresh.items() if k != "summary_version"}
    fileio.write_json(d / "build_summary.json", {**stale, "layers_final": -1})
    assert buildlog.load_summary(d) == fresh  # older code's summary: analysed again from the log
    (d / "build.log").unlink()
    with pytest.raises(PipelineError, match="neither a current build_summary.json nor a build.log"):
        buildlog.load_summary(d)


def _layer(name, kind="kgen"):
    return {
        "name": name,
        "type": kind,
        "precision": "fp32",
        "inputs": [],
        "outputs": [],
        "onnx_nodes": [],
        "tactic": None,
    }


def test_fusion_is_measured_against_engine_layers_not_optimizer_regions():
    parsed = {
        "c": {"op": "Constant", "dtype": "fp32"},
        "q": {"op": "QuantizeLinear", "dtype": "int8"},
        "conv": {"op": "Conv", "dtype": "fp32"},
        "relu": {"op": "Relu", "dtype": "fp32"},
        "fc": {"op": "Gemm", "dtype": "fp32"},
        "id": {"op": "Identity", "dtype": "fp32"},
    }
    passes = [{"pass": "Original", "layers": 6}, {"pass": "After Myelin optimization", "layers": 1}]
    region = "{ForeignNode[conv...fc]}"
    only_region = fusion.measure(parsed, None, [_layer(region, "Myelin")], {region}, passes)
    assert (
        only_region["fusion_ratio"] is None and only_region["layers_final"] is None
    )  # 3 → 1 is no fusion ratio
    assert only_region["fusion_basis"].startswith(
        "unknown: the build log lists no engine layers, only Myelin"
    )
    assert only_region["optimizer"] == {"layers_parsed": 6, "layers_after": 1, "regions": 1}
    classic = [
        _layer("conv + relu", "CaskConvolution"),
        _layer("fc", "CaskGemm"),
    ]  # full TensorRT's own layers
    m = fusion.measure(parsed, None, classic, set(), passes)
    assert (m["layers_original"], m["layers_final"], m["fusion_ratio"]) == (3, 2, 1.5)
    mixed = fusion.measure(
        parsed, None, [_layer("conv + relu", "CaskConvolution"), _layer(region)], {region}, passes
    )
    assert (
        mixed["fusion_ratio"] == 1.5
        and "1 of them Myelin regions, each counted as one layer" in mixed["fusion_basis"]
    )
    plan = {
        "source": "build log (ProfilingVerbosity.DETAILED)",
        "layers": [*classic, _layer("reformat")],
    }
    assert fusion.measure(parsed, plan, [_layer(region)], {region}, passes)["fusion_ratio"] == 1.0
    assert fusion.measure({}, plan, [], set(), [])["fusion_basis"].startswith(
        "unknown: the build log names no"
    )
