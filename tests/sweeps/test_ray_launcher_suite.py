"""The Ray launcher through Hydra's own launcher test suite (LauncherTestSuite), as
Hydra's launcher plugins are tested: jobs, folders, return values, job names and ids,
resolvers and configs as every Hydra launcher must give them, each job a Ray task on a
local Ray started for the suite."""

from __future__ import annotations

import pytest
from hydra.test_utils.launcher_common_tests import LauncherTestSuite

pytest.importorskip("ray")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """A local Ray, and Hydra's global state as a fresh process has it: the suite expects
    Hydra's unset version base (jobs change directory), which an earlier test's compose
    sets to this tool's."""
    import ray
    from hydra.core.singleton import Singleton
    from hydra.version import VersionBase

    state = Singleton.get_state()
    Singleton._instances.pop(VersionBase, None)
    # "local": a Ray of this module's own. Left to Ray's choice (None) it joins any cluster
    # running on this machine, such as test_ray_launcher.py's on the other xdist worker.
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()
    Singleton.set_state(state)


@pytest.mark.parametrize("launcher_name, overrides", [("trt_ray", [])])
class TestTrtRayLauncher(LauncherTestSuite):
    pass
