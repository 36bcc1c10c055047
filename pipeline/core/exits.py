"""Turn PipelineError into one line on stderr and exit status 1."""

from __future__ import annotations

import errno
import functools
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from pipeline.core import console
from pipeline.core.errors import Interrupted, PipelineError

# The machine's state, not a bug in this tool: a full disk, a quota, a read-only
# mount, missing permission, a file too large. One line naming the path and cause.
ENVIRONMENT_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EFBIG,
}


def one_line(message: object) -> str:
    return " ".join(str(message).split())


def exits_cleanly(main: Callable[..., int | None]) -> Callable[..., int]:
    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> int:
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
        except Interrupted as e:
            print(
                "error: interrupted" if e.signum == signal.SIGINT else f"error: {e}",
                file=sys.stderr,
            )
            return 128 + e.signum

    return wrapper


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


def run(main: Callable[..., int | None]) -> None:
    # SIGTERM unwinds like Ctrl-C, so staged outputs and locks are cleaned up.
    signal.signal(signal.SIGTERM, _terminate)
    console.capture_third_party_logs()
    code = exits_cleanly(main)()
    # The work is done and its exit status decided: a signal now must not turn into a
    # traceback or a death by signal during interpreter shutdown.
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    sys.exit(code)
