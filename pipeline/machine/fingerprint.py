"""What an engine is valid for: GPU model, compute capability, memory, driver,
CUDA runtime, TensorRT flavour and version, hardware-compatibility settings.

Kept light (no numpy, no TensorRT import) because the DVC `fingerprint` stage runs
on every `dvc repro`: it is the only way to notice that the machine changed."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import Mapping
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from pipeline.core import hashing, ngc
from pipeline.core.errors import PipelineError
from pipeline.core.numbers import MIB
from pipeline.machine.shared_runtime import cuda_runtime
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:  # not imported here: the schema needs OmegaConf, which this stage skips
    from pipeline.core.config import BuildConfig
    from pipeline.machine.build_settings import BuildSettings

NO_GPU_TARGET = "no GPU: portable ahead-of-time target"
# Distribution names that provide each module, newest naming first.
TRT_DISTS = {
    "tensorrt": ("tensorrt", "tensorrt-cu13", "tensorrt-cu12", "tensorrt-cu11", "tensorrt_libs"),
    "tensorrt_rtx": (
        "tensorrt-rtx-cu13",
        "tensorrt-rtx",
        "tensorrt_rtx_cu13_libs",
        "tensorrt-rtx-cu12",
    ),
}
IDENTITY_KEYS = (
    "gpu",
    "driver_version",
    "cuda_driver_version",
    "cuda_runtime_version",
    "trt_flavour",
    "trt_version",
    "trt_distribution",
    "hardware_compatibility",
    "version_compatible",
    "target",
)


def probe_gpu() -> tuple[dict[str, Any] | None, str]:
    """(gpu facts, reason) from NVML; (None, why) where there is no usable GPU.

    $TRT_PIPELINE_GPU_PROBE names a JSON file that stands in for NVML: it exists so
    tests can play another machine for the cache-key and DVC logic, and the
    fingerprint says so. It is never evidence that TensorRT works on that GPU."""
    override = os.environ.get("TRT_PIPELINE_GPU_PROBE")
    if override:
        return _probe_override(override)
    if importlib.util.find_spec("pynvml") is None:
        return None, "nvidia-ml-py is not installed"
    if not _nvml_loads():
        # What pynvml.nvmlInit() says here, without importing pynvml: its import was a
        # fifth of this always-run stage's time on a machine without an NVIDIA driver.
        return None, "NVML unavailable (NVML Shared Library Not Found)"
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return None, f"NVML unavailable ({e})"
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return None, "NVML reports no GPU"
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
        gpu = {
            "name": name.decode() if isinstance(name, bytes) else name,
            "compute_capability": f"{major}.{minor}",
            "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(h).total // MIB,
            "index": 0,
            "count": count,
        }
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda_driver = pynvml.nvmlSystemGetCudaDriverVersion()
        gpu["_driver"] = driver.decode() if isinstance(driver, bytes) else driver
        gpu["_cuda_driver"] = f"{cuda_driver // 1000}.{(cuda_driver % 1000) // 10}"
        return gpu, "NVML"
    finally:
        pynvml.nvmlShutdown()


def _nvml_loads() -> bool:
    """Whether the NVML library pynvml loads on Linux is there (elsewhere: let pynvml try)."""
    if not sys.platform.startswith("linux"):
        return True
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")  # the name pynvml loads; a GPU host keeps it mapped
    except OSError:
        return False
    return True


def _probe_override(path: str) -> tuple[dict[str, Any] | None, str]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PipelineError(f"TRT_PIPELINE_GPU_PROBE={path} is unreadable: {e}") from None
    if data is None:
        return None, f"override from TRT_PIPELINE_GPU_PROBE={path}: no GPU"
    need = {"name", "compute_capability", "memory_mib", "_driver", "_cuda_driver"}
    if not need <= set(data):
        raise PipelineError(
            f"TRT_PIPELINE_GPU_PROBE={path} lacks {', '.join(sorted(need - set(data)))}"
        )
    return {"index": 0, "count": 1, **data}, f"override from TRT_PIPELINE_GPU_PROBE={path}"


def package_version(dist: str) -> str | None:
    """An installed distribution's version from its metadata (no import), or None."""
    import importlib.metadata as md  # here: the build stage needs only identity() from this module

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


