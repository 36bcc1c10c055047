"""Graphviz `dot` as the graph picture's layout, where the binary is on PATH: it routes
edges and orders boxes better than the built-in layout (graph_svg), which stays the
fallback so a machine without Graphviz still gets a picture.

Takes the same {nodes, edges} as graph_svg, runs `dot -Tsvg` and returns SVG fit for
embedding inline in the report: scaled to the page width, ids prefixed per picture,
no comments, no XML prolog and no xlink namespace (nothing the page would load)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess

from pipeline.records.inspect_file import GraphNode
from pipeline.report import templating

TIMEOUT_S = 60
_SVG_OPEN = re.compile(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"\s*(viewBox="[^"]*")[^>]*>')
_TITLE = re.compile(r"<title>([^<]*)</title>")


def binary() -> str | None:
    return shutil.which("dot")


def version() -> str:
    """'Graphviz dot 2.43.0', as `dot -V` says it (on stderr)."""
    out = subprocess.run(
        [binary() or "dot", "-V"], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    m = re.search(r"version ([\w.~+-]+)", out.stderr + out.stdout)
    return f"Graphviz dot {m.group(1) if m else '(unknown version)'}"


def _label(n: GraphNode) -> str:
    """An HTML-like label: op in bold, the short name under it, and for a folded block
    its precision mix as a row of coloured cells (graph_svg draws the same bar)."""
    fg = (
        "#000000"
        if n.get("kind") == "io"
        else templating.text_colour(templating.colour(n.get("precision")))
    )
    rows = [f'<TR><TD><FONT COLOR="{fg}"><B>{html.escape(n["label"])}</B></FONT></TD></TR>']
    if n.get("sublabel"):
        rows.append(
            f'<TR><TD><FONT COLOR="{fg}" POINT-SIZE="9">{html.escape(n["sublabel"])}</FONT></TD></TR>'
        )
    mix = templating.ranked(n.get("mix") or {})
    total = sum(c for _, c in mix)
    if n.get("kind") == "group" and total:
        cells = "".join(
            f'<TD BGCOLOR="{templating.colour(p)}" WIDTH="{max(1, round(150 * c / total))}" HEIGHT="6" '
            f'FIXEDSIZE="TRUE"></TD>'
            for p, c in mix
        )
        rows.append(
            f'<TR><TD><TABLE BORDER="0" CELLBORDER="1" COLOR="#ffffff" CELLSPACING="0" CELLPADDING="0"><TR>{cells}</TR></TABLE></TD></TR>'
        )
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{"".join(rows)}</TABLE>>'


def to_dot(nodes: list[GraphNode], edges: list[tuple[str, str]]) -> tuple[str, dict[str, str]]:
    """DOT source, and the tooltip for each DOT node id (dot names a node's <title> by its id)."""
    ids = {n["id"]: f"n{i}" for i, n in enumerate(nodes)}
    lines = [
        "digraph G {",
        'graph [rankdir=TB, nodesep=0.25, ranksep=0.35, bgcolor="transparent"];',
        'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11, margin="0.1,0.04", '
        'penwidth=1, color="#333333"];',
        'edge [color="#888888", arrowsize=0.7];',
    ]
    tooltips = {}
    for n in nodes:
        kind = n.get("kind", "op")
        fill = "#ffffff" if kind == "io" else templating.colour(n.get("precision"))
        style = "rounded,dashed,filled" if kind == "io" else "rounded,filled"
        extra = ", penwidth=2.2" if kind == "group" else ""
        lines.append(
            f'{ids[n["id"]]} [label={_label(n)}, fillcolor="{fill}", style="{style}"{extra}];'
        )
        tooltips[ids[n["id"]]] = n.get("tooltip") or n["label"]
    for u, v in dict.fromkeys(tuple(e) for e in edges):
        if u in ids and v in ids and u != v:
            lines.append(f"{ids[u]} -> {ids[v]};")
    lines.append("}")
    return "\n".join(lines), tooltips


def inline(svg: str, svg_id: str, tooltips: dict[str, str]) -> str:
    """dot's SVG made fit for the page: see the module docstring."""
    start = svg.find("<svg")
    svg = re.sub(r"<!--.*?-->", "", svg[max(start, 0) :], flags=re.S)
    m = _SVG_OPEN.search(svg)
    if start < 0 or m is None:
        raise ValueError("dot's SVG has no width/height/viewBox header")
    natural_px = round(float(m.group(1)) * 4 / 3)  # dot measures in points
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{html.escape(svg_id)}" width="100%" {m.group(3)} '
        f'style="max-width:{natural_px}px" role="img">'
    )
    body = svg[m.end() :].replace(' id="', f' id="{html.escape(svg_id)}-')
    body = _TITLE.sub(
        lambda t: (
            f"<title>{html.escape(tooltips[t.group(1)])}</title>" if t.group(1) in tooltips else ""
        ),
        body,
    )
    return head + body.strip()


def render(nodes: list[GraphNode], edges: list[tuple[str, str]], svg_id: str) -> str:
    """Inline SVG; raises RuntimeError (with dot's own words) when dot fails."""
    if not nodes:
        return ""
    source, tooltips = to_dot(nodes, edges)
    try:
        out = subprocess.run(
            [binary() or "dot", "-Tsvg"],
            input=source,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"dot did not run: {e}") from None
    if out.returncode != 0:
        raise RuntimeError(f"dot failed: {' '.join(out.stderr.split())[:200]}")
    try:
        return inline(out.stdout, svg_id, tooltips)
    except ValueError as e:  # another Graphviz's SVG header: the built-in layout still draws
        raise RuntimeError(str(e)) from None
