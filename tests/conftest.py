"""Shared fixtures: the real config composed from conf/, and real exports and
builds made once per session (TensorRT-RTX on the CPU, no mocks)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The README installs with --no-compile: each module's bytecode is written the first time it
# is imported, not all of them at install (the install 2:03 against 3:26 on 2 cores). This
# project's machines set PYTHONDONTWRITEBYTECODE=1, under which every process would then
# compile torch, ModelOpt and the rest anew. The tests, and every process they start,
# write bytecode as a user's Python does.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# xdist's workers share the machine's cores as a sweep's jobs do (pipeline/core/threads.py):
# each gets its share through OMP_NUM_THREADS, which this tool's ONNX Runtime sessions and
# torch follow, and so does every stage a test starts. Left unset, each worker's sessions
# spin a thread per core: tests/e2e/test_dvc.py alone took 150 CPU-seconds so, 102 with one
# thread, and two workers on two cores wait on each other's spinning.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))


def pytest_xdist_auto_num_workers(config) -> int:
    """A worker per core and one more (-n auto; pyproject.toml caps it at four). Much of the
    e2e tests' time is spent waiting on subprocesses, git, disk and Ray, and the extra
    worker fills it. On this project's 2-core machine (2026-11-29, the whole suite): two
    workers 26:53 at 179% of the cores, three 26:25 at 182%, four 30:15 with 16% more
    CPU-seconds (the same work, slower on cores shared four ways) and a Ray test's deadline
    missed."""
    return (os.cpu_count() or 1) + 1  # the count the OMP_NUM_THREADS share above divides


def compose(*overrides: str):
    """The validated config exactly as DVC/Hydra would compose it from conf/."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from pipeline.core import config

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        raw = hydra_compose("config", overrides=list(overrides))
    return config.validate(raw)


@pytest.fixture(scope="session", autouse=True)
def private_stores(tmp_path_factory):
    """Tests never touch the engine and calibration caches of the checkout they run in;
    subprocesses (dvc repro, stage CLIs) inherit these too."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("stores")
    mp.setenv("TRT_PIPELINE_STORE", str(root / "engines"))
    mp.setenv("TRT_PIPELINE_CALIB_CACHE", str(root / "calibration"))
    yield root
    mp.undo()


FAST_BENCH = (
    "benchmark.warmup_s=0.05",
    "benchmark.min_duration_s=0.2",
    "benchmark.min_iterations=10",
)


@pytest.fixture(scope="session")
def requires_trt() -> None:
    """For gpu tests that build first: a GPU host may have no TensorRT installed yet."""
    from pipeline.machine.fingerprint import trt_installed

    if not (trt_installed("tensorrt") or trt_installed("tensorrt_rtx")):
        pytest.skip("no TensorRT flavour is installed here to build an engine")


@pytest.fixture(scope="session")
def gpu_available() -> bool:
    from pipeline.machine.fingerprint import probe_gpu

    return probe_gpu()[0] is not None


def pytest_collection_modifyitems(config, items):
    from pipeline.machine.fingerprint import probe_gpu

    gpu, why = probe_gpu()
    if gpu is None:
        skip = pytest.mark.skip(reason=f"needs an NVIDIA GPU: {why}")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    items[:] = longest_modules_first(items)


def longest_modules_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """Modules with a slow or e2e test first, in collection order, then the rest.

    xdist hands out whole modules (--dist loadscope) in this order (pyproject.toml turns
    off its own reordering, which puts the modules with most tests first: the one-test
    tutorials of several minutes then started last and one worker ran them alone while the
    others sat idle). Long modules first and short ones to fill in at the end keeps every
    worker busy to the last minute."""
    module = lambda item: item.nodeid.split("::", 1)[0]  # xdist's loadscope unit
    long_modules = {module(item) for item in items if {"slow", "e2e"} & set(item.keywords)}
    return sorted(items, key=lambda item: module(item) not in long_modules)


def _pipeline_through(tmp: Path, cfg, last: str):
    from pipeline.core.layout import Layout
    from pipeline.core.stage_names import STAGES
    from pipeline.flow import stages

    layout = Layout(tmp)
    for name in STAGES:
        stages.BY_NAME[name](cfg, layout)
        if name == last:
            break
    return layout


@pytest.fixture(scope="session")
def built_cnn(tmp_path_factory):
    """fp32 CNN through build (real TensorRT-RTX engine), shared read-only."""
    tmp = tmp_path_factory.mktemp("cnn_fp32")
    cfg = compose("model=cnn", "precision=fp32", *FAST_BENCH)
    return cfg, _pipeline_through(tmp, cfg, "build")


@pytest.fixture(scope="session")
def built_transformer(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transformer_fp32")
    cfg = compose("model=transformer", "precision=fp32", *FAST_BENCH)
    return cfg, _pipeline_through(tmp, cfg, "build")


@pytest.fixture(scope="session")
def built_cnn_fp16(tmp_path_factory):
    """fp16 (AutoCast) CNN through build, with its own engine store."""
    tmp = tmp_path_factory.mktemp("cnn_fp16")
    cfg = compose("model=cnn", "precision=fp16", f"build.store_dir={tmp / 'store'}", *FAST_BENCH)
    return cfg, _pipeline_through(tmp, cfg, "build")


@pytest.fixture(scope="session")
def built_cnn_int8(tmp_path_factory):
    """Q/DQ int8 CNN (calibrated on the shipped samples) through build, own store."""
    if (
        not (REPO / "pipeline/conf/precision/int8.yaml").exists()
        or not (REPO / "conf/calibration/cnn_samples.yaml").exists()
    ):
        pytest.skip("no int8 precision config in conf/")
    tmp = tmp_path_factory.mktemp("cnn_int8")
    cfg = compose(
        "model=cnn",
        "precision=int8",
        "calibration=cnn_samples",
        f"build.store_dir={tmp / 'store'}",
        *FAST_BENCH,
    )
    return cfg, _pipeline_through(tmp, cfg, "build")


@pytest.fixture(scope="session")
def transformer_result(built_transformer):
    """A fresh real build of the fp32 transformer (records straight from the logger),
    independent of whatever the engine store holds."""
    from pipeline.engine import build
    from pipeline.flow import stages

    cfg, layout = built_transformer
    onnx_path = layout.calibrate_dir / "model.onnx"
    return build.build_engine(
        onnx_path,
        cfg.precision,
        cfg.build,
        build.resolve_profiles(cfg.profile, onnx_path),
        stages.read_fingerprint(layout)["trt_flavour"],
        progress=False,
    )


@pytest.fixture(scope="session")
def built_transformer_detailed(built_transformer, tmp_path_factory):
    """The fp32 transformer built with ProfilingVerbosity.DETAILED (what the build log
    then holds: the engine's own layers), through build and inspect, own store."""
    from pipeline.core.layout import Layout
    from pipeline.engine import build
    from pipeline.flow import stages

    _, src = built_transformer
    tmp = tmp_path_factory.mktemp("transformer_detailed")
    layout = Layout(tmp)
    for part in ("export", "calibrate"):
        shutil.copytree(src.root / "artifacts" / part, layout.root / "artifacts" / part)
    shutil.copy(src.fingerprint, layout.fingerprint)
    cfg = compose(
        "model=transformer", "precision=fp32", f"build.store_dir={tmp / 'store'}", *FAST_BENCH
    )
    configure = build.configure

    def detailed(trt, *args, **kwargs):
        config = configure(trt, *args, **kwargs)
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        return config

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build, "configure", detailed)
        stages.build(cfg, layout, progress=False)
    stages.inspect(cfg, layout)
    return cfg, layout


