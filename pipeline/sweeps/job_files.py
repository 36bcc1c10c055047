"""What a sweep's job leaves in its folder (pipeline/sweeps/job.py): its result, or the one
line it failed with. The sweep table (sweep_table.py) and job reuse (job_cache.py) read
them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from pipeline.records.inspect_file import Backend

RESULT_FILE = "result.json"
ERROR_FILE = "error.txt"


class JobResult(TypedDict, total=False):
    """result.json: one job's headline (job.job_result), as the sweep table reads it. Read
    leniently: a job of another version is a row with what it has."""

    model: str
    precision: str
    profile: str
    engine_sha256: str
    engine_bytes: int
    build_seconds: float | None
    store_event: str | None  # the engine store's word, or REUSED
    cache_key: str | None
    backend: Backend
    fingerprint: str
    gpu: str
    accuracy: dict[str, dict[str, Any]]
    accuracy_gate: dict[str, dict[str, dict[str, Any]]]
    accuracy_gate_passed: bool | None
    accuracy_on_random_inputs: bool
    benchmark: dict[str, dict[str, Any]]  # backend -> status, median, p99, throughput
    host: str
    node: str | None
    overrides: list[str]  # the job's Hydra overrides
    reused: dict[str, Any]  # a job reused: the finished job's key, host, node
