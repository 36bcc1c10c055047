"""One JSON file a stage writes and later stages (or other tools) read: its required
top-level fields and their types, one writer that refuses a record lacking them (a bug of
this tool, so it keeps its traceback) and one checked reader that turns a file of another
version, a hand edit or a truncated write into one line naming the file, the field and the
stage to rerun, instead of a KeyError three modules later. Polygraphy's RunResults
round-trip (comparator/struct.py) is the model; a field check suffices here because every
consumer reads these files as plain JSON.

The schema is a TypedDict, written once: its Required keys (with their types, and those of a
nested TypedDict as dotted keys) are what the reader checks, and what it returns is typed
as that TypedDict, so a consumer reading a field the record does not have is a mypy error."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar, cast, is_typeddict

from pipeline.core import fileio
from pipeline.core.errors import PipelineError

Kind = type | tuple[type, ...]
T = TypeVar("T")


@dataclass(frozen=True)
class JsonRecord(Generic[T]):
    what: str  # how errors name it: "calibration summary"
    rerun: str  # what makes it again: "the calibrate stage"
    schema: type[T]  # a TypedDict

    @cached_property
    def required(self) -> dict[str, Kind]:
        """Each required field and its JSON type; dotted keys reach into nested objects."""
        return required_fields(self.schema)

    def lacking(self, data: Any) -> list[str]:
        if not isinstance(data, dict):
            return list(self.required)
        return [key for key, kind in self.required.items() if not _fits(_at(data, key), kind)]

    def write(self, path: Path, data: T) -> Path:
        if missing := self.lacking(data):
            raise ValueError(f"{self.what} lacks or mistypes {', '.join(missing)}")
        return fileio.write_json(path, data)

    def check(self, data: Any, where: str | Path) -> T:
        """`data` as read from `where` (a path, or an experiment's name for DVC's API)."""
        if not isinstance(data, dict):
            raise PipelineError(f"{where} is not a {self.what}; rerun {self.rerun}")
        if missing := self.lacking(data):
            raise PipelineError(
                f"{where} has no valid '{missing[0]}' (made by another version, or edited); "
                f"rerun {self.rerun}"
            )
        return cast(T, data)

    def read(self, path: Path) -> T:
        return self.check(fileio.read_json(path, self.what), path)


def required_fields(schema: Any, prefix: str = "") -> dict[str, Kind]:
    """A TypedDict's required keys and the JSON types they take; a nested TypedDict's own
    required keys follow as dotted keys (which a value that is no object lacks)."""
    hints = typing.get_type_hints(schema)
    out: dict[str, Kind] = {}
    for key, hint in hints.items():  # declared order: the first missing one is named
        if key not in schema.__required_keys__:
            continue
        inner = required_fields(hint, f"{prefix}{key}.") if is_typeddict(hint) else {}
        if inner:  # a nested object is checked through its own fields
            out.update(inner)
        elif (kind := _json_kind(hint)) is not None:
            out[prefix + key] = kind
    return out


def _json_kind(hint: Any) -> Kind | None:
    """The Python types JSON gives a field annotated `hint`; None: any value will do."""
    if hint is Any:
        return None
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        flat: list[type] = []
        for h in typing.get_args(hint):
            if (k := _json_kind(h)) is None:
                return None
            flat.extend(k if isinstance(k, tuple) else (k,))
        return tuple(dict.fromkeys(flat))
    if hint is type(None):
        return type(None)
    if is_typeddict(hint):
        return dict
    origin = typing.get_origin(hint) or hint
    if origin is float:  # JSON writes 2.0 as 2
        return (int, float)
    return cast(type, origin)


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
