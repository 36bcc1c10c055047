"""dvc.yaml's stages, parsed once per process while the file is unchanged: a sweep
reads them for every job (the job key's dependencies, the order jobs start in), and
parsing the YAML is a third of a job key's cost."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any


def stages(repo: Path) -> dict[str, Any]:
    """The `stages` mapping of `repo`/dvc.yaml (shared between callers: read it, never change it)."""
    path = Path(repo) / "dvc.yaml"
    st = path.stat()
    return _parse(str(path.resolve()), st.st_mtime_ns, st.st_size, st.st_ino)


@lru_cache(maxsize=8)
def _parse(path: str, mtime_ns: int, size: int, inode: int) -> dict[str, Any]:
    import yaml

    parsed: dict[str, Any] = yaml.load(
        Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )["stages"]
    return parsed
