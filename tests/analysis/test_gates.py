"""Quality gates on real TensorRT-RTX builds: each gate fails a build it should,
naming the gate, its threshold and what matched; results land in metrics/gates.json."""

import pytest
from omegaconf import OmegaConf

from pipeline.analysis import buildlog, gates
from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.engine import build
from tests.conftest import REPO, compose

INT64_WARNING = "Make sure input input_ids has Int64 binding"


def _gates(**values):
    return compose(*(f"build.gates.{k}={v}" for k, v in values.items())).build.gates


def _real(transformer_result):
    return (
        buildlog.summarize(transformer_result.records),
        transformer_result.records,
        transformer_result.engine,
    )


def test_forbidden_real_warning_fails_the_build_with_the_match(transformer_result, tmp_path):
    summary, records, engine = _real(transformer_result)
    cfg = _gates(forbid_patterns=f"[{INT64_WARNING!r}]".replace("'", '"'))
    metrics = tmp_path / "metrics" / "gates.json"
    with pytest.raises(PipelineError) as err:
        gates.check(cfg, summary, records, engine, metrics_path=metrics)
    msg = str(err.value)
    assert msg.startswith(f"build gate forbid_patterns failed (threshold [{INT64_WARNING!r}])")
    assert "matched 1 build-log line(s)" in msg and "WARNING" in msg and "ModelImporter.cpp" in msg
    assert "\n" not in msg
    written = fileio.read_json(metrics)
    assert written["passed"] is False and written["failed"] == 1
    hit = written["gates"]["forbid_patterns"]
    assert hit["value"] == 1 and INT64_WARNING in hit["matches"][0]["line"]


def test_forbidden_info_line_fails_a_cnn_build(built_cnn):
    cfg, _ = built_cnn
    onnx_path = REPO / "pipeline/zoo/onnx/tiny_mlp.onnx"
    result = build.build_engine(
        onnx_path,
        cfg.precision,
        cfg.build,
        build.resolve_profiles(cfg.profile, onnx_path),
        "tensorrt_rtx",
        progress=False,
    )
    summary = buildlog.summarize(result.records)
    with pytest.raises(
        PipelineError, match=r"forbid_patterns.*'INFO +build +Local timing cache in use"
    ):
        gates.check(
            _gates(forbid_patterns='["^INFO .*timing cache"]'),
            summary,
            result.records,
            result.engine,
        )


def test_each_numeric_gate_fails_past_its_threshold(transformer_result):
    summary, records, engine = _real(transformer_result)
    cases = {
        "max_warnings": (0, "2 warning(s), at most 0 allowed"),
        "min_fusion_ratio": (100000, "at least 100000"),
        "max_engine_mib": (0.01, "at most 0.01 MiB allowed"),
        "max_peak_memory_mib": (0.01, "at most 0.01 MiB allowed"),
    }
    for gate, (threshold, words) in cases.items():
        with pytest.raises(PipelineError) as err:
            gates.check(_gates(**{gate: threshold}), summary, records, engine)
        assert str(err.value).startswith(f"build gate {gate} failed (threshold {threshold})"), gate
        assert words in str(err.value)


def test_gates_within_thresholds_pass_and_report_values(transformer_result):
    summary, records, engine = _real(transformer_result)
    results = gates.check(
        _gates(
            max_warnings=2,
            min_fusion_ratio=2,
            max_engine_mib=100,
            max_peak_memory_mib=4096,
            forbid_patterns='["Error Code"]',
        ),
        summary,
        records,
        engine,
    )
    assert all(r["passed"] and r["enabled"] for r in results)
    by = {r["gate"]: r for r in results}
    assert (
        by["max_warnings"]["value"] == 2
        and by["min_fusion_ratio"]["value"] == summary["fusion_ratio"]
    )
    assert by["max_engine_mib"]["value"] == round(len(engine) / (1 << 20), 3)


def test_switched_off_gates_pass_with_their_values(transformer_result):
    summary, records, engine = _real(transformer_result)
    m = gates.metrics(gates.evaluate(compose().build.gates, summary, records, engine))
    assert m["passed"] and m["failed"] == 0 and set(m["gates"]) == set(gates.GATES)
    assert not any(g["enabled"] for g in m["gates"].values())
    assert m["gates"]["max_peak_memory_mib"]["value"] == summary["peak_memory_mib"]


def test_gates_read_a_saved_log_and_the_manifest_size(transformer_result):
    """An engine from the store has no records, only build.log and its manifest."""
    summary, records, engine = _real(transformer_result)
    text = buildlog.format_log(records)
    results = gates.evaluate(
        _gates(forbid_patterns='["Int64 binding"]', max_engine_mib=0.01),
        summary,
        text,
        manifest={"engine": {"bytes": len(engine)}},
    )
    failed = {r["gate"] for r in gates.failures(results)}
    assert failed == {"forbid_patterns", "max_engine_mib"}


def test_bad_gate_config_is_one_clear_error(transformer_result):
    summary, records, engine = _real(transformer_result)
    with pytest.raises(
        PipelineError, match=r"build.gates.forbid_patterns: '\[oops' is not a valid regex"
    ):
        gates.evaluate(_gates(forbid_patterns='["[oops"]'), summary, records, engine)
    with pytest.raises(PipelineError, match="unknown gate max_layers"):
        gates.evaluate(OmegaConf.create({"max_layers": 3}), summary, records, engine)


def test_several_failures_name_the_first_and_count_the_rest(transformer_result):
    summary, records, engine = _real(transformer_result)
    with pytest.raises(
        PipelineError, match=r"^build gate max_warnings failed .*\(\+1 more failed gate"
    ):
        gates.check(_gates(max_warnings=0, max_engine_mib=0.01), summary, records, engine)


def test_an_unmeasured_fusion_ratio_fails_a_set_gate_and_says_why(transformer_result):
    summary, records, engine = _real(transformer_result)
    unmeasured = {
        **summary,
        "fusion_ratio": None,
        "fusion_basis": "unknown: the build log lists no engine layers",
    }
    with pytest.raises(
        PipelineError,
        match=r"min_fusion_ratio failed .*fusion ratio unknown: the build log lists no "
        r"engine layers, at least 1",
    ):
        gates.check(_gates(min_fusion_ratio=1), unmeasured, records, engine)
