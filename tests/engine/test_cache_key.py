"""Every field that decides an engine changes the key; fields that do not, don't."""

import copy

import pytest

from pipeline.core import config
from pipeline.engine import cache_key
from pipeline.flow import stages
from tests.conftest import compose

BASE = dict(
    onnx_sha256="a" * 64,
    build_cfg=config.to_dict(compose().build),
    precision_cfg=config.to_dict(compose().precision),
    profile_cfg=config.to_dict(compose().profile),
    calibration_sha256=None,
    plugin_sha256={},
    fingerprint={
        "gpu": {
            "name": "NVIDIA L4",
            "compute_capability": "8.9",
            "memory_mib": 23034,
            "index": 0,
            "count": 1,
        },
        "driver_version": "580.1",
        "cuda_driver_version": "13.0",
        "cuda_runtime_version": "13.0",
        "trt_flavour": "tensorrt",
        "trt_version": "11.4.0.106",
        "trt_distribution": "tensorrt-cu13",
        "hardware_compatibility": "none",
        "version_compatible": False,
        "target": "NVIDIA L4 (sm 8.9)",
        "trt_choice": "auto",
        "gpu_probe": "NVML",
        "id": "x",
    },
)


def key(**changes):
    args = copy.deepcopy(BASE)
    for path, value in changes.items():
        target = args
        parts = path.split("__")
        for p in parts[:-1]:
            target = target[p]
        target[parts[-1]] = value
    return cache_key.cache_key(cache_key.key_inputs(**args))


ENGINE_CHANGES = {
    "onnx_sha256": "b" * 64,
    "calibration_sha256": "c" * 64,
    "plugin_sha256": {"myplugin.so": "d" * 64},
    "build_cfg__workspace_mib": 2048,
    "build_cfg__optimization_level": 5,
    "build_cfg__hardware_compatibility": "ampere_plus",
    "build_cfg__version_compatible": True,
    "build_cfg__compute_capabilities": ["SM89"],
    "build_cfg__extra_flags": ["STRICT_NANS"],
    "build_cfg__strip_weights": True,
    "precision_cfg__tf32": True,
    "precision_cfg__mode": "weak",
    "profile_cfg__profiles": [{"name": "default", "dims": {"batch": [1, 4, 8]}, "shapes": {}}],
    # each resizes the profiles the build resolves (they were left out of the key once, so a
    # decoder rebuilt with a longer max_seq_len was served the shorter engine)
    "profile_cfg__shapes": {"x": {"min": [1, 32], "opt": [2, 32], "max": [4, 32]}},
    "profile_cfg__decoder": {
        "max_batch": 2,
        "max_input_len": 32,
        "max_seq_len": 64,
        "one_profile": False,
    },
    "fingerprint__gpu__name": "NVIDIA A10",
    "fingerprint__gpu__compute_capability": "8.6",
    "fingerprint__gpu__memory_mib": 46068,
    "fingerprint__driver_version": "580.2",
    "fingerprint__cuda_driver_version": "13.1",
    "fingerprint__cuda_runtime_version": "12.9",
    "fingerprint__trt_flavour": "tensorrt_rtx",
    "fingerprint__trt_version": "11.4.0.107",
    "fingerprint__hardware_compatibility": "ampere_plus",
    "fingerprint__version_compatible": True,
}


@pytest.mark.parametrize("field", sorted(ENGINE_CHANGES))
def test_each_engine_field_changes_the_key(field):
    assert key(**{field: ENGINE_CHANGES[field]}) != key()


@pytest.mark.parametrize(
    "field,value",
    [
        ("build_cfg__store_dir", "/elsewhere"),
        ("build_cfg__timing_cache", "off"),
        ("build_cfg__gates", {"max_warnings": 0}),
        ("build_cfg__log_redactions", ["secret"]),
        ("build_cfg__backend", "tensorrt"),  # what was chosen is in the fingerprint
        ("precision_cfg__gate", {"min_cosine": 0.5}),
        ("fingerprint__gpu__count", 8),
        ("fingerprint__gpu__index", 3),
        ("fingerprint__gpu_probe", "override"),
        ("fingerprint__trt_choice", "requested"),
    ],
)
def test_fields_that_do_not_change_the_engine_keep_the_key(field, value):
    assert key(**{field: value}) == key()


def test_key_from_the_real_pipeline_ignores_benchmark_settings(built_cnn):
    cfg, layout = built_cnn
    fp = stages.read_fingerprint(layout)
    k = lambda c: cache_key.cache_key(cache_key.engine_key_inputs(c, layout, fp))
    assert k(compose("benchmark.min_iterations=7", "benchmark.warmup_s=0.01")) == k(cfg)
    assert k(compose("inspect.max_table_rows=3")) == k(cfg)
    assert k(compose("build.workspace_mib=512")) != k(cfg)


def test_differences_names_dotted_paths():
    assert cache_key.differences({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}) == ["a.c"]


def test_the_build_takes_calibrates_recorded_graph_hash_only_while_the_file_is_unchanged(
    built_cnn, tmp_path
):
    """One read of the graph per build: calibrate's record stands in for hashing it again,
    until the file is written over in place (its mtime moves), even at the same size."""
    import json
    import shutil

    from pipeline.core.layout import Layout
    from pipeline.graph import onnx_model

    cfg, built = built_cnn
    shutil.copytree(built.root / "artifacts", tmp_path / "artifacts", copy_function=shutil.copy2)
    layout = Layout(tmp_path)
    graph = layout.calibrate_dir / "model.onnx"
    summary = json.loads((layout.calibrate_dir / "calibration.json").read_text())
    assert (
        summary["onnx_sha256"] == onnx_model.sha256(graph) and "model.onnx" in summary["onnx_files"]
    )
    fp = stages.read_fingerprint(layout)
    assert cache_key.engine_key_inputs(cfg, layout, fp)["onnx_sha256"] == summary["onnx_sha256"]

    data = bytearray(graph.read_bytes())
    data[-1] ^= 1  # one byte of the last initializer, same size
    graph.write_bytes(bytes(data))
    now = cache_key.engine_key_inputs(cfg, layout, fp)["onnx_sha256"]
    assert now != summary["onnx_sha256"] and now == onnx_model.sha256(graph)
    assert cache_key.engine_key_inputs(cfg, layout, fp, rehash=True)["onnx_sha256"] == now


def test_a_setting_added_later_keeps_the_keys_of_engines_stored_before():
    """strip_weights off is the key of old: every engine stored before it existed hits."""
    args = copy.deepcopy(BASE)
    del args["build_cfg"]["strip_weights"]
    assert cache_key.cache_key(cache_key.key_inputs(**args)) == key()
    assert "strip_weights" not in cache_key.key_inputs(**BASE)["build"]
    assert (
        cache_key.key_inputs(**{**BASE, "build_cfg": {**BASE["build_cfg"], "strip_weights": True}})[
            "build"
        ]["strip_weights"]
        is True
    )
