"""Structured config: the schema behind the YAML in conf/ and params.yaml.

DVC composes conf/ into params.yaml without importing this package, so the YAML
files are complete on their own; these dataclasses are the types and the rules,
applied by `validate` before any work starts, so a typo costs a second, not a build.
The value rules (allowed names, ranges, combinations) are in config_rules.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline.core import model_folder, models, shape_forms
from pipeline.core.choices import (
    Activations,
    Backend,
    BenchBackend,
    CalibrationMethod,
    CalibrationSource,
    Device,
    Fallback,
    HardwareCompatibility,
    Int4Method,
    LowPrecision,
    Objective,
    Precision,
    ProfilePoint,
    QdqPlacement,
    QuantizeMode,
    ReferenceEngines,
    SearchType,
    Smoothing,
    Streaming,
    Task,
    TimingCacheMode,
    Transform,
    Typing,
)
from pipeline.core.config_pin import PinConfig
from pipeline.core.config_rules import check_values
from pipeline.core.errors import PipelineError, first_line


@dataclass
class ModelConfig:
    name: str = "cnn"  # a label for the model in tables, reports and `cache ls`
    # Exactly one of: a factory (a module, or `module:attribute`, exposing build(),
    # INPUT_NAMES and OUTPUT_NAMES; bundled ones in pipeline/zoo), or an ONNX file.
    factory: str | None = "pipeline.zoo.cnn_classifier"
    onnx_path: str | None = None  # an existing ONNX file (model=onnx_file); null for a factory
    # A decoder's folder as optimum or ONNX Runtime GenAI write one (model=hf_decoder): its
    # ONNX file, tokenizer.json and lengths fill onnx_path, tokenizer and profile.decoder
    # where they are not given (pipeline/core/model_folder.py).
    folder: str | None = None
    # The path dvc.yaml tracks for the model (a templated dependency): the factory's folder for a
    # factory; for a file, the .onnx itself, or the folder holding it and its external data.
    source: str = "pipeline/zoo"
    opset: int = 17  # ONNX opset of the torch export (7 to 23); older model files are upgraded
    seed: int = 0  # seeds the factory's weights and the random reference inputs
    # What every output is, so the accuracy gate judges it by what matters for it
    # (pipeline/precision/gate/tasks.py); auto: class scores for [N, C] outputs, dense otherwise.
    task: Task = Task.auto
    # Per output, a task other than `task` (e.g. {boxes: detection, scores: classification}).
    output_tasks: dict[str, Task] = field(default_factory=dict)
    # Sizes by ONNX dim name for the sample inputs (reference, random calibration, the
    # torch export's example). Unset dims take the first profile's opt shape, so a model
    # says each dynamic input's shapes once (profile.shapes). Any dim name: the mapping is
    # open in Hydra and a given mapping replaces this default instead of merging into it.
    sample_dims: dict[str, int] = field(default_factory=dict)
    # Per input, the axis that counts samples where it is not 0: recurrent state
    # [layers, batch, hidden] has {h: 1}; null for an input shared by the whole batch. Unset
    # inputs follow the batch dim's name, else their first dynamic axis; rank 0 has none.
    sample_axis: dict[str, int | None] = field(default_factory=dict)
    # Inputs frozen to a value and folded into the graph at export (e.g. {sr: 16000}): the
    # `If` branches a deployment never takes go, and the input is no longer fed.
    constant_inputs: dict[str, Any] = field(default_factory=dict)
    num_reference_batches: int = 4  # reference batches made when reference_data is null
    # Integer inputs (token ids) are drawn from [low, high) unless the factory says otherwise.
    int_low: int = 0
    int_high: int = 100  # exclusive upper bound of random integer inputs (see int_low)
    # Per input, [low, high) for random inputs (integers drawn in it, floats uniform);
    # an input named like a mask (*mask*) defaults to 0/1.
    input_ranges: dict[str, list[Any]] = field(default_factory=dict)
    # A folder of .npz/.npy arrays keyed by input name (the calibration folder format):
    # the reference inputs of the accuracy gate and the benchmark, every sample of it in
    # batches of sample_dims' batch (num_reference_batches is then unused). null: the
    # factory's sampler, or random inputs for a model file (and every output says so).
    reference_data: str | None = None
    # The path dvc.yaml tracks for reference_data: reference_data itself unless set (conf/model).
    reference_source: str = "data/reference"
    # A decoder with a KV cache (docs/decoders.md): prompts under reference_source, each
    # run through the fp32 graph as a prefill and decode_steps greedy steps, every step a
    # reference batch, so both profiles are judged. A file or folder of .txt (one prompt
    # per line, read with `tokenizer`) or token ids (.npy [prompts, tokens], .npz input_ids).
    prompts: str | None = None
    tokenizer: str | None = None  # a Hugging Face tokenizer.json, or a folder holding one
    decode_steps: int = 8  # greedy steps after each prefill (model.prompts, calibration)


@dataclass
class AccuracyGate:
    max_abs_error: float | None = None  # largest absolute difference of any output element
    max_mean_rel_error: float | None = None  # mean relative error over all output elements
    min_cosine: float | None = None  # cosine similarity (task embedding: per row, the worst row)
    min_top1_agreement: float | None = None  # share of rows with the same argmax (classification)
    # a decoder's perplexity over its prompts (model.prompts): at most this share above fp32's
    max_perplexity_increase: float | None = None
    # worst sample's ||candidate - reference|| / ||reference|| (regression, detection, dense, sequence)
    max_rel_error: float | None = None
    # A task metric of your own, `module:function` (fp32 outputs, candidate outputs, labels)
    # -> float, judged by metric_max (an error, e.g. CER) or metric_min (a score, e.g. mAP).
    metric: str | None = None
    metric_max: float | None = None  # the metric must not exceed this (an error rate)
    metric_min: float | None = None  # the metric must reach this (a score)


@dataclass
class PrecisionConfig:
    name: Precision = Precision.fp32  # the conf/precision option
    transform: Transform = Transform.none  # the graph transform before the build
    mode: Typing = Typing.strong  # who picks layer precisions: the graph, or TensorRT 10's flags
    tf32: bool = False  # set the builder's TF32 flag (precision=tf32)
    low_precision_type: LowPrecision | None = None  # autocast: the type it casts to
    quantize_mode: QuantizeMode | None = None  # qdq: int8 or fp8; int4 for the int4 transform
    # int4: ModelOpt's weight method (AWQ with clip search, or round to nearest)
    int4_method: Int4Method | None = None
    block_size: int = 128  # int4: weights quantized in blocks this long along the reduction axis
    # int4: the activations' type, fp32 or fp16 (AutoCast after the weights are int4)
    activations: Activations = Activations.fp32
    # int4: embedding tables (a Gather of a constant) in int4 blocks too
    int4_embeddings: bool = False
    # AutoCast (fp16/bf16): op types kept in fp32.
    keep_fp32_op_types: list[str] = field(default_factory=list)
    # AutoCast: node-name regexes kept in fp32.
    keep_fp32_nodes: list[str] = field(default_factory=list)
    # AutoCast: a node whose activations (data_max) or initializers (init_max) exceed
    # this magnitude on the reference batch stays in fp32.
    data_max: float = 512.0
    init_max: float = 65504.0  # AutoCast: see data_max; 65504 is fp16's largest value
    keep_io_types: bool = True  # AutoCast: the graph's inputs and outputs keep their fp32 type
    # int8/fp8/int4: a graph that misses the gate keeps its most sensitive quantized nodes
    # out of the low type, the fewest that pass (pipeline/precision/fallback/search.py); auto: in
    # fp16 where the gate holds (the most sensitive in fp32), fp32: all in fp32.
    fallback: Fallback = Fallback.none
    # int8/fp8: which readers of a quantized tensor read the quantized value
    # (pipeline/precision/qdq/plan.py): MatMul/Gemm/Conv inputs only, or as ModelOpt placed them.
    qdq_placement: QdqPlacement = QdqPlacement.gemm_inputs
    # int8/fp8: migrate activation outliers into the weights before quantizing
    # (pipeline/precision/qdq/smoothing.py); auto: where the graph allows.
    smoothing: Smoothing = Smoothing.none
    smoothing_alpha: float = 0.5  # SmoothQuant's migration strength, 0 to 1
    # auto: the types a GEMM may take besides fp32 (int4 weight-only, int8, fp8, fp16).
    search_types: list[SearchType] = field(default_factory=list)
    # auto: what the search makes smallest. engine_bytes: the plan as TensorRT writes it on
    # this machine (builds measure it; fp16 where no mix beats fp16's engine), weight_bytes:
    # the GEMM weights by type (no build).
    objective: Objective = Objective.engine_bytes
    # Of the reference samples that are not calibration samples, the share a search never
    # judges: the final gate's verdict on the written graph (pipeline/precision/gate/
    # verdict.py). Quantized modes only; 0 re-reads the search's samples, and says so.
    holdout: float = 0.25
    # A search judges by a gate tightened by this share of each threshold's distance to
    # perfect, so that what passes its samples holds on the held-out ones.
    search_margin: float = 0.2
    # Accuracy thresholds against the fp32 reference; null switches a metric off.
    gate: AccuracyGate = field(default_factory=AccuracyGate)


@dataclass
class ShapeRange:
    min: list[int] = field(default_factory=list)  # the smallest shape the engine accepts
    opt: list[int] = field(default_factory=list)  # the shape TensorRT tunes kernels for
    max: list[int] = field(default_factory=list)  # the largest shape the engine accepts


@dataclass
class ProfileSpec:
    name: str = "default"  # the profile's name in reports and benchmark.profile
    # Symbolic dim name -> [min, opt, max]; applies to every input that uses the dim.
    dims: dict[str, list[int]] = field(default_factory=dict)
    # Per input, explicit shapes; these win over dims.
    shapes: dict[str, ShapeRange] = field(default_factory=dict)


@dataclass
class DecoderProfile:
    """A decoder with a KV cache: its prefill and decode profiles from three numbers
    (pipeline/inputs/decoder_profiles.py); 0 (the default) leaves the profiles as given."""

    max_batch: int = 0  # sequences per run
    max_input_len: int = 0  # the longest prompt, in tokens (prefill's seq)
    max_seq_len: int = 0  # prompt and generated tokens together (the KV cache's length)
    # One profile for both phases (`generate`: 1..max_input_len tokens over a past of
    # 0..max_seq_len-1) instead of two: TensorRT compiles code per layer per profile, about
    # 1 MB a decoder layer, which on a small decoder is a tenth of its engine
    # (docs/decoders.md); kernels are then chosen for both phases at once.
    one_profile: bool = False


@dataclass
class ProfileConfig:
    name: str = "dynamic"  # the conf/profile option
    # Per input, its shapes in every profile (a profile's own `shapes` win): the one
    # statement a dynamic input needs, whatever its dims are called. Written as
    # {x: [1x3x320x320, 1x3x640x640, 4x3x1280x1280]}, {x: 1x3x640x640} (fixed), a
    # {min, opt, max} mapping, or trtexec's string x:1x3x640x640 (pipeline/core/shape_forms.py).
    shapes: dict[str, ShapeRange] = field(default_factory=dict)
    # Optimization profiles, all in one engine; the first is the default one.
    profiles: list[ProfileSpec] = field(default_factory=lambda: [ProfileSpec()])
    # A decoder: profiles `prefill` and `decode` from three numbers, in place of `profiles`
    # (profile.shapes still wins for the inputs it names).
    decoder: DecoderProfile = field(default_factory=DecoderProfile)


@dataclass
class CalibrationConfig:
    """Data and settings for int8/fp8 calibration (pipeline/inputs/calibration_data.py, qdq/quantize.py)."""

    name: str = "none"  # the conf/calibration option
    # where the data comes from (random only when named)
    source: CalibrationSource = CalibrationSource.none
    # directory: a folder of .npz/.npy keyed by input name, or one .npz. dvc.yaml tracks this
    # path for every source (the others leave it at the shipped data/calibration; it is not read).
    path: str | None = "data/calibration"
    factory: str | None = (
        None  # factory: a module with calibration_batches(); null means model.factory
    )
    num_samples: int = 0  # 0 with a directory means every sample in it
    batch_size: int = 1  # samples per calibration batch
    seed: int = 0  # seeds random calibration data and sample selection
    method: CalibrationMethod = CalibrationMethod.entropy  # minmax is max
    exclude_nodes: list[str] = field(default_factory=list)  # regexes over node names (re.match)
    exclude_op_types: list[str] = field(default_factory=list)  # op types left unquantized
    # int8/fp8 and int4_rtn read one weight at a time and calibrate in one ONNX Runtime
    # session, without ModelOpt's copies of the model (pipeline/precision/common/streamed.py).
    streaming: Streaming = Streaming.auto
    # Calibration result cache; null means $TRT_PIPELINE_CALIB_CACHE or ~/.cache/trt-pipeline/calibration.
    cache_dir: str | None = None


@dataclass
class GatesConfig:
    """Quality gates checked at the end of a build; null switches a gate off."""

    max_warnings: int | None = None  # most warnings the build log may hold
    forbid_patterns: list[str] = field(default_factory=list)  # regexes over the build log
    min_fusion_ratio: float | None = None  # least ONNX compute nodes per engine layer
    max_engine_mib: float | None = None  # largest engine file
    max_peak_memory_mib: float | None = None  # largest peak device memory the build log reports


@dataclass
class BuildConfig:
    # auto: full TensorRT where it imports and a GPU is present, else TensorRT-RTX.
    backend: Backend = Backend.auto
    workspace_mib: int = 1024  # the builder's workspace memory pool limit
    optimization_level: int = 3  # TensorRT's builder optimization level, 0 to 5
    # Which GPUs the engine may run on (TensorRT's hardware compatibility level).
    hardware_compatibility: HardwareCompatibility = HardwareCompatibility.none
    version_compatible: bool = False  # an engine later TensorRT versions can run
    # TensorRT-RTX ahead-of-time targets, e.g. [SM86, SM89]; empty lets TensorRT choose.
    compute_capabilities: list[str] = field(default_factory=list)
    # One timing cache per fingerprint beside the store (strict: a miss fails); full
    # TensorRT only.
    timing_cache: TimingCacheMode = TimingCacheMode.readwrite
    plugins: list[str] = field(default_factory=list)  # plugin libraries (.so) loaded for the parse
    # More TensorRT BuilderFlag names to set, e.g. [SPARSE_WEIGHTS].
    extra_flags: list[str] = field(default_factory=list)
    # Weight-stripped engine (STRIP_PLAN + REFIT_IDENTICAL): the plan holds no weights and is
    # refitted from the calibrated ONNX where it is loaded; N GPUs store the weights once.
    strip_weights: bool = False
    # The fp16 and fp32 engines of the same graph, settings and machine, from the store or
    # built by the calibrate stage, so a run says where its engine stands (auto: for
    # quantized precisions).
    reference_engines: ReferenceEngines = ReferenceEngines.auto
    # Engine store root; null means $TRT_PIPELINE_STORE or the user cache folder (~/.cache/trt-pipeline/engines).
    store_dir: str | None = None
    gates: GatesConfig = field(default_factory=GatesConfig)
    log_redactions: list[str] = field(default_factory=list)  # regexes scrubbed from saved logs


@dataclass
class DecoderBench:
    """A decoder's phases timed apart (pipeline/bench/decoder_bench.py), for a graph with a
    KV cache: time to first token by prompt length, time per output token by past length."""

    input_lens: list[int] = field(default_factory=list)  # []: the prefill profile's min/opt/max
    past_lens: list[int] = field(default_factory=list)  # []: the decode profile's min/opt/max
    batch: int = 1  # sequences per run


@dataclass
class BenchmarkConfig:
    # trtexec's method: warm up for a time, then run until both minimums are met.
    warmup_s: float = 0.2
    min_duration_s: float = 0.5  # timed for at least this long
    min_iterations: int = 10  # and at least this many iterations (trtexec's --iterations)
    # A budget per measured shape: a model that takes seconds per call stops here with
    # what it has (at least one iteration; its result says it was cut short). 0: no limit.
    max_duration_s: float = 10.0
    # A percentile with fewer samples than this beyond it is reported but flagged.
    min_tail_samples: int = 10
    # Side by side in this order; speed-ups are against `baseline`.
    backends: list[BenchBackend] = field(default_factory=lambda: list(BenchBackend))
    baseline: BenchBackend = BenchBackend.onnxruntime  # the backend speed-ups are measured against
    device: Device = Device.auto  # where ONNX Runtime and PyTorch run
    intra_op_threads: int = (
        0  # ONNX Runtime and PyTorch CPU threads; 0 keeps each library's default
    )
    profile: str | None = (
        None  # optimization profile by name for the headline shape; null: the first
    )
    shape: ProfilePoint = ProfilePoint.opt  # the headline point of that profile
    # Sweep for latency/throughput against batch size; [] means the profile's min, opt and max batch.
    batch_sizes: list[int] = field(default_factory=list)
    seq_lens: list[int] = field(
        default_factory=list
    )  # models with a `seq` dim; [] keeps the headline's
    accuracy: bool = True  # each backend against the fp32 reference outputs
    # TensorRT on a GPU (and PyTorch on CUDA where it applies)
    device_copies: bool = (
        True  # host-to-device and device-to-host copies inside the timed iteration
    )
    cuda_graph: bool = False  # TensorRT: time a captured CUDA graph of the iteration
    layer_profile_top: int = (
        10  # slowest layers to report from a separate IProfiler pass; 0: no pass
    )
    layer_profile_iterations: int = 20  # iterations of that per-layer pass
    decoder: DecoderBench = field(default_factory=DecoderBench)


@dataclass
class InspectConfig:
    network_layers: bool = True  # list the parsed TensorRT network's layers in report.json
    max_table_rows: int = 400  # rows of the report's fusion and layer tables
    html: bool = True  # report.html beside report.json and report.md
    # Boxes drawn in the graph picture; repeated blocks are folded first, then modules.
    graph_max_nodes: int = 150
    # Load the engine with TensorRT's EngineInspector where a GPU can run it.
    engine_inspector: bool = True


@dataclass
class SweepConfig:
    # Ray launcher (hydra/launcher=trt_ray): run on a node advertising this GPU model;
    # a sweep over several (A100,L4) builds one engine per GPU model of the fleet.
    accelerator_type: str | None = None
    # A job whose every input matches a finished job's (same config, code, data, library
    # versions and machine fingerprint) restores that job's outputs instead of running
    # (pipeline/sweeps/job_cache.py); false measures again (builds still come from the store).
    reuse: bool = True
    # A project of several models (`models`): the one each job of a sweep builds, by name;
    # sweep its options as `precision@models.<name>.precision=fp16,int8`.
    model: str | None = None


@dataclass
class PipelineConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    build: BuildConfig = field(default_factory=BuildConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    inspect: InspectConfig = field(default_factory=InspectConfig)
    pin: PinConfig = field(default_factory=PinConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    # Several models in one project (core/models.py): name -> its model, precision, profile
    # and calibration groups, each checked when that model's config is loaded.
    models: dict[str, Any] = field(default_factory=dict)


def _omegaconf_message(e: OmegaConfBaseException) -> str:
    msg = str(getattr(e, "msg", None) or e).splitlines()[0]
    key = getattr(e, "full_key", None)
    return f"{key}: {msg}" if key else msg


@functools.lru_cache(maxsize=1)
def _schema() -> DictConfig:
    # Made once: building it from the dataclasses is most of a validation (10 ms of 16),
    # and a sweep validates every job twice. merge() copies it, so it is never changed.
    schema: DictConfig = OmegaConf.structured(PipelineConfig)
    return schema


def validate(raw: Any) -> PipelineConfig:
    """Merge onto the schema (unknown keys and wrong types fail) and check values.

    Typed as the schema, as Hydra hands a structured config to its task: library code takes
    the group it reads (`precision: PrecisionConfig`) and the type checker sees every access.
    At run time it is the read-only DictConfig the schema was merged into, so a misspelt key
    also fails when read, and `config.to_dict` gives any group as plain data."""
    try:
        raw = shape_forms_normalized(raw)
        # Merged onto a DictConfig schema, the result is a DictConfig (merge's type says
        # ListConfig too, for a list schema).
        cfg = cast(DictConfig, OmegaConf.merge(_schema(), raw))
        OmegaConf.to_container(cfg, throw_on_missing=True)
    except OmegaConfBaseException as e:
        raise PipelineError(f"invalid config: {_omegaconf_message(e)}") from None
    if cfg.model.folder is not None:
        model_folder.fill(cfg.model, cfg.profile)
    check_values(cfg)
    OmegaConf.set_readonly(cfg, True)
    known = models.names(cfg)
    if known:  # each model's own config, as its stages will load it
        several = OmegaConf.create(raw)
        for name in known:
            one = models.select(several, name)
            try:
                validate(one)
            except PipelineError as e:
                raise PipelineError(f"models.{name}: {e}") from None
    chosen = cfg.sweep.model
    if chosen is not None and known and chosen not in known:
        raise PipelineError(f"sweep.model={chosen}: no such model ({', '.join(known)})")
    return cast(PipelineConfig, cfg)


# Mappings keyed by a dim or input name, which a dotted override splits at its dots.
NAME_KEYED = (
    ("model", "sample_dims"),
    ("model", "input_ranges"),
    ("model", "sample_axis"),
    ("model", "constant_inputs"),
    ("model", "output_tasks"),
    ("profile", "shapes"),
)


def shape_forms_normalized(raw: Any) -> Any:
    """`raw` with every way of writing names and shapes in the one form the schema holds
    (pipeline/core/shape_forms.py); a config without those keys is returned as it is."""
    tree = OmegaConf.to_container(raw) if OmegaConf.is_config(raw) else raw
    if not isinstance(tree, dict):
        return raw
    for group, key in NAME_KEYED:
        section = tree.get(group)
        if isinstance(section, dict) and isinstance(section.get(key), dict):
            section[key] = shape_forms.joined_names(section[key])
    profile = tree.get("profile")
    if isinstance(profile, dict):
        if "shapes" in profile:
            profile["shapes"] = shape_forms.shapes_mapping(profile["shapes"], "profile.shapes")
        for i, spec in enumerate(profile.get("profiles") or []):
            if isinstance(spec, dict):
                if isinstance(spec.get("dims"), dict):
                    spec["dims"] = shape_forms.joined_names(spec["dims"])
                if "shapes" in spec:
                    where = f"profile.profiles[{i}].shapes"
                    spec["shapes"] = shape_forms.shapes_mapping(spec["shapes"], where)
    return tree


def load(path: str | Path = "params.yaml", model: str | None = None) -> PipelineConfig:
    """The config in `path`; `model`: that one of its several models (core/models.py)."""
    path = Path(path)
    if not path.exists():
        raise PipelineError(f"config not found: {path}")
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # yaml errors come in many types
        raise PipelineError(f"config {path} is not valid YAML: {first_line(e)}") from None
    if model is None:
        return validate(raw)
    if not isinstance(raw, DictConfig):
        raise PipelineError(f"config {path} is not a mapping")
    one = models.select(raw, model)
    try:
        return validate(one)
    except PipelineError as e:
        raise PipelineError(f"models.{model}: {e}") from None


# Open shape: whichever config section the caller passes, as plain data (the user's values).
def to_dict(cfg: Any) -> dict[str, Any]:
    if OmegaConf.is_config(cfg):
        # A config section (a DictConfig) becomes a dict of plain data (a choice as its
        # string: params.yaml, cache keys and provenance records read the same as before
        # choices were enums); to_container's type also covers lists and scalars.
        return cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    return dict(cfg)
