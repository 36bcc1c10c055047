"""The documentation site builds offline with `mkdocs build --strict` (a broken link, a
missing page or a hook error fails it), carries the generated reference pages, and loads
nothing from the network."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("mkdocs", reason="the docs extra (mkdocs, mkdocs-material) is not installed")


def test_site_builds_strict_offline_with_the_generated_reference(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    config = (site / "reference" / "config.html").read_text()
    assert "build.workspace_mib" in config and "profile.profiles[].dims" in config
    assert "--fail-on-regression" in (site / "reference" / "cli.html").read_text()
    for tutorial in ("own-onnx-model", "int8-transformer", "sweeps", "team-store", "ci"):
        assert (site / "tutorials" / f"{tutorial}.html").is_file(), tutorial
    # Every script, stylesheet, image and font comes from the site itself.
    remote = re.compile(r"""<(?:script|link|img)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""")
    for page in site.rglob("*.html"):
        assert not remote.search(page.read_text()), page
    for css in site.rglob("*.css"):
        assert "fonts.googleapis" not in css.read_text(), css
