"""The one exception type users see.

A PipelineError is a problem with the user's input (config, model, data, machine):
the CLI prints its message as one line and exits 1. Anything else is a bug in this
tool and keeps its traceback.
"""


class PipelineError(Exception):
    """Bad config, bad model, unsupported op, missing data, foreign engine."""
