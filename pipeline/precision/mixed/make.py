"""precision=auto: each low type of precision.search_types made by its own transform from one
source graph (int8/fp8 Q/DQ scales, int4 weights, each through the calibration cache), then
the search (mixed/search.py) picks a type per GEMM and the graph it chose is written.

The source is the exported graph with each Gemm's transposed weight stored untransposed (as
int4 needs) at an opset every type's nodes fit in, so that every plan names the same nodes
and weights; where that changes nothing the exported file itself is used."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from pipeline.core import console, fileio, hashing
from pipeline.core.errors import NothingToQuantize, PipelineError
from pipeline.core.layout import EXPORT_SUMMARY
from pipeline.graph import onnx_model
from pipeline.inputs import calibration_data
from pipeline.precision.autocast.cast import autocast, fp16_of
from pipeline.precision.calibration import cache
from pipeline.precision.common.engine_cost import EngineCost
from pipeline.precision.fallback.cache import JudgedBy, judged_by
from pipeline.precision.fallback.search import SearchFailed
from pipeline.precision.gate import accuracy
from pipeline.precision.gate.verdict import Holdout, Split
from pipeline.precision.mixed import objective, search
from pipeline.precision.mixed.graphs import MixedGraphs
from pipeline.precision.mixed.record import AutoSummary
from pipeline.precision.mixed.search import Figures
from pipeline.records.calibration_file import Judgement

if TYPE_CHECKING:
    from pipeline.core.config import CalibrationConfig, ModelConfig, PrecisionConfig
    from pipeline.precision.calibration.result import QuantizeResult

QDQ_TYPES = ("int8", "fp8")


def make(
    src: Path,
    dest: Path,
    pairs: list[accuracy.ReferenceBatch],
    criteria: accuracy.Criteria,
    holdout: Holdout,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
    judge: Callable[[Path, list[accuracy.ReferenceBatch], accuracy.Criteria], Judgement],
    engines: EngineCost | None = None,
) -> tuple[Split, AutoSummary, Judgement]:
    """Write dest (the graph the search chose); return the held-out batches split into the
    search's and the verdict's (`holdout`), what calibration.json says of it ("calibration"
    and "mixed"), and its judgement as written on the search's batches (`judge(dest,
    batches, criteria)`, under the tightened gate): where that misses, the search goes on
    with written graphs (search.resume) rather than giving up its result. With
    `engines` and the objective engine_bytes, the search weighs the engine's bytes and the
    answer is the fp16 graph where no mix beats its engine (mixed/objective.py)."""
    types = [str(t) for t in precision_cfg.search_types]
    with tempfile.TemporaryDirectory(prefix="auto.") as tmp:
        work = Path(tmp)
        source_path, source = _common_source(src, work, "fp8" in types)
        results, left_out = _transforms(
            types, source_path, work, precision_cfg, calibration_cfg, model_cfg
        )
        graphs = MixedGraphs(
            source,
            cast(Any, results["int4"].graphs) if "int4" in results else None,
            {t: cast(Any, r.graphs).plan for t, r in results.items() if t in QDQ_TYPES},
            "fp16" in types,
            source_path.parent,
        )
        held_out, overlap = _held_out(pairs, results)
        parts, searching = holdout.split(held_out), holdout.searching(criteria)

        def written(chosen: dict[str, str]) -> Judgement:
            cache.save_beside(graphs.graph(chosen), dest, source_path.parent)
            return judge(dest, parts.search, searching)

        def fp16() -> Judgement:
            cast_cfg = fp16_of(precision_cfg)
            autocast(src, dest, cast_cfg, calibration_cfg, pairs[0][0])
            return judge(dest, parts.search, searching)

        options = {n: graphs.options(n) for n in graphs.candidates()}
        model = objective.model_for(precision_cfg, engines, graphs, options, src, pairs[0][0])
        early = objective.fp16_first(model, graphs, options, fp16)
        if early is not None:
            record, final = early
        else:
            inputs = _key_inputs(source_path, results, parts.search, searching, types)
            searcher = _Search(graphs, parts.search, searching, calibration_cfg, inputs)
            record, final = searcher.written(model, engines, dest, written, fp16)
    if left_out:
        record["left_out"] = left_out
    return parts, _summary(results, source_path != src, record, overlap), final


def _summary(
    results: dict[str, QuantizeResult],
    untransposed: bool,
    record: dict[str, Any],
    overlap: dict[str, int] | None,
) -> AutoSummary:
    """What calibration.json says of the types made and the search."""
    summary: AutoSummary = {
        "calibration": {
            "types": {t: r.summary for t, r in results.items()},
            "data": next((r.data.info for r in results.values() if r.data is not None), None),
            "untransposed_source": untransposed,
        },
        "mixed": record,
    }
    if overlap is not None:
        summary["reference_overlap"] = overlap
    return summary


class _Search:
    """The search over one set of graphs and batches, from the cache where it ran before."""

    def __init__(
        self,
        graphs: MixedGraphs,
        batches: list[accuracy.ReferenceBatch],
        criteria: accuracy.Criteria,
        calibration_cfg: CalibrationConfig,
        inputs: MixedKey,
    ) -> None:
        self.graphs, self.batches, self.criteria = graphs, batches, criteria
        self.calibration_cfg, self.inputs = calibration_cfg, inputs

    def written(
        self,
        model: objective.EngineModel | None,
        engines: EngineCost | None,
        dest: Path,
        written: Callable[[dict[str, str]], Judgement],
        fp16: Callable[[], Judgement],
    ) -> tuple[dict[str, Any], Judgement]:
        """The chosen graph written to dest and judged; with the engine model, held to the
        fp16 engine (objective.settled)."""
        code = model.code if model else None
        assignment, record = _searched(
            self.graphs, self.batches, self.criteria, self.calibration_cfg, self.inputs, code
        )
        final = _written(assignment, record, written)
        if model is not None and engines is not None:
            final = objective.settled(
                model, self.graphs, assignment, record, engines, dest, final, fp16
            )
        return record, final


def _written(
    assignment: dict[str, str],
    record: dict[str, Any],
    written: Callable[[dict[str, str]], Judgement],
) -> Judgement:
    """The chosen assignment written and judged; where it misses, GEMMs go back to fp32."""
    final = written(assignment)
    if final["gate_passed"]:
        return final
    console.warn(
        "precision=auto: the chosen graph misses the gate as written; putting its most "
        "sensitive GEMMs back in fp32, each graph judged as written"
    )
    try:
        assignment.clear()
        chosen, final = search.resume(record, written)
        assignment.update(chosen)
    except SearchFailed as e:
        raise PipelineError(str(e)) from None
    return final


def _common_source(src: Path, work: Path, fp8: bool) -> tuple[Path, Any]:
    """The source every type is made from (see the module's docstring), and its graph:
    read without the weights it keeps in external-data files (only transposed Gemm
    weights are read, to be stored untransposed)."""
    from pipeline.graph.external_data import write_gathered
    from pipeline.precision.common import streamed
    from pipeline.precision.int4.quantize import untranspose_gemm_weights
    from pipeline.precision.qdq import quantize

    model = onnx_model.load(src, check=False, weights=False)
    untransposed = untranspose_gemm_weights(model, src.parent)
    converted = quantize.qdq_source(model, "fp8" if fp8 else "int8")
    if not untransposed and converted is model:
        return src, model
    path = work / "source" / "model.onnx"
    path.parent.mkdir()
    # the calibration data's loader reads the export's sample layout beside the graph
    shutil.copy2(src.parent / EXPORT_SUMMARY, path.parent / EXPORT_SUMMARY)
    if not streamed.external_data(converted):
        onnx_model.save_copy(converted, path)  # a copy: the weights stay in `converted`
        return path, converted
    write_gathered(converted, src.parent, path)  # weights copied file to file
    return path, onnx_model.load(path, check=False, weights=False)


def _transforms(
    types: list[str],
    src: Path,
    work: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
) -> tuple[dict[str, QuantizeResult], dict[str, str]]:
    """Each low type's whole-graph result; and the types that fit no node of the graph
    (int4 on a graph of convolutions), left out of the search with a line each."""
    results: dict[str, QuantizeResult] = {}
    left_out: dict[str, str] = {}
    for t in types:
        if t == "fp16":
            continue
        try:
            results[t] = _transform(t, src, work, precision_cfg, calibration_cfg, model_cfg)
        except NothingToQuantize as e:
            left_out[t] = str(e)
            console.note(f"precision=auto leaves {t} out of its search: {e}")
    if not results and "fp16" not in types:
        raise PipelineError(
            f"precision=auto has no type to search: none of precision.search_types="
            f"{types} fits a node of this graph ({'; '.join(left_out.values())})"
        )
    return results, left_out


def _transform(
    kind: str,
    src: Path,
    work: Path,
    precision_cfg: PrecisionConfig,
    calibration_cfg: CalibrationConfig,
    model_cfg: ModelConfig,
) -> QuantizeResult:
    """One type over the whole graph, as precision=int8 / fp8 / int4_* would make it."""
    from omegaconf import OmegaConf

    from pipeline.precision.int4.quantize import quantize_int4
    from pipeline.precision.qdq import quantize

    transform = "int4" if kind == "int4" else "qdq"
    # merge() gives a DictConfig of the same schema: still a PrecisionConfig to its readers
    cfg = cast(
        "PrecisionConfig",
        OmegaConf.merge(precision_cfg, {"transform": transform, "quantize_mode": kind}),
    )
    make = quantize_int4 if kind == "int4" else quantize.quantize
    (work / kind).mkdir()
    return make(src, work / kind / "model.onnx", cfg, calibration_cfg, model_cfg)


def _held_out(
    pairs: list[accuracy.ReferenceBatch], results: dict[str, QuantizeResult]
) -> tuple[list[accuracy.ReferenceBatch], dict[str, int] | None]:
    data = next((r.data for r in results.values() if r.data is not None), None)
    if data is None:
        return pairs, None
    held_out, overlap = calibration_data.held_out(pairs, data)
    if not held_out:
        raise PipelineError(
            "every reference sample is also a calibration sample, so the accuracy gate "
            "has no held-out data; calibrate on other data than the reference inputs"
        )
    return held_out, overlap


class CachedSearch(TypedDict):
    """A search's search.json in the calibration cache: its choice and its record."""

    assignment: dict[str, str]  # GEMM -> its type
    record: dict[str, Any]


def _searched(
    graphs: MixedGraphs,
    held_out: list[accuracy.ReferenceBatch],
    criteria: accuracy.Criteria,
    calibration_cfg: CalibrationConfig,
    inputs: MixedKey,
    code: dict[str, float] | None = None,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The search's choice and record, from the cache where the same inputs were searched
    before (no ONNX Runtime at all then). Its accuracy figures are cached apart, without the
    gate or the engine model (`code`), so a search under another gate or on another machine
    measures none of them again."""
    started = time.perf_counter()
    figures_inputs = {**inputs, "kind": "precision=auto figures", "gate": None}

    def figures(measure: Callable[[], Figures]) -> tuple[Figures, bool]:
        return _cached_json(calibration_cfg, figures_inputs, "figures.json", measure)

    def run_search() -> CachedSearch:
        memo = cache.figures_memo(
            calibration_cfg, {**inputs, "kind": "precision=auto graphs judged", "gate": None}
        )
        try:
            assignment, record = search.search(graphs, held_out, criteria, figures, code, memo)
        except SearchFailed as e:
            raise PipelineError(str(e)) from None
        finally:
            memo.save()
        return {"assignment": assignment, "record": record}

    keyed = {**inputs, "code": {k: round(v) for k, v in code.items()}} if code else inputs
    found, hit = _cached_json(calibration_cfg, keyed, "search.json", run_search)
    record = {**found["record"], "search_cache_hit": hit}
    if hit:
        record["seconds"] = round(time.perf_counter() - started, 3)
        record["figures_cache_hit"] = True
    return found["assignment"], record


class MixedKey(JudgedBy):
    """precision=auto's search cache key (its figures' key is this with `kind` and `gate`
    replaced)."""

    kind: str  # "precision=auto search"
    search_version: int
    source_sha256: str  # the graph every type was made from
    results: dict[str, str]  # type -> its whole-graph result's sha256
    types: list[str]  # precision.search_types


def _key_inputs(
    source: Path,
    results: dict[str, QuantizeResult],
    held_out: list[accuracy.ReferenceBatch],
    criteria: accuracy.Criteria,
    types: list[str],
) -> MixedKey:
    """What the search depends on: the graphs, the data, the gate, ONNX Runtime."""
    return {
        "kind": "precision=auto search",
        "search_version": search.SEARCH_VERSION,
        "source_sha256": onnx_model.sha256(source),
        "results": {t: r.summary["result_sha256"] for t, r in results.items()},
        "types": types,
        **judged_by(held_out, criteria),
    }


def _cached_json(
    calibration_cfg: CalibrationConfig,
    inputs: Mapping[str, Any],
    name: str,
    make_value: Callable[[], Any],
) -> tuple[Any, bool]:
    """make_value()'s result through the calibration cache, keyed by `inputs`; whether it
    was a hit."""

    def make() -> tuple[dict[str, Any], dict[str, Any], str]:
        data = fileio.to_json(make_value()).encode()
        return {name: data}, {k: v for k, v in inputs.items() if k != "gate"}, "miss"

    got, _ = cache.cached(
        calibration_cfg, hashing.sha256_json(inputs), make, str(inputs["kind"]), required=(name,)
    )
    return json.loads(got.read(name)), got.hit
