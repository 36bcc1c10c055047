"""Where each stage reads and writes, relative to one root: the repository for
`dvc repro`, a job folder for a Hydra sweep. dvc.yaml names the same paths."""

from __future__ import annotations

import re
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
# A model's name is a folder (artifacts/<model>, a Triton model in the repository) and a DVC
# stage's suffix (export@<model>): one path segment.
MODEL_NAME = r"[A-Za-z0-9_.-]+"


def model_name_problem(name: str) -> str | None:
    if not re.fullmatch(MODEL_NAME, name) or name in (".", ".."):
        return f"{name!r} is not a model name (letters, digits, _ . -)"
    return None


@dataclass(frozen=True)
class Layout:
    root: Path = Path(".")
    # One model of several (core/models.py): its stages' files lie in artifacts/<model>/
    # and metrics/<model>/; the machine's fingerprint and the Triton repository are shared.
    model: str | None = None

    @property
    def fingerprint(self) -> Path:
        return self.root / "artifacts" / "fingerprint.json"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts" / self.model if self.model else self.root / "artifacts"

    @property
    def export_dir(self) -> Path:
        return self.artifacts / "export"

    @property
    def calibrate_dir(self) -> Path:
        return self.artifacts / "calibrate"

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
        return self.artifacts / "build"

    def engine_dir(self, fingerprint_id: str) -> Path:
        return self.build_dir / fingerprint_id

    @property
    def repository(self) -> Path:
        """The Triton model repository the package stage writes."""
        return self.root / "repository"

    @property
    def inspect_dir(self) -> Path:
        return self.artifacts / "inspect"

    @property
    def metrics_dir(self) -> Path:
        return self.root / "metrics" / self.model if self.model else self.root / "metrics"

    @property
    def index_dir(self) -> Path:
        """The page and table across a project's several models."""
        return self.root / "index"
