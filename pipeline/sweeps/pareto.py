"""The sweep summary's pictures, the Pareto front joined (jobs no other job beats on both):
accuracy against latency, marker area by engine size (sweep_pareto.svg and .png), and
accuracy against engine size, the bytes a precision buys (sweep_pareto_size.svg, .png)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from pipeline.core import fileio

# The accuracy a picture plots, first present wins: (metric, higher is better).
PLOT_METRICS = (
    ("cosine", True),
    ("top1_agreement", True),
    ("max_abs_error", False),
    ("mean_rel_error", False),
)


def metric_to_plot(rows: list[dict[str, Any]]) -> tuple[str, bool] | None:
    for metric, higher in PLOT_METRICS:
        key = f"acc:{metric}"
        if any(r.get(key) is not None for r in rows):
            return key, higher
    return None


# x axis (lower is better) -> its label and the picture's file name
AXES = {
    "median_ms": ("median latency, ms", "sweep_pareto"),
    "engine_mib": ("engine MiB", "sweep_pareto_size"),
}


def pareto(rows: list[dict[str, Any]], x: str = "median_ms") -> list[dict[str, Any]]:
    """The jobs no other job beats on both `x` (lower) and accuracy, sorted by `x`."""
    chosen = metric_to_plot(rows)
    if chosen is None:
        return []
    key, higher = chosen
    pts = [r for r in rows if r.get(key) is not None and r.get(x) is not None]

    def score(r: dict[str, Any]) -> float:
        value: float = r[key]
        return value if higher else -value

    front: list[dict[str, Any]] = []
    best: float | None = None
    for r in sorted(pts, key=lambda r: (r[x], -score(r))):
        if best is None or score(r) > best:
            front.append(r)
            best = score(r)
    return front


def plot(rows: list[dict[str, Any]], out_dir: Path, title: str) -> list[Path]:
    """Both pictures, each where some job has its x value and an accuracy."""
    return [p for x in AXES for p in _picture(rows, out_dir, title, x)]


def _picture(rows: list[dict[str, Any]], out_dir: Path, title: str, x: str) -> list[Path]:
    chosen = metric_to_plot(rows)
    pts = [r for r in rows if chosen and r.get(chosen[0]) is not None and r.get(x) is not None]
    if not pts or chosen is None:  # no points without a chosen metric
        return []
    # A bare Figure, not pyplot: no GUI backend is chosen or imported (most of pyplot's cost).
    from matplotlib.figure import Figure

    key, higher = chosen
    label, name = AXES[x]
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    by_size = x != "engine_mib"
    sizes = [40 + 60 * (r.get("engine_mib") or 0) if by_size else 50 for r in pts]
    ax.scatter([r[x] for r in pts], [r[key] for r in pts], s=sizes, alpha=0.5)
    for r in pts:
        ax.annotate(
            f"{r.get('precision')} {r.get('profile') or ''} {str(r.get('fingerprint') or '')[:12]}".strip(),
            (r[x], r[key]),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    front = pareto(pts, x)
    ax.plot([r[x] for r in front], [r[key] for r in front], "r--", marker="o", label="Pareto front")
    if x == "median_ms":
        label += f" ({', '.join(sorted({r['latency_backend'] for r in pts}))})"
    ax.set_xlabel(label)
    ax.set_ylabel(
        f"{key[4:]} ({'higher' if higher else 'lower'} is better)"
        + ("; marker area: engine MiB" if by_size else "")
    )
    ax.set_title(f"Sweep {title}: accuracy against {AXES[x][0].split(',')[0]}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths = []
    for ext in ("svg", "png"):
        buf = io.BytesIO()
        # No timestamp in the SVG, so an unchanged sweep gives unchanged bytes.
        fig.savefig(buf, format=ext, metadata={"Date": None} if ext == "svg" else None)
        paths.append(fileio.write_bytes(out_dir / f"{name}.{ext}", buf.getvalue()))
    return paths
