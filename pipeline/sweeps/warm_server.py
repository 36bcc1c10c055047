"""What the joblib workers' forkserver runs before it forks any worker
(pipeline/sweeps/warm_workers.py), and nowhere else: the server's one preload module.

- It imports the modules the sweep names in MARK (taken back out of the environment, so
  no worker inherits it), as multiprocessing's own preload would: one that cannot be
  imported is left for the job to report.
- Then it freezes the garbage collector's view of all that (gc.freeze), as Python's
  documentation advises before forking: every worker inherits ~1 M objects of torch,
  ONNX and ONNX Runtime, and each full collection in a worker would scan them again (loky
  forces one after each worker's first job). Here that was 0.15-0.2 s per worker and 20%
  of each job's time; frozen, the collections see only what the jobs make, and the
  workers stop touching (hence copying) the pages they share with the server. Collection
  stays off while importing, so freed gaps do not end up in the shared pages.
- When the sweep's process has gone (its pipe closes), the server exits by SystemExit:
  Python's full teardown of all it imported, ~0.7 s of a core after the sweep has ended,
  and until then a pipe reading the sweep's output (`| tee`, CI, subprocess.run) stays
  open. The server has nothing to clean up: it writes no file, and its workers, forked
  from it, leave by os._exit on their own. So its last exit hook (the first registered:
  hooks run last-in first-out) ends it there, after the others."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os

MARK = "TRT_PIPELINE_WARM_SERVER"

_modules = os.environ.pop(MARK, None)
if _modules is not None:
    atexit.register(os._exit, 0)
    gc.disable()
    try:
        for _name in filter(None, _modules.split(",")):
            with contextlib.suppress(ImportError):
                importlib.import_module(_name)
        gc.freeze()
    finally:
        gc.enable()
