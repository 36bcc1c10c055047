"""One JSON file a stage writes and later stages (or other tools) read: its required
top-level fields and their types, one writer that refuses a record lacking them (a bug of
this tool, so it keeps its traceback) and one checked reader that turns a file of another
version, a hand edit or a truncated write into one line naming the file, the field and the
stage to rerun, instead of a KeyError three modules later. Polygraphy's RunResults
round-trip (comparator/struct.py) is the model; a field check suffices here because every
consumer reads these files as plain JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core import fileio
from pipeline.core.errors import PipelineError

Kind = type | tuple[type, ...]


@dataclass(frozen=True)
class JsonRecord:
    what: str  # how errors name it: "calibration summary"
    rerun: str  # what makes it again: "the calibrate stage"
    required: Mapping[str, Kind]  # dotted keys reach into nested objects

    def lacking(self, data: Any) -> list[str]:
        if not isinstance(data, dict):
            return list(self.required)
        return [key for key, kind in self.required.items() if not _fits(_at(data, key), kind)]

    def write(self, path: Path, data: Mapping[str, Any]) -> Path:
        if missing := self.lacking(dict(data)):
            raise ValueError(f"{self.what} lacks or mistypes {', '.join(missing)}")
        return fileio.write_json(path, data)

    def check(self, data: Any, where: str | Path) -> dict[str, Any]:
        """`data` as read from `where` (a path, or an experiment's name for DVC's API)."""
        if not isinstance(data, dict):
            raise PipelineError(f"{where} is not a {self.what}; rerun {self.rerun}")
        if missing := self.lacking(data):
            raise PipelineError(
                f"{where} has no valid '{missing[0]}' (made by another version, or edited); "
                f"rerun {self.rerun}"
            )
        return data

    def read(self, path: Path) -> dict[str, Any]:
        return self.check(fileio.read_json(path, self.what), path)


def _at(data: dict[str, Any], key: str) -> Any:
    """The value at a dotted key ("engine.bytes"), None where any step is missing."""
    value: Any = data
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _fits(value: Any, kind: Kind) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int to isinstance: a number field must not take True
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
