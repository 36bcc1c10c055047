"""Where each stage reads and writes, relative to one root: the repository for
`dvc repro`, a job folder for a Hydra sweep. dvc.yaml names the same paths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Written by the calibrate step for TensorRT 10 implicit int8 calibration; the build's
# cache key hashes it, so its name lives here, away from the modules that make it.
WEAK_CALIBRATION_INPUTS = "calibration_inputs.npz"
# The files the export and calibrate stages write into their folders, named once: every
# stage and function that reads them takes the name from here.
GRAPH = "model.onnx"  # the graph (export: fp32; calibrate: the one TensorRT builds)
REFERENCE = "reference.npz"  # export: reference inputs with their fp32 outputs and labels
EXPORT_SUMMARY = "export.json"
CALIBRATION_SUMMARY = "calibration.json"


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
    def export_graph(self) -> Path:
        return self.export_dir / GRAPH

    @property
    def reference(self) -> Path:
        return self.export_dir / REFERENCE

    @property
    def export_summary(self) -> Path:
        return self.export_dir / EXPORT_SUMMARY

    @property
    def calibrated_graph(self) -> Path:
        return self.calibrate_dir / GRAPH

    @property
    def calibration_summary(self) -> Path:
        return self.calibrate_dir / CALIBRATION_SUMMARY

    @property
    def accuracy_metrics(self) -> Path:
        return self.metrics_dir / "accuracy.json"

    @property
    def gates_metrics(self) -> Path:
        return self.metrics_dir / "gates.json"

    @property
    def weak_calibration_inputs(self) -> Path:
        return self.calibrate_dir / WEAK_CALIBRATION_INPUTS

    @property
    def build_dir(self) -> Path:
        return self.root / "artifacts" / "build"

    def engine_dir(self, fingerprint_id: str) -> Path:
        return self.build_dir / fingerprint_id

    @property
    def repository(self) -> Path:
        """The Triton model repository the package stage writes."""
        return self.root / "repository"

    @property
    def inspect_dir(self) -> Path:
        return self.root / "artifacts" / "inspect"

    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics"
