"""Static SVG charts of the benchmark sweep (latency and throughput against batch size) and
of a decoder's phases (time to first token against prompt length, time per output token
against past length).

DVC's own plot page loads its chart scripts from a CDN and is blank offline; these SVGs
are plain files any browser, Markdown viewer or CI artifact page shows. Matplotlib's Agg
backend needs no display. The files are DVC outputs, so they carry no date and their
element ids are salted with a constant: the same numbers give the same bytes. Text stays
text (svg.fonttype none), so the bytes do not depend on the fonts this machine has."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

CHARTS = {
    "latency": ("latency_ms", "median latency (ms)", "median latency against batch size"),
    "throughput": ("throughput_per_s", "samples per second", "throughput against batch size"),
}


def rendered(draw: Callable[[Any], None], panels: int = 1) -> str:
    """An SVG of one chart that `draw` draws on its Axes (a row of `panels` of them where
    more than one), as this module's docstring says."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.hashsalt": "trt-pipeline", "svg.fonttype": "none"}):
        fig = Figure(figsize=(6.4 * panels, 4.0))
        draw(fig.subplots(1, panels) if panels > 1 else fig.subplots())
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def svg(rows: list[dict[str, Any]], kind: str, subtitle: str = "") -> str:
    field, ylabel, title = CHARTS[kind]

    def draw(ax: Any) -> None:
        for series in sorted({r["series"] for r in rows}):
            pts = sorted(
                (r["batch"], r[field])
                for r in rows
                if r["series"] == series and r.get(field) is not None
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=series)
        batches = sorted({r["batch"] for r in rows})
        if batches:
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
        ax.grid(True, alpha=0.3)
        if rows:
            ax.legend(title="backend", fontsize=8)

    return rendered(draw)


# A decoder's two charts: its field in benchmark.json's decoder backends, the x axis, the title.
PHASES = (
    ("ttft_ms", "prompt length (tokens)", "time to first token (prefill)"),
    ("tpot_ms", "past length (tokens)", "time per output token (decode)"),
)


def phases_svg(decoder: Mapping[str, Any] | None, subtitle: str = "") -> str:
    """A decoder's TTFT against prompt length and TPOT against past length, a line per
    backend; for a model without a KV cache, panels that say so (the file is a DVC output
    of every benchmark)."""
    backends = (decoder or {}).get("backends") or {}

    def draw(axes: Any) -> None:
        for ax, (field, xlabel, title) in zip(axes, PHASES, strict=True):
            for backend, figures in sorted(backends.items()):
                pts = sorted((int(n), ms) for n, ms in figures.get(field, {}).items())
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
            if not backends:
                why = (decoder or {}).get("skipped") or "no KV cache: not a decoder"
                ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, transform=ax.transAxes)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("median ms")
            ax.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
            ax.grid(True, alpha=0.3)
            if backends:
                ax.legend(title="backend", fontsize=8)

    return rendered(draw, panels=2)
