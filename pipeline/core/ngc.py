"""NGC container releases, and the images a project pins: the release that builds a plan is
the release that serves it.

A TensorRT plan loads only in the TensorRT that built it, and Triton's TensorRT backend
deserializes without checking: a plan from another version fails when the serving host
loads it. So a team pins one release from CI to the fleet, `nvcr.io/nvidia/tensorrt:<yy.mm>-py3`
to build and `nvcr.io/nvidia/tritonserver:<yy.mm>-py3` to serve; a tag does not name the
TensorRT inside (the `-trtllm-python-py3` variant of a tag carries another), so what an image
carries is read from the table that ships with the package (conf/ngc_releases.json, its
sources and date in it), from the user (pin.<role>.tensorrt, read inside the image), or
inside the image itself (its environment: NGC images name their release and versions).

Light: config validation and the fingerprint stage read it."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    from pipeline.core.config_pin import ImagePin, PinConfig

TABLE = Path(__file__).resolve().parents[1] / "conf" / "ngc_releases.json"
REPOSITORY = {"build": "nvcr.io/nvidia/tensorrt", "serve": "nvcr.io/nvidia/tritonserver"}
TABLE_IMAGE = {"build": "tensorrt", "serve": "tritonserver"}
RELEASE = re.compile(r"\d{2}\.\d{2}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# What an NGC image declares in its environment (the entrypoint's banner prints them).
ENV = {
    "release": ("NVIDIA_TENSORRT_VERSION", "NVIDIA_TRITON_SERVER_VERSION"),
    "tensorrt": ("TENSORRT_VERSION", "TRT_VERSION"),
    "cuda": ("CUDA_VERSION",),
    "driver": ("CUDA_DRIVER_VERSION",),
    "triton": ("TRITON_SERVER_VERSION",),
    "build_id": ("NVIDIA_BUILD_ID",),
}


class ReleaseTable(TypedDict):
    """conf/ngc_releases.json, or a team's own table of its shape: the rows, and for a
    person where they came from. Only the rows are checked (each has its release)."""

    releases: list[dict[str, Any]]  # one per release: its TensorRT, CUDA, driver, Triton
    about: NotRequired[str]
    checked: NotRequired[str]  # when the sources were read, "2026-11-27"
    sources: NotRequired[dict[str, str]]  # a row's source names, described


@cache
def releases(extra: str | None = None) -> dict[str, dict[str, Any]]:
    """The shipped table by release, with the rows of `extra` (a JSON file of the same
    shape, a team's own) over it."""
    rows = {r["release"]: r for r in _read(TABLE)["releases"]}
    if extra:
        for r in _read(Path(extra))["releases"]:
            if not isinstance(r, dict) or not RELEASE.fullmatch(str(r.get("release", ""))):
                raise PipelineError(f"{extra}: a row without a release like 26.07: {r!r}")
            rows[r["release"]] = r
    return dict(sorted(rows.items()))


def _read(path: Path) -> ReleaseTable:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PipelineError(f"NGC release table {path} cannot be read: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("releases"), list):
        raise PipelineError(f"NGC release table {path} has no 'releases' list")
    return cast(ReleaseTable, data)


@dataclass(frozen=True)
class Image:
    """One pinned image, resolved: its reference, and the TensorRT it carries (None where
    neither the table nor the user says)."""

    role: str  # "build" or "serve"
    reference: str  # repository:tag, with @digest where given
    release: str | None
    tensorrt: str | None
    triton: str | None
    digest: str | None

    def __str__(self) -> str:
        return self.reference


def resolve(role: str, ref: ImagePin | Mapping[str, Any], extra: str | None = None) -> Image | None:
    """`ref` (pin.build or pin.serve: release, tag, digest, tensorrt) as an Image, None
    where nothing is pinned; one line for a release the table does not hold, a malformed
    digest or a TensorRT the user states against the table's."""

    def field(name: str) -> Any:
        return ref.get(name) if isinstance(ref, Mapping) else getattr(ref, name, None)

    release, tag, digest, stated = (field(k) for k in ("release", "tag", "digest", "tensorrt"))
    if not release and not tag:
        return None
    where = f"pin.{role}"
    if digest and not DIGEST.fullmatch(str(digest)):
        raise PipelineError(f"{where}.digest={digest}: expected sha256: and 64 hex digits")
    row: dict[str, Any] = {}
    if release:
        if not RELEASE.fullmatch(str(release)):
            raise PipelineError(f"{where}.release={release}: expected an NGC release like 26.07")
        table = releases(extra)
        if str(release) not in table:
            known = ", ".join(table)
            raise PipelineError(
                f"{where}.release={release} is not in the NGC release table ({known}); add its "
                f"row (pin.releases_file, docs/pinned-images.md) or pin by tag and tensorrt"
            )
        row = table[str(release)]
    image = str(tag or f"{REPOSITORY[role]}:{release}-py3")
    table_trt = (row.get("tensorrt") or {}).get(TABLE_IMAGE[role]) if row else None
    if stated and table_trt and str(stated) != table_trt:
        raise PipelineError(
            f"{where}.tensorrt={stated}, but the NGC table says {image} carries TensorRT "
            f"{table_trt}; read it inside the image (echo $TENSORRT_VERSION)"
        )
    return Image(
        role,
        f"{image}@{digest}" if digest else image,
        str(release) if release else None,
        str(stated or table_trt) if (stated or table_trt) else None,
        row.get("triton") if row else None,
        str(digest) if digest else None,
    )


def pinned(pin: PinConfig, role: str) -> Image | None:
    """pin.build or pin.serve (`role`), resolved with pin.releases_file's rows."""
    return resolve(role, getattr(pin, role), pin.releases_file)


def machine_problem(pin: PinConfig, fp: Mapping[str, Any]) -> str | None:
    """Why this machine (its fingerprint `fp`) must not build for pin.build; None where it may."""
    return build_problem(pinned(pin, "build"), fp.get("trt_flavour"), fp.get("trt_version"))


def pair_problem(build: Image | None, serve: Image | None) -> str | None:
    """Why the pinned serving image cannot load the pinned build image's plans; None where
    it can (or where what either carries is not known: said where it matters)."""
    if build is None or serve is None or not build.tensorrt or not serve.tensorrt:
        return None
    if build.tensorrt != serve.tensorrt:
        return (
            f"the pinned images disagree: {build} builds plans with TensorRT {build.tensorrt}, "
            f"{serve} loads TensorRT {serve.tensorrt} plans only; pin one release for both"
        )
    return None


def build_problem(pinned: Image | None, flavour: str | None, version: str | None) -> str | None:
    """Why this machine (TensorRT `flavour` `version`) must not build for the pinned build
    image; None where it may (or nothing is pinned, or what the image carries is unknown)."""
    if pinned is None:
        return None
    carries = f"TensorRT {pinned.tensorrt}" if pinned.tensorrt else "full TensorRT"
    if flavour != "tensorrt":
        return (
            f"this machine builds with {flavour or 'no TensorRT'} {version or ''}, but pin.build "
            f"is {pinned} ({carries}): its plans would load nowhere the pin serves; build "
            f"inside the pinned image (trt-pipeline init --ci writes the job), or set pin=none"
        ).replace("  ", " ")
    if pinned.tensorrt and version != pinned.tensorrt:
        return (
            f"this machine runs TensorRT {version}, but pin.build is {pinned} ({carries}): "
            f"build inside the pinned image, or pin the release this machine carries"
        )
    return None


def container(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The NGC image this process runs in, as its environment declares it (release,
    TensorRT, CUDA, driver, build id, and the digest TRT_PIPELINE_IMAGE_DIGEST gives, as a
    CI job knows it); None outside one."""
    env = os.environ if environ is None else environ
    got = {k: next((env[n] for n in names if env.get(n)), "") for k, names in ENV.items()}
    if not got["release"] and not got["build_id"]:
        return None
    product = "tritonserver" if env.get("NVIDIA_TRITON_SERVER_VERSION") else "tensorrt"
    out = {"product": product, **{k: v for k, v in got.items() if v}}
    digest = env.get("TRT_PIPELINE_IMAGE_DIGEST", "")
    if DIGEST.fullmatch(digest):
        out["digest"] = digest
    return out
