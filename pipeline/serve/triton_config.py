"""A Triton model configuration (config.pbtxt) derived from built engines, and the rules it
must keep with them.

Triton's TensorRT backend, as its sources and docs say (2026-11): with `max_batch_size > 0`
dim 0 of every input and output is the batch and `dims` leave it out; the backend takes, per
optimization profile, the smallest max dim 0 over the inputs, then the largest of those
over the profiles, and refuses a config that asks for more. An engine with any input
without a dynamic leading dim needs `max_batch_size: 0` and full dims (-1 where dynamic).
Profiles are chosen by index in `instance_group { profile: [...] }`; this config lists every
profile. `cc_model_filenames` maps "major.minor" compute capabilities to plan files in one
version folder, and a compute capability it does not list falls back to `model.plan` in
silence; the repository writes no `model.plan`, so such a GPU fails to load, loudly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from pipeline.core import hashing
from pipeline.core.errors import PipelineError
from pipeline.records.build_file import NetworkIO, TensorIO

# TensorRT's tensor types (backend.dtype_name) as Triton names them.
TRITON_TYPES = {
    "float": "TYPE_FP32",
    "half": "TYPE_FP16",
    "bf16": "TYPE_BF16",
    "int8": "TYPE_INT8",
    "uint8": "TYPE_UINT8",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "bool": "TYPE_BOOL",
}


class TritonTensor(TypedDict):
    """An input or output of a config: its dims leave the batch dim out where it batches."""

    name: str
    data_type: str  # Triton's: "TYPE_FP32", ...
    dims: list[int]


class InstanceGroup(TypedDict):
    """Where the model's instances run: one on each GPU, free to use every profile."""

    kind: str  # "KIND_GPU"
    count: int
    profile: list[str]  # the optimization profiles it may use, by index


class TritonConfig(TypedDict):
    """A model configuration (config()), shaped as protobuf's JSON form of Triton's
    ModelConfig: what text() writes and the schema check compares Triton's reading with."""

    name: str
    platform: str  # "tensorrt_plan"
    max_batch_size: int  # 0: the config does not batch
    input: list[TritonTensor]
    output: list[TritonTensor]
    instance_group: list[InstanceGroup]
    cc_model_filenames: dict[str, str]  # compute capability -> plan file
    dynamic_batching: NotRequired[dict[str, Any]]  # {}, Triton's defaults, where it batches
    model_warmup: NotRequired[list[dict[str, Any]]]  # warmup()'s, where a sample was given


@dataclass(frozen=True)
class Engine:
    """One built engine, as its build folder's manifest says."""

    folder: Path
    fingerprint_id: str
    compute_capability: str | None  # "8.9"; None where the build saw no GPU
    gpu: str | None  # the GPU's name, the kind a server runs
    flavour: str  # tensorrt or tensorrt_rtx
    io: NetworkIO  # the manifest's network_io
    profiles: list[dict[str, Any]]  # per profile, per input: min/opt/max
    sha256: str
    # what made the engine but the machine (the engine key's inputs less the fingerprint):
    # engines of several machines with one graph_key are one model's plans
    graph_key: str = ""
    trt_version: str = ""  # the full TensorRT version that built it (it loads only there)
    built_in: str | None = None  # the image it was built in: pinned (by reference), or declared

    @property
    def plan(self) -> Path:
        return self.folder / "engine.plan"


def engine_of(folder: Path) -> Engine:
    """The engine of one build folder (artifacts/build/<fingerprint>/), checked."""
    from pipeline.engine import manifest

    m = manifest.load(folder)
    fp, gpu = m["fingerprint"], m["fingerprint"].get("gpu") or {}
    return Engine(
        folder=folder,
        fingerprint_id=str(fp["id"]),
        compute_capability=gpu.get("compute_capability"),
        gpu=gpu.get("name"),
        flavour=str(fp.get("trt_flavour", "tensorrt")),
        io=m["network_io"],
        profiles=list(m["config"]["profiles"]),
        sha256=m["engine"]["sha256"],
        graph_key=hashing.sha256_json(
            {k: v for k, v in m["key_inputs"].items() if k != "fingerprint"}
        ),
        trt_version=str(fp.get("trt_version") or ""),
        built_in=_built_in(m.get("image") or {}, fp.get("container") or {}),
    )


def _built_in(image: dict[str, Any], container: dict[str, Any]) -> str | None:
    """The image a manifest says its engine was built in: the pinned reference, else the
    NGC release the build machine's environment declared."""
    if image.get("pinned"):
        return str(image["pinned"])
    if container.get("release"):
        digest = f"@{container['digest']}" if container.get("digest") else ""
        return f"NGC {container.get('product', 'tensorrt')} {container['release']}{digest}"
    return None


def max_batch_size(engine: Engine) -> int:
    """The backend's rule: 0 where some input or output has no dynamic leading dim, else
    the largest over profiles of the smallest profile max of dim 0 over the inputs."""
    tensors = [*engine.io["inputs"], *engine.io["outputs"]]
    if not tensors or any(not t["shape"] or t["shape"][0] != -1 for t in tensors):
        return 0
    per_profile = [
        min(int(shapes["max"][0]) for shapes in p["inputs"].values()) for p in engine.profiles
    ]
    return max(per_profile, default=0)


