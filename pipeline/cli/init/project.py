"""`trt-pipeline init`: the pipeline's scaffolding dropped into an existing git repository,
as `dvc init` drops its own.

It writes dvc.yaml (stages that call the installed package: `trt-pipeline stage <name>`),
conf/config.yaml (the package's config groups on Hydra's search path, and only this
repository's own choices), params.yaml composed from it, data/ folders that dvc.yaml
tracks, DVC's plot template, and .gitignore/.dvcignore entries; it runs `dvc init` where
DVC is not set up yet and runs nothing else.

A file is only ever replaced if init wrote it and it has not changed since: what init wrote
is recorded with its hash in .dvc/trt-pipeline-init.json. Anything else in the way is one
line naming it, checked before anything is written."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from pipeline.cli.init import several
from pipeline.core import dvc_yaml, fileio
from pipeline.core.errors import PipelineError, first_line
from pipeline.core.layout import model_name_problem
from pipeline.core.stage_names import STAGES

RECORD = Path(".dvc/trt-pipeline-init.json")
GITIGNORE = ("/outputs/", "/multirun/", "/.cache/", "/artifacts/fingerprint.json")
DVCIGNORE = ("/outputs/", "/multirun/", "/.cache/", "__pycache__/")


def _package_text(*parts: str) -> str:
    return resources.files("pipeline").joinpath(*parts).read_text()


# conf/config.yaml's opening comment in a project of one model.
ONE_MODEL_HEADER = (
    "# Written by `trt-pipeline init`: this repository's settings on top of the installed",
    "# trt-pipeline's config groups (model, precision, profile, calibration, build,",
    "# benchmark, inspect), found on Hydra's search path. Add only what you change, e.g.",
    "#   model:",
    "#     factory: mypkg.models:make   # or a module exposing build(), INPUT_NAMES, OUTPUT_NAMES",
    "#     source: mypkg                # the folder dvc.yaml tracks for it",
    "# then `trt-pipeline params` (or `dvc exp run -S precision=fp16` for one experiment).",
)


def config_yaml(model: str | None) -> str:
    lines = [*ONE_MODEL_HEADER, "defaults:", "  - trt_pipeline"]
    if model:
        lines.append("  - override model: onnx_file")
    lines += ["  - _self_", "", "hydra:", "  searchpath:", "    - pkg://pipeline.conf", ""]
    if model:
        lines += [
            "model:",
            "  name: " + json.dumps(Path(model).stem),
            "  onnx_path: " + json.dumps(model),
            "# Each dynamic input's shapes, said once (min, opt, max; the sample inputs take",
            "# opt), whatever its dims are called; the first run lists any that are missing:",
            "# profile:",
            "#   shapes: {x: [1x3x320x320, 1x3x640x640, 4x3x1280x1280]}",
            "",
        ]
    return "\n".join(lines)


def _model_path(model: str) -> str:
    path = Path(model)
    if not path.is_file():
        raise PipelineError(f"--model {model}: no such file")
    if path.suffix != ".onnx":
        raise PipelineError(f"--model {model}: not an .onnx file")
    _check_onnx(path, model)
    try:  # relative to the repository where it lies in it, so a clone finds it too
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


def _check_onnx(path: Path, given: str) -> None:
    """The file is an ONNX model (its graph parses; external data is not read): a file that
    is not fails here, in one line, not at the first `dvc repro`."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf's decode errors are of several types
        raise PipelineError(f"--model {given}: not an ONNX model ({first_line(e)})") from None
    if not model.graph.node:
        raise PipelineError(f"--model {given}: not an ONNX model (it holds no graph)")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _recorded() -> dict[str, str]:
    return dict(fileio.read_json(RECORD, "init record")) if RECORD.is_file() else {}


def _check_free(files: dict[str, str], record: dict[str, str]) -> None:
    for name in files:
        path = Path(name)
        if not path.exists():
            continue
        if not path.is_file() or _sha(path.read_text(errors="replace")) != record.get(name):
            raise PipelineError(
                f"{name} exists and was not written by trt-pipeline init (or was changed "
                f"since): move it aside or merge it by hand, then run init again"
            )


def _lines_added(path: Path, entries: tuple[str, ...]) -> bool:
    text = path.read_text() if path.exists() else ""
    missing = [e for e in entries if e not in text.splitlines()]
    if missing:
        head = text if not text or text.endswith("\n") else text + "\n"
        fileio.write_text(path, head + "# trt-pipeline\n" + "\n".join(missing) + "\n")
    return bool(missing)


