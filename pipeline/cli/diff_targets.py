"""What `diff` accepts: a build or inspect folder, an engine-store key (a prefix from
`cache ls`), or a DVC experiment name / git revision (whose report.json DVC's API reads
from the local cache; `dvc exp apply` would rewrite the workspace)."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from pipeline.core.errors import PipelineError

_HEX = re.compile(r"[0-9a-f]{4,64}")


def _git(*args: str) -> str | None:
    r = subprocess.run(["git", *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def _exp_commit(name: str) -> str | None:
    refs = _git("for-each-ref", "--format=%(refname) %(objectname)", "refs/exps") or ""
    hits = [
        line.split()[1] for line in refs.splitlines() if line.split()[0].rsplit("/", 1)[-1] == name
    ]
    if len(hits) > 1:
        raise PipelineError(
            f"diff: {len(hits)} experiments are named '{name}'; give its commit instead"
        )
    return hits[0] if hits else _git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")


def from_revision(name: str, dest: Path) -> Path | None:
    """report.json of an experiment or revision, read through DVC's own API from the
    revision's dvc.lock and the local cache (the workspace is not touched)."""
    commit = _exp_commit(name)
    if commit is None:
        return None
    import dvc.api
    from dvc.exceptions import DvcException

    try:
        data = dvc.api.read(
            "artifacts/inspect/report.json",
            repo=_git("rev-parse", "--show-toplevel") or ".",
            rev=commit,
            mode="rb",
        )
    except (DvcException, FileNotFoundError) as e:
        raise PipelineError(
            f"diff: cannot read the inspect report of '{name}' ({str(e).splitlines()[0]}; "
            f"was the pipeline run there, and is its output in the local DVC cache?)"
        ) from None
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "report.json").write_bytes(data)
    return dest


def diff_source(arg: str, store_dir: str | None, work: Path) -> Path:
    """A folder `pipeline.analysis.diff.load` reads, for any of the accepted forms."""
    path = Path(arg)
    if path.exists():
        return path
    if _HEX.fullmatch(arg):
        from pipeline.engine import store
        from pipeline.store import ENGINES

        st = store.EngineStore(ENGINES.root(store_dir))
        if any(k.startswith(arg) for k in st.keys()):
            entry = st.get(st.resolve(arg))
            if entry is None:
                raise PipelineError(f"diff: store entry {arg} is damaged (see `cache verify`)")
            return entry.path
    found = from_revision(arg, work / re.sub(r"[^\w.-]", "_", arg))
    if found is not None:
        return found
    raise PipelineError(
        f"diff: '{arg}' is not a folder, an engine-store key or a DVC experiment / git revision"
    )


def temp_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="trt-pipeline-diff.")
