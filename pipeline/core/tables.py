"""Tables for people: Markdown for reports, aligned text for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def markdown(headers: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def text(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[Any] | None = None,
    max_width: int | None = None,
) -> str:
    """Columns padded to their widest cell (cut at max_width); a rule under headers."""
    cells = [[str(c)[:max_width] if max_width else str(c) for c in r] for r in rows]
    head = [str(h) for h in headers] if headers is not None else None
    widths = [max(len(x) for x in col) for col in zip(*([head] if head else []), *cells)]

    def line(r: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()

    out = [line(head), line(["-" * w for w in widths])] if head else []
    return "\n".join(out + [line(r) for r in cells])
