"""The report's view of precision=auto (pipeline/precision/mixed/search.py): each GEMM's type
and why, every graph the search judged with the Pareto front of weight bytes against the
gate score, and that front as a picture (report.html inline, report.md beside it)."""

from __future__ import annotations

from typing import Any

from pipeline.core import tables
from pipeline.core.numbers import fmt
from pipeline.records.inspect_file import MixedView

PLAN_HEADERS = ["GEMM", "op", "type", "weight bytes", "of fp32", "why"]
GRAPH_HEADERS = ["graph judged", "GEMM weight bytes", "gate score (<= 1 passes)", "gate", "front"]
PICTURE = "mixed_pareto.svg"


def view(record: dict[str, Any] | None) -> MixedView | None:
    """report.json's data for precision=auto; None for every other precision."""
    if not record or "assignment" not in record:
        return None
    front = {p["graph"] for p in record["pareto"]}
    return {
        "types": record["types"],
        "counts": {t: n for t, n in record["counts"].items() if n},
        "candidates": record["candidates"],
        "weight_bytes": record["weight_bytes"],
        "fp32_weight_bytes": record["fp32_weight_bytes"],
        "graphs_judged": record["graphs_judged"],
        "search_cache_hit": record.get("search_cache_hit", False),
        "figures_cache_hit": record["figures_cache_hit"],
        "seconds": record["seconds"],
        "plan": [
            [
                r["node"],
                r["op_type"],
                r["type"],
                r["weight_bytes"],
                f"{r['weight_bytes'] / max(r['fp32_weight_bytes'], 1):.0%}",
                r["why"],
            ]
            for r in record["assignment"]
        ],
        "graphs": [
            [
                g["graph"],
                g["weight_bytes"],
                g["score"],
                "pass" if g["passed"] else "fail",
                "yes" if g["graph"] in front else "",
            ]
            for g in sorted(record["graphs"], key=lambda g: g["weight_bytes"])
        ],
        "pareto": record["pareto"],
    }


def headline(v: MixedView) -> str:
    counts = ", ".join(f"{n} {t}" for t, n in v["counts"].items())
    share = v["weight_bytes"] / max(v["fp32_weight_bytes"], 1)
    if v["search_cache_hit"]:
        how = f"the search's choice from the cache in {v['seconds']:.3g} s"
    else:
        cache = "from the cache" if v["figures_cache_hit"] else "measured"
        how = f"{v['graphs_judged']} graphs judged in {v['seconds']:.3g} s, sensitivities {cache}"
    return (
        f"precision=auto: {v['candidates']} GEMMs as {counts}; GEMM weights "
        f"{fmt(v['weight_bytes'])} B, {share:.1%} of fp32's ({how})"
    )


def markdown(v: MixedView | None) -> list[str]:
    if not v:
        return []
    return [
        f"### {headline(v)}",
        "",
        tables.markdown(PLAN_HEADERS, v["plan"]),
        "",
        f"Every graph the search judged; the front is what no other beats on both "
        f"([picture]({PICTURE})):",
        "",
        tables.markdown(GRAPH_HEADERS, v["graphs"]),
        "",
    ]


def pareto_svg(v: MixedView) -> str:
    """Weight bytes against gate score: every graph judged, the front joined, the gate's
    threshold (score 1) drawn."""
    from pipeline.report.pictures import plots

    def draw(ax: Any) -> None:
        points = v["graphs"]
        ax.scatter([p[1] / 1024 for p in points], [p[2] for p in points], alpha=0.5)
        for p in points:
            if p[0].startswith("all ") or p[0] == "chosen":
                ax.annotate(
                    p[0], (p[1] / 1024, p[2]), fontsize=7, xytext=(4, 4), textcoords="offset points"
                )
        front = v["pareto"]
        ax.plot(
            [p["weight_bytes"] / 1024 for p in front],
            [p["score"] for p in front],
            "r--",
            marker="o",
            label="Pareto front",
        )
        ax.axhline(1.0, color="gray", linestyle=":", label="gate (score 1)")
        ax.set_xlabel("GEMM weight KiB")
        ax.set_ylabel("gate score (lower is better)")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_title("precision=auto: weight bytes against accuracy", fontsize=10)
        ax.legend(fontsize=8)

    return plots.rendered(draw)
