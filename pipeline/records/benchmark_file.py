"""metrics/benchmark.json, the benchmark stage's record (written by bench/benchmark.py)."""

from collections.abc import Mapping
from typing import Any, Required, TypeAlias, TypedDict

# A GPU's readings before and after a benchmark (machine/gpu_conditions.snapshot).


class NoGpu(TypedDict):
    """snapshot() where no GPU can be read, and why."""

    gpu: None
    reason: str


class Clocks(TypedDict):
    """Clock speeds in MHz by domain; None where NVML does not say."""

    sm: int | None
    memory: int | None
    graphics: int | None


class GpuReading(TypedDict):
    """One reading of a GPU; None for each field it does not report."""

    gpu: str | None  # its name
    pci_bus_id: str | None
    clocks_mhz: Clocks
    max_clocks_mhz: Clocks
    temperature_c: int | None
    power_w: float | None
    power_limit_w: float | None
    performance_state: str | None  # "P0" (fastest) to "P15"
    clock_event_reasons: list[str] | None  # CLOCK_EVENT_REASONS' names of the bits set
    utilization_pct: int | None
    memory_used_mib: int | None


GpuSnapshot: TypeAlias = NoGpu | GpuReading


class TimingMethod(TypedDict):
    """How every figure was timed: the loop's budget (the benchmark group's settings) and
    what the clock measures."""

    warmup_s: float
    min_duration_s: float
    min_iterations: int
    max_duration_s: float  # 0: no limit
    min_tail_samples: int
    latency: str  # what one latency is: the host's clock per iteration, and GPU stages'


# The libraries a benchmark ran with, by distribution name (None: not installed); a
# functional TypedDict, since "nvidia-ml-py" is no identifier.
LibraryVersions = TypedDict(
    "LibraryVersions",
    {
        "python": str,
        "numpy": str,
        "onnxruntime": str | None,
        "torch": str | None,
        "tensorrt": str,  # "<flavour> <version>"
        "nvidia-ml-py": str | None,
    },
)


class BenchConditions(TypedDict):
    """What a benchmark ran under (bench/conditions.py): the machine, its CPU, the threads
    each library used, the library versions, and the GPU's readings before and after."""

    fingerprint: str  # the fingerprint's id
    target: str | None
    cpu: str
    cpu_count: int | None
    usable_cpus: int | None  # this process's CPU affinity, where the OS says
    cpu_governor: str | None  # None: the OS exposes no cpufreq governor
    intra_op_threads: int | str  # "library default" where none was configured
    threads_from: str  # what chose them
    torch_threads: int | None  # None: torch not imported
    omp_num_threads: str | None
    versions: LibraryVersions
    gpu_before: GpuSnapshot  # machine/gpu_conditions.snapshot's readings
    gpu_after: GpuSnapshot


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
    method: Required[TimingMethod]
    conditions: Required[BenchConditions]  # the GPU's clocks and load before and after
    # a decoder's TTFT and TPOT by length, its KV cache's bytes (bench/measuring.DecoderRecord)
    decoder: Mapping[str, Any]
    model: str  # the stage adds these two
    precision: str
    peak_rss_mib: float  # the stage's return only