# The libraries whose versions decide a graph transform's result (part of its cache key).
TRANSFORM_LIBRARIES = ("nvidia-modelopt", "onnx", "onnxruntime")


def transform_library_versions() -> dict[str, str]:
    return {d: package_version(d) or "not installed" for d in TRANSFORM_LIBRARIES}


def trt_installed(module: str) -> tuple[str, str] | None:
    """(distribution, version) of an installed TensorRT flavour, without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    beside = _dist_infos_beside(spec)
    for dist in TRT_DISTS[module]:
        found = beside.get(_normalized(dist), [])
        # One wheel's folder beside the package: its name holds the version. Anything
        # else (none, or two left by an old install) is importlib.metadata's to settle;
        # importing that was a fifth of this always-run stage's time.
        version = found[0] if len(found) == 1 else package_version(dist)
        if version is not None:
            return dist, version
    return module, "unknown"


def _normalized(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


def _dist_infos_beside(spec: ModuleSpec) -> dict[str, list[str]]:
    """Normalized distribution name -> versions, from the `<name>-<version>.dist-info`
    folders in the folder that holds the module's package."""
    if not spec.submodule_search_locations:
        return {}
    try:
        names = os.listdir(os.path.dirname(next(iter(spec.submodule_search_locations))))
    except OSError:
        return {}
    out: dict[str, list[str]] = {}
    for name in names:
        if name.endswith(".dist-info") and "-" in name:
            dist, version = name[: -len(".dist-info")].rsplit("-", 1)
            out.setdefault(_normalized(dist), []).append(version)
    return out


def choose_flavour(requested: str, gpu: dict[str, Any] | None) -> tuple[str, str]:
    """(flavour, why). auto: full TensorRT where it imports and a GPU is present,
    TensorRT-RTX otherwise (it builds ahead of time without a GPU)."""
    have_trt, have_rtx = trt_installed("tensorrt"), trt_installed("tensorrt_rtx")
    if requested == "tensorrt":
        if not have_trt:
            raise PipelineError(
                "build.backend=tensorrt but the tensorrt package is not installed "
                "(pip install '.[tensorrt]' on a GPU host)"
            )
        return "tensorrt", "requested by build.backend"
    if requested == "tensorrt_rtx":
        if not have_rtx:
            raise PipelineError(
                "build.backend=tensorrt_rtx but tensorrt-rtx is not installed (pip install '.[rtx]')"
            )
        return "tensorrt_rtx", "requested by build.backend"
    if have_trt and gpu is not None:
        return "tensorrt", "auto: tensorrt imports and a GPU is present"
    if have_rtx:
        why = "no GPU" if gpu is None else "tensorrt is not installed"
        return "tensorrt_rtx", f"auto: {why}, TensorRT-RTX builds ahead of time"
    if have_trt:
        raise PipelineError(
            "only full TensorRT is installed and it needs a GPU to build; "
            "install TensorRT-RTX (pip install '.[rtx]') to build without one"
        )
    raise PipelineError(
        "no TensorRT is installed: pip install '.[rtx]' (any machine) or '.[tensorrt]' (GPU hosts)"
    )


def collect(build_cfg: BuildConfig | BuildSettings, require_trt: bool = True) -> FingerprintRecord:
    """The fingerprint; require_trt=False lets `python -m pipeline fingerprint`
    describe a GPU host where no TensorRT is installed yet. `build_cfg`: the validated
    config's build group, or the fingerprint stage's light reading of it (build_settings)."""
    gpu, gpu_source = probe_gpu()
    try:
        flavour, why = choose_flavour(build_cfg.backend, gpu)
        installed = trt_installed(flavour)
        assert installed is not None  # choose_flavour picks only an installed flavour
        dist, version = installed
    except PipelineError as e:
        if require_trt:
            raise
        flavour, why, dist, version = None, str(e), None, None
    runtime, runtime_source = cuda_runtime()
    fp: dict[str, Any] = {
        "gpu": None,
        "driver_version": None,
        "cuda_driver_version": None,
        "cuda_runtime_version": runtime,
        "cuda_runtime_source": runtime_source,
        "trt_flavour": flavour,
        "trt_version": version,
        "trt_distribution": dist,
        "trt_choice": why,
        "hardware_compatibility": build_cfg.hardware_compatibility,
        "version_compatible": bool(build_cfg.version_compatible),
        "target": None,
        "gpu_probe": gpu_source,
        "container": ngc.container(),
    }
    if gpu is None:
        fp["target"] = NO_GPU_TARGET
        if flavour == "tensorrt_rtx" and build_cfg.compute_capabilities:
            fp["target"] += " for " + ",".join(sorted(build_cfg.compute_capabilities))
    else:
        fp["driver_version"] = gpu.pop("_driver")
        fp["cuda_driver_version"] = gpu.pop("_cuda_driver")
        fp["gpu"] = gpu
        fp["target"] = f"{gpu['name']} (sm {gpu['compute_capability']})"
    return cast(FingerprintRecord, {**fp, "id": fingerprint_id(fp)})


