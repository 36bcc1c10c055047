"""ModelOpt's logging, kept off the console."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_modelopt() -> Iterator[io.StringIO]:
    """ModelOpt logs every node it touches at INFO through its own handlers; keep the
    console for warnings and errors."""
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            yield out
    finally:
        logging.disable(previous)
