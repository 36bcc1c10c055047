"""Torch factory or ONNX file -> checked model.onnx plus reference
inputs/outputs computed with ONNX Runtime on the CPU (the fp32 ground truth)."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core import fileio, hashing
from pipeline.core.errors import PipelineError, first_line
from pipeline.core.layout import REFERENCE
from pipeline.graph import (
    constant_inputs,
    onnx_import,
    onnx_model,
    tied_weights,
    weight_counts,
)
from pipeline.graph.onnx_runtime import run_batches
from pipeline.inputs import (
    decoder_runs,
    factory,
    input_roles,
    reference_file,
    sample_data,
    samples,
    sizes,
)
from pipeline.inputs.array_folder import LABEL_PREFIX
from pipeline.records import export_file
from pipeline.records.export_file import ExportRecord

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.core.config import ModelConfig, ProfileConfig

Arrays = dict[str, np.ndarray]  # arrays by input (or output) name


def export_torch(model_cfg: ModelConfig, dims: dict[str, int], dest: Path) -> None:
    """Trace the factory's module on one example batch at `dims` (named dim sizes)."""
    import torch

    assert model_cfg.factory, "only a factory is exported by torch"
    module = sample_data.load_factory(model_cfg.factory)
    net = module.build(int(model_cfg.seed))
    rng = np.random.default_rng(model_cfg.seed)
    example = module.sample_inputs(dims, rng)
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


def infer_shapes(path: Path) -> Any:  # the onnx ModelProto
    """Store inferred intermediate shapes in the artifact. The graph only: weights in
    external data stay where they are. Not strict: ops of custom domains (TensorRT
    plugins) have no ONNX shape function and are left as they are."""
    import onnx

    model = onnx_model.load(path, check=False, weights=False)
    # Inline weights past the inline limit (a torch export below 2 GB may hold them) go to a
    # data file first, which empties them in memory: inference would copy them twice over.
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


def export_model(model_cfg: ModelConfig, profile_cfg: ProfileConfig, out_dir: Path) -> ExportRecord:
    """Write out_dir/model.onnx, reference.npz and export.json; return the summary.
    Sample inputs take the first optimization profile's opt shapes (pipeline/inputs/samples.py)."""
    with fileio.staged_dir(out_dir) as tmp, tempfile.TemporaryDirectory() as work:
        onnx_path = tmp / "model.onnx"
        source, given, changes = _graph(model_cfg, profile_cfg, onnx_path)
        changes += _tied_stored_once(onnx_path)
        frozen = _frozen(model_cfg, onnx_path)
        if frozen:
            if given == onnx_path:  # the fp32 truth is the graph before folding
                given = Path(shutil.copy(onnx_path, Path(work) / "unfrozen.onnx"))
            changes += constant_inputs.freeze(onnx_path, frozen)
        model = infer_shapes(onnx_path)
        specs = onnx_model.inputs(model)
        if not specs:
            raise PipelineError("the ONNX model has no runtime inputs")
        sample_data.check_input_ranges(model_cfg, specs)
        layout = samples.layout(model_cfg, profile_cfg, specs)
        if model_cfg.prompts:  # a decoder's every step; the fp32 truth below runs them again
            batches, reference = decoder_runs.reference(
                model_cfg, profile_cfg.decoder, onnx_path, specs, layout.batch
            )
            labels = _pop_labels(batches)
        else:
            batches, labels, reference = _reference_batches(model_cfg, model, specs, layout)
        outputs = _fp32_truth(given if changes else onnx_path, onnx_path, batches, frozen)
        if outputs.note:
            reference["truth"] = outputs.note
        _write_reference(tmp / REFERENCE, batches, outputs.batches, labels)
        summary: ExportRecord = {
            "source": source,
            "opset": onnx_model.opset(model),
            "inputs": [{"name": s.name, "dtype": s.dtype, "dims": list(s.dims)} for s in specs],
            "outputs": [
                {"name": s.name, "dtype": s.dtype, "dims": list(s.dims)}
                for s in onnx_model.outputs(model)
            ],
            "parameters": onnx_model.parameter_count(model),
            "weights": weight_counts.counts(model),
            "nodes": len(model.graph.node),
            "reference_batches": len(batches),
            "samples": {"shapes": layout.shapes, "axes": layout.axes},
            "reference": reference,
            "normalized": changes,
            "onnx_sha256": onnx_model.sha256(onnx_path),
        }
        export_file.write(tmp, summary)
    return summary


def _graph(
    model_cfg: ModelConfig, profile_cfg: ProfileConfig, onnx_path: Path
) -> tuple[str, Path, list[str]]:
    """Write the graph to onnx_path: (where it came from, the graph the fp32 truth comes
    from, what normalising the user's file changed)."""
    if model_cfg.factory:
        # The example torch traces with is one batch at the profile's opt dims.
        dims = samples.factory_dims(model_cfg, profile_cfg)
        sizes.check_factory_example(model_cfg, dims)
        export_torch(model_cfg, dims, onnx_path)
        onnx_import.check(onnx_path)
        return f"factory:{model_cfg.factory}", onnx_path, []
    # The user's file was checked by path (errors name it) before normalising.
    assert model_cfg.onnx_path is not None, "config_rules: no factory, so an ONNX file"
    given = Path(model_cfg.onnx_path)
    changes = onnx_import.import_onnx(given, onnx_path)
    return f"onnx:{given.name}", given, changes


