"""The always-run stage's cheap lookups give what the slower ones they stand in for give."""

import importlib.util
from types import SimpleNamespace

from pipeline.machine import fingerprint


def test_the_trt_version_beside_the_package_is_importlib_metadata_s():
    dist, version = fingerprint.trt_installed("tensorrt_rtx")
    assert version == fingerprint.package_version(dist) and version != "unknown"


def test_dist_info_folders_beside_a_package(tmp_path):
    (tmp_path / "pkg").mkdir()
    for name in ("tensorrt_rtx_cu13-1.7.1.116.dist-info", "Other.Name-2.0+local.dist-info"):
        (tmp_path / name).mkdir()
    (tmp_path / "tensorrt_rtx_cu13-1.6.0.dist-info").mkdir()  # an old install left behind
    spec = SimpleNamespace(submodule_search_locations=[str(tmp_path / "pkg")])
    found = fingerprint._dist_infos_beside(spec)
    assert sorted(found["tensorrt_rtx_cu13"]) == ["1.6.0", "1.7.1.116"]
    assert found[fingerprint._normalized("other-name")] == ["2.0+local"]


def test_without_an_nvml_library_the_probe_says_what_pynvml_says():
    if fingerprint._nvml_loads() or importlib.util.find_spec("pynvml") is None:
        return  # a GPU host, or no nvidia-ml-py: nothing to compare
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        assert fingerprint.probe_gpu() == (None, f"NVML unavailable ({e})")
