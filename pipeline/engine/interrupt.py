"""Ctrl-C and SIGTERM while TensorRT runs. A Python exception raised inside a TensorRT
callback (the logger, the progress monitor, a calibrator) is caught and printed by
TensorRT ("Exception caught in log(): KeyboardInterrupt") and TensorRT goes on, so the
stage would store the engine and exit 0. While TensorRT objects live, a signal therefore
only sets a flag (the progress monitor then asks TensorRT to cancel the build), and it
is raised as Interrupted once TensorRT has returned: exit 130/143, nothing stored.

The same scope keeps Python's cyclic garbage collector out of TensorRT's callbacks: a
collection that runs inside one (the logger allocates) while TensorRT holds its builder
lock, and that frees a TensorRT object of an earlier build left in a reference cycle (a
traceback's frames hold it), waits on that same lock for ever (seen: a second
trt.Builder() hung in createInferBuilder). Cycles are collected on entry, outside any
TensorRT lock, and automatic collection waits until TensorRT has returned."""

from __future__ import annotations

import contextlib
import gc
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
        if self.signum is not None:
            raise Interrupted(self.signum)


@contextlib.contextmanager
def tensorrt_scope() -> Iterator[StopFlag]:
    """Where TensorRT objects live: signals deferred, the cyclic collector paused."""
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with deferred_signals() as flag:
            yield flag
    finally:
        if collecting:
            gc.enable()


@contextlib.contextmanager
def deferred_signals() -> Iterator[StopFlag]:
    """Inside: SIGINT/SIGTERM set the flag and nothing else. On leaving: a caught signal
    is raised as Interrupted, also over an error TensorRT gave meanwhile (a cancelled
    build fails; the user asked to stop, and that is what the exit status says)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag  # only the main thread can own signal handlers; a worker keeps the defaults
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        flag.signum = flag.signum or signum

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield flag
    except BaseException as e:
        if flag.signum is not None:
            raise Interrupted(flag.signum) from e
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    flag.raise_if_requested()