def _tied_stored_once(onnx_path: Path) -> list[str]:
    """A weight the exporter wrote twice (a tied LM head beside its token table) stored
    once (graph/tied_weights.py); a line for each."""
    model = onnx_model.load(onnx_path, check=False, weights=False)
    ties = tied_weights.store_once(model, onnx_path.parent)
    if ties:
        onnx_model.save(model, onnx_path)
    return [f"tied weights stored once: {t.line()}" for t in ties]


def _reference_batches(
    model_cfg: ModelConfig,
    model: ModelProto,
    specs: list[onnx_model.TensorSpec],
    layout: samples.SampleLayout,
) -> tuple[list[Arrays], list[Arrays], dict[str, Any]]:
    """(input batches, their labels, where they came from), every size checked first."""
    if not model_cfg.reference_data:  # a folder is checked by its files' sizes
        n = int(model_cfg.num_reference_batches)
        sizes.check_sample_batches(
            model_cfg,
            specs,
            onnx_model.outputs(model),
            layout.shapes,
            n,
            f"{n} reference batches with their outputs",
            f"model.num_reference_batches={n}",
        )
    batches, reference = sample_data.reference_inputs(model_cfg, specs, layout)
    labels = _pop_labels(batches)
    if reference["random"]:
        input_roles.check_random_inputs(model.graph, specs, model_cfg)
    if not batches:  # here, not when calibrate finds an empty reference.npz
        raise PipelineError(sample_data.no_batches(model_cfg, reference))
    missing = sorted({s.name for s in specs} - set(batches[0]))
    if missing:
        raise PipelineError(f"sample inputs lack model input '{missing[0]}'")
    return batches, labels, reference


def _pop_labels(batches: list[Arrays]) -> list[Arrays]:
    """Each batch's labels (`label:<name>`), taken out of its inputs."""
    return [{k: b.pop(k) for k in [k for k in b if k.startswith(LABEL_PREFIX)]} for b in batches]


def _write_reference(
    path: Path,
    batches: list[dict[str, np.ndarray]],
    outputs: list[dict[str, np.ndarray]],
    labels: list[dict[str, np.ndarray]],
) -> None:
    """Each batch's inputs and fp32 outputs, its labels beside the outputs (filtered with
    them when calibration data overlaps: calibration_data.held_out)."""
    pairs = [
        (feeds, {**outs, **labels[b]}) for b, (feeds, outs) in enumerate(zip(batches, outputs))
    ]
    reference_file.write(path, pairs)


@dataclass
class Truth:
    batches: list[Arrays]
    note: str = ""


def _fp32_truth(
    given: Path, normalized: Path, batches: list[Arrays], frozen: dict[str, np.ndarray]
) -> Truth:
    """The fp32 ground truth: the model as the user gave it (fed the frozen inputs' values),
    not the normalised graph; that one only where ONNX Runtime cannot run the file as given
    (jax2tf's annotations of different sizes under one name), and said so."""
    if given == normalized:
        return Truth(run_batches(normalized, batches))
    try:
        return Truth(run_batches(given, batches, frozen or None))
    except PipelineError as e:
        try:
            outputs = run_batches(normalized, batches)
        except PipelineError:
            raise e from None
        return Truth(
            outputs,
            f"ONNX Runtime cannot run the file as given ({e}); the reference outputs come "
            f"from the normalised graph (export.json's `normalized` says what changed)",
        )


def _frozen(model_cfg: ModelConfig, onnx_path: Path) -> dict[str, np.ndarray]:
    """model.constant_inputs as arrays of their inputs' types (empty when none is set)."""
    if not model_cfg.constant_inputs:
        return {}
    specs = onnx_model.inputs(onnx_model.load(onnx_path, check=False, weights=False))
    return constant_inputs.values(dict(model_cfg.constant_inputs), specs)


def source_sha256(model_cfg: ModelConfig) -> str:
    """The bytes the export read, hashed: the factory's module file, or the ONNX file
    with every external-data file it names. Each must lie under model.source, the
    path dvc.yaml tracks for the model, or DVC would not notice it change."""
    if model_cfg.factory:
        files = [factory.source_file(model_cfg.factory)]
        digest = hashing.sha256_file(files[0])
    else:
        assert model_cfg.onnx_path is not None, "config_rules: no factory, so an ONNX file"
        path = Path(model_cfg.onnx_path)
        if path.is_dir():
            raise PipelineError(f"model.onnx_path={path} is a folder; give the .onnx file")
        if not path.is_file():
            raise PipelineError(f"model.onnx_path={path} not found")
        files, digest = onnx_model.files_and_sha256(path)
    for f in files:
        if not sample_data.tracked_by(f, model_cfg.source):
            raise PipelineError(
                f"{f} is not under model.source={model_cfg.source}, so DVC would not see it "
                f"change; set model.source to the folder holding the model and its data"
            )
    return digest
