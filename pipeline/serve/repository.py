"""A Triton model repository of one model's engines: `<repo>/<model>/config.pbtxt`, the
plans in `<repo>/<model>/1/`, one per compute capability (`cc_model_filenames`), one
`configs/<gpu-kind>.pbtxt` per GPU kind where two kinds share a compute capability (an L4
and an L40S are both 8.9: `tritonserver --model-config-name=<kind>` picks one per server),
and `sha256.json` naming every file. Written whole or not at all (fileio.staged_dir), and
checked before it replaces the old one (triton_checks.py)."""

from __future__ import annotations

import os
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core import console, fileio, hashing, ngc
from pipeline.core.errors import PipelineError
from pipeline.records.package_file import PackageRecord
from pipeline.serve import serving, triton_checks
from pipeline.serve.triton_config import Engine, TritonConfig, config, text

VERSION = "1"
RTX_NOTE = (
    "A TensorRT-RTX engine: Triton's TensorRT backend links full TensorRT and cannot load it;\n"
    "serve it with a runtime built on TensorRT-RTX."
)


def engines_in(build_dir: Path, current: str | None = None) -> list[Engine]:
    """The built engines under artifacts/build/ (one folder per machine fingerprint) of
    one graph: that of `current` (this machine's fingerprint id) where it built one. The
    folders persist across runs, so another machine's may be of older inputs: left out,
    with a line."""
    from pipeline.serve.triton_config import engine_of

    folders = sorted(p.parent for p in build_dir.glob("*/manifest.json"))
    if not folders:
        raise PipelineError(f"no built engine in {build_dir}: run the build stage first")
    engines = [engine_of(f) for f in folders]
    mine = [e for e in engines if e.fingerprint_id == current]
    keys = {e.graph_key for e in (mine or engines)}
    if len(keys) > 1:
        raise PipelineError(
            f"the engines in {build_dir} were built from {len(keys)} different graphs or "
            "settings; run the build stage here first, or keep one model's engines there"
        )
    kept = [e for e in engines if e.graph_key in keys]
    for e in engines:
        if e not in kept:
            console.note(f"package: left out {e.fingerprint_id}, built from other inputs")
    return kept


def with_store(local: list[Engine], store_root: Path) -> list[Engine]:
    """`local` and every engine in the engine store (a team's, a fleet sweep's) built from
    the same graph, settings and profiles on another machine: one per fingerprint, each
    entry verified before it is read."""
    from pipeline.engine.store import EngineStore
    from pipeline.serve.triton_config import engine_of

    wanted = {e.graph_key for e in local}
    out = {e.fingerprint_id: e for e in local}
    store = EngineStore(store_root)
    for key in store.keys():
        try:
            engine = engine_of(store.entries / key)
        except PipelineError:
            continue  # not an engine entry this version reads: `cache verify` says why
        if engine.graph_key not in wanted or engine.fingerprint_id in out:
            continue
        if store.get(key) is not None:  # verified: a damaged entry is never packaged
            out[engine.fingerprint_id] = engine
    return sorted(out.values(), key=lambda e: e.fingerprint_id)


def _kind(gpu: str | None) -> str:
    return re.sub(r"[^a-z0-9]+", "-", (gpu or "any").lower()).strip("-")


def plan_names(engines: list[Engine]) -> dict[str, list[tuple[str, Engine]]]:
    """compute capability -> (plan file, engine) per GPU kind. An engine built without a
    GPU (TensorRT-RTX ahead of time) runs on every compute capability TensorRT-RTX takes."""
    from pipeline.engine.backend import RTX_COMPUTE_CAPABILITIES

    by_cc: dict[str, list[tuple[str, Engine]]] = defaultdict(list)
    for e in engines:
        if e.compute_capability is None:
            for cc in RTX_COMPUTE_CAPABILITIES:
                by_cc[cc].append((f"model_{e.flavour}_portable.plan", e))
        else:
            cc = e.compute_capability
            by_cc[cc].append((f"model_sm{cc.replace('.', '')}_{_kind(e.gpu)}.plan", e))
    return dict(sorted(by_cc.items()))


