"""Build-log analysis: pure functions over (severity, phase, seconds, message)
records, so they are tested on real TensorRT-RTX logs without a logger in sight."""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, NamedTuple

SEVERITIES = ("internal_error", "error", "warning", "info", "verbose")

_LAYERS = re.compile(r"^(Original|After [\w\s-]+?):\s+(\d+) layers")
_MEMORY = {
    "weights_bytes": re.compile(r"Total Weights Memory: (\d+) bytes"),
    "activation_bytes": re.compile(r"Total Activation Memory: (\d+) bytes"),
    "scratch_bytes": re.compile(r"Max Scratch Memory: (\d+) bytes"),
    "host_persistent_bytes": re.compile(r"Total Host Persistent Memory: (\d+) bytes"),
    "device_persistent_bytes": re.compile(r"Total Device Persistent Memory: (\d+) bytes"),
}
_PEAK = re.compile(r"Peak memory usage of TRT CPU/GPU memory allocators: CPU (\d+) MiB, GPU (\d+) MiB")
_FUSED = re.compile(r"(?:ForeignNode|Layer)\s*\{?(.+?)\}? metadata: ((?:\[ONNX Layer: [^\]]+\])+)")
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]]+)\]")
_ENGINE_LAYER = re.compile(r"^Layer\((\w+)\): (.+?), Tactic: (0x[0-9a-fA-F]+), (.*)$")
_TIMING_CACHE = re.compile(r"timing cache", re.IGNORECASE)
_FUSION_EVENT = re.compile(r"^(Fusing|Running: \w+Fusion|Removing|Eliminating)\b")


class Record(NamedTuple):
    severity: str
    phase: str
    seconds: float
    message: str


def summarize(records: Iterable[Record]) -> dict:
    records = list(records)
    counts = Counter(r.severity for r in records)
    passes: list[dict] = []
    memory: dict[str, int] = {}
    fused: list[dict] = []
    engine_layers: list[dict] = []
    timing_cache: list[str] = []
    fusion_events = 0
    for r in records:
        for line in r.message.splitlines():
            line = line.strip()
            if m := _LAYERS.match(line):
                passes.append({"pass": m.group(1), "layers": int(m.group(2))})
            for key, pattern in _MEMORY.items():
                if m := pattern.search(line):
                    memory[key] = int(m.group(1))
            if m := _PEAK.search(line):
                memory["peak_cpu_mib"], memory["peak_gpu_mib"] = int(m.group(1)), int(m.group(2))
            if m := _FUSED.search(line):
                fused.append({"layer": m.group(1).strip("{} "), "onnx_nodes": _ONNX_LAYER.findall(m.group(2))})
            if m := _ENGINE_LAYER.match(line):
                engine_layers.append({"kind": m.group(1), "name": m.group(2), "tactic": m.group(3),
                                      "io": m.group(4)})
            if _TIMING_CACHE.search(line):
                timing_cache.append(line)
            if _FUSION_EVENT.match(line):
                fusion_events += 1
    original = next((p["layers"] for p in passes if p["pass"] == "Original"), None)
    final = passes[-1]["layers"] if passes else None
    return {
        "counts": {s: counts.get(s, 0) for s in SEVERITIES},
        "warnings": [r.message for r in records if r.severity == "warning"],
        "errors": [r.message for r in records if r.severity in ("error", "internal_error")],
        "layer_passes": passes,
        "layers_original": original,
        "layers_final": final,
        "fusion_ratio": round(original / final, 3) if original and final else None,
        "fused_layers": fused,
        "fusion_events": fusion_events,
        "engine_layers": engine_layers,
        "memory": memory,
        "timing_cache": timing_cache,
    }


def redact(text: str, patterns: Iterable[str]) -> str:
    for p in patterns:
        text = re.sub(p, "<redacted>", text)
    return text


def format_log(records: Iterable[Record], redactions: Iterable[str] = ()) -> str:
    patterns = list(redactions)
    return "".join(f"{r.seconds:9.3f} {r.severity.upper():<14} {r.phase:<6} "
                   f"{redact(r.message, patterns)}\n" for r in records)
