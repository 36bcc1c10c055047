"""The terminal, in one place: verbosity, progress bars, end-of-stage tables, and
third-party log records kept in a file instead of on the screen.

Every layer draws its bars through `bar()`, so the look (rich) is decided here once.
Verbosity comes from `TRT_PIPELINE_VERBOSITY` (quiet | normal | verbose), which is what
`dvc repro` passes down to `python -m stages.<name>`, or from -q/-v on the CLI, which
set the same variable so child processes agree."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import ProgressColumn

ENV = "TRT_PIPELINE_VERBOSITY"
LEVELS = {"quiet": -1, "-1": -1, "q": -1, "normal": 0, "0": 0, "": 0, "verbose": 1, "1": 1, "v": 1}
LOG_DIR_ENV = "TRT_PIPELINE_LOG_DIR"
# Where stderr is no terminal (a DVC stage's log, CI), a bar prints a plain line this often.
LINES_EVERY_ENV = "TRT_PIPELINE_PROGRESS_EVERY"
LINES_EVERY = 30.0
# ModelOpt configures console handlers on sys.stdout at import and again on each call;
# these are the modules that do it.
THIRD_PARTY_LOG_CONFIG = ("modelopt.onnx.logging_config", "modelopt.onnx.autocast.logging_config")


def verbosity() -> int:
    value = os.environ.get(ENV, "normal").strip().lower()
    return LEVELS.get(value, 0)


def set_verbosity(level: int) -> None:
    os.environ[ENV] = {-1: "quiet", 0: "normal", 1: "verbose"}[max(-1, min(1, level))]


def warn(message: str) -> None:
    """'warning: <message>' on stderr, one line, at every verbosity: something the user
    should know that does not stop the run (a store that could not keep an entry)."""
    print(f"warning: {' '.join(message.split())}", file=sys.stderr)


def note(message: str) -> None:
    """One line on stderr of what the tool is doing or did (a store hit, a search starting),
    left out when quiet."""
    if verbosity() >= 0:
        print(" ".join(message.split()), file=sys.stderr)


def detail(message: str) -> None:
    """One line on stderr that only -v (verbose) shows: what a step does on the way (each
    engine a stage builds to measure it), which a long step's bar already accounts for."""
    if verbosity() >= 1:
        print(" ".join(message.split()), file=sys.stderr)


def _stderr_console() -> Console:
    from rich.console import Console

    # Bound to the stderr of the moment: ModelOpt's output is redirected while it
    # calibrates, and the calibration bar must still reach the terminal.
    return Console(file=sys.stderr, highlight=False)


def columns(unit: str = "", percent: bool = False) -> list[ProgressColumn]:
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

    # Percent, not a rate: a rate of a fraction ("130.12%/s") means nothing.
    done = (
        "{task.percentage:>3.0f}%" if percent else "{task.completed:.0f}/{task.total:.0f} " + unit
    )
    return [
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn(done),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
    ]


class Bar:
    """A tqdm-shaped bar (update, reset, n, set_postfix_str, close, context manager) so
    call sites written against tqdm keep working when they import this instead."""

    _progress: Any = None
    _open = 0
    n: float

    def __init__(
        self,
        total: float | None = None,
        desc: str = "",
        unit: str = "",
        percent: bool = False,
        **_tqdm_kwargs: Any,
    ) -> None:
        self.total, self.desc, self.n = total, desc, 0
        self._task = None
        self._lines: _Lines | None = None
        if verbosity() < 0:
            return
        if not _stderr_console().is_terminal:
            self._lines = _Lines(desc, total, unit)
            return
        if Bar._progress is None:
            from rich.progress import Progress

            Bar._progress = Progress(
                *columns(unit, percent), console=_stderr_console(), transient=True
            )
            Bar._progress.start()
        Bar._open += 1
        self._task = Bar._progress.add_task(desc, total=total, note="")

    def update(self, n: float = 1) -> None:
        self.set(self.n + n)

    def set(self, n: float) -> None:
        self.n = n
        if self._task is not None:
            Bar._progress.update(self._task, completed=n)
        elif self._lines is not None:
            self._lines.tick(n)

    def reset(self) -> None:
        self.set(0)

    def refresh(self) -> None:
        self.set(self.n)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        if self._task is not None:
            Bar._progress.update(self._task, note=text)
        elif self._lines is not None:
            self._lines.note = text

    def close(self) -> None:
        if self._lines is not None:
            self._lines.done(self.n)
            self._lines = None
        if self._task is None:
            return
        Bar._progress.remove_task(self._task)
        self._task = None
        Bar._open -= 1
        if Bar._open == 0:
            Bar._progress.stop()
            Bar._progress = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Lines:
    """A bar as plain lines, for a log that is no terminal: every LINES_EVERY seconds (its
    variable overrides), what is done of what, the note (a search's best so far), the time
    so far and, where the total is known, an estimate of the rest; and a last line once
    any was printed."""

    def __init__(self, desc: str, total: float | None, unit: str) -> None:
        import time

        self.desc, self.total, self.unit, self.note = desc, total, unit, ""
        self.started = self.last = time.monotonic()
        self.every = float(os.environ.get(LINES_EVERY_ENV) or LINES_EVERY)
        self.printed = False

    def tick(self, n: float) -> None:
        import time

        now = time.monotonic()
        if now - self.last < self.every or n <= 0:
            return
        self.last, self.printed = now, True
        spent = now - self.started
        of = f"/{self.total:.0f}" if self.total else ""
        rest = ""
        if self.total and n < self.total:
            rest = f", about {spent / n * (self.total - n):.0f} s left"
        note = f"; {self.note}" if self.note else ""
        print(f"{self.desc}: {n:.0f}{of} {self.unit} in {spent:.0f} s{rest}{note}", file=sys.stderr)

    def done(self, n: float) -> None:
        import time

        if self.printed:
            spent = time.monotonic() - self.started
            note = f"; {self.note}" if self.note else ""
            print(f"{self.desc}: done, {n:.0f} {self.unit} in {spent:.0f} s{note}", file=sys.stderr)


