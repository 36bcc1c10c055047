"""Where each stage reads and writes, relative to one root: the repository for
`dvc repro`, a job folder for a Hydra sweep. dvc.yaml names the same paths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Written by the calibrate step for TensorRT 10 implicit int8 calibration; the build's
# cache key hashes it, so its name lives here, away from the modules that make it.
WEAK_CALIBRATION_INPUTS = "calibration_inputs.npz"


@dataclass(frozen=True)
class Layout:
    root: Path = Path(".")

    @property
    def fingerprint(self) -> Path:
        return self.root / "artifacts" / "fingerprint.json"

    @property
    def export_dir(self) -> Path:
        return self.root / "artifacts" / "export"

    @property
    def calibrate_dir(self) -> Path:
        return self.root / "artifacts" / "calibrate"

    @property
    def weak_calibration_inputs(self) -> Path:
        return self.calibrate_dir / WEAK_CALIBRATION_INPUTS

    @property
    def build_dir(self) -> Path:
        return self.root / "artifacts" / "build"

    def engine_dir(self, fingerprint_id: str) -> Path:
        return self.build_dir / fingerprint_id

    @property
    def inspect_dir(self) -> Path:
        return self.root / "artifacts" / "inspect"

    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics"