def _git_root() -> Path:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise PipelineError("init needs git, which is not installed") from None
    if out.returncode != 0:
        raise PipelineError(f"{Path.cwd()} is not in a git repository: run `git init` first")
    return Path(out.stdout.strip()).resolve()


def _dvc(*args: str) -> None:
    dvc = shutil.which("dvc")
    cmd = [dvc] if dvc else [sys.executable, "-m", "dvc"]
    out = subprocess.run([*cmd, *args], capture_output=True, text=True)
    if out.returncode != 0:
        why = (out.stderr or out.stdout).strip().splitlines()
        raise PipelineError(f"dvc {args[0]} failed: {why[0] if why else f'exit {out.returncode}'}")


def _dvc_init(root: Path) -> list[str]:
    done = []
    if not Path(".dvc").is_dir():
        _dvc("init", "-q", *(["--subdir"] if Path.cwd().resolve() != root else []))
        done.append("ran dvc init")
    config = Path(".dvc/config")
    if "[hydra]" not in (config.read_text() if config.is_file() else ""):
        # `dvc exp run -S precision=fp16` then composes conf/ with Hydra (conf/config.yaml
        # is DVC's default config_dir and name) instead of writing the value into params.yaml.
        _dvc("config", "hydra.enabled", "true")
        done.append("set DVC's hydra.enabled (dvc exp run -S composes conf/)")
    return done


def _params() -> str:
    from pipeline.cli import params_file

    return params_file.compose([], Path("conf"))


def _own_files(models: list[str]) -> dict[str, str]:
    """dvc.yaml and conf/: one model as config.yaml's own, or several, a file each."""
    # Shipped as .in: DVC collects every dvc.yaml in a repository, a template's too.
    machine = {dvc_yaml.MACHINE: _package_text("cli", "init", "files", "dvc_machine.yaml.in")}
    if len(models) <= 1:
        return {
            "dvc.yaml": _package_text("cli", "init", "files", "dvc.yaml.in"),
            **machine,
            "conf/config.yaml": config_yaml(_model_path(models[0]) if models else None),
        }
    names = several.names_of(models)
    return {
        "dvc.yaml": _package_text("cli", "init", "files", "dvc_models.yaml.in"),
        **machine,
        "conf/config.yaml": several.config_yaml(names),
        **{
            f"conf/models/{name}.yaml": several.model_yaml(name, _model_path(path))
            for name, path in zip(names, models)
        },
    }


def run(models: list[str] | None = None) -> list[str]:
    """Scaffold the working directory; the lines to print (what was written or done)."""
    root = _git_root()
    files = {
        **_own_files(models or []),
        "data/README.md": _package_text("cli", "init", "files", "data_README.md"),
        "data/reference/.gitkeep": "",
        "data/calibration/.gitkeep": "",
        ".dvc/plots/trt_by_backend.json": _package_text(
            "conf", "benchmark", "plot_by_backend.json"
        ),
    }
    record = _recorded()
    _check_free({**files, "params.yaml": ""}, record)
    done = _dvc_init(root)
    new = [Path(n) for n in files if not Path(n).exists()]
    try:
        for name, text in files.items():
            fileio.write_text(name, text)
            record[name] = _sha(text)
        # Composed after conf/ is in place, through the same checks `trt-pipeline params` makes.
        params = _params()
    except BaseException:
        for path in new:  # no half scaffolding: what this run created goes again
            path.unlink(missing_ok=True)
        raise
    fileio.write_text("params.yaml", params)
    record["params.yaml"] = _sha(params)
    fileio.write_json(RECORD, record)
    done.append("wrote " + ", ".join([*files, "params.yaml"]))
    for ignore, entries in ((".gitignore", GITIGNORE), (".dvcignore", DVCIGNORE)):
        if _lines_added(Path(ignore), entries):
            done.append(f"added trt-pipeline entries to {ignore}")
    done.append("next: `dvc repro` (or `git add -A && git commit` first)")
    return done


