"""The shared CUDA runtime (libcudart) a process on this machine would load, and its
version: part of the fingerprint (fingerprint.collect)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator


def cuda_runtime() -> tuple[str | None, str]:
    """(version, where it was read) of the shared CUDA runtime a process here would
    load: the libcudart TensorRT and PyTorch link, from pip's nvidia wheels or the
    system. Not cuda.bindings' own: that runtime is static and its version is our pin,
    not a fact about the machine. One ctypes call that needs no driver, so a machine
    without a GPU reports it too (and fingerprint ids stay what they were)."""
    import ctypes

    for path in _libcudart_candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        v = ctypes.c_int()
        if getattr(lib, "cudaRuntimeGetVersion", None) is None or lib.cudaRuntimeGetVersion(
            ctypes.byref(v)
        ):
            continue
        # The file itself, however it was found: a bare soname, a wheel's symlink or a
        # mapping made earlier in this process name one library, and the record must not
        # change with what the process happened to load before.
        loaded = path if os.sep in path else next(_mapped_libcudart(), path)
        return (
            f"{v.value // 1000}.{(v.value % 1000) // 10}",
            f"cudaRuntimeGetVersion of {os.path.realpath(loaded)}",
        )
    return None, "no shared CUDA runtime (libcudart) found"


def _mapped_libcudart() -> Iterator[str]:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if os.path.basename(path).startswith("libcudart.so"):
                    yield path
    except OSError:
        pass


def _libcudart_candidates() -> Iterator[str]:
    import glob

    yield from _mapped_libcudart()  # one already mapped (by torch or TensorRT) first
    for site in sys.path:
        yield from sorted(
            glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcudart.so*")), reverse=True
        )
    yield from ("libcudart.so", "libcudart.so.13", "libcudart.so.12")