class GpuIdentity(TypedDict):
    """The GPU of an identity: its model, not which one of how many."""

    name: str
    compute_capability: str  # "8.9"
    memory_mib: int


class FingerprintIdentity(TypedDict):
    """identity(): the fields of IDENTITY_KEYS, hashed into the fingerprint id and kept in
    the engine key's inputs. None where a fingerprint (an older manifest's) lacks one."""

    gpu: GpuIdentity | None
    driver_version: str | None
    cuda_driver_version: str | None
    cuda_runtime_version: str | None
    trt_flavour: str | None
    trt_version: str | None
    trt_distribution: str | None
    hardware_compatibility: str | None
    version_compatible: bool | None
    target: str | None


def identity(fp: Mapping[str, Any]) -> FingerprintIdentity:
    """The fields that decide which machines an engine is valid for. GPU count and
    index are left out: an engine built on GPU 0 of eight runs on any of them."""
    # IDENTITY_KEYS decides what the identity holds; the type only names it
    ident = cast(FingerprintIdentity, {k: fp.get(k) for k in IDENTITY_KEYS})
    if gpu := ident["gpu"]:
        ident["gpu"] = {
            "name": gpu["name"],
            "compute_capability": gpu["compute_capability"],
            "memory_mib": gpu["memory_mib"],
        }
    return ident


def fingerprint_id(fp: Mapping[str, Any]) -> str:
    """Readable folder name plus a hash of every identity field."""
    digest = hashing.sha256_json(identity(fp), hashing.SPACED)[:12]
    gpu = fp.get("gpu")
    head = (
        f"{gpu['name']}-sm{gpu['compute_capability']}-drv{fp['driver_version']}" if gpu else "nogpu"
    )
    flavour = {"tensorrt": "trt", "tensorrt_rtx": "rtx"}.get(fp["trt_flavour"], "notrt")
    slug = (
        re.sub(r"[^A-Za-z0-9.]+", "-", f"{head}-{flavour}{fp['trt_version'] or ''}")
        .strip("-")
        .lower()
    )
    return f"{slug}-{digest}"


def describe(fp: FingerprintRecord) -> str:
    lines = [f"fingerprint  {fp['id']}", f"target       {fp['target']}"]
    gpu = fp.get("gpu")
    if gpu:
        lines += [
            f"gpu          {gpu['name']} x{gpu['count']}, compute capability {gpu['compute_capability']}, "
            f"{gpu['memory_mib']} MiB",
            f"driver       {fp['driver_version']} (CUDA {fp['cuda_driver_version']})",
        ]
    else:
        lines.append(f"gpu          none ({fp['gpu_probe']})")
    trt = (
        f"{fp['trt_flavour']} {fp['trt_version']} ({fp['trt_distribution']}; {fp['trt_choice']})"
        if fp["trt_flavour"]
        else f"none usable: {fp['trt_choice']}"
    )
    lines += [
        f"cuda runtime {fp['cuda_runtime_version'] or 'unknown'} ({fp.get('cuda_runtime_source')})",
        f"tensorrt     {trt}",
        f"hw compat    {fp['hardware_compatibility']}, version compatible: {fp['version_compatible']}",
    ]
    return "\n".join(lines)
