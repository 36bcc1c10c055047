"""Imports made ahead, in a thread, while this one waits on native code.

TensorRT's build and a large file's write let go of the GIL and use one core: the
modules a step needs afterwards (its log analysis, its tables) can be imported on the
other one meanwhile instead of after. Python's per-module import locks make a later
`import` of the same module wait for the thread's, never run it twice."""

from __future__ import annotations

import importlib
import threading


def prefetch(*modules: str) -> threading.Thread:
    """Start importing `modules` in a daemon thread; join it only where the import must
    be finished (another `import` of them waits by itself)."""

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                return

    thread = threading.Thread(target=run, name="prefetch-imports", daemon=True)
    thread.start()
    return thread
