"""The GPU's free memory from NVML, for the size checks of pipeline.core.memory: the
device buffers a benchmark point needs are compared with it before any is allocated."""

from __future__ import annotations

from typing import Any


def free_bytes(pci_bus_id: str | None = None, index: int = 0) -> int | None:
    """Free memory of the GPU (by PCI bus id where known: CUDA and NVML may number GPUs
    differently); None where there is no GPU or NVML cannot say."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound and friends: no driver, so no GPU to fill
        return None
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return None
        handle: Any = (
            pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
            if pci_bus_id
            else pynvml.nvmlDeviceGetHandleByIndex(index)
        )
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)
    except Exception:  # NVMLError_NotSupported on some virtual GPUs
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
