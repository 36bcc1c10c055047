"""The fingerprint stage (always run): this machine's GPU, driver and TensorRT, which key
its engines. Read without OmegaConf: the stage starts on every `dvc repro`."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pipeline.core import fileio
from pipeline.core.layout import Layout
from pipeline.core.machine_settings import FingerprintParams
from pipeline.records.fingerprint_file import FingerprintRecord


def run(cfg: FingerprintParams, layout: Layout) -> FingerprintRecord:
    """This machine's fingerprint, written where it changed."""
    from pipeline.machine import fingerprint

    if TYPE_CHECKING:
        from pipeline.core.config import BuildConfig
        from pipeline.machine.build_settings import BuildSettings
    # `build` is one of the two, as FingerprintParams says: collect names them.
    fp = fingerprint.collect(cast("BuildConfig | BuildSettings", cfg.build))
    # Unchanged (the usual no-op `dvc repro`): the file is left as it is, see fileio.
    fileio.write_bytes_if_changed(layout.fingerprint, fileio.to_json(fp).encode())
    return fp
