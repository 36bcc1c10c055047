"""What `diff` accepts: a build or inspect folder, an engine-store key (a prefix from
`cache ls`), or a DVC experiment name / git revision.

An experiment's artifacts are DVC-cached outputs, not in git: its dvc.lock (in git)
names the inspect folder's .dir hash, whose listing in the local DVC cache names
report.json's hash. Reading those two cache files is cheap and changes nothing, where
`dvc exp apply` would rewrite the workspace."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import yaml

from pipeline.core.errors import PipelineError

_HEX = re.compile(r"[0-9a-f]{4,64}")


def _git(*args: str) -> str | None:
    r = subprocess.run(["git", *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def _exp_commit(name: str) -> str | None:
    refs = _git("for-each-ref", "--format=%(refname) %(objectname)", "refs/exps") or ""
    hits = [line.split()[1] for line in refs.splitlines() if line.split()[0].rsplit("/", 1)[-1] == name]
    if len(hits) > 1:
        raise PipelineError(f"diff: {len(hits)} experiments are named '{name}'; give its commit instead")
    return hits[0] if hits else _git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")


def _cache_file(md5: str) -> Path:
    root = Path(_git("rev-parse", "--show-toplevel") or ".") / ".dvc" / "cache" / "files" / "md5"
    return root / md5[:2] / md5[2:]


def from_revision(name: str, dest: Path) -> Path | None:
    commit = _exp_commit(name)
    if commit is None:
        return None
    lock_text = _git("show", f"{commit}:dvc.lock")
    if lock_text is None:
        raise PipelineError(f"diff: revision '{name}' has no dvc.lock (was the pipeline run there?)")
    outs = yaml.safe_load(lock_text).get("stages", {}).get("inspect", {}).get("outs", [])
    md5 = next((o.get("md5") for o in outs if o.get("path") == "artifacts/inspect"), None)
    if not md5:
        raise PipelineError(f"diff: revision '{name}' has no inspect output in its dvc.lock")
    listing = _cache_file(md5)
    if not listing.exists():
        raise PipelineError(f"diff: the inspect output of '{name}' is not in the local DVC cache "
                            f"(dvc pull or dvc exp pull first)")
    entry = next((e for e in json.loads(listing.read_text()) if e.get("relpath") == "report.json"), None)
    if entry is None or not _cache_file(entry["md5"]).exists():
        raise PipelineError(f"diff: report.json of '{name}' is not in the local DVC cache")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "report.json").write_bytes(_cache_file(entry["md5"]).read_bytes())
    return dest


def diff_source(arg: str, store_dir: str | None, work: Path) -> Path:
    """A folder `pipeline.analysis.diff.load` reads, for any of the accepted forms."""
    path = Path(arg)
    if path.exists():
        return path
    if _HEX.fullmatch(arg):
        from pipeline.engine import store as store_lib

        st = store_lib.EngineStore(store_lib.default_root(store_dir))
        if any(k.startswith(arg) for k in st.keys()):
            entry = st.get(st.resolve(arg))
            if entry is None:
                raise PipelineError(f"diff: store entry {arg} is damaged (see `cache verify`)")
            return entry.path
    found = from_revision(arg, work / re.sub(r"[^\w.-]", "_", arg))
    if found is not None:
        return found
    raise PipelineError(f"diff: '{arg}' is not a folder, an engine-store key or a DVC experiment / git revision")


def temp_dir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="trt-pipeline-diff.")
