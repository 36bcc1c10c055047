"""Every project module a stage's process imports is a declared dependency of that stage
in dvc.yaml, so editing any of them reruns exactly the stages that use it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from pipeline.core.stage_names import INDEX, PARAMS, STAGES, model_params
from tests.helpers import PACKAGE, graph, runtime_only

REPO = PACKAGE.parent


def _imports_of(node: ast.AST, known: set[str]) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("pipeline"):
            for a in n.names:
                sub = f"{n.module}.{a.name}"
                out.add(sub if sub in known else n.module)
        elif isinstance(n, ast.Import):
            out |= {a.name for a in n.names if a.name in known}
    return out


def step_modules(stage: str) -> set[str]:
    """The pipeline modules the stage's process can import: its entry point's imports,
    stages.py's module-level imports, the stage function's own (and the helpers it
    calls), then everything those import, statically and transitively."""
    g = graph(at_run_time=True)
    known = set(g)
    steps = runtime_only(ast.parse((PACKAGE / "flow" / "stages.py").read_text()))
    assert isinstance(steps, ast.Module)
    fns = {n.name: n for n in steps.body if isinstance(n, ast.FunctionDef)}
    entry = ast.parse((REPO / "stages" / f"{stage}.py").read_text())
    todo = _imports_of(entry, known) | {"pipeline.flow.stages"}
    todo |= _imports_of(
        ast.Module(
            body=[n for n in steps.body if not isinstance(n, ast.FunctionDef)], type_ignores=[]
        ),
        known,
    )
    called, queue = set(), [stage]
    while queue:
        name = queue.pop()
        if name in called:
            continue
        called.add(name)
        todo |= _imports_of(fns[name], known)
        queue += [
            c.func.id
            for c in ast.walk(fns[name])
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in fns
        ]
    # stages.py itself is walked above, step by step, not as a whole
    seen, stack = {"pipeline.flow.stages"}, [m for m in todo if m != "pipeline.flow.stages"]
    while stack:
        m = stack.pop()
        if m not in seen and m in g:
            seen.add(m)
            stack += g[m]
    return seen


def module_file(module: str) -> Path:
    path = REPO / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def covered(path: Path, deps: list[str]) -> bool:
    rel = path.relative_to(REPO).as_posix()
    return any(rel == d or rel.startswith(d.rstrip("/") + "/") for d in deps)


def pipeline_stages(dvc_yaml: Path, machine: Path) -> dict:
    """A pipeline's stages: the fingerprint's file (machine/dvc.yaml), then the others'."""
    return {
        **yaml.safe_load(machine.read_text())["stages"],
        **yaml.safe_load(dvc_yaml.read_text())["stages"],
    }


REPO_STAGES = (REPO / "dvc.yaml", REPO / "machine/dvc.yaml")
INIT_FILES = REPO / "pipeline/cli/init/files"


@pytest.mark.parametrize("stage", STAGES)
def test_every_module_a_stage_imports_is_a_dvc_dependency(stage):
    spec = pipeline_stages(*REPO_STAGES)[stage]
    if spec.get("always_changed"):
        # It runs on every repro, code changed or not: deps would only cost hashing.
        assert not spec.get("deps"), f"stage {stage} always runs: its deps are only a cost"
        return
    deps = spec["deps"]
    files = {module_file(m) for m in step_modules(stage)} | {REPO / "stages" / f"{stage}.py"}
    # a package's __init__ is imported with any of its modules
    files |= {f.parent / "__init__.py" for f in files if f.parent != REPO / "stages"}
    missing = sorted(f.relative_to(REPO).as_posix() for f in files if not covered(f, deps))
    assert not missing, f"stage {stage} imports code dvc.yaml does not list: {missing}"


def test_the_closure_sees_a_step_s_own_imports():
    assert "pipeline.engine.build" in step_modules("build")
    assert "pipeline.engine.build" not in step_modules("export")


def test_no_dependency_is_an_empty_file():
    """DVC warns "'<path>' is empty" for an empty file it hashes as a dep, on every repro."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    deps = {d for stage in stages.values() for d in stage.get("deps", []) if "${" not in d}
    empty = sorted(d for d in deps if (REPO / d).is_file() and (REPO / d).stat().st_size == 0)
    assert not empty, f"empty files as dvc.yaml deps (DVC warns on each): {empty}"


@pytest.mark.parametrize(
    "files", [REPO_STAGES, (INIT_FILES / "dvc.yaml.in", INIT_FILES / "dvc_machine.yaml.in")]
)
def test_each_dvc_yaml_names_the_stages_and_params_written_once_in_core(files):
    """pipeline/core/stage_names.py holds the stage list and what each reads; this repository's
    dvc.yaml and the one `init` writes (each with its machine/dvc.yaml, the fingerprint's)
    must say the same, in the same order."""
    stages = pipeline_stages(*files)
    assert tuple(stages) == STAGES
    assert yaml.safe_load(files[1].read_text())["stages"]["fingerprint"]["wdir"] == ".."
    assert {name: tuple(spec["params"]) for name, spec in stages.items()} == PARAMS


def test_the_several_models_dvc_yaml_runs_each_stage_per_model_on_its_own_params():
    """init's dvc.yaml for several models: each stage but the fingerprint a foreach over the
    models, tracking that model's own groups (model_params) and writing under its key; then
    one index across them."""
    files = REPO / "pipeline/cli/init/files"
    stages = yaml.safe_load((files / "dvc_models.yaml.in").read_text())["stages"]
    assert tuple(stages) == (*STAGES[1:], INDEX)
    machine = yaml.safe_load((files / "dvc_machine.yaml.in").read_text())["stages"]
    assert tuple(machine) == ("fingerprint",) and machine["fingerprint"]["wdir"] == ".."
    assert tuple(machine["fingerprint"]["params"]) == PARAMS["fingerprint"]
    for name in STAGES[1:]:
        assert stages[name]["foreach"] == "${models}"
        do = stages[name]["do"]
        assert tuple(do.get("params", ())) == model_params(name), name
        assert do["cmd"] == f"trt-pipeline stage {name} --model ${{key}}"
        outs = [next(iter(o)) if isinstance(o, dict) else o for o in do["outs"]]
        assert all("/${key}/" in f"/{o}/" for o in outs), outs
    assert stages[INDEX]["cmd"] == "trt-pipeline stage index"
