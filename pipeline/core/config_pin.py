"""The pin group's schema: the container images that build and serve a project's plans, and
the fleet's GPU kinds (docs/pinned-images.md). Apart from core/config.py so that core/ngc.py,
which resolves these pins and is read by config validation, imports no config module."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ImagePin:
    """One container image (pipeline/core/ngc.py): by NGC release, or by tag; with the
    digest a fleet pulls it by."""

    release: str | None = None  # an NGC release, e.g. "26.07": the image and its TensorRT
    tag: str | None = None  # or the image by name, e.g. registry.example.com/triton:prod
    digest: str | None = None  # sha256:... (docker inspect --format '{{.RepoDigests}}')
    tensorrt: str | None = None  # the TensorRT inside, where the release table does not say


@dataclass
class GpuKind:
    """A GPU kind of the fleet: where its CI job runs and its servers are scheduled."""

    # the node label nvidia.com/gpu.product (GPU feature discovery), e.g. NVIDIA-L4
    product: str = ""
    # the CI runner labels a job for this kind runs on
    runner: list[str] = field(default_factory=lambda: ["self-hosted", "gpu"])


@dataclass
class PinConfig:
    """The release that builds a plan is the release that serves it (docs/pinned-images.md)."""

    name: str = "none"  # the conf/pin option
    build: ImagePin = field(default_factory=ImagePin)  # builds engines: nvcr.io/nvidia/tensorrt
    serve: ImagePin = field(default_factory=ImagePin)  # serves them: nvcr.io/nvidia/tritonserver
    releases_file: str | None = None  # NGC release rows of your own, over the shipped table
    # GPU kinds by name, named as the package names them (the GPU's name in lower case with
    # dashes, e.g. nvidia-l4): a CI job each, a Deployment each
    fleet: dict[str, GpuKind] = field(default_factory=dict)
