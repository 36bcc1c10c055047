"""The one exception type users see.

A PipelineError is a problem with the user's input (config, model, data, machine):
the CLI prints its message as one line and exits 1. Anything else is a bug in this
tool and keeps its traceback.
"""


class PipelineError(Exception):
    """Bad config, bad model, unsupported op, missing data, foreign engine."""


class NothingToQuantize(PipelineError):
    """A precision transform found no node of the graph it can take (precision=auto leaves
    that type out of its search, with a line)."""


def first_line(e: BaseException) -> str:
    """The first line of a library's exception, for a one-line PipelineError; never
    empty (some exceptions carry no message)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class Interrupted(BaseException):
    """SIGTERM (or another stop signal) turned into an exception, so that staged folders
    and locks are cleaned up on the way out; the CLI exits 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum
