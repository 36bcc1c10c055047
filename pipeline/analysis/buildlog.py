"""Build-log analysis: pure functions over (severity, phase, seconds, message)
records, so they are tested on real TensorRT-RTX logs without a logger in sight.

What a verbose TensorRT-RTX build tells us, and where:
- `Original: N layers`, `After <pass>: N layers`: the optimizer's passes;
- `ForeignNode {...} metadata: [ONNX Layer: a]\\x1f[ONNX Layer: b]`: a Myelin region and
  the ONNX nodes fused into it;
- `Engine Layer Information:` then `Layer(Kind): name, Tactic: 0x.., in (Float[..]) -> out (..)`;
- with ProfilingVerbosity.DETAILED, a `Layers:` / `I/O Tensors:` dump of the engine's own
  layers (the EngineInspector's one-line format), available without a GPU;
- `Total Weights Memory`, `Total Activation Memory`, `Max Scratch Memory`, `[MemUsageStats]`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pipeline.analysis import attention, engine_layers, fusion, plan_dump
from pipeline.analysis.fusion import FusionMeasure
from pipeline.analysis.plan_dump import PlanDump
from pipeline.core.errors import PipelineError
from pipeline.core.numbers import MIB
from pipeline.engine.trt_hooks import Record as Record  # re-exported: buildlog.Record
from pipeline.records.inspect_file import EngineLayer

SEVERITIES = ("internal_error", "error", "warning", "info", "verbose")
MAX_EVENTS = 500  # fusion/timing-cache lines kept in the summary; the log has them all
# Bump when summarize() changes what it reports: summaries of another version are
# recomputed from the saved build.log rather than trusted.
# 2: layers_original/layers_final/fusion_ratio count ONNX compute nodes and engine layers
#    (analysis/fusion.py), no longer the optimizer's passes; pointwise kernels at a quantized
#    edge report the type they compute in.
# 3: attention_found: the nodes TensorRT found part of its self-attention pattern.
SUMMARY_VERSION = 3

_LAYERS = re.compile(r"^(Original|After [\w\s/-]+?):\s+(\d+) layers")
_MEMORY = {
    "weights_bytes": re.compile(r"Total Weights Memory: (\d+) bytes"),
    "activation_bytes": re.compile(r"Total Activation Memory: (\d+) bytes"),
    "scratch_bytes": re.compile(r"(?:Max|Total) Scratch Memory: (\d+) bytes"),
    "host_persistent_bytes": re.compile(r"Total Host Persistent Memory: (\d+) bytes"),
    "device_persistent_bytes": re.compile(r"Total Device Persistent Memory: (\d+) bytes"),
}
_PEAK = re.compile(
    r"Peak memory usage of TRT CPU/GPU memory allocators: CPU (\d+) MiB, GPU (\d+) MiB"
)
_MEM_NOW = re.compile(r"\[MemUsageChange\].*now: CPU (\d+), GPU (\d+) \(MiB\)")
_LAYER_MEMORY = re.compile(
    r"^Layer: (.+?) Host Persistent: (\d+) bytes Device Persistent: (\d+) bytes "
    r"Scratch Memory: (\d+) bytes"
)
_FUSED = re.compile(r"^(?:ForeignNode|Layer) (.+?) metadata: (\[ONNX Layer: .*)$")
_PARSED_NODE = re.compile(
    r"^(.+?) \[([\w.:]+)\] outputs: \[.*?\)\[(\w+)\]"
)  # the ONNX parser's view of a node
_TIMING_CACHE = re.compile(r"timing cache", re.IGNORECASE)
# Classic (non-Myelin) optimizer lines from full TensorRT: "Running: ConvReluFusion on conv1",
# "ConstShuffleFusion: Fusing w with (Unnamed Layer* 3) [Shuffle]", "Removing /Identity".
_FUSION_LINE = re.compile(
    r"^(?:Running: (\w+) on (.+)|(\w+): Fusing (.+)|(Removing|Eliminating) (.+))$"
)


def _fusion_event(line: str) -> dict[str, str] | None:
    m = _FUSION_LINE.match(line)
    if not m:
        return None
    if m.group(1):
        return {"event": m.group(1), "detail": m.group(2)}
    if m.group(3):
        return {"event": m.group(3), "detail": m.group(4)}
    return {"event": m.group(5).lower(), "detail": m.group(6)}


def _phases(records: list[Record]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in records:
        p = out.setdefault(r.phase, {"records": 0, "first_s": r.seconds, "last_s": r.seconds})
        p["records"] += 1
        p["last_s"] = r.seconds
    return {
        k: {"records": v["records"], "seconds": round(v["last_s"] - v["first_s"], 3)}
        for k, v in out.items()
    }


@dataclass
class _LogScan:
    """What one pass over the records collects, before engine layers meet their regions."""

    passes: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, int] = field(default_factory=dict)
    layer_memory: list[dict[str, Any]] = field(default_factory=list)
    fused: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    engine_layers: list[EngineLayer] = field(default_factory=list)
    plan: PlanDump | None = None
    timing_cache: list[str] = field(default_factory=list)
    parsed: dict[str, dict[str, str]] = field(default_factory=dict)
    attention: list[str] = field(default_factory=list)  # nodes in a self-attention pattern


class BuildLogSummary(FusionMeasure):
    """build_summary.json: what the verbose build log says (summarize)."""

    summary_version: int
    counts: dict[str, int]  # severity -> lines
    warnings: list[str]
    errors: list[str]
    phases: dict[str, dict[str, Any]]  # builder phase -> records, first and last second
    layer_passes: list[dict[str, Any]]
    fused_layers: list[dict[str, Any]]
    fusion_events: list[dict[str, Any]]
    fusion_event_count: int
    engine_layers: list[EngineLayer]
    engine_plan: PlanDump | None  # the DETAILED engine-layer dump
    engine_precisions: dict[str, int]
    memory: dict[str, Any]
    layer_memory: list[dict[str, Any]]
    peak_memory_mib: float | None
    timing_cache: list[str]
    onnx_nodes: dict[str, dict[str, str]]  # ONNX node -> op and type as parsed
    attention_found: list[str]  # nodes the builder took into a self-attention pattern


def summarize(records: Iterable[Record]) -> BuildLogSummary:
    records = list(records)
    counts = Counter(r.severity for r in records)
    scan = _scan(records)
    by_name = _attach_regions(scan.engine_layers, scan.fused, scan.parsed)
    peak_memory_mib = _peak_memory_mib(scan.memory)
    known = scan.plan["layers"] if scan.plan else scan.engine_layers
    return {
        "summary_version": SUMMARY_VERSION,
        "counts": {s: counts.get(s, 0) for s in SEVERITIES},
        "warnings": [r.message for r in records if r.severity == "warning"],
        "errors": [r.message for r in records if r.severity in ("error", "internal_error")],
        "phases": _phases(records),
        "layer_passes": scan.passes,
        **fusion.measure(scan.parsed, scan.plan, scan.engine_layers, set(by_name), scan.passes),
        "fused_layers": scan.fused,
        "fusion_events": scan.events[:MAX_EVENTS],
        "fusion_event_count": len(scan.events),
        "engine_layers": scan.engine_layers,
        "engine_plan": scan.plan,
        "engine_precisions": engine_layers.histogram(known) if known else {},
        "memory": scan.memory,
        "layer_memory": scan.layer_memory,
        "peak_memory_mib": peak_memory_mib,
        "timing_cache": scan.timing_cache,
        "onnx_nodes": scan.parsed,
        "attention_found": scan.attention[:MAX_EVENTS],
    }


def _scan(records: list[Record]) -> _LogScan:
    scan = _LogScan()
    for r in records:
        if r.message.startswith("Layers:") and (dump := plan_dump.parse_plan_dump(r.message)):
            if scan.plan is None:
                scan.plan = dump
            else:  # one dump per build; more would be more profiles or subgraphs
                scan.plan["layers"] += dump["layers"]
            continue
        # split("\n"), not splitlines(): that would also cut at \x1e, the metadata separator
        for line in r.message.split("\n"):
            line = line.strip()
            _read_structure(scan, line, r.phase)
            _read_memory(scan.memory, line)
            if _TIMING_CACHE.search(line) and len(scan.timing_cache) < MAX_EVENTS:
                scan.timing_cache.append(line)
    return scan


def _read_structure(scan: _LogScan, line: str, phase: str) -> None:
    """The one thing a line can say about the graph: a parsed node, an optimizer pass, a
    region's fused nodes, an engine layer, a layer's memory, or a fusion event."""
    if phase == "parse" and (m := _PARSED_NODE.match(line)):
        scan.parsed[m.group(1)] = {"op": m.group(2), "dtype": engine_layers.dtype(m.group(3))}
    elif m := _LAYERS.match(line):
        scan.passes.append({"pass": m.group(1), "layers": int(m.group(2))})
    elif m := _FUSED.match(line):
        nodes = engine_layers.onnx_nodes(m.group(2))
        scan.fused.append({"layer": m.group(1), "onnx_nodes": nodes})
        scan.events.append(
            {"event": "region", "detail": f"{m.group(1)} fuses {len(nodes)} ONNX nodes"}
        )
    elif m := attention.FOUND.match(line):
        scan.attention.append(m.group(1))
    elif m := plan_dump.ENGINE_LAYER.match(line):
        scan.engine_layers.append(plan_dump.engine_layer(m))
    elif m := _LAYER_MEMORY.match(line):
        scan.layer_memory.append(
            {
                "layer": m.group(1),
                "host_persistent_bytes": int(m.group(2)),
                "device_persistent_bytes": int(m.group(3)),
                "scratch_bytes": int(m.group(4)),
            }
        )
    elif ev := _fusion_event(line):
        scan.events.append(ev)


def _read_memory(memory: dict[str, int], line: str) -> None:
    for key, pattern in _MEMORY.items():
        if m := pattern.search(line):
            memory[key] = int(m.group(1))
    if m := _PEAK.search(line):
        memory["peak_cpu_mib"], memory["peak_gpu_mib"] = int(m.group(1)), int(m.group(2))
    elif m := _MEM_NOW.search(line):
        memory["peak_cpu_mib"] = max(memory.get("peak_cpu_mib", 0), int(m.group(1)))
        memory["peak_gpu_mib"] = max(memory.get("peak_gpu_mib", 0), int(m.group(2)))


def _attach_regions(
    engine_layers: list[EngineLayer],
    fused: list[dict[str, Any]],
    parsed: dict[str, dict[str, str]],
) -> dict[str, list[str]]:
    """Each engine layer's fused ONNX nodes; returns the regions by layer name."""
    by_name = {f["layer"]: f["onnx_nodes"] for f in fused}
    for layer in engine_layers:
        layer["onnx_nodes"] = by_name.get(layer["name"], [])
        # A Myelin region: its I/O types say little, its nodes' types say more.
        if layer["onnx_nodes"]:
            layer["precision"] = region_precision(layer["onnx_nodes"], parsed) or layer["precision"]
    return by_name


