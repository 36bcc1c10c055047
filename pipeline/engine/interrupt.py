"""Ctrl-C and SIGTERM during a TensorRT build. A Python exception raised inside a
TensorRT callback (the logger, the progress monitor) is caught and printed by
TensorRT ("Exception caught in log(): KeyboardInterrupt") and the build goes on; so
while the builder runs, a signal only sets a flag, the progress monitor then asks
TensorRT to cancel, and the signal is raised once the builder has returned."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from pipeline.core.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopFlag:
    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def raise_if_requested(self) -> None:
        if self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.signum is not None:
            raise Interrupted(self.signum)


@contextlib.contextmanager
def deferred_signals() -> Iterator[StopFlag]:
    """Inside: SIGINT/SIGTERM set the flag. On leaving: a caught signal is raised."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag  # only the main thread can own signal handlers; a worker keeps the defaults
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        flag.signum = flag.signum or signum

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    flag.raise_if_requested()
