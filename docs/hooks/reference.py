"""MkDocs hook (mkdocs.yml `hooks:`): the reference pages are generated from the code at
every build (pipeline/cli/reference.py), never committed, so they cannot go stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    from pipeline.cli import reference

    repo = Path(config["config_file_path"]).resolve().parent
    for path, text in reference.pages(repo).items():
        files.append(File.generated(config, path, content=text))
    return files
