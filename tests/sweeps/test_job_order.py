"""The order a sweep's jobs start in (hydra_plugins/trt_pipeline/job_order.py): keys
that an earlier shared stage reads vary fastest, so neighbouring jobs, which a parallel
launcher starts side by side, do not wait on one another's export or calibration."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from hydra_plugins.trt_pipeline import job_order
from hydra_plugins.trt_pipeline.checked_sweeper import CheckedSweeper


def jobs(*given: str, batch: int | None = None) -> list:
    return CheckedSweeper.split_arguments(
        OverridesParser.create().parse_overrides(list(given)), batch
    )


def test_stage_ranks_follow_dvc_yaml_and_leave_out_the_stage_that_always_runs():
    stages = job_order.shared_stage_params()
    # export (the profile's opt shapes are its sample inputs'); the fingerprint stage
    # (always_changed) shares nothing
    assert stages[0] == ("model", "profile")
    rank = lambda key: job_order.stage_rank(key, stages)
    assert rank("model") == rank("model.opset") == rank("profile") < rank("precision")
    # calibrate measures engines as the build makes them: it reads the engine's build fields
    assert rank("precision") == rank("calibration.batches") == rank("build.workspace_mib")
    assert rank("build.workspace_mib") < rank("build.gates.max_warnings")
    assert rank("sweep.reuse") == rank("hydra.launcher.n_jobs") == len(stages)


def test_the_profile_the_export_reads_varies_faster_than_precision_and_overrides_keep_their_order():
    got = jobs("precision=fp32,fp16,int8", "profile=dynamic,two_profiles", "model=transformer")
    assert got == [
        [
            [f"precision={p}", f"profile={f}", "model=transformer"]
            for p in ("fp32", "fp16", "int8")
            for f in ("dynamic", "two_profiles")
        ]
    ]
    # Same jobs as Hydra's own order, just started in another order.
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = OverridesParser.create().parse_overrides(
        ["precision=fp32,fp16,int8", "profile=dynamic,two_profiles"]
    )
    assert sorted(map(tuple, BasicSweeper.split_arguments(parsed, None)[0])) == sorted(
        map(tuple, CheckedSweeper.split_arguments(parsed, None)[0])
    )


def test_the_model_varies_fastest_and_keys_no_stage_reads_slowest():
    got = jobs("sweep.reuse=true,false", "precision=fp16,int8", "model=cnn,transformer", batch=3)
    flat = [j for b in got for j in b]
    assert [len(b) for b in got] == [3, 3, 2]
    assert [j[2] for j in flat[:4]] == ["model=cnn", "model=transformer"] * 2
    assert [j[1] for j in flat[:4]] == ["precision=fp16"] * 2 + ["precision=int8"] * 2
    assert {j[0] for j in flat[:4]} == {"sweep.reuse=True"} and {j[0] for j in flat[4:]} == {
        "sweep.reuse=False"
    }


def test_a_key_given_twice_counts_once_and_a_non_list_sweep_is_refused_as_hydra_does():
    assert jobs("precision=fp16", "model=cnn", "precision=fp32,int8") == [
        [["precision=fp32", "model=cnn"], ["precision=int8", "model=cnn"]]
    ]
    with pytest.raises(HydraException, match="does not support sweep type"):
        jobs("benchmark.warmup_s=interval(0,1)")


def test_ranks_come_from_the_dvc_yaml_given(tmp_path):
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  probe: {cmd: x, always_changed: true, params: [a]}\n"
        "  first: {cmd: x, params: [b]}\n  second: {cmd: x, params: [a, b]}\n"
    )
    stages = job_order.shared_stage_params(tmp_path)
    assert stages == (("b",), ("a", "b"))
    assert [job_order.stage_rank(k, stages) for k in ("b.x", "a", "c")] == [0, 1, 2]
