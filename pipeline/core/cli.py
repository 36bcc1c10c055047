"""Turn PipelineError into one line on stderr and exit status 1."""

from __future__ import annotations

import errno
import functools
import sys
from typing import Callable

from pipeline.core.errors import PipelineError

# The machine's state, not a bug in this tool: a full disk, a quota, a read-only
# mount, missing permission, a file too large. One line naming the path and cause.
ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def one_line(message: str) -> str:
    return " ".join(str(message).split())


def exits_cleanly(main: Callable[..., int | None]) -> Callable[..., int]:
    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs) or 0
        except PipelineError as e:
            print(f"error: {one_line(e)}", file=sys.stderr)
            return 1
        except OSError as e:
            if e.errno not in ENVIRONMENT_ERRNOS:
                raise
            where = f"{e.filename}: " if e.filename else ""
            print(f"error: {one_line(where + (e.strerror or str(e)))}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130

    return wrapper


def run(main: Callable[..., int | None]) -> None:
    sys.exit(exits_cleanly(main)())
