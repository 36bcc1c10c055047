"""The pipeline's stages (dvc.yaml, and machine/dvc.yaml's fingerprint), each file parsed
once per process while it is unchanged: a sweep reads them for every job (the job key's
dependencies, the order jobs start in), and parsing the YAML is a third of a job key's
cost."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

# The fingerprint stage's own file (and lock file): it runs on every `dvc repro`, and DVC
# rewrites the lock file of a stage that ran.
MACHINE = "machine/dvc.yaml"


# Open shape: DVC's YAML, stage name -> its dvc.yaml body (DVC's schema, not ours).
def stages(repo: Path) -> dict[str, Any]:
    """The stages of `repo`'s pipeline in order: machine/dvc.yaml's (the fingerprint), then
    dvc.yaml's (the values are shared between callers: read them, never change them)."""
    out: dict[str, Any] = {}
    for name in (MACHINE, "dvc.yaml"):
        path = Path(repo) / name
        if name == MACHINE and not path.is_file():
            continue  # a project set up before the fingerprint had a file of its own
        st = path.stat()
        out.update(_parse(str(path.resolve()), st.st_mtime_ns, st.st_size, st.st_ino))
    return out


@lru_cache(maxsize=8)
# Open shape: DVC's YAML, stage name -> its dvc.yaml body (DVC's schema, not ours).
def _parse(path: str, mtime_ns: int, size: int, inode: int) -> dict[str, Any]:
    import yaml

    parsed: dict[str, Any] = yaml.load(
        Path(path).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )["stages"]
    return parsed
