"""TensorRT callbacks: a logger that keeps every record, and a progress monitor
that draws a bar. Classes are made per TensorRT module because each flavour has
its own ILogger / IProgressMonitor base types."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any, NamedTuple, Protocol

from pipeline.core import console
from pipeline.engine.interrupt import StopFlag


class Record(NamedTuple):
    """One TensorRT log record; build.log keeps every one, analysis.buildlog reads them."""

    severity: str
    phase: str
    seconds: float
    message: str


class RecordingLogger(Protocol):
    """What make_logger's logger adds to the flavour's trt.ILogger."""

    records: list[Record]
    phase: str

    def errors(self) -> list[str]: ...


def make_logger(trt: ModuleType) -> RecordingLogger:
    severity_names = {
        trt.ILogger.Severity.INTERNAL_ERROR: "internal_error",
        trt.ILogger.Severity.ERROR: "error",
        trt.ILogger.Severity.WARNING: "warning",
        trt.ILogger.Severity.INFO: "info",
        trt.ILogger.Severity.VERBOSE: "verbose",
    }

    # Each flavour has its own ILogger, so the base is only known at run time (and
    # TensorRT ships no type information).
    class TracingLogger(trt.ILogger):  # type: ignore[misc,name-defined]
        """Keeps everything (verbose included) in memory; nothing goes to the console,
        so a build's thousands of verbose lines end up in build.log only."""

        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.records: list[Record] = []
            self.phase = "setup"
            self._t0 = time.perf_counter()

        def log(self, severity: Any, msg: str) -> None:
            self.records.append(
                Record(
                    severity_names.get(severity, str(severity)),
                    self.phase,
                    time.perf_counter() - self._t0,
                    str(msg),
                )
            )

        def errors(self) -> list[str]:
            return [r.message for r in self.records if r.severity in ("error", "internal_error")]

    return TracingLogger()


def make_progress_monitor(
    trt: ModuleType, enabled: bool = True, stop: StopFlag | None = None
) -> object:
    # A subclass of the flavour's own IProgressMonitor, as for the logger above.
    class BarMonitor(trt.IProgressMonitor):  # type: ignore[misc,name-defined]
        """One bar per top-level builder phase; the deepest running phase below it
        (optimizing, timing tactics...) shows as the bar's postfix."""

        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self._bars: dict[str, console.Bar] = {}
            self._root: dict[str, str] = {}

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            if parent_phase is None:
                if enabled:
                    self._bars[phase_name] = console.bar(
                        total=num_steps, desc=phase_name, unit="step"
                    )
                self._root[phase_name] = phase_name
                return
            root = self._root.get(parent_phase)
            if root is not None:
                self._root[phase_name] = root
                if root in self._bars:
                    self._bars[root].set_postfix_str(phase_name, refresh=True)

        def step_complete(self, phase_name: str, step: int) -> bool:
            bar = self._bars.get(phase_name)
            if bar is not None:
                bar.n = step + 1
                bar.refresh()
            return not (stop is not None and stop.requested)  # False cancels the build

        def phase_finish(self, phase_name: str) -> None:
            if self._root.pop(phase_name, None) == phase_name:
                bar = self._bars.pop(phase_name, None)
                if bar is not None:
                    bar.close()

    return BarMonitor()
