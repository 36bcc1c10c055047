"""The accuracy figures a search measured, by graph and batches, kept across runs.

Figures are what a gate judges, never its verdict: one graph on the same batches gives the
same figures under any threshold or `precision.search_margin`. A search run again with
either changed reads what the last one measured and runs ONNX Runtime only for the graphs it
has not judged. The memo of one search (its Q/DQ graph, reference data, tasks, metric and
ONNX Runtime: the caller's key) is one calibration-cache entry, merged and replaced under
the key's lock when the search ends; a killed run or a read-only cache loses only what that
run measured."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeline.core import console, fileio, hashing
from pipeline.core.errors import PipelineError, first_line
from pipeline.store import VerifiedStore

# A graph's accuracy figures: output (or the user's metric) -> figure -> value.
Figures = dict[str, dict[str, Any]]
_ID = re.compile(r"^[0-9a-f]{32}$")


def memo_id(choice: Mapping[str, str] | Iterable[str], batches: Sequence[int]) -> str:
    """A graph (the nodes a search keeps, or a type per node) on these batches, in order."""
    items: list[Any] = sorted(choice.items()) if isinstance(choice, Mapping) else sorted(choice)
    return hashing.sha256_json({"choice": items, "batches": list(batches)})[:32]


class FiguresMemo:
    """Figures by memo_id: those an earlier search stored under `key`, and this run's."""

    FILE = "figures.json"  # the entry's one file

    def __init__(
        self,
        store: VerifiedStore | None = None,
        key: str | None = None,
        labels: Mapping[str, Any] | None = None,
    ) -> None:
        """`labels`: what `cache ls` shows of the entry (its kind among them)."""
        self.store, self.key, self.labels = store, key, dict(labels or {})
        self.known = self._stored()
        self.new: dict[str, Figures] = {}
        self.reused = 0  # figures an earlier search measured

    def get(self, ident: str) -> Figures | None:
        if ident in self.new:
            return self.new[ident]
        if ident in self.known:
            self.reused += 1
            return self.known[ident]
        return None

    def put(self, ident: str, figures: Figures) -> None:
        self.new[ident] = figures

    def _stored(self) -> dict[str, Figures]:
        if self.store is None or self.key is None:
            return {}
        entry = self.store.get(self.key)
        if entry is None:
            return {}
        try:
            data = json.loads(entry.file(self.FILE).read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if _ID.match(str(k)) and isinstance(v, dict)}

    def save(self) -> None:
        """This run's figures merged into the stored entry; a cache that cannot be written
        keeps what it had (a note says so)."""
        if not self.new or self.store is None or self.key is None:
            return
        try:
            with self.store.lock(self.key):
                merged = {**self._stored(), **self.new}
                if self.store.entry_unverified(self.key)[0] is not None:
                    self.store.remove(self.key)
                body = fileio.to_json(merged, compact=True).encode()
                self.store.put(self.key, {self.FILE: body}, self.labels)
        except (PipelineError, OSError) as e:
            console.note(f"the search's figures are not kept for its next run: {first_line(e)}")
            return
        self.known, self.new = merged, {}
