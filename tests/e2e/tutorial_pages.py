"""Reading and running the tutorials in docs/tutorials/ as written: a page's `sh` blocks
and the files it asks the reader to save, each block run in bash with `set -e` in a copy
of the repository. Shared by tests/e2e/test_tutorials*.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, git_env


def page(name: str) -> str:
    """A tutorial page's text."""
    return (REPO / "docs" / "tutorials" / name).read_text()


def blocks(name: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", page(name), flags=re.S | re.M)


def commands(name: str) -> list[list[str]]:
    return [shlex.split(line) for b in blocks(name) for line in b.strip().splitlines()]


def save_files(name: str, repo: Path) -> list[str]:
    found = re.findall(r'^```\w+ title="([^"]+)"\n(.*?)^```', page(name), flags=re.S | re.M)
    for name, body in found:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(body)
    return [name for name, _ in found]


def offline_wheels(monkeypatch: pytest.MonkeyPatch, *wheels: tuple[str, str]) -> None:
    """A page's own `pip download` of `wheels` ((package, version) each), answered from the
    wheels fetched once from PyPI and cached; the test skips where they cannot be fetched."""
    from tests.wild import fetch

    try:
        for package, version in wheels:
            fetch.wheel_file(package, version)
    except fetch.FetchError as e:
        pytest.skip(str(e))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(fetch.wheels_dir()))


def sh(repo: Path, block: str, check: bool = True) -> subprocess.CompletedProcess:
    # The tutorials commit; the console script and dvc of this interpreter come first.
    env = git_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"{block} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        )
    return r


def blocks_lines(block: str) -> list[str]:
    return [line for line in block.strip().splitlines() if line.strip()]
