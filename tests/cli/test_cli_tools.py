"""The CLI as a user meets it: a console script with --version, config mistakes as
one line naming the nearest valid keys (params, run, exp run), Hydra's completion for
`trt-pipeline run`, and diff on store keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def cli(*args, env=None, cwd=REPO, module="pipeline"):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def one_line(r, *needles):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_console_script_is_the_same_cli_and_has_a_version():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = scripts["trt-pipeline"].split(":")
    assert (module, func) == ("pipeline.cli.main", "console")
    from pipeline.cli import main

    assert callable(getattr(main, func))
    r = cli("--version")
    assert (
        r.returncode == 0
        and r.stdout.startswith("trt-pipeline ")
        and r.stdout.split()[1][0].isdigit()
    )


def test_a_command_builds_its_own_parser_and_anything_else_all_of_them():
    """The always-run fingerprint stage is a `trt-pipeline stage` process: it imports no
    other command's module. --help, a typo and no command still list every command."""
    from pipeline.cli import main

    # --help ends in sys.exit: what was imported is read at exit.
    probe = (
        "import atexit, sys; atexit.register(lambda: print(sorted(m for m in sys.modules "
        "if m.startswith('pipeline.cli.commands.')))); from pipeline.cli import main; "
        "main.main(['-q', 'stage', '--help'])"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "['pipeline.cli.commands.stage']", r.stdout
    for args in (["--help"], ["-q", "--help", "stage"], ["stag"]):
        out = cli(*args)
        assert all(name in out.stdout + out.stderr for name in ("sweep-report", "add-model")), args
    assert len(main.COMMANDS) == len(list((REPO / "pipeline/cli/commands").glob("[!_]*.py")))


@pytest.mark.parametrize(
    "args,module,needles",
    [
        (["params", "precison=int8"], "pipeline", ["'precison'", "nearest: precision"]),
        (["params", "precision=int9"], "pipeline", ["'int9'", "int8"]),
        (["params", "build.gates.max_warning=3"], "pipeline", ["build.gates.max_warnings"]),
        (["params", "build.workspace_mib=lots"], "pipeline", ["build.workspace_mib"]),
        (["run", "precison=int8"], "pipeline", ["nearest: precision"]),
        (
            ["-q", "run", "--multirun", "precision=fp32,fp61"],
            "pipeline",
            ["'fp61'", "fp16"],
        ),  # a leading Hydra flag
        (
            ["build.workspace_mb=3", "hydra.run.dir=never"],
            "pipeline.cli.run",
            ["build.workspace_mib"],
        ),
        (["--multirun", "precision=fp32,fp61"], "pipeline.cli.run", ["'fp61'", "fp16"]),
        (["exp", "run", "-S", "precison=int8"], "pipeline", ["nearest: precision"]),
        (
            ["exp", "run", "-S", "params.yaml:build.workspace_mb=3"],
            "pipeline",
            ["build.workspace_mib"],
        ),
    ],
)
def test_a_misspelt_override_is_one_line_naming_the_nearest(tmp_path, args, module, needles):
    r = (
        cli(*args, "--out", str(tmp_path / "p.yaml"))
        if args[0] == "params"
        else cli(*args, module=module)
    )
    one_line(r, *needles)
    assert not (tmp_path / "p.yaml").exists() and not (REPO / "never").exists()


def test_exp_run_hands_valid_arguments_to_dvc():
    r = cli("exp", "run", "--help")
    assert r.returncode == 0 and "usage: dvc experiments run" in r.stdout


def test_hydra_tab_completion_for_the_console_script():
    code = "import sys; sys.argv[0] = 'trt-pipeline'; from pipeline.cli.main import main; main(sys.argv[1:])"
    install = subprocess.run(
        [sys.executable, "-c", code, "-sc", "install=bash"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0 and install.stdout.rstrip().endswith(
        "-F hydra_bash_completion trt-pipeline"
    )
    assert "$helper -sc query=bash" in install.stdout

    def query(line):
        r = subprocess.run(
            [sys.executable, "-c", code, "-sc", "query=bash"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "COMP_LINE": line},
        )
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert "precision=int8" in query("trt-pipeline run precision=")
    assert "model=transformer" in query("trt-pipeline run precision=fp16 model=")
    assert query("trt-pipeline cache ") == []  # only `run` takes Hydra overrides


def test_diff_takes_an_engine_store_key(built_cnn, capsys):
    from pipeline.cli.main import main
    from pipeline.core import fileio
    from pipeline.flow import stages

    _, layout = built_cnn
    folder = layout.engine_dir(stages.read_fingerprint(layout)["id"])
    key = fileio.read_json(folder / "manifest.json")["cache_key"]
    assert main(["diff", key[:12], str(folder), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # Same key, same inputs: no layer changes precision. The bytes may differ by a few if another
    # test rebuilt this key into the shared session store (TensorRT-RTX's internal tensor names).
    assert (
        result["precision_changes"] == []
        and abs(result["metrics"]["engine_bytes"]["change"]) < 1024
    )
    assert (
        "entries" in result["a"]["path"] and key in result["a"]["path"]
    )  # read from the store itself


def test_diff_names_what_it_accepts(tmp_path):
    r = cli("diff", "no-such-thing", "abcdef12", cwd=tmp_path, env={"PYTHONPATH": str(REPO)})
    one_line(r, "no-such-thing", "engine-store key", "experiment")
