"""A repository's conf/ adds options to the package's groups (pkg://pipeline.conf on its
search path): the override check sees both, as Hydra's compose does."""

from __future__ import annotations

from pipeline.cli import overrides
from tests.conftest import REPO


def test_package_and_repository_options_of_one_group_both_pass_the_check():
    for option in ("directory", "cnn_samples"):  # the package's, this repository's
        raw = overrides.check([f"calibration={option}"], REPO / "conf")
        assert raw.calibration.name == option
