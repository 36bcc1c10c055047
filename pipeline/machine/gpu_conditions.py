"""What the GPU was doing around a measurement: clocks, temperature, power,
performance state and why clocks were held down, read from NVML before and after.
A machine without a GPU gets an explicit record saying so, never a silent gap."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from pipeline.core.numbers import MIB
from pipeline.records.benchmark_file import Clocks, GpuReading, GpuSnapshot

T = TypeVar("T")

# NVML clock-event (formerly "throttle") reason bits, as named in nvml.h.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def _read(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except Exception:  # NVMLError_NotSupported and friends: a field this GPU does not report
        return None


def _text(value: object) -> str | None:
    """NVML's strings: bytes from older nvidia-ml-py, str from newer; None where unread."""
    return value.decode() if isinstance(value, bytes) else cast("str | None", value)


def snapshot(pci_bus_id: str | None = None, index: int = 0) -> GpuSnapshot:
    """One reading of the GPU the benchmark runs on (by PCI bus id where known,
    since CUDA and NVML may number GPUs differently), or {"gpu": None, ...}."""
    try:
        import pynvml
    except ImportError:
        return {"gpu": None, "reason": "no GPU readings: nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return {"gpu": None, "reason": f"no GPU: NVML unavailable ({e})"}
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return {"gpu": None, "reason": "no GPU: NVML reports none"}
        if pci_bus_id:
            h = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        else:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
        return _reading(pynvml, h)
    finally:
        _read(pynvml.nvmlShutdown)


def _reading(nv: Any, h: Any) -> GpuReading:
    """nv: the pynvml module, h: a device handle (nvidia-ml-py ships no type information)."""

    def clocks(get: Callable[[Any, int], int]) -> Clocks:
        return {
            "sm": _read(lambda: get(h, nv.NVML_CLOCK_SM)),
            "memory": _read(lambda: get(h, nv.NVML_CLOCK_MEM)),
            "graphics": _read(lambda: get(h, nv.NVML_CLOCK_GRAPHICS)),
        }

    power_mw = _read(lambda: nv.nvmlDeviceGetPowerUsage(h))
    limit_mw = _read(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))
    reasons_fn = (
        getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    bits = _read(lambda: reasons_fn(h))
    pstate = _read(lambda: nv.nvmlDeviceGetPerformanceState(h))
    util = _read(lambda: nv.nvmlDeviceGetUtilizationRates(h))
    mem = _read(lambda: nv.nvmlDeviceGetMemoryInfo(h))
    return {
        "gpu": _text(_read(lambda: nv.nvmlDeviceGetName(h))),
        "pci_bus_id": _text(_read(lambda: nv.nvmlDeviceGetPciInfo(h).busId)),
        "clocks_mhz": clocks(nv.nvmlDeviceGetClockInfo),
        "max_clocks_mhz": clocks(nv.nvmlDeviceGetMaxClockInfo),
        "temperature_c": _read(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        "power_w": None if power_mw is None else round(power_mw / 1000, 1),
        "power_limit_w": None if limit_mw is None else round(limit_mw / 1000, 1),
        "performance_state": None if pstate is None else f"P{int(pstate)}",
        "clock_event_reasons": None
        if bits is None
        else [name for bit, name in CLOCK_EVENT_REASONS.items() if int(bits) & bit],
        "utilization_pct": None if util is None else int(util.gpu),
        "memory_used_mib": None if mem is None else int(mem.used) // MIB,
    }


def summary(before: GpuSnapshot, after: GpuSnapshot) -> str:
    """One line for people: did clocks or temperature move while measuring?"""
    if before.get("gpu") is None:
        return str(before.get("reason", "no GPU"))

    def one(s: Mapping[str, Any]) -> str:
        return (
            f"SM {s['clocks_mhz']['sm']} MHz, {s['temperature_c']} C, {s['power_w']} W, "
            f"{s['performance_state']}"
        )

    return f"{before['gpu']}: before {one(before)}; after {one(after)}"
