"""A bar over the graphs a search judges (the fallback search, precision=auto's): how many
so far, of about how many, and the cheapest that passed."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from pipeline.core import console

Choice = TypeVar("Choice")


class Progress(Generic[Choice]):
    """A bar over the graphs a search judges: how many so far (of about `total`), and the
    cheapest that passed, as `describe` says it (a search runs for minutes on a real
    model; without this it printed nothing)."""

    def __init__(
        self,
        desc: str,
        total: int | None,
        cost: Callable[[Choice], float],
        describe: Callable[[float], str],
    ) -> None:
        self.bar = console.bar(total=total, desc=desc, unit="graph")
        self.cost, self.describe = cost, describe
        self.best: float | None = None

    def judged(self, choice: Choice, result: Mapping[str, Any]) -> None:
        self.bar.update(1)
        if result["passed"] and (self.best is None or self.cost(choice) < self.best):
            self.best = self.cost(choice)
            self.bar.set_postfix_str(f"best passing so far: {self.describe(self.best)}")

    def close(self) -> None:
        self.bar.close()


def most_graphs(units: int, candidates: int) -> int:
    """The graphs a fallback search judges at most: every candidate kept, each group and each
    node alone, a bisection over each."""
    return (
        1
        + units
        + math.ceil(math.log2(units + 1))
        + candidates
        + math.ceil(math.log2(candidates + 1))
    )
