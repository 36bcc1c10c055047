"""A Triton model repository of real engines (TensorRT-RTX builds on this CPU): the config
derived from each engine and checked against it by our rules and by Triton's own
ModelConfig schema, read from the tritonclient wheel (never installed: it pins ml-dtypes
below what onnx needs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.core import hashing
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.inputs import reference_file
from pipeline.serve import repository, triton_checks
from pipeline.serve.triton_config import Engine, max_batch_size
from tests.wild import fetch

GPUS = {  # name, compute capability: an L4 and an L40S share 8.9
    "l4": ("NVIDIA L4", "8.9"),
    "l40s": ("NVIDIA L40S", "8.9"),
    "a100": ("NVIDIA A100-SXM4-80GB", "8.0"),
}


@pytest.fixture(scope="module")
def schema():
    try:
        return fetch.wheel_file("tritonclient", "2.73.0")
    except fetch.FetchError as e:
        pytest.skip(str(e))


def _engine(shape_in, shape_out, maxes) -> Engine:
    return Engine(
        folder=Path("."),
        fingerprint_id="x",
        compute_capability="8.9",
        gpu="NVIDIA L4",
        flavour="tensorrt",
        io={
            "inputs": [{"name": "x", "dtype": "float", "shape": shape_in}],
            "outputs": [{"name": "y", "dtype": "half", "shape": shape_out}],
        },
        profiles=[{"inputs": {"x": {"min": [1], "opt": [1], "max": [m]}}} for m in maxes],
        sha256="0" * 64,
    )


def test_max_batch_size_is_the_backends_rule():
    # the largest over profiles of the smallest profile max of dim 0 over the inputs
    assert max_batch_size(_engine([-1, 3], [-1, 10], [8, 32])) == 32
    # an input or output without a dynamic leading dim: no batch, full dims
    assert max_batch_size(_engine([4, 3], [4, 10], [4])) == 0
    assert max_batch_size(_engine([-1, 3], [10], [8])) == 0


def test_the_built_engine_makes_a_repository_triton_reads(built_cnn, tmp_path, schema):
    _, layout = built_cnn
    engines = repository.engines_in(layout.build_dir)
    sample = reference_file.read(layout.reference)[0][0]
    done = repository.write(tmp_path / "repo", "cnn", engines, schema, dict(sample))
    folder = tmp_path / "repo" / "cnn"
    assert done["checked"] == ["config.pbtxt: parsed with Triton's ModelConfig (tritonclient)"]
    # warm-up: one reference sample, its raw bytes beside the config
    assert 'input_data_file: "input_0"' in (folder / "config.pbtxt").read_text()
    assert (folder / "warmup" / "input_0").read_bytes() == sample["images"][:1].astype(
        "float32"
    ).tobytes()
    text = (folder / "config.pbtxt").read_text()
    manifest = json.loads((engines[0].folder / "manifest.json").read_text())
    profile = manifest["config"]["profiles"][0]["inputs"]["images"]
    assert f"max_batch_size: {profile['max'][0]}" in text
    assert "dims: [ 3, 32, 32 ]" in text and "dynamic_batching" in text
    # built without a GPU, by TensorRT-RTX: one portable plan for every compute capability
    # it runs on, said in the config; no model.plan for an unnamed GPU to fall back to
    plans = sorted(p.name for p in (folder / "1").iterdir())
    assert plans == ["model_tensorrt_rtx_portable.plan"]
    assert set(done["plans"]) == {"7.5", "8.0", "8.6", "8.9"}
    assert "TensorRT-RTX engine" in text
    sums = json.loads((folder / "sha256.json").read_text())
    assert sums["1/model_tensorrt_rtx_portable.plan"] == engines[0].sha256
    assert all(hashing.sha256_file(folder / rel) == h for rel, h in sums.items())


def test_a_fleet_gets_a_plan_per_compute_capability_and_a_config_per_kind(
    built_cnn, tmp_path, schema, monkeypatch
):
    """Three machines' fingerprints (the GPU probe stands in for NVML; the engines are
    TensorRT-RTX CPU builds, fine for keys and files): L4 and L40S share 8.9."""
    cfg, built = built_cnn
    layout = Layout(tmp_path / "fleet")
    shutil.copytree(built.root / "artifacts", layout.root / "artifacts")
    shutil.rmtree(layout.build_dir)
    monkeypatch.setenv("TRT_PIPELINE_STORE", str(tmp_path / "store"))
    for kind, (name, cc) in GPUS.items():
        probe = tmp_path / f"{kind}.json"
        gpu = {"name": name, "compute_capability": cc, "memory_mib": 24000}
        probe.write_text(json.dumps({**gpu, "_driver": "580.65.06", "_cuda_driver": 13000}))
        monkeypatch.setenv("TRT_PIPELINE_GPU_PROBE", str(probe))
        stages.fingerprint(cfg, layout)
        stages.build(cfg, layout, progress=False)
    done = repository.write(
        tmp_path / "repo", "cnn", repository.engines_in(layout.build_dir), schema
    )
    folder = tmp_path / "repo" / "cnn"
    assert done["plans"] == {
        "8.0": "model_sm80_nvidia-a100-sxm4-80gb.plan",
        "8.9": "model_sm89_nvidia-l4.plan",
    }
    assert done["configs"] == [
        "config.pbtxt",
        "configs/nvidia-l4.pbtxt",
        "configs/nvidia-l40s.pbtxt",
    ]
    l40s = (folder / "configs" / "nvidia-l40s.pbtxt").read_text()
    assert 'value: "model_sm89_nvidia-l40s.plan"' in l40s and 'value: "model_sm80' in l40s
    assert len(list((folder / "1").iterdir())) == 3 and not (folder / "1" / "model.plan").exists()
    assert all("parsed with Triton's ModelConfig" in line for line in done["checked"])
    # a folder another machine left from older inputs (artifacts/build persists) is not
    # this model's: left out where this machine's engine names the graph, refused where
    # none does
    a100 = next(e for e in repository.engines_in(layout.build_dir) if "A100" in (e.gpu or ""))
    old = layout.build_dir / "old-machine"
    shutil.copytree(a100.folder, old)
    m = json.loads((old / "manifest.json").read_text())
    m["key_inputs"]["precision"] = {"mode": "strong", "tf32": True}
    m["fingerprint"]["id"] = "old-machine"
    (old / "manifest.json").write_text(json.dumps(m))
    assert "old-machine" not in {
        e.fingerprint_id for e in repository.engines_in(layout.build_dir, a100.fingerprint_id)
    }
    with pytest.raises(PipelineError, match="built from 2 different graphs or settings"):
        repository.engines_in(layout.build_dir)
    shutil.rmtree(old)
    # the same fleet from the store, as a machine that built for the A100 only sees it
    for folder_of in layout.build_dir.iterdir():
        if (
            json.loads((folder_of / "manifest.json").read_text())["fingerprint"]["gpu"]["name"]
            != GPUS["a100"][0]
        ):
            shutil.rmtree(folder_of)
    local = repository.engines_in(layout.build_dir)
    assert [e.gpu for e in local] == [GPUS["a100"][0]]
    fleet = repository.with_store(local, tmp_path / "store")
    assert sorted(e.gpu for e in fleet) == sorted(name for name, _ in GPUS.values())
    again = repository.write(tmp_path / "repo2", "cnn", fleet, schema)
    assert again["plans"] == done["plans"] and again["configs"] == done["configs"]
    # an engine of another graph in the store is not this model's
    other = repository.with_store(
        [local[0].__class__(**{**local[0].__dict__, "graph_key": "x"})], tmp_path / "store"
    )
    assert len(other) == 1


def test_what_triton_would_refuse_is_one_line_and_writes_nothing(built_cnn, tmp_path, schema):
    _, layout = built_cnn
    engines = repository.engines_in(layout.build_dir)
    other = Engine(**{**engines[0].__dict__, "io": {**engines[0].io, "outputs": []}})
    with pytest.raises(PipelineError, match="different inputs or outputs"):
        repository.write(tmp_path / "repo", "cnn", [engines[0], other], schema)
    fp8 = {**engines[0].io["inputs"][0], "dtype": "fp8"}
    odd = Engine(**{**engines[0].__dict__, "io": {**engines[0].io, "inputs": [fp8]}})
    with pytest.raises(PipelineError, match="Triton has no type for fp8 tensor 'images'"):
        repository.write(tmp_path / "repo", "cnn", [odd], schema)
    assert not (tmp_path / "repo" / "cnn").exists()
    # a config our rules refuse: more batch than the engine's profiles allow
    cfg = repository.config("cnn", engines[0], {"8.9": "p.plan"})
    cfg["max_batch_size"] += 1
    (tmp_path / "v").mkdir()
    problems = triton_checks.rule_problems(cfg, engines, tmp_path / "v", "cnn")
    assert any("max_batch_size" in p for p in problems)
    assert any("p.plan is not in v/" in p for p in problems)
    # a warm-up sample the profiles do not take
    cfg["model_warmup"] = [
        {
            "name": "w",
            "batch_size": 1,
            "inputs": {
                "images": {
                    "data_type": "TYPE_FP32",
                    "dims": [3, 64, 64],
                    "input_data_file": "input_0",
                }
            },
        }
    ]
    problems = triton_checks.rule_problems(cfg, engines, tmp_path / "v", "cnn")
    assert any("model_warmup images [1, 3, 64, 64] is outside" in p for p in problems)
    assert any("warmup/input_0 is not 49152 bytes" in p for p in problems)
