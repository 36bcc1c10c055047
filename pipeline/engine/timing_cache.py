"""One TensorRT timing cache per fingerprint, kept beside the engine store.

Full TensorRT only: TensorRT-RTX has no timing cache (its calls are no-ops since
1.2), and the manifest says so rather than claiming hits. TensorRT reports no hit
count; the manifest records entries before and after the build, so new entries are
the misses, and `strict` makes any miss an error for reproducible tactic choice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core import console, fileio, locking
from pipeline.core.errors import PipelineError
from pipeline.engine import backend
from pipeline.records.build_file import TimingCacheReport
from pipeline.store import ENGINES


class TimingCache:
    def __init__(self, path: Path, mode: str) -> None:
        self.path, self.mode = path, mode
        self.status = "unused"
        self.entries_before: int | None = None
        self.entries_after: int | None = None
        self._cache = None

    @classmethod
    def for_fingerprint(
        cls, store_dir: str | None, fingerprint_id: str, mode: str
    ) -> TimingCache | None:
        if mode == "off":
            return None

        return cls(ENGINES.root(store_dir) / "timing" / f"{fingerprint_id}.cache", mode)

    def attach(self, trt: Any, config: Any) -> None:
        if backend.is_rtx(trt):
            self.status = "no-op: TensorRT-RTX has no timing cache"
            return
        data = self.path.read_bytes() if self.path.exists() else b""
        if self.mode in ("read", "strict") and not data:
            if self.mode == "strict":
                raise PipelineError(
                    f"build.timing_cache=strict needs an existing timing cache at {self.path}; "
                    f"build once with readwrite first"
                )
        cache = config.create_timing_cache(data)
        if data and cache is None:
            raise PipelineError(
                f"timing cache {self.path} is unreadable by TensorRT {trt.__version__}"
            )
        if not config.set_timing_cache(cache, ignore_mismatch=False):
            raise PipelineError(
                f"timing cache {self.path} was made on another device or TensorRT version"
            )
        if self.mode == "strict":
            config.set_flag(trt.BuilderFlag.ERROR_ON_TIMING_CACHE_MISS)
        self._cache = cache
        self.entries_before = _count(cache)
        self.status = "loaded" if data else "new"

    def save(self, trt: Any, config: Any) -> None:
        if self._cache is None:
            return
        self.entries_after = _count(self._cache)
        if self.mode != "readwrite":
            return
        try:
            with locking.exclusive(str(self.path) + ".lock"):
                # Another builder may have saved meanwhile: merge rather than overwrite.
                if self.path.exists():
                    other = config.create_timing_cache(self.path.read_bytes())
                    if other is not None:
                        self._cache.combine(other, False)
                fileio.write_bytes(self.path, bytes(self._cache.serialize()))
        except OSError as e:  # a read-only or full store: the engine is still good
            self.status = f"not saved: {e.strerror} ({e.filename or self.path})"
            console.warn(f"timing cache {self.status}")
            return
        self.status = "saved"

    def report(self) -> TimingCacheReport:
        new = (
            self.entries_after - self.entries_before
            if self.entries_after is not None and self.entries_before is not None
            else None
        )
        return {
            "mode": self.mode,
            "file": self.path.name,
            "status": self.status,
            "entries_before": self.entries_before,
            "entries_after": self.entries_after,
            "misses": new,
        }


def _count(cache: Any) -> int | None:
    query = getattr(cache, "queryKeys", None) or getattr(cache, "query_keys", None)
    try:
        return len(query()) if query else None
    except RuntimeError:
        return None
