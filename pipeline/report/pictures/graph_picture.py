"""Which layout draws a graph picture: Graphviz `dot` where it is on PATH and works,
else the built-in layered layout. Either way the picture says which one drew it."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from typing import TypedDict

from markupsafe import Markup

from pipeline.records.inspect_file import NodesAndEdges
from pipeline.report.pictures import graph_dot, graph_svg

BUILT_IN = "the built-in layered layout"


@lru_cache(maxsize=1)
def _dot() -> str | None:
    """dot's name and version once per process, or None where it is absent."""
    if not graph_dot.binary():
        return None
    try:
        return graph_dot.version()
    except (
        OSError,
        subprocess.SubprocessError,
    ):  # a broken install: the built-in layout still draws
        return None


class Picture(TypedDict):
    """A graph drawn for report.html."""

    svg: Markup  # inline SVG, marked safe for the page template
    layout: str  # which layout drew it, in words, and why not dot where dot was wanted


def draw(graph: NodesAndEdges, svg_id: str, use_dot: bool = True) -> Picture:
    """{svg, layout}: the inline SVG (marked safe for the page template) and, in words,
    the layout that drew it, with the reason when dot was wanted but not used."""
    nodes, edges = graph["nodes"], graph["edges"]
    dot = _dot() if use_dot else None
    if dot:
        try:
            return {"svg": Markup(graph_dot.render(nodes, edges, svg_id)), "layout": dot}
        except RuntimeError as e:
            why = f" ({e}; fell back)"
    else:
        why = " (Graphviz dot is not on PATH)" if use_dot else ""
    return {"svg": Markup(graph_svg.render(nodes, edges, svg_id)), "layout": BUILT_IN + why}