def bar(
    total: float | None = None, desc: str = "", unit: str = "", percent: bool = False, **kwargs: Any
) -> Bar:
    return Bar(total, desc, unit, percent, **kwargs)


def table(title: str, rows: list[tuple[str, str]]) -> None:
    """The short summary a stage ends with (stderr: stdout may be a pipe of data)."""
    if verbosity() < 0 or not rows:
        return
    from rich.table import Table

    t = Table(title=title, show_header=False, title_justify="left", box=None, padding=(0, 1))
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, v)
    _stderr_console().print(t)


def log_path() -> Path:
    return Path(os.environ.get(LOG_DIR_ENV) or ".cache/logs") / "third_party.log"


def capture_third_party_logs() -> Path:
    """Third-party records go to a file (and to stderr with -v), not between our bars."""
    path = log_path()
    root = logging.getLogger()
    ours = {getattr(h, "_trt_pipeline", None) for h in root.handlers}
    wanted: list[tuple[str, logging.Handler]] = []
    if "file" not in ours:
        to_file = _LazyFileHandler(path)
        to_file.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        wanted.append(("file", to_file))
    # Called again once -v has been parsed: the screen handler joins then.
    if verbosity() > 0 and "screen" not in ours:
        wanted.append(("screen", logging.StreamHandler(sys.stderr)))
    for tag, h in wanted:
        h._trt_pipeline = tag  # type: ignore[attr-defined]
        root.addHandler(h)
    root.setLevel(min(root.level or logging.WARNING, logging.INFO))
    logging.captureWarnings(True)
    if not any(isinstance(f, _TameOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _TameOnImport())
    for name in THIRD_PARTY_LOG_CONFIG:
        if name in sys.modules:
            _tame(sys.modules[name])
    return path


class _LazyFileHandler(logging.FileHandler):
    """No folder and no file until the first record: a `diff` run leaves nothing behind."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self):  # type: ignore[no-untyped-def]
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def _silence(logger: logging.Logger) -> None:
    for h in list(logger.handlers):
        if type(h) is logging.StreamHandler:
            logger.removeHandler(h)
    # A handler must remain: ModelOpt's autocast adds its own console handler when
    # its parent has none. Records still propagate to the root, i.e. to our log.
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


def _tame(module: Any) -> None:
    logger, configure = getattr(module, "logger", None), getattr(module, "configure_logging", None)
    if logger is None or configure is None or getattr(configure, "_tamed", False):
        return
    _silence(logger)

    def configure_logging(*args: Any, **kwargs: Any) -> None:
        configure(*args, **kwargs)
        _silence(logger)

    configure_logging._tamed = True  # type: ignore[attr-defined]
    module.configure_logging = configure_logging


class _TameOnImport(importlib.abc.MetaPathFinder):
    """Runs `_tame` right after ModelOpt's logging modules execute, before any module
    imports their configure_logging by name."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in THIRD_PARTY_LOG_CONFIG:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, execute = spec.loader, spec.loader.exec_module

        def exec_module(module: Any) -> None:
            execute(module)
            _tame(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
