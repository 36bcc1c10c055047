"""What the package stage made of one model (serve/repository.py writes the folder)."""

from typing import TypedDict


class PackageRecord(TypedDict):
    """What `write` made of one model, for the stage's table and the caller."""

    model: str
    plans: dict[str, str]  # compute capability -> plan file name
    max_batch_size: int
    configs: list[str]  # config.pbtxt and configs/<gpu kind>.pbtxt
    checked: list[str]  # what was checked, a line each
