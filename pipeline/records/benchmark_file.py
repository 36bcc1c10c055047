"""metrics/benchmark.json, the benchmark stage's record (written by bench/benchmark.py)."""

from collections.abc import Mapping
from typing import Any, Required, TypedDict


class BenchmarkRecord(TypedDict, total=False):
    """metrics/benchmark.json: every backend timed side by side at the headline shapes,
    and each backend at every swept shape."""

    profile: Required[str]
    shapes: Required[dict[str, list[int]]]  # input -> the headline shape
    headline: Required[str]  # the headline point's key
    inputs: Required[dict[str, Any]]  # where the inputs came from
    baseline: Required[str]
    results: Required[dict[str, dict[str, Any]]]  # backend -> status, latency, throughput
    by_shape: Required[dict[str, dict[str, Any]]]  # point key -> backend -> figures
    method: Required[dict[str, Any]]  # how it was timed
    conditions: Required[dict[str, Any]]  # the GPU's clocks and load before and after
    # a decoder's TTFT and TPOT by length, its KV cache's bytes (bench/measuring.DecoderRecord)
    decoder: Mapping[str, Any]
    model: str  # the stage adds these two
    precision: str
    peak_rss_mib: float  # the stage's return only
