"""Engine bytes measured on this machine, for the calibrate stage: the fp16 and fp32 engines
of the exported graph (what a quantized engine is held against), and any graph
precision=auto asks about (its objective, engine_bytes).

Each is the engine the build stage would make of that graph: the same build settings,
profiles and fingerprint, so the same engine key. Where the store holds that key (a
precision=fp16 run built it), its size is read there; else an earlier measure is read from
the calibration cache (the bytes only, keyed by the engine key); else TensorRT builds it and
the bytes are kept. A TensorRT-RTX build of a CNN of a few MB takes about a second on this
project's 2-core machine, of a 22 M-parameter encoder a few seconds."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core import config, console, fileio, hashing
from pipeline.core.engine_sizes import QUANTIZED, EngineSize
from pipeline.records import fingerprint_file
from pipeline.records.fingerprint_file import FingerprintRecord

if TYPE_CHECKING:
    from pipeline.core.config import PipelineConfig
    from pipeline.core.layout import Layout
    from pipeline.engine.cache_key import KeyInputs


def wanted(cfg: PipelineConfig) -> bool:
    """Whether this run measures engines: its references (build.reference_engines, auto:
    quantized precisions) or precision=auto's objective."""
    p, setting = cfg.precision, cfg.build.reference_engines
    if p.mode == "weak":  # TensorRT 10's flags pick the types: no graph of its own to size
        return False
    if p.transform == "auto" and p.objective == "engine_bytes":
        return True
    return setting == "always" or (setting == "auto" and p.transform in QUANTIZED)


def for_calibrate(cfg: PipelineConfig, layout: Layout) -> Sizes | None:
    """The sizer for this run, or None (with a line) where it measures nothing or no
    TensorRT flavour can build here."""
    if not wanted(cfg):
        return None
    fp = _fingerprint(cfg, layout)
    from pipeline.core import ngc

    if ngc.machine_problem(cfg.pin, fp):
        console.note(
            f"engine sizes: not measured: this machine's TensorRT is not the pinned build "
            f"image's ({ngc.pinned(cfg.pin, 'build')}), whose engines the build stage keys"
        )
        return None
    if not fp.get("trt_flavour") or not fp.get("trt_version"):
        console.note(
            "engine sizes: no TensorRT flavour is installed here, so no engine is measured "
            "(install the rtx extra: pip install 'trt-pipeline[rtx]')"
        )
        return None
    return Sizes(cfg, fp)


def _fingerprint(cfg: PipelineConfig, layout: Layout) -> FingerprintRecord:
    """The fingerprint stage's record (DVC runs it first); this machine's, where a caller
    runs calibrate alone."""
    if layout.fingerprint.is_file():
        return fingerprint_file.read(layout.fingerprint)
    from pipeline.machine import fingerprint

    return fingerprint.collect(cfg.build, require_trt=False)


class Sizes:
    """EngineCost for the calibrate stage (precision/common/engine_cost.py)."""

    def __init__(self, cfg: PipelineConfig, fp: FingerprintRecord) -> None:
        self.cfg, self.fp = cfg, fp
        self.measured_with = f"{fp['trt_flavour']} {fp['trt_version']}, {fp['target']}"
        self.references: dict[str, EngineSize] = {}
        self.measured = False
        from pipeline.engine import cache_key

        self.settings_sha256 = cache_key.settings_sha256(
            config.to_dict(cfg.build), config.to_dict(cfg.profile), fp
        )

    def measure_references(self, export_dir: Path, first_batch: dict[str, np.ndarray]) -> None:
        """The fp32 engine of the exported graph, and the fp16 one of the graph
        precision=fp16 makes of it (AutoCast, through the calibration cache); once."""
        from pipeline.core.layout import GRAPH

        if self.measured:
            return
        self.measured = True
        graph = export_dir / GRAPH
        got = self.size_of(graph, "the fp32 engine")
        if got is not None:
            self.references["fp32"] = got
        with tempfile.TemporaryDirectory(prefix="fp16-reference.") as tmp:
            fp16 = Path(tmp) / GRAPH
            self.fp16_graph(graph, fp16, first_batch)
            got = self.size_of(fp16, "the fp16 engine")
            if got is not None:
                self.references["fp16"] = got

    def fp16_graph(self, src: Path, dest: Path, first_batch: dict[str, np.ndarray]) -> None:
        """What precision=fp16 writes for `src`: AutoCast with this run's AutoCast settings,
        on the same first reference batch (so the same cache entry and engine key)."""
        from pipeline.precision import finish
        from pipeline.precision.autocast.cast import autocast, fp16_of

        fp16 = fp16_of(self.cfg.precision)
        autocast(src, dest, fp16, self.cfg.calibration, first_batch)
        finish.cast_tables(dest, fp16)

    def size_of(self, graph: Path, what: str) -> EngineSize | None:
        key, key_in, resolved = self._key(graph)
        stored = self._stored(key)
        if stored is not None:
            return {"bytes": stored, "key": key, "source": "store"}
        from pipeline.engine import build
        from pipeline.precision.calibration import cache

        built: list[int] = []

        def make() -> tuple[dict[str, Any], dict[str, Any], str]:
            console.detail(f"engine sizes: building {what} to measure it ({self.measured_with})")
            result = build.build_engine(
                graph,
                self.cfg.precision,
                self.cfg.build,
                resolved,
                fingerprint_file.trt_flavour(self.fp),
                progress=True,
            )
            built.append(len(result.engine))
            data = fileio.to_json({"bytes": len(result.engine), "key": key}).encode()
            return {"engine.json": data}, {"kind": "engine size", "what": what}, "miss"

        try:
            got, _ = cache.cached(
                self.cfg.calibration,
                hashing.sha256_json({"kind": "engine size", **key_in}),
                make,
                "engine size",
                required=("engine.json",),
            )
        except build.BuildFailed as e:
            console.warn(
                f"engine sizes: TensorRT could not build {what}, so it is not measured: {e}"
            )
            return None
        size = int(json.loads(got.read("engine.json"))["bytes"])
        return {"bytes": size, "key": key, "source": "built" if built else "measured"}

    def _key(self, graph: Path) -> tuple[str, KeyInputs, list[dict[str, Any]]]:
        """The engine key the build stage would give `graph`'s engine, its inputs, and the
        profiles resolved for it."""
        from pipeline.engine import build, cache_key
        from pipeline.graph import onnx_model

        resolved = build.resolve_profiles(self.cfg.profile, graph)
        key_in = cache_key.key_inputs(
            onnx_sha256=onnx_model.sha256(graph),
            build_cfg=config.to_dict(self.cfg.build),
            precision_cfg=config.to_dict(self.cfg.precision),
            profile_cfg=config.to_dict(self.cfg.profile),
            calibration_sha256=None,
            plugin_sha256=cache_key.plugin_sha256(self.cfg.build.plugins),
            fingerprint=self.fp,
        )
        return cache_key.cache_key(key_in), key_in, resolved

    def _stored(self, key: str) -> int | None:
        """The engine's bytes where the store holds a whole entry for `key`."""
        from pipeline.engine.store import EngineStore
        from pipeline.store import ENGINES

        store = EngineStore(ENGINES.root(self.cfg.build.store_dir))
        entry = store.get(key)
        if entry is None:
            return None
        return entry.file("engine.plan").stat().st_size
