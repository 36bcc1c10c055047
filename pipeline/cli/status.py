"""`python -m pipeline status`: are all stage outputs current for the present params,
code and data on THIS machine? Exit 0 if so, 1 naming the first stale stage (a CI
gate). DVC's own status always lists the fingerprint stage (it must always run to
notice a new GPU or driver), so this asks DVC about every other stage and probes the
machine itself: the same answer `dvc repro` would act on, without running anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.core.stage_names import STAGES

if TYPE_CHECKING:
    from pipeline.core.config import BuildConfig


def stale_stages(
    repo: Path = Path("."), build_cfg: BuildConfig | None = None
) -> list[tuple[str, str]]:
    """[(stage, why)] in pipeline order; [] when everything is current here. Without
    `build_cfg`, the machine is probed with the schema's default build settings."""
    from pipeline.machine import fingerprint

    layout = Layout(repo)
    out: list[tuple[str, str]] = []
    if not layout.fingerprint.is_file():
        return [("fingerprint", f"{layout.fingerprint} missing")]
    recorded = fileio.read_json(layout.fingerprint, "fingerprint")
    if build_cfg is None:
        from pipeline.core import config

        build_cfg = config.BuildConfig()
    now = fingerprint.collect(build_cfg, require_trt=False)
    if fingerprint.identity(recorded) != fingerprint.identity(now):
        out.append(
            (
                "fingerprint",
                f"artifacts were made on {recorded.get('id')}, this machine is {now['id']}",
            )
        )
    for stage, changes in _dvc_status(repo).items():
        why = [c for c in changes if c != "always changed"]
        if why:
            out.append((stage, _describe(why)))
    return sorted(out, key=lambda s: STAGES.index(s[0]) if s[0] in STAGES else len(STAGES))


def _dvc_status(repo: Path) -> dict[str, list[str | dict[str, Any]]]:
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(repo)) as r:
            # DVC's API is untyped: stage name -> its changes (names, or {kind: items})
            status: dict[str, list[str | dict[str, Any]]] = r.status()
            return status
    except DvcException as e:
        raise PipelineError(f"dvc status failed in {repo}: {e}") from None


def _describe(changes: list[str | dict[str, Any]]) -> str:
    parts = []
    for c in changes:
        if isinstance(c, dict):
            for kind, items in c.items():
                names = ", ".join(sorted(items)) if isinstance(items, dict) else str(items)
                parts.append(f"{kind}: {names}")
        else:
            parts.append(str(c))
    return "; ".join(parts)


def main(repo: Path, as_json: bool, build_cfg: BuildConfig | None = None) -> int:
    stale = stale_stages(repo, build_cfg)
    if as_json:
        print(
            json.dumps(
                {"current": not stale, "stale": [{"stage": s, "why": w} for s, w in stale]},
                indent=2,
            )
        )
    elif stale:
        stage, why = stale[0]
        more = f" (+{len(stale) - 1} more stale stage(s))" if len(stale) > 1 else ""
        print(f"stale: {stage} ({why}){more}; run dvc repro")
    else:
        print(
            "current: every stage's outputs match the present params, code and data on this machine"
        )
    return 1 if stale else 0
