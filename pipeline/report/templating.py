"""The one Jinja2 environment the report pages and pictures render through: templates
ship as package data (pipeline/report/templates), autoescape is always on, and an
unknown name in a template is an error rather than an empty string."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2

from pipeline.analysis.engine_layers import PRECISION_COLOURS
from pipeline.core.numbers import MIB, fmt


def colour(precision: str | None) -> str:
    return PRECISION_COLOURS.get(precision or "unknown", PRECISION_COLOURS["unknown"])


def text_colour(fill: str) -> str:
    """Dark text on light fills, white on dark ones (perceived luminance)."""
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#111" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


def mib(n: object) -> str:
    return f"{n / MIB:,.2f} MiB" if isinstance(n, (int, float)) else "–"


def ranked(counts: dict[str, int]) -> list[tuple[str, int]]:
    """Largest count first, ties by name: JSON round trips sort keys, so rank again."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def first(names: list[str], n: int) -> str:
    """The first n names, and how many more there are."""
    return ", ".join(names[:n]) + (f" … +{len(names) - n}" if len(names) > n else "")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pipeline.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(colour=colour, text_colour=text_colour, mib=mib, first=first, fmt=fmt)
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