def _type(tensor: TensorIO) -> str:
    kind = TRITON_TYPES.get(tensor["dtype"])
    if kind is None:
        raise PipelineError(
            f"Triton has no type for {tensor['dtype']} tensor '{tensor['name']}' "
            f"(it takes {', '.join(sorted(TRITON_TYPES))})"
        )
    return kind


def _tensors(tensors: list[TensorIO], batch: int) -> list[TritonTensor]:
    return [
        {
            "name": t["name"],
            "data_type": _type(t),
            "dims": [int(d) for d in (t["shape"][1:] if batch else t["shape"])],
        }
        for t in tensors
    ]


# numpy's name for the array a Triton type reads, for warm-up data files.
NUMPY_TYPES = {
    "TYPE_FP32": "float32",
    "TYPE_FP16": "float16",
    "TYPE_INT8": "int8",
    "TYPE_UINT8": "uint8",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_BOOL": "bool",
}


def warmup(cfg: TritonConfig, sample: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """model_warmup from one reference sample (input name -> array, its batch axis first
    where the config batches), and the files it reads (warmup/<file> -> raw bytes)."""
    import numpy as np

    batch = cfg["max_batch_size"] > 0
    inputs, files = {}, {}
    for i, t in enumerate(cfg["input"]):
        if t["data_type"] not in NUMPY_TYPES:
            return {}, {}  # bf16 has no numpy type: no warm-up rather than a wrong one
        array = np.ascontiguousarray(sample[t["name"]], dtype=NUMPY_TYPES[t["data_type"]])
        array = array[:1] if batch else array
        inputs[t["name"]] = {
            "data_type": t["data_type"],
            "dims": [int(d) for d in (array.shape[1:] if batch else array.shape)],
            "input_data_file": f"input_{i}",
        }
        files[f"input_{i}"] = array.tobytes()
    return {"name": "reference sample", "batch_size": 1, "inputs": inputs}, files


def config(name: str, engine: Engine, plans: dict[str, str]) -> TritonConfig:
    """The model configuration for `engine`'s I/O and profiles, reading `plans` (compute
    capability -> plan file in the version folder), shaped as protobuf's JSON form of
    Triton's ModelConfig (what the schema check compares it with)."""
    batch = max_batch_size(engine)
    out: TritonConfig = {
        "name": name,
        "platform": "tensorrt_plan",
        "max_batch_size": batch,
        "input": _tensors(engine.io["inputs"], batch),
        "output": _tensors(engine.io["outputs"], batch),
        "instance_group": [
            {
                "kind": "KIND_GPU",
                "count": 1,
                "profile": [str(i) for i in range(len(engine.profiles))],
            }
        ],
        "cc_model_filenames": dict(sorted(plans.items())),
    }
    if batch:
        out["dynamic_batching"] = {}
    return out


def text(cfg: TritonConfig, note: str = "") -> str:
    """config.pbtxt: protobuf's text format of `cfg`, written here (the schema check parses
    it back where tritonclient is installed)."""
    lines = [f"# {line}" for line in note.splitlines()]
    lines += [
        f"name: {_quoted(cfg['name'])}",
        f"platform: {_quoted(cfg['platform'])}",
        f"max_batch_size: {cfg['max_batch_size']}",
    ]
    for section in ("input", "output"):
        for t in cfg[section]:
            lines.append(
                f"{section} {{\n  name: {_quoted(t['name'])}\n  data_type: {t['data_type']}\n"
                f"  dims: [ {', '.join(map(str, t['dims']))} ]\n}}"
            )
    for g in cfg["instance_group"]:
        profiles = ", ".join(_quoted(p) for p in g["profile"])
        lines.append(
            f"instance_group {{\n  kind: {g['kind']}\n  count: {g['count']}\n"
            f"  profile: [ {profiles} ]\n}}"
        )
    if "dynamic_batching" in cfg:
        lines.append("dynamic_batching { }")
    for cc, plan in cfg["cc_model_filenames"].items():
        lines.append(f"cc_model_filenames {{\n  key: {_quoted(cc)}\n  value: {_quoted(plan)}\n}}")
    for w in cfg.get("model_warmup", []):
        lines.append(_warmup_text(w))
    return "\n".join(lines) + "\n"


def _warmup_text(w: dict[str, Any]) -> str:
    inputs = "".join(
        f"  inputs {{\n    key: {_quoted(name)}\n    value {{\n"
        f"      data_type: {t['data_type']}\n      dims: [ {', '.join(map(str, t['dims']))} ]\n"
        f"      input_data_file: {_quoted(t['input_data_file'])}\n    }}\n  }}\n"
        for name, t in w["inputs"].items()
    )
    return f"model_warmup {{\n  name: {_quoted(w['name'])}\n  batch_size: {w['batch_size']}\n{inputs}}}"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