def write(
    repo: Path,
    name: str,
    engines: list[Engine],
    schema: Path | None = None,
    sample: dict[str, np.ndarray] | None = None,
    serve: ngc.Image | None = None,
) -> PackageRecord:
    """The model's folder in `repo`, checked; what was written and checked. `sample`: one
    batch of reference inputs, which model_warmup feeds each instance before it serves.
    `serve`: the pinned serving image; a plan it cannot load is refused (serving.py)."""
    ios = {hashing.sha256_json(e.io) for e in engines}
    if len(ios) > 1:
        raise PipelineError(
            f"the engines in {', '.join(e.fingerprint_id for e in engines)} have different "
            "inputs or outputs: one Triton model serves one graph"
        )
    by_cc = plan_names(engines)
    main = {cc: kinds[0][0] for cc, kinds in by_cc.items()}
    cfg = config(name, engines[0], main)
    rtx = any(e.flavour == "tensorrt_rtx" for e in engines)
    serving.refuse_unloadable(serve, engines)  # before any write
    module = triton_checks.load_schema(schema)  # a bad --triton-schema: before any write
    header = serving.note(serve, engines) + ("\n" + RTX_NOTE if rtx else "")
    with fileio.staged_dir(repo / name) as folder:
        version = folder / VERSION
        version.mkdir()
        for kinds in by_cc.values():
            for plan, engine in kinds:
                _place(engine.plan, version / plan)
        configs = {"config.pbtxt": cfg, **_per_kind(name, engines[0], by_cc)}
        if sample is not None:
            _warmed(configs, sample, folder)
        checked = _written(folder, configs, engines, version, header, module)
        fileio.write_text(folder / serving.FILE, header + "\n")
        fileio.write_json(folder / "sha256.json", _sums(folder))
    return {
        "model": name,
        "plans": main,
        "max_batch_size": cfg["max_batch_size"],
        "configs": sorted(configs),
        "checked": checked,
    }


def _per_kind(
    name: str, engine: Engine, by_cc: dict[str, list[tuple[str, Engine]]]
) -> dict[str, TritonConfig]:
    """configs/<kind>.pbtxt where a compute capability has plans for several GPU kinds."""
    out: dict[str, TritonConfig] = {}
    for cc, kinds in by_cc.items():
        if len({e.gpu for _, e in kinds}) < 2:
            continue
        for plan, e in kinds:
            plans = {c: ks[0][0] for c, ks in by_cc.items()} | {cc: plan}
            out[f"configs/{_kind(e.gpu)}.pbtxt"] = config(name, engine, plans)
    return out


def _written(
    folder: Path,
    configs: dict[str, TritonConfig],
    engines: list[Engine],
    version: Path,
    header: str,
    module: Any,
) -> list[str]:
    """Each config judged by our rules and Triton's schema, then written; what was checked."""
    checked = []
    for rel, cfg in configs.items():
        problems = triton_checks.rule_problems(cfg, engines, version, cfg["name"])
        if problems:
            raise PipelineError(f"{rel} for Triton: {'; '.join(problems)}")
        body = text(cfg, header)
        try:
            checked.append(f"{rel}: {triton_checks.schema_check(body, cfg, module)}")
        except ValueError as e:
            raise PipelineError(f"{rel} for Triton: {e}") from None
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        fileio.write_text(folder / rel, body)
    if RTX_NOTE in header:
        console.warn(RTX_NOTE.replace("\n", " "))
    return checked


def _warmed(configs: dict[str, TritonConfig], sample: dict[str, np.ndarray], folder: Path) -> None:
    """model_warmup in every config, and the files it reads in warmup/."""
    from pipeline.serve.triton_config import warmup

    for cfg in configs.values():
        w, files = warmup(cfg, sample)
        if not w:
            return
        cfg["model_warmup"] = [w]
    (folder / "warmup").mkdir()
    for rel, data in files.items():
        fileio.write_bytes(folder / "warmup" / rel, data)


def _place(src: Path, dest: Path) -> None:
    """A plan in the repository: a hard link where it can be (engines are GB; the build
    folder's plan is read-only), else a copy."""
    if dest.exists():  # one portable plan serves several compute capabilities
        return
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _sums(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashing.sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