def _peak_memory_mib(memory: dict[str, int]) -> float | None:
    """The most device memory the log accounts for: the builder's own peak, or what the
    engine needs to run (weights + activations + persistent), whichever is larger."""
    if not memory:
        return None
    engine_device = sum(
        memory.get(k, 0) for k in ("weights_bytes", "activation_bytes", "device_persistent_bytes")
    )
    return round(max(memory.get("peak_gpu_mib", 0), engine_device / MIB), 3)


def region_precision(nodes: list[str], parsed: dict[str, dict[str, str]]) -> str | None:
    """The compute type most of a region's ONNX nodes produce (ties: the narrower)."""
    counts = Counter(
        parsed[n]["dtype"]
        for n in nodes
        if n in parsed and parsed[n]["dtype"] in engine_layers.COMPUTE_ORDER
    )
    if not counts:
        return None
    return min(counts, key=lambda d: (-counts[d], engine_layers.COMPUTE_ORDER.index(d)))


def compile_patterns(patterns: Iterable[str], key: str) -> list[re.Pattern[str]]:
    """Regexes from config; a bad one is a one-line error naming its config key."""
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error as e:
            raise PipelineError(f"{key}: {p!r} is not a valid regex ({e})") from None
    return compiled


def compile_redactions(patterns: Iterable[str]) -> list[re.Pattern[str]]:
    return compile_patterns(patterns, "build.log_redactions")


