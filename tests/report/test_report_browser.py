"""report.html in a real browser (headless Chromium, where installed): the graphs fit
the page width at a desktop and a narrow window, nothing scrolls sideways, and the page
stays a few screens long. The report has no scripts; the test appends one to its own
copy that writes what the browser laid out into the DOM, and reads it back."""

import json
import re
import shutil
import subprocess

import pytest

from pipeline.report.inspect import report_html
from tests.helpers import built_report as _report

BROWSER = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no headless Chromium on PATH (apt-get install chromium)"
)
HEIGHT = 2000
MEASURE = """<script>
window.addEventListener("load", () => {
  const doc = document.documentElement, out = {page_w: doc.scrollWidth, page_h: doc.scrollHeight,
                                               view_w: window.innerWidth, svgs: {}};
  document.querySelectorAll("details").forEach(d => d.open = true);  // measure what a reader can open
  document.querySelectorAll("svg[id]").forEach(s => {
    const r = s.getBoundingClientRect();
    out.svgs[s.id] = {left: r.left, right: r.right, width: r.width};
  });
  document.body.setAttribute("data-measure", JSON.stringify(out));
});
</script>"""


def _measure(page: str, tmp_path, width: int) -> dict:
    path = tmp_path / f"report-{width}.html"
    path.write_text(page + MEASURE)
    out = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'ud'}",
            f"--window-size={width},{HEIGHT}",
            "--dump-dom",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r'data-measure="([^"]*)"', out.stdout)
    assert m, f"the browser wrote no measurements: {out.stderr[-500:]}"
    return json.loads(m.group(1).replace("&quot;", '"'))


@pytest.mark.parametrize("width", [1280, 800])
def test_graphs_fit_the_page_width(built_transformer, tmp_path, width):
    page = report_html.to_html(_report(built_transformer, tmp_path))
    m = _measure(page, tmp_path, width)
    assert m["page_w"] <= m["view_w"], (
        f"the page scrolls sideways: {m['page_w']} px in a {m['view_w']} px window"
    )
    assert {"onnx-graph", "detail-0"} <= set(m["svgs"])
    for svg_id, box in m["svgs"].items():
        assert box["width"] > 100 and box["left"] >= 0 and box["right"] <= m["view_w"], (
            svg_id,
            box,
            m["view_w"],
        )
    assert m["page_h"] <= 3 * HEIGHT, (
        f"closed, the page is {m['page_h']} px: more than a few screens"
    )
