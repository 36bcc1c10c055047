"""The graph picture in report.html: Graphviz `dot` where it is on PATH, the built-in
layout where it is not (or fails); either way inline SVG that fits the page width,
says which layout drew it and loads nothing from anywhere."""

import os
import re
import shutil

import pytest

from pipeline.report.inspect import report_html
from pipeline.report.pictures import graph_picture
from tests.helpers import built_report as _report
from tests.helpers import self_contained as _self_contained

needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None,
    reason="Graphviz dot is not on PATH (apt-get install graphviz to run this)",
)

GRAPH = {
    "nodes": [
        {"id": "in:x", "label": "x", "kind": "io", "tooltip": "graph input x"},
        {
            "id": "n0",
            "name": "/a/<script>",
            "label": "Conv",
            "sublabel": "a/<script>",
            "precision": "int8",
            "kind": "op",
            "tooltip": "/a/<script> (Conv)\nprecision int8 (engine kernel)",
        },
        {
            "id": "g:/layers.0",
            "label": "layers.0",
            "kind": "group",
            "precision": "fp32",
            "mix": {"fp32": 5, "int8": 3},
            "sublabel": "8 nodes",
            "tooltip": "layers.0: 8 nodes folded",
        },
        {"id": "out:y", "label": "y", "kind": "io", "tooltip": "graph output y"},
    ],
    "edges": [("in:x", "n0"), ("n0", "g:/layers.0"), ("g:/layers.0", "out:y")],
}


@pytest.fixture
def fresh_dot_lookup():
    """graph_picture remembers dot once per process; these tests change PATH under it."""
    graph_picture._dot.cache_clear()
    yield
    graph_picture._dot.cache_clear()


def _fits_the_page(svg: str, svg_id: str) -> None:
    head = svg[: svg.index(">") + 1]
    assert head.startswith(f'<svg xmlns="http://www.w3.org/2000/svg" id="{svg_id}"')
    assert (
        'width="100%"' in head and re.search(r'viewBox="[-\d. ]+"', head) and "max-width:" in head
    )
    assert "height=" not in head  # the viewBox keeps the aspect; a fixed height would not scale
    assert "<script" not in svg and "&lt;script&gt;" in svg  # names are text, never markup


@needs_dot
def test_dot_draws_inline_svg_with_tooltips(fresh_dot_lookup):
    pic = graph_picture.draw(GRAPH, "t")
    svg = str(pic["svg"])
    assert re.fullmatch(r"Graphviz dot \d+\.\d+.*", pic["layout"])
    _fits_the_page(svg, "t")
    assert (
        "<?xml" not in svg and "<!--" not in svg and "xlink" not in svg and "<!DOCTYPE" not in svg
    )
    assert all(
        i.startswith("t") for i in re.findall(r' id="([^"]+)"', svg)
    )  # unique across the page
    assert "<title>graph input x</title>" in svg and "precision int8 (engine kernel)" in svg
    assert svg.count('class="node"') == 4 and svg.count('class="edge"') == 3


def test_without_dot_the_built_in_layout_draws(monkeypatch, tmp_path, fresh_dot_lookup):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no dot to find
    pic = graph_picture.draw(GRAPH, "t")
    assert pic["layout"] == "the built-in layered layout (Graphviz dot is not on PATH)"
    _fits_the_page(str(pic["svg"]), "t")
    assert str(pic["svg"]).count('<g class="node ') == 4


def _broken_dot(monkeypatch, folder, layout_script: str) -> None:
    """A `dot` first on PATH that answers -V like Graphviz, then runs layout_script."""
    dot = folder / "dot"
    dot.write_text(
        '#!/bin/sh\nif [ "$1" = -V ]; then echo "dot - graphviz version 9.9.9 (0)" >&2; exit 0; fi\n'
        + layout_script
    )
    dot.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def test_a_failing_dot_falls_back_and_says_why(monkeypatch, tmp_path, fresh_dot_lookup):
    _broken_dot(monkeypatch, tmp_path, 'echo "Error: layout exploded" >&2\nexit 3\n')
    pic = graph_picture.draw(GRAPH, "t")
    assert (
        pic["layout"]
        == "the built-in layered layout (dot failed: Error: layout exploded; fell back)"
    )
    _fits_the_page(str(pic["svg"]), "t")


def test_a_dot_with_output_we_cannot_read_falls_back(monkeypatch, tmp_path, fresh_dot_lookup):
    _broken_dot(monkeypatch, tmp_path, 'echo "not an svg"\n')
    pic = graph_picture.draw(GRAPH, "t")
    assert pic["layout"].startswith(
        "the built-in layered layout (dot's SVG has no width/height/viewBox header"
    )


@pytest.mark.parametrize("use_dot", [True, False], ids=["dot-where-installed", "built-in"])
def test_report_page_is_self_contained_and_names_its_layout(built_transformer, tmp_path, use_dot):
    r = _report(built_transformer, tmp_path)
    r["build_log"]["warnings"].append("<script>alert(1)</script>")  # autoescaped
    page = report_html.to_html(r, use_dot=use_dot)
    _self_contained(page)
    assert "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in page
    assert not re.search(r"<(script|link|iframe|img|object|embed)\b", page, re.I)
    assert "@import" not in page and not re.search(r"url\((?!#)", page)  # only in-page references
    drawn_by = re.search(r"Drawn by ([^<]+)\.</p>", page).group(1)
    expected = (
        (graph_picture._dot() or "the built-in layered layout (Graphviz dot is not on PATH)")
        if use_dot
        else "the built-in layered layout"
    )
    assert drawn_by == expected
    # the main graph is on the page; the block's inside and the engine's layers wait behind <details>
    assert re.search(r'<div class="graph"><svg [^>]*id="onnx-graph"', page)
    assert re.search(
        r'<details><summary>inside /layers\.0[^<]*</summary><div class="graph"><svg [^>]*id="detail-0"',
        page,
    )
