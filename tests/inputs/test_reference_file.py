"""reference.npz, written and read in one place: a file of another kind or a truncated one is
one line naming it."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.inputs import reference_file


def test_pairs_round_trip_with_labels_beside_the_outputs(tmp_path):
    x, y = np.arange(6.0).reshape(3, 2), np.ones((3, 1))
    labels = np.array(["a", "b", "c"])
    path = reference_file.write(
        tmp_path / "r.npz", [({"x": x}, {"y": y, "label:text": labels})] * 2
    )
    pairs = reference_file.read(path)
    assert len(pairs) == 2 and np.array_equal(pairs[1][0]["x"], x)
    assert list(pairs[0][1]["label:text"]) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "arrays, needle",
    [
        ({"x": np.ones(2)}, "not a reference array"),
        ({"in::0::x": np.ones(2), "out::2::y": np.ones(2), "in::2::x": np.ones(2)}, "incomplete"),
        ({"in::0::x": np.ones(2)}, "incomplete"),
    ],
)
def test_a_file_of_another_kind_or_a_truncated_one_is_one_line(tmp_path, arrays, needle):
    path = fileio.write_npz(tmp_path / "r.npz", arrays)
    with pytest.raises(PipelineError, match=needle):
        reference_file.read(path)
