"""The pipeline's stages, in order, and the config each one reads: written once here.

dvc.yaml and the dvc.yaml `trt-pipeline init` writes name the same params per stage
(tests/test_dvc_deps.py checks both against PARAMS); provenance records, for each output
another stage consumes, the sections it and the stages before it read (made_from)."""

from __future__ import annotations

STAGES = ("fingerprint", "export", "calibrate", "build", "inspect", "benchmark", "package")

# What a sweep job runs (pipeline/sweeps/job.py): a job's folder is one point of a sweep,
# not a served model, and its saved outputs leave the engine to the engine store; the
# package stage (or `trt-pipeline package`, --from-store for a fleet's) serves engines.
JOB_STAGES = STAGES[:-1]

# What the calibrate stage reads of `build` to measure engines as the build stage makes them.
ENGINE_PARAMS = (
    "build.workspace_mib",
    "build.optimization_level",
    "build.hardware_compatibility",
    "build.version_compatible",
    "build.compute_capabilities",
    "build.extra_flags",
    "build.strip_weights",
    "build.plugins",
    "build.store_dir",
    "build.reference_engines",
    # a machine whose TensorRT is not the pinned build image's measures nothing
    "pin.build",
    "pin.releases_file",
)

# dvc.yaml's `params` of each stage: what its output depends on in params.yaml.
PARAMS: dict[str, tuple[str, ...]] = {
    "fingerprint": (
        "build.backend",
        "build.hardware_compatibility",
        "build.version_compatible",
        "build.compute_capabilities",
    ),
    # the profile's opt shapes are the sample inputs' (pipeline/inputs/samples.py)
    "export": ("model", "profile"),
    # and what an engine's bytes depend on (engine/cache_key.py's build fields, plugins) and
    # where the store is: it measures the fp16 and fp32 engines of its graph (flow/
    # engine_sizes.py), and precision=auto builds what it weighs
    "calibrate": (
        "precision",
        "calibration",
        "model",
        "profile",
        *ENGINE_PARAMS,
    ),
    # pin.build: a machine whose TensorRT is not the pinned image's builds nothing
    "build": ("precision", "profile", "build", "pin.build", "pin.releases_file"),
    "inspect": ("inspect",),
    "benchmark": ("benchmark", "model", "precision.name"),
    # the repository's model is named after the model; the rest is the engines' own, and
    # the pinned serving image and the fleet (its deployment files)
    "package": ("model.name", "pin"),
}

# A project of several models (core/models.py) runs each stage but the fingerprint once per
# model, then `index`, one page and table across them. A model's own groups are these; its
# stages track them under models.<model> (model_params).
INDEX = "index"
PER_MODEL = ("model", "precision", "profile", "calibration")


def model_params(stage: str) -> tuple[str, ...]:
    """dvc.yaml's params of `stage` for one model of several (`${key}`: the model): its own
    groups under models.${key}, the shared ones as they are. The package stage names the
    Triton model after the key, so of its params it reads the shared pin only."""
    if stage == "package":
        return ("pin",)
    own = [p.split(".")[0] in PER_MODEL for p in PARAMS[stage]]
    return tuple(f"models.${{key}}.{p}" if o else p for p, o in zip(PARAMS[stage], own))


# The stage whose output each one reads as its input graph, for made_from.json.
UPSTREAM = {"calibrate": "export"}


def made_from(stage: str) -> tuple[str, ...]:
    """The config sections an output of `stage` is made from: its own params and those of
    the stages it reads (calibrate's graph is made from the export's too). The engine sizes
    calibrate records carry the build settings they were measured under themselves, so a
    build with other settings says so instead of refusing the graph."""
    before = made_from(UPSTREAM[stage]) if stage in UPSTREAM else ()
    own = [p for p in PARAMS[stage] if p not in ENGINE_PARAMS]
    return tuple(dict.fromkeys((*before, *own)))
