"""The NGC release table and the pinned images: what each release's images carry, the pair a
project pins, and the image a process runs in."""

from __future__ import annotations

import json
import re

import pytest

from pipeline.core import ngc
from pipeline.core.errors import PipelineError

DIGEST = "sha256:" + "ab" * 32


def test_each_release_s_tensorrt_and_triton_images_carry_one_tensorrt():
    """The -py3 TensorRT and Triton images of a release carry the same TensorRT; where the
    table knows both, they agree (the -trtllm-python-py3 variant is a row field of its own)."""
    for release, row in ngc.releases().items():
        trt = row["tensorrt"]
        if trt["tensorrt"] and trt["tritonserver"]:
            assert trt["tensorrt"] == trt["tritonserver"], release


def test_triton_versions_follow_the_release_calendar():
    """Triton 2.N ships in release 25.11 + (N - 63) months from 2.60 on, 24.01 + (N - 42)
    before (the table's own rule, checked on every row)."""
    for release, row in ngc.releases().items():
        n = int(row["triton"].split(".")[1])
        year, month = (int(x) for x in release.split("."))
        months = (year - 25) * 12 + month - 11 if n >= 60 else (year - 24) * 12 + month - 1
        assert months == (n - 63 if n >= 60 else n - 42), release


def test_every_row_names_known_sources_and_well_formed_fields():
    data = json.loads(ngc.TABLE.read_text())
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", data["checked"])
    for row in data["releases"]:
        assert set(row["source"]) <= set(data["sources"]), row["release"]
        for v in (*row["tensorrt"].values(), row["trtllm_tensorrt"]):
            assert v is None or re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", v)
        cc = row["min_compute_capability"]
        assert cc is None or re.fullmatch(r"\d+\.\d", cc)


def test_a_release_resolves_to_its_images_and_their_tensorrt():
    build = ngc.resolve("build", {"release": "26.07", "digest": DIGEST})
    serve = ngc.resolve("serve", {"release": "26.07"})
    assert build is not None and serve is not None
    assert str(build) == f"nvcr.io/nvidia/tensorrt:26.07-py3@{DIGEST}"
    assert str(serve) == "nvcr.io/nvidia/tritonserver:26.07-py3"
    assert build.tensorrt == serve.tensorrt == "11.1.0.106" and serve.triton == "2.71.0"
    assert ngc.pair_problem(build, serve) is None
    assert ngc.resolve("build", {}) is None


def test_a_pair_of_two_tensorrts_is_refused_in_one_line():
    build = ngc.resolve("build", {"release": "25.01"})
    serve = ngc.resolve("serve", {"release": "26.07"})
    line = ngc.pair_problem(build, serve)
    assert line is not None and "TensorRT 10.8.0.43" in line and "TensorRT 11.1.0.106" in line
    assert "\n" not in line


@pytest.mark.parametrize(
    "role,ref,says",
    [
        ("build", {"release": "19.01"}, "not in the NGC release table"),
        ("build", {"release": "26.7"}, "expected an NGC release like 26.07"),
        ("serve", {"release": "26.07", "digest": "sha256:xyz"}, "expected sha256:"),
        ("build", {"release": "26.07", "tensorrt": "10.14.1.48"}, "the NGC table says"),
    ],
)
def test_bad_pins_are_one_line(role, ref, says):
    with pytest.raises(PipelineError, match=says):
        ngc.resolve(role, ref)


def test_a_release_the_table_does_not_know_the_tensorrt_of_takes_the_users(tmp_path):
    extra = tmp_path / "rows.json"
    row = {"release": "26.09", "triton": "2.73.0", "tensorrt": {"tensorrt": "11.2.0.1"}}
    extra.write_text(json.dumps({"releases": [row]}))
    got = ngc.resolve("build", {"release": "26.09"}, str(extra))
    assert got is not None and got.tensorrt == "11.2.0.1"
    tagged = ngc.resolve("serve", {"tag": "registry.local/triton:prod", "tensorrt": "11.2.0.1"})
    assert tagged is not None and tagged.tensorrt == "11.2.0.1" and tagged.release is None


def test_the_container_is_read_from_the_environment_an_ngc_image_sets():
    env = {
        "NVIDIA_TENSORRT_VERSION": "26.07",
        "TENSORRT_VERSION": "11.1.0.106",
        "CUDA_VERSION": "13.1.0.036",
        "NVIDIA_BUILD_ID": "171234567",
        "TRT_PIPELINE_IMAGE_DIGEST": DIGEST,
    }
    got = ngc.container(env)
    assert got == {
        "product": "tensorrt",
        "release": "26.07",
        "tensorrt": "11.1.0.106",
        "cuda": "13.1.0.036",
        "build_id": "171234567",
        "digest": DIGEST,
    }
    assert ngc.container({"PATH": "/usr/bin", "CUDA_VERSION": "13.0"}) is None