def redact(text: str, patterns: Iterable[str | re.Pattern[str]]) -> str:
    for p in patterns:
        text = (p if isinstance(p, re.Pattern) else re.compile(p)).sub("<redacted>", text)
    return text


def redacted(records: Iterable[Record], patterns: Iterable[str]) -> list[Record]:
    """Records with build.log_redactions scrubbed, to summarise and save: the saved log,
    the summary and the manifest's warnings then never hold the secret."""
    compiled = compile_redactions(patterns)
    records = list(records)
    if not compiled:
        return records
    return [r._replace(message=redact(r.message, compiled)) for r in records]


def format_log(records: Iterable[Record], redactions: Iterable[str] = ()) -> str:
    """One line per record; a multi-line message keeps its lines, indented under the
    first, so every line of the file still starts with a time or whitespace."""
    patterns = compile_redactions(redactions)
    out = []
    for r in records:
        text = engine_layers.METADATA_SEPARATORS.sub(" ", redact(r.message, patterns))
        first, *rest = text.split("\n") or [""]
        out.append(f"{r.seconds:9.3f} {r.severity.upper():<14} {r.phase:<6} {first}\n")
        out.extend(f"{'':9} {'':<14} {'':<6}   {line}\n" for line in rest)
    return "".join(out)


_CONTINUATION = " " * 34  # the indent format_log gives a message's second and later lines
_HEAD = re.compile(r"^ *(\d+\.\d+) (INTERNAL_ERROR|ERROR|WARNING|INFO|VERBOSE) +(\S+)")