# The copies commit; they have no git identity of their own. Merged into the environment
# when a command runs (git_env()), so what a test set there since still reaches it.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git_env(**extra: str) -> dict[str, str]:
    """This process's environment with the copies' git identity and `extra`."""
    return {**os.environ, **GIT_IDENTITY, **extra}


def copy_repo(dest: Path) -> Path:
    """A copy of the repository's tracked sources in a fresh git repo at `dest`."""
    import subprocess

    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for f in files:
        src = REPO / f
        if src.is_file() and not f.startswith(("artifacts/", "metrics/")):
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True, env=git_env())
    subprocess.run(["git", "commit", "-qm", "copy"], cwd=dest, check=True, env=git_env())
    return dest


@pytest.fixture
def in_tmp_repo_copy(tmp_path):
    """A copy of the repository's tracked sources in a fresh git repo (for CLI/DVC tests)."""
    return copy_repo(tmp_path / "repo")


@pytest.fixture
def tutorial_repo(tmp_path):
    """A repository copy whose own config (conf/config.yaml, committed) keeps the
    benchmark's timing to FAST_BENCH's, as a user's CI job would: a tutorial's checks read
    what its benchmarks measured and how the results are laid out, never how fast. Under the
    default timing the tutorials' benchmark stages took 237 CPU-seconds of the suite, 161
    under this one (docs/layout.md)."""
    import subprocess

    from omegaconf import OmegaConf

    repo = copy_repo(tmp_path / "repo")
    config = repo / "conf" / "config.yaml"
    timing = OmegaConf.to_yaml(OmegaConf.from_dotlist(list(FAST_BENCH)))
    config.write_text(f"{config.read_text()}\n{timing}")
    subprocess.run(
        ["git", "commit", "-qam", "short benchmark timing"], cwd=repo, check=True, env=git_env()
    )
    return repo


@pytest.fixture(scope="module")
def transformer_repo(tmp_path_factory):
    """A repository copy with the fp32 transformer made through calibrate by the stage
    CLIs, as `dvc repro` runs them; shared by a module's tests, so each test that builds
    uses a store of its own and removes artifacts/build first."""
    import subprocess
    import sys

    repo = copy_repo(tmp_path_factory.mktemp("transformer_repo") / "repo")
    for args in (
        ["pipeline", "params", "model=transformer"],
        ["stages.fingerprint"],
        ["stages.export"],
        ["stages.calibrate"],
    ):
        r = subprocess.run([sys.executable, "-m", *args], cwd=repo, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    return repo