def add_model(path: str, name: str | None = None) -> list[str]:
    """conf/models/<name>.yaml for the ONNX file at `path`, listed in conf/config.yaml, and
    params.yaml composed again; dvc.yaml's stages run per model, so they take it as it is.
    A project of one model becomes one of several first (_to_several)."""
    (name,) = several.names_of([path], [name] if name else None)
    config, model_file = Path("conf/config.yaml"), Path(f"conf/models/{name}.yaml")
    if not config.is_file():
        raise PipelineError("no conf/config.yaml here: run `trt-pipeline init` first")
    if model_file.exists():
        raise PipelineError(f"{model_file} exists: remove it, or give the model another --name")
    old = config.read_text()
    first, files = (None, {}) if several.LIST_LINE.search(old) else _to_several(old, name)
    text = several.with_model(files.get(str(config), old), name)
    files |= {str(config): text, str(model_file): several.model_yaml(name, _model_path(path))}
    before = {n: Path(n).read_text() if Path(n).is_file() else None for n in files}
    try:
        for n, written in files.items():
            fileio.write_text(n, written)
        params = _params()
    except BaseException:  # as it was: a model that does not compose is not added
        _restore(before)
        raise
    done: list[str] = []
    if first:
        files["dvc.yaml"], done = _replace_one_model_stages(first)
    fileio.write_text("params.yaml", params)
    _record({**files, "params.yaml": params}, before)
    return [f"wrote {', '.join([*files, 'params.yaml'])}", *done, "next: `dvc repro`"]


def _replace_one_model_stages(first: str) -> tuple[str, list[str]]:
    """init's dvc.yaml for several models in place of its one-model one (its text, and the
    lines to print), and dvc.lock without the old stages; their outputs are left where
    they are, for the user to remove."""
    from pipeline.cli.init import convert

    old = convert.outputs(dvc_yaml.stages(Path(".")), STAGES[1:])
    lock = Path("dvc.lock")
    if lock.is_file():
        fileio.write_text(lock, convert.without_stages(lock.read_text(), STAGES[1:]))
    text = _package_text("cli", "init", "files", "dvc_models.yaml.in")
    fileio.write_text("dvc.yaml", text)
    left = [p for p in old if "${" not in p and Path(p).exists()]
    return text, [
        f"dvc.yaml runs each stage per model; the one model is models.{first}, and "
        f"`dvc repro` makes its outputs under artifacts/{first}/ and metrics/{first}/ "
        "(its engine from the engine store)",
        *([f"no stage makes these now, remove them when done: {', '.join(left)}"] if left else []),
    ]


def _to_several(config_text: str, name: str) -> tuple[str, dict[str, str]]:
    """The one model's name, and its files once the project is one of several: the model
    moved to conf/models/<its name>.yaml (init_convert). dvc.yaml must be the one init
    wrote: add_model replaces it with init's for several models."""
    from pipeline.cli.init import convert

    dvc = Path("dvc.yaml")
    if not dvc.is_file() or _sha(dvc.read_text()) != _recorded().get("dvc.yaml"):
        raise PipelineError(
            "conf/config.yaml lists no models and dvc.yaml is not the one trt-pipeline init "
            "wrote: move the model to conf/models/<name>.yaml by hand (docs/models.md)"
        )
    first = str(_compose_model_name())
    if (problem := model_name_problem(first)) is not None:
        raise PipelineError(f"this project's model.name: {problem}; set a plain one first")
    if first == name:
        raise PipelineError(f"this project's model is named {name!r} already: give --name")
    config, own = convert.to_several(config_text, first)
    one = "\n".join(ONE_MODEL_HEADER) + "\n"
    if config.startswith(one):  # init's header, which tells how to change the one model
        config = "\n".join(several.SEVERAL_HEADER) + "\n" + config[len(one) :]
    return first, {"conf/config.yaml": config, f"conf/models/{first}.yaml": own}


def _compose_model_name() -> object:
    from pipeline.cli import overrides

    return overrides.check([], Path("conf")).model.name


def _restore(before: dict[str, str | None]) -> None:
    for name, was in before.items():
        if was is None:
            Path(name).unlink(missing_ok=True)
        else:
            fileio.write_text(name, was)


def _record(written: dict[str, str], before: dict[str, str | None]) -> None:
    """What init wrote stays replaceable by a later init where it was before: a file this
    command made, or one init wrote and nobody changed since."""
    record = _recorded()
    if not record:
        return
    for name, text in written.items():
        was = before.get(name)
        if was is None or _sha(was) == record.get(name):
            record[name] = _sha(text)
    fileio.write_json(RECORD, record)


def main(models: list[str] | None) -> int:
    for line in run(models):
        print(line)
    return 0
