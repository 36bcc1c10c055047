"""Imported first by the joblib workers' forkserver (pipeline/warm_workers.py) and
nowhere else: it makes the server leave at once when the sweep's process has gone.

The server exits when the sweep's process does (its pipe closes), by SystemExit: Python's
full teardown of a process holding torch, ONNX and ONNX Runtime, about 0.7 s of a core
after the sweep has ended, and until it ends a pipe reading the sweep's output (`| tee`,
CI, subprocess.run) stays open. The server has nothing to clean up: it writes no file, and
its workers, forked from it, leave by os._exit on their own. So its last exit hook (the
first registered, hooks run last-in first-out) ends the process there, after the others.

The sweep sets MARK only in the server's environment; this import takes it back out, so
no worker forked from the server inherits it."""

from __future__ import annotations

import atexit
import os

MARK = "TRT_PIPELINE_WARM_SERVER"

if os.environ.pop(MARK, None) == "1":
    atexit.register(os._exit, 0)
