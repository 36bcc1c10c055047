"""What tests share: the package's import graph, running dvc and the stage CLIs in repository copies, engine-store
entries made and damaged on purpose, a built report, a model with external data, the
precision tests' exports. Test modules import these from here, never from each other."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.core import fileio, hashing
from pipeline.core.layout import Layout
from pipeline.flow import stages
from pipeline.inputs import reference_file
from pipeline.report.inspect import report
from tests.conftest import REPO, compose

DVC_FAST = ["-S", "benchmark.min_duration_s=0.3", "-S", "benchmark.warmup_s=0.05"]


def dvc(repo, *args, check=True):
    r = subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=repo, capture_output=True, text=True
    )
    if check and r.returncode != 0:
        raise AssertionError(f"dvc {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return r


def ran_stages(output: str) -> list[str]:
    """The stages `dvc repro` ran, by name, in order, with the fingerprint (machine/dvc.yaml's)
    first: it has no upstream stage, so DVC runs it wherever its order puts it before build."""
    ran = [
        line.split("'")[1].split(":")[-1]
        for line in output.splitlines()
        if line.startswith("Running stage")
    ]
    return sorted(ran, key=lambda s: s != "fingerprint")


KEY = "ab" * 32


OTHER = "cd" * 32


def manifest_bytes(key, engine):
    """The smallest manifest the engine store's schema accepts."""
    from pipeline.core import fileio, hashing

    return fileio.to_json(
        {
            "manifest_version": 1,
            "cache_key": key,
            "fingerprint": {"id": "no-gpu-test", "gpu": None},
            "engine": {
                "file": "engine.plan",
                "bytes": len(engine),
                "sha256": hashing.sha256_bytes(engine),
            },
            "config": {"build": {}, "precision": {"name": "fp32"}, "profiles": []},
            "backend": {"flavour": "tensorrt_rtx", "version": "1.7.1.116"},
        }
    ).encode()


def put(store, key=KEY, engine=b"engine-bytes" * 100, labels=None):
    with store.lock(key):
        return store.put(
            key,
            {"engine.plan": engine, "manifest.json": manifest_bytes(key, engine)},
            labels or {"model": "m"},
        )


def damage_entry(entry, damage):
    """Damage a store entry the ways the field saw: bytes, entry.json, confinement."""

    from pipeline.core import hashing

    engine = entry.file("engine.plan")
    meta_path = entry.path / "entry.json"
    meta = json.loads(meta_path.read_text())
    if damage == "truncate":
        engine.write_bytes(engine.read_bytes()[:100])
    elif damage == "flip":
        data = bytearray(engine.read_bytes())
        data[5] ^= 1
        engine.write_bytes(bytes(data))
    elif damage == "delete":
        engine.unlink()
    elif damage == "entry_json":
        meta_path.write_text("{not json")
    elif damage in ("[]", "{}", "null"):
        meta_path.write_text(damage)
    elif damage == "files_list":
        meta_path.write_text(json.dumps({**meta, "files": ["engine.plan"]}))
    elif damage == "escape":  # a listed file outside the entry, with a matching size and sha256
        outside = entry.path.parents[2] / "OUTSIDE.txt"
        outside.write_text("outside")
        meta["files"]["../../../OUTSIDE.txt"] = {
            "bytes": 7,
            "sha256": hashing.sha256_bytes(b"outside"),
        }
        meta_path.write_text(json.dumps(meta))
    elif damage == "symlink":
        target = entry.path.parents[2] / "elsewhere.plan"
        target.write_bytes(engine.read_bytes())
        engine.unlink()
        engine.symlink_to(target)
    elif damage in ("manifest{}", "manifest_escape"):
        body = (
            b"{}"
            if damage == "manifest{}"
            else json.dumps(
                {
                    **json.loads(entry.file("manifest.json").read_text()),
                    "engine": {"file": "../../x.plan", "bytes": 1, "sha256": "0" * 64},
                }
            ).encode()
        )
        entry.file("manifest.json").write_bytes(body)
        meta["files"]["manifest.json"] = {"bytes": len(body), "sha256": hashing.sha256_bytes(body)}
        meta_path.write_text(json.dumps(meta))
    else:
        raise ValueError(damage)


def cli(cwd, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def one_error_line(r, *needles):
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def assert_clean(store_dir, tmp_path):
    r = cli(tmp_path, "cache", "verify", "--store", str(store_dir))
    assert r.returncode == 0 and "all intact" in r.stdout and r.stderr == "", (r.stdout, r.stderr)


def prepared_copy(layout, dest):
    """A private layout with the built model's fingerprint/export/calibrate outputs."""
    (dest / "artifacts").mkdir(parents=True)
    for name in ("fingerprint.json", "export", "calibrate"):
        src = layout.root / "artifacts" / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / "artifacts" / name)
    # The model's source (model.source=pipeline/zoo, relative) travels with the outputs
    # made from it: the checkout's package, which `python -m` there imports first.
    (dest / "pipeline").symlink_to(REPO / "pipeline", target_is_directory=True)
    return dest


def truncated_entry(root, key):
    """An entry whose engine is shorter than its entry.json says (a crash mid-copy)."""
    entry = root / "entries" / key
    entry.mkdir(parents=True)
    data = key.encode() * 500
    (entry / "engine.plan").write_bytes(data[:100])
    fileio.write_json(
        entry / "entry.json",
        {
            "key": key,
            "labels": {},
            "created": 0.0,
            "files": {"engine.plan": {"bytes": len(data), "sha256": hashing.sha256_bytes(data)}},
        },
    )


def kill_lock_holder(lock, procs, timeout):
    """SIGKILL the process among `procs` whose pid the lock file names (the holder
    writes it) as soon as one does; that process, or None after `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            pid = int(lock.read_text() or 0)
        except (FileNotFoundError, ValueError):
            pid = 0
        victim = next((p for p in procs if p.pid == pid), None)
        if victim is not None:
            victim.send_signal(signal.SIGKILL)
            return victim
        time.sleep(0.002)
    return None


def built_report(built, tmp_path):
    cfg, layout = built
    fp = stages.read_fingerprint(layout)
    inspection = {"available": False, "reason": "not tried in this test"}
    r = report.make_report(
        layout.export_dir / "model.onnx",
        layout.calibrate_dir / "model.onnx",
        layout.engine_dir(fp["id"]),
        cfg.inspect,
        inspection,
    )
    fileio.write_json(tmp_path / "report.json", r)  # serialisable
    return r


def self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg"}


def write_model_with_external_data(folder):
    import onnx

    from pipeline.zoo.make_tiny_mlp import make

    model = make()
    onnx.save_model(
        model,
        str(folder / "mlp.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="mlp.weights",
        size_threshold=0,
    )
    return folder / "mlp.onnx", folder / "mlp.weights"


def fresh(exported: Layout, tmp_path: Path) -> Layout:
    """A layout of its own holding a copy of `exported`'s export stage."""
    layout = Layout(tmp_path / "run")
    shutil.copytree(exported.export_dir, layout.export_dir)
    return layout


def reference_pairs(layout: Layout) -> list[tuple[dict, dict]]:
    return reference_file.read(layout.export_dir / "reference.npz")


def quantized(layout: Layout, tmp_path: Path, *overrides: str):
    """quantize.quantize on the export, as the calibrate stage calls it: the result holds
    the calibration summary and every graph the fallback search may write."""
    from pipeline.precision.qdq import quantize

    cfg = compose(*overrides, f"calibration.cache_dir={tmp_path / 'cache'}")
    dest = tmp_path / "qdq.onnx"
    result = quantize.quantize(
        layout.export_dir / "model.onnx", dest, cfg.precision, cfg.calibration, cfg.model
    )
    return cfg, result


PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_only(tree: ast.AST) -> ast.AST:
    """`tree` without its `if TYPE_CHECKING:` blocks: what a process imports at run time."""

    class Drop(ast.NodeTransformer):
        def visit_If(self, node: ast.If) -> ast.AST | None:
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            return None if name == "TYPE_CHECKING" else self.generic_visit(node)

    return Drop().visit(tree)


def imports(path: Path, known: set[str], at_run_time: bool = False) -> set[str]:
    """Every pipeline module `path` imports, wherever the statement is (`at_run_time`: but
    the type checker's own imports)."""
    out = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(runtime_only(tree) if at_run_time else tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("pipeline")}
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipeline")
        ):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
    return {m for m in out if m in known and m != "pipeline"}


def graph(at_run_time: bool = False) -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {m: imports(p, known, at_run_time) for m, p in paths.items()}


SWEEP_FAST = [
    "benchmark.warmup_s=0.02",
    "benchmark.min_duration_s=0.05",
    "benchmark.min_iterations=5",
]


def int4_tensors(graphs) -> dict:
    """The packed int4 weights and their scales of an int4 transform's graph, by name."""
    from onnx import numpy_helper

    return {
        i.name: numpy_helper.to_array(i)
        for i in graphs.int4.graph.initializer
        if i.name.endswith(("_i4", "_scale"))
    }
