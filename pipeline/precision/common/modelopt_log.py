"""ModelOpt's logging, kept off the console."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def quiet_modelopt(work: Path | None = None) -> Iterator[io.StringIO]:
    """ModelOpt logs every node it touches at INFO through its own handlers; keep the
    console for warnings and errors. With `work`, run in that folder: ModelOpt and ONNX
    Runtime's symbolic shape inference write temporary files (`<uuid>.data`,
    `sym_shape_infer_temp.onnx`) into the working directory and leave them there when they
    fail, so every path handed to ModelOpt inside is absolute."""
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    out = io.StringIO()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(out))
            if work is not None:
                stack.enter_context(contextlib.chdir(work))
            yield out
    finally:
        logging.disable(previous)
