"""One page and one table across a project's models (index/): each model's precision,
engine size, accuracy and build gates, median latency per backend, and where its report,
benchmark page and Triton model lie. Read from the files the per-model stages wrote
(metrics/<model>/summary.json through its checked reader); a model whose stages have
not run yet is a row that says so."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from pipeline.core import fileio, tables
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.records import summary_file
from pipeline.report import templating

HEADERS = ["model", "precision", "engine MiB", "accuracy gate", "build gates", "median ms"]


class ModelRow(TypedDict):
    """A model's row of index/models.json: its headline numbers, or why there are none."""

    model: str
    precision: str
    missing: NotRequired[str]  # why there are no numbers: its stages have not run yet
    engine_mib: NotRequired[float]
    accuracy_gate: NotRequired[bool]
    build_gates: NotRequired[bool]
    median_ms: NotRequired[dict[str, float]]  # backend -> median latency
    links: NotRequired[dict[str, str]]  # page -> its path from the project root, where it is


def row(root: Path, name: str, precision: str) -> ModelRow:
    """A model's row: its headline numbers, or why there are none."""
    layout = Layout(root, name)
    found: ModelRow = {"model": name, "precision": precision}
    try:
        summary = summary_file.read(layout.metrics_dir)
    except PipelineError as e:
        return {**found, "missing": str(e)}
    medians = {
        k.removesuffix("_median_ms"): v for k, v in summary.items() if k.endswith("_median_ms")
    }
    links = {
        "report": layout.inspect_dir / "report.html",
        "benchmark": layout.metrics_dir / "benchmark.md",
        "triton": layout.repository / name / "config.pbtxt",
    }
    return {
        **found,
        "engine_mib": summary["engine_mib"],
        "accuracy_gate": bool(summary["accuracy_gate_pass"]),
        "build_gates": bool(summary["build_gates_pass"]),
        "median_ms": medians,
        "links": {k: p.relative_to(root).as_posix() for k, p in links.items() if p.is_file()},
    }


def _cells(r: ModelRow) -> list[str]:
    if "missing" in r:
        return [r["model"], r["precision"], "–", "not run", "not run", r["missing"]]
    ms = ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["median_ms"].items())) or "–"
    gate = {True: "passed", False: "FAILED"}
    return [
        r["model"],
        r["precision"],
        f"{r['engine_mib']:.2f}",
        gate[r["accuracy_gate"]],
        gate[r["build_gates"]],
        ms,
    ]


def to_markdown(rows: list[ModelRow]) -> str:
    return f"# Models\n\n{tables.markdown(HEADERS, [_cells(r) for r in rows])}\n"


def write(root: Path, models: dict[str, str], out: Path) -> list[dict[str, Any]]:
    """index/models.md, models.json and index.html for `models` (name -> precision)."""
    rows = [row(root, name, precision) for name, precision in models.items()]
    with fileio.staged_dir(out) as tmp:
        fileio.write_text(tmp / "models.md", to_markdown(rows))
        fileio.write_json(tmp / "models.json", rows)
        page = templating.render(
            "models.html.j2",
            headers=HEADERS,
            rows=[(r, _cells(r)) for r in rows],
            up=Path(os.path.relpath(root, out)).as_posix(),  # links are root-relative
        )
        fileio.write_text(tmp / "index.html", page)
    # the rows as flow/stages.index declares them, plain dicts
    return cast("list[dict[str, Any]]", rows)
