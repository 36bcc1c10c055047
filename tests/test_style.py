"""Lint, format and types, as CI runs them (the settings are in pyproject.toml): a
change that breaks any of them fails the suite, with the tool's own report."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "cmd",
    [("ruff", "check", "--no-cache", "."), ("ruff", "format", "--check", "--no-cache", ".")],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff(cmd):
    if shutil.which("ruff") is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    r = _run(*cmd)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow  # ~45 s on 2 cores: started early, not left for the last minute
def test_mypy():
    r = _run(sys.executable, "-m", "mypy", "--no-incremental")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr
