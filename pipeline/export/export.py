"""ExportFromModel: torch factory or ONNX file -> checked model.onnx plus reference
inputs/outputs computed with ONNX Runtime on the CPU (the fp32 ground truth)."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError, first_line
from pipeline.export import factory, onnx_import, onnx_model, sizes
from pipeline.export.onnx_runtime import run_batches

REFERENCE_SEED_OFFSET = 1_000


def load_factory(name: str) -> ModuleType:
    # A module, or `module:object` (pipeline/export/factory.py); typed as the module it
    # usually is.
    module: ModuleType = factory.resolve(name)
    missing = [a for a in ("build", "INPUT_NAMES", "OUTPUT_NAMES") if not hasattr(module, a)]
    if missing:
        raise PipelineError(f"model factory '{name}' lacks {', '.join(missing)}")
    return module


def sample_inputs(
    model_cfg: Any,
    specs: list[onnx_model.TensorSpec],
    dims: dict[str, int],
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Inputs for the model at the given symbolic dims: the factory's own sampler
    where there is one (realistic masks, token ranges), else by dtype."""
    if model_cfg.factory:
        module = load_factory(model_cfg.factory)
        if hasattr(module, "sample_inputs"):
            return module.sample_inputs(dict(dims), rng)
    out = {}
    for spec in specs:
        low, high = input_range(model_cfg, spec.name)
        shape = []
        for axis, d in enumerate(spec.dims):
            if isinstance(d, int):
                shape.append(d)
            elif isinstance(d, str) and d in dims:
                shape.append(int(dims[d]))
            else:
                raise PipelineError(
                    f"input '{spec.name}' axis {axis} ('{d}') has no size: "
                    f"set model.sample_dims.{d or '<name>'}"
                )
        out[spec.name] = random_array(
            spec.dtype, shape, rng, low, high, model_cfg.int_low, model_cfg.int_high
        )
    return out


def input_range(model_cfg: Any, name: str) -> tuple[float | None, float | None]:
    """[low, high) for a random input: model.input_ranges, else 0/1 for a mask, else
    int_low/int_high for integers and a standard normal (None, None) for floats."""
    ranges = dict(getattr(model_cfg, "input_ranges", None) or {})
    if name in ranges:
        return tuple(ranges[name])
    if "mask" in name.lower():
        return 0, 2
    return None, None


def check_input_ranges(model_cfg: Any, specs: list[onnx_model.TensorSpec]) -> None:
    names = [s.name for s in specs]
    for name in getattr(model_cfg, "input_ranges", None) or {}:
        if name not in names:
            raise PipelineError(
                f"invalid config: model.input_ranges names '{name}', which is not an input of the "
                f"model (its inputs: {', '.join(names)})"
            )


def random_array(
    dtype: str,
    shape: list[int],
    rng: np.random.Generator,
    low: float | None,
    high: float | None,
    int_low: int = 0,
    int_high: int = 100,
) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        if low is None or high is None:
            lo, hi = int_low, int_high
        else:
            lo, hi = int(np.ceil(low)), int(np.ceil(high))
        return rng.integers(lo, hi, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if low is None or high is None:
        return rng.standard_normal(shape).astype(dt)
    return rng.uniform(low, high, size=shape).astype(dt)


def export_torch(model_cfg: Any, dest: Path) -> None:
    import torch

    module = load_factory(model_cfg.factory)
    net = module.build(int(model_cfg.seed))
    rng = np.random.default_rng(model_cfg.seed)
    example = module.sample_inputs(dict(model_cfg.sample_dims), rng)
    args = tuple(torch.from_numpy(example[n]) for n in module.INPUT_NAMES)
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter is deprecated but gives stable, named dynamic axes.
        warnings.simplefilter("ignore")
        try:
            # To the path: past 2 GB torch writes the weights as external data beside it.
            torch.onnx.export(
                net,
                args,
                str(dest),
                input_names=module.INPUT_NAMES,
                output_names=module.OUTPUT_NAMES,
                dynamic_axes=getattr(module, "DYNAMIC_AXES", None),
                opset_version=int(model_cfg.opset),
                do_constant_folding=True,
                dynamo=False,
            )
        except Exception as e:
            raise PipelineError(
                f"torch could not export '{model_cfg.factory}' at opset "
                f"{model_cfg.opset}: {first_line(e)}"
            ) from None


def infer_shapes(path: Path) -> Any:
    """Store inferred intermediate shapes in the artifact. The graph only: weights in
    external data stay where they are. Not strict: ops of custom domains (TensorRT
    plugins) have no ONNX shape function and are left as they are."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise PipelineError(f"ONNX model {path.name} is unreadable: {first_line(e)}") from None
    # Inline weights past 1 GiB (a torch export below 2 GB) go to a data file first, which
    # empties them in memory: inference would otherwise copy them twice over.
    if onnx_model.weight_bytes(model) >= onnx_model.inline_limit():
        onnx_model.save(model, path)
    try:
        inferred = onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=False, data_prop=True
        )
    except Exception as e:
        raise PipelineError(f"ONNX shape inference fails on {path.name}: {first_line(e)}") from None
    fileio.write_bytes(path, inferred.SerializeToString())
    return inferred


def reference_key(kind: str, batch: int, name: str) -> str:
    return f"{kind}::{batch}::{name}"


def split_reference(arrays: dict[str, np.ndarray]) -> list[tuple[dict, dict]]:
    """reference.npz -> [(inputs, outputs)] per batch."""
    batches: dict[int, tuple[dict, dict]] = {}
    for key, value in arrays.items():
        kind, idx, name = key.split("::", 2)
        pair = batches.setdefault(int(idx), ({}, {}))
        pair[0 if kind == "in" else 1][name] = value
    return [batches[i] for i in sorted(batches)]


def reference_inputs(model_cfg: Any, specs: list[onnx_model.TensorSpec]) -> tuple[list[dict], dict]:
    """The inputs the gate and the benchmark judge by, and where they came from:
    model.reference_data (the user's arrays), the factory's sampler, or random."""
    if model_cfg.reference_data:
        from pipeline.export.array_folder import data_sha256, read_folder

        if not tracked_by(model_cfg.reference_data, model_cfg.reference_source):
            raise PipelineError(
                f"model.reference_data={model_cfg.reference_data} is not under model.reference_source="
                f"{model_cfg.reference_source}, so DVC would not see it change; leave "
                f"model.reference_source unset or point it at a folder holding the data"
            )

        first = specs[0].dims[0] if specs[0].dims else None
        bs = first if isinstance(first, int) else int(model_cfg.sample_dims.get(first, 8))
        batches = read_folder(
            model_cfg.reference_data, specs, "reference data", "model.reference_data", 0, bs
        )
        return batches, {
            "source": "folder",
            "random": False,
            "path": str(model_cfg.reference_data),
            "samples": sum(len(next(iter(b.values()))) for b in batches),
            "sha256": data_sha256(batches),
        }
    rng = np.random.default_rng(int(model_cfg.seed) + REFERENCE_SEED_OFFSET)
    batches = [
        sample_inputs(model_cfg, specs, model_cfg.sample_dims, rng)
        for _ in range(int(model_cfg.num_reference_batches))
    ]
    if model_cfg.factory and hasattr(load_factory(model_cfg.factory), "sample_inputs"):
        return batches, {
            "source": "factory",
            "random": False,
            "sampler": f"{model_cfg.factory}.sample_inputs",
        }
    return batches, {
        "source": "random",
        "random": True,
        "note": "RANDOM reference inputs (no model.reference_data): the accuracy gate and the benchmark "
        "say little about real inputs; set model.reference_data to a folder of real ones",
        "ranges": {s.name: _drawn_from(model_cfg, s) for s in specs},
    }


def _drawn_from(model_cfg: Any, spec: onnx_model.TensorSpec) -> Any:
    low, high = input_range(model_cfg, spec.name)
    kind = np.dtype(spec.dtype).kind
    if kind == "b":
        return [0, 2]
    if low is None:
        return (
            [int(model_cfg.int_low), int(model_cfg.int_high)] if kind in "iu" else "standard normal"
        )
    return [low, high]


def reference_info(export_dir: Path) -> dict:
    """Where the export's reference inputs came from (its export.json)."""
    path = Path(export_dir) / "export.json"
    if not path.exists():
        return {"source": "unknown", "random": None}
    return fileio.read_json(path, "export summary").get(
        "reference", {"source": "unknown", "random": None}
    )


def export_model(model_cfg: Any, out_dir: Path) -> dict:
    """Write out_dir/model.onnx, reference.npz and export.json; return the summary."""
    with fileio.staged_dir(out_dir) as tmp:
        onnx_path = tmp / "model.onnx"
        changes: list[str] = []
        if model_cfg.factory:
            # The example torch traces with is one batch at model.sample_dims.
            sizes.check_sample_batches(model_cfg, [], [], 1, "the export's example", "")
            export_torch(model_cfg, onnx_path)
            onnx_import.check(onnx_path)
            source = f"factory:{model_cfg.factory}"
            reference_model = onnx_path
        else:
            # The user's file was checked by path (errors name it) before normalising.
            reference_model = Path(model_cfg.onnx_path)
            changes = onnx_import.import_onnx(reference_model, onnx_path)
            source = f"onnx:{reference_model.name}"
        model = infer_shapes(onnx_path)
        specs = onnx_model.inputs(model)
        if not specs:
            raise PipelineError("the ONNX model has no runtime inputs")
        check_input_ranges(model_cfg, specs)
        if not model_cfg.reference_data:  # a folder is checked by its files' sizes
            n = int(model_cfg.num_reference_batches)
            sizes.check_sample_batches(
                model_cfg,
                specs,
                onnx_model.outputs(model),
                n,
                f"{n} reference batches with their outputs",
                f"model.num_reference_batches={n}",
            )
        batches, reference = reference_inputs(model_cfg, specs)
        if not batches:  # here, not when calibrate finds an empty reference.npz
            raise PipelineError(_no_batches(model_cfg, reference))
        missing = sorted({s.name for s in specs} - set(batches[0])) if batches else []
        if missing:
            raise PipelineError(f"sample inputs lack model input '{missing[0]}'")
        arrays: dict[str, np.ndarray] = {}
        # The fp32 ground truth is the model as the user gave it, not the normalised graph.
        outputs = run_batches(reference_model if changes else onnx_path, batches)
        for b, (feeds, outs) in enumerate(zip(batches, outputs)):
            arrays.update({reference_key("in", b, k): v for k, v in feeds.items()})
            arrays.update({reference_key("out", b, k): v for k, v in outs.items()})
        fileio.write_npz(tmp / "reference.npz", arrays)
        summary = {
            "source": source,
            "opset": onnx_model.opset(model),
            "inputs": [{"name": s.name, "dtype": s.dtype, "dims": list(s.dims)} for s in specs],
            "outputs": [
                {"name": s.name, "dtype": s.dtype, "dims": list(s.dims)}
                for s in onnx_model.outputs(model)
            ],
            "parameters": onnx_model.parameter_count(model),
            "nodes": len(model.graph.node),
            "reference_batches": len(batches),
            "reference": reference,
            "normalized": changes,
            "onnx_sha256": onnx_model.sha256(onnx_path),
        }
        fileio.write_json(tmp / "export.json", summary)
    return summary


def _no_batches(model_cfg: Any, reference: dict) -> str:
    need = "the accuracy gate and the benchmark need at least one"
    if reference.get("source") == "folder":
        return (
            f"model.reference_data={model_cfg.reference_data} gives no reference batches "
            f"({reference.get('samples', 0)} samples): {need}; put arrays keyed by input name in it"
        )
    return (
        f"model.num_reference_batches={model_cfg.num_reference_batches} gives no reference "
        f"batches: {need}; set it to 1 or more"
    )


def tracked_by(path: str | Path, dep: str | Path) -> bool:
    """Whether `path` is the DVC dependency `dep` or lies inside it (links resolved)."""
    path, dep = Path(path).resolve(), Path(dep).resolve()
    return path == dep or dep in path.parents


def source_sha256(model_cfg: Any) -> str:
    """The bytes the export read, hashed: the factory's module file, or the ONNX file
    with every external-data file it names. Each must lie under model.source, the
    path dvc.yaml tracks for the model, or DVC would not notice it change."""
    if model_cfg.factory:
        files = [factory.source_file(model_cfg.factory)]
        digest = hashing.sha256_file(files[0])
    else:
        path = Path(model_cfg.onnx_path)
        if path.is_dir():
            raise PipelineError(f"model.onnx_path={path} is a folder; give the .onnx file")
        if not path.is_file():
            raise PipelineError(f"model.onnx_path={path} not found")
        files, digest = onnx_model.files_and_sha256(path)
    for f in files:
        if not tracked_by(f, model_cfg.source):
            raise PipelineError(
                f"{f} is not under model.source={model_cfg.source}, so DVC would not see it "
                f"change; set model.source to the folder holding the model and its data"
            )
    return digest