def parse_log(text: str) -> list[Record]:
    """build.log back into records (separators between metadata entries come back as
    spaces), so a saved log can be analysed again by the current code. Logs written
    before continuation lines were indented read back too."""
    records: list[Record] = []
    for line in text.split("\n"):
        m = _HEAD.match(line)
        if m is None:
            if records and line:
                last = records[-1]
                rest = line[len(_CONTINUATION) :] if line.startswith(_CONTINUATION) else line
                records[-1] = last._replace(message=f"{last.message}\n{rest}")
            elif line.strip():
                raise PipelineError(f"not a build log line: {line[:80]!r}")
            continue
        phase = m.group(3)
        records.append(
            Record(
                m.group(2).lower(), phase, float(m.group(1)), line[25 + max(6, len(phase)) + 1 :]
            )
        )
    return records


def load_summary(build_dir: Path) -> BuildLogSummary:
    """The build's summary as this code makes it: the saved build_summary.json when it
    is of this SUMMARY_VERSION, else the saved build.log analysed again (an engine
    from the store may have been summarised by older code)."""
    from pipeline.core import fileio

    build_dir = Path(build_dir)
    saved = build_dir / "build_summary.json"
    if saved.exists():
        summary = fileio.read_json(saved, "build summary")
        if isinstance(summary, dict) and summary.get("summary_version") == SUMMARY_VERSION:
            return cast(BuildLogSummary, summary)
    log = build_dir / "build.log"
    if log.exists():
        return summarize(parse_log(log.read_text()))
    raise PipelineError(
        f"{build_dir} has neither a current build_summary.json nor a build.log; rebuild"
    )


def log_lines(records: Iterable[Record]) -> list[str]:
    """The lines of build.log without the leading time: what gates search."""
    return [line[10:].strip() for line in format_log(records).split("\n") if line]
