"""Bad input through the real stage entry points: one line, exit 1, no traceback,
nothing half-written."""

import subprocess
import sys

import pytest
import yaml


def run_stage(repo, stage):
    return subprocess.run(
        [sys.executable, "-m", f"stages.{stage}"], cwd=repo, capture_output=True, text=True
    )


def params(repo, *overrides):
    subprocess.run(
        [sys.executable, "-m", "pipeline", "params", *overrides],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def hand_edit(repo, edit):
    """params.yaml changed by hand, past `trt-pipeline params`' checks, as block YAML."""
    path = repo / "params.yaml"
    values = yaml.safe_load(path.read_text())
    edit(values)
    path.write_text(yaml.safe_dump(values, sort_keys=False))


def assert_one_line_error(r, *needles):
    assert r.returncode == 1, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    for n in needles:
        assert n in lines[0]


@pytest.mark.parametrize(
    "content,needle", [(b"not a protobuf at all" * 10, "unreadable"), (b"", "checker")]
)
def test_bad_onnx_file(in_tmp_repo_copy, content, needle):
    repo = in_tmp_repo_copy
    (repo / "bad.onnx").write_bytes(content)
    params(repo, "model=onnx_file", "model.onnx_path=bad.onnx")
    r = run_stage(repo, "export")
    assert_one_line_error(r, "bad.onnx")
    assert not (repo / "artifacts/export").exists()


def test_unknown_precision(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    hand_edit(repo, lambda v: v["precision"].update(name="fp12"))
    # The always-run fingerprint stage reads only its build settings; the first stage that
    # reads precision refuses the whole config before any work.
    assert run_stage(repo, "fingerprint").returncode == 0
    r = run_stage(repo, "calibrate")
    assert_one_line_error(r, "precision.name: Invalid value 'fp12', expected one of [fp32,")
    assert not (repo / "artifacts/calibrate").exists()


def test_profile_with_unknown_input_and_min_over_opt(in_tmp_repo_copy):
    repo = in_tmp_repo_copy
    assert run_stage(repo, "fingerprint").returncode == 0
    assert run_stage(repo, "export").returncode == 0
    assert run_stage(repo, "calibrate").returncode == 0
    assert run_stage(repo, "build").returncode == 0
    assert len(list((repo / "artifacts/build").glob("*/engine.plan"))) == 1
    params(repo, "+profile.profiles.0.shapes.pixels={min:[1],opt:[1],max:[1]}")
    # the profile gives the sample inputs' shapes: the export is the first stage to read it
    r = run_stage(repo, "export")
    assert_one_line_error(r, "pixels")
    # the failed export took the later stages' outputs with it: the build has nothing to use
    assert_one_line_error(run_stage(repo, "build"), "rerun the calibrate stage")
    params(repo)
    hand_edit(repo, lambda v: v["profile"]["profiles"][0]["dims"].update(batch=[9, 8, 32]))
    r = run_stage(repo, "build")
    assert_one_line_error(r, "min <= opt <= max")


@pytest.mark.parametrize("tamper", ["foreign", "truncated"])
def test_foreign_or_truncated_engine_is_refused_before_loading(
    in_tmp_repo_copy, tamper, monkeypatch
):
    import json

    repo = in_tmp_repo_copy
    # A store of its own: a large engine is served as a hard link, and truncating it in
    # place (as this test does) damages the stored entry every other test may be served.
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(repo.parent / "engines"))
    for stage in ("fingerprint", "export", "calibrate", "build"):
        assert run_stage(repo, stage).returncode == 0
    fp = json.loads((repo / "artifacts/fingerprint.json").read_text())
    folder = repo / "artifacts/build" / fp["id"]
    if tamper == "foreign":
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["fingerprint"] = {
            **manifest["fingerprint"],
            "driver_version": "999.1",
            "id": "other-machine",
        }
        (folder / "manifest.json").write_text(json.dumps(manifest))
        needle = "built for other-machine"
    else:
        engine = folder / "engine.plan"
        engine.write_bytes(engine.read_bytes()[:1000])
        needle = "does not match the sha256"
    for stage in ("inspect", "benchmark"):
        assert_one_line_error(run_stage(repo, stage), needle)
    assert (
        not (repo / "artifacts/inspect").exists() and not (repo / "metrics/benchmark.json").exists()
    )
