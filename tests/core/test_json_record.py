"""The stage records' one writer and one checked reader each (calibration.json,
report.json, summary.json): a record lacking a field is not written, and a file of
another version, a hand edit or a truncated write is one line naming file and field."""

# No `from __future__ import annotations`: the probe TypedDicts' Required[] must be
# evaluated at class creation, as in the record modules themselves.
import json
from typing import Any, NotRequired, Required, TypedDict

import pytest

from pipeline.core.errors import PipelineError
from pipeline.core.json_record import JsonRecord, required_fields
from pipeline.records import summary_file


class Inner(TypedDict):
    name: str


class Probe(TypedDict, total=False):
    n: Required[int]
    inner: Required[Inner]
    extra: list[int]


RECORD = JsonRecord("probe record", "the probe stage", Probe)


class Wide(TypedDict):
    """Every kind of field a record declares."""

    ratio: float  # JSON writes 2.0 as 2
    maybe: str | None
    anything: Any  # no check
    later: NotRequired[int]


def test_the_checked_fields_are_the_typeddicts_required_ones():
    assert RECORD.required == {"n": int, "inner.name": str}
    assert required_fields(Wide) == {"ratio": (int, float), "maybe": (str, type(None))}


def test_a_record_round_trips_and_reaches_into_nested_fields(tmp_path):
    path = RECORD.write(tmp_path / "r.json", {"n": 3, "inner": {"name": "x"}, "extra": [1]})
    assert RECORD.read(path) == {"n": 3, "inner": {"name": "x"}, "extra": [1]}


@pytest.mark.parametrize(
    "data, field",
    [
        ({"inner": {"name": "x"}}, "n"),
        ({"n": True, "inner": {"name": "x"}}, "n"),  # a bool is no count
        ({"n": 1, "inner": {}}, "inner.name"),
        ({"n": 1, "inner": "x"}, "inner.name"),
    ],
)
def test_a_record_lacking_a_field_is_refused_both_ways(tmp_path, data, field):
    with pytest.raises(ValueError, match=field):
        RECORD.write(tmp_path / "r.json", data)
    assert not (tmp_path / "r.json").exists()
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(PipelineError) as e:
        RECORD.read(tmp_path / "r.json")
    assert str(e.value) == (
        f"{tmp_path / 'r.json'} has no valid '{field}' (made by another version, or edited); "
        f"rerun the probe stage"
    )


@pytest.mark.parametrize("text", ['{"n": 1, "inn', "[1, 2]", ""])
def test_a_truncated_or_foreign_file_is_one_line(tmp_path, text):
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(PipelineError, match=r"r\.json"):
        RECORD.read(tmp_path / "r.json")


def test_a_summary_with_a_word_for_a_number_is_refused(tmp_path):
    good = {"engine_mib": 1.5, "accuracy_gate_pass": 1, "build_gates_pass": 1}
    summary_file.write(tmp_path, {**good, "onnxruntime_median_ms": 0.3})
    with pytest.raises(ValueError, match="worst_cosine"):
        summary_file.write(tmp_path, {**good, "worst_cosine": float("nan")})
    (tmp_path / "summary.json").write_text(json.dumps({**good, "build_s": "fast"}))
    with pytest.raises(PipelineError, match="'build_s' that is not a number"):
        summary_file.read(tmp_path)
