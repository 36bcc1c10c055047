"""MkDocs hook (mkdocs.yml `hooks:`): the reference pages are committed in docs/reference/
(`python -m pipeline.cli.reference docs` writes them) so that links to them work in the
repository too; the build stops where a page differs from what the code generates now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files


def on_files(files: Files, config: Any) -> Files:
    from pipeline.cli import reference

    repo = Path(config["config_file_path"]).resolve().parent
    for path, text in reference.pages(repo).items():
        page = repo / "docs" / path
        if not page.is_file() or page.read_text(encoding="utf-8") != text:
            raise PluginError(f"docs/{path} is stale: run python -m pipeline.cli.reference docs")
    return files
