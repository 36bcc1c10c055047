"""The Ray launcher through Hydra's own launcher test suite (LauncherTestSuite), as
Hydra's launcher plugins are tested: jobs, folders, return values, job names and ids,
resolvers and configs as every Hydra launcher must give them, each job a Ray task on a
local Ray started for the suite."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")
from hydra.test_utils.launcher_common_tests import (  # noqa: E402  (once ray is known to import)
    IntegrationTestSuite,
    LauncherTestSuite,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.mark.parametrize("launcher_name, overrides", [("trt_ray", [])])
class TestTrtRayLauncher(LauncherTestSuite):
    pass
