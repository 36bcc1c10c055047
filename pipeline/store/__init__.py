"""The verified content-addressed store, and where each store lives.

One mechanism under the engine store (pipeline/engine/store.py), the calibration cache
(pipeline/precision/calibration/cache.py) and sweep job reuse (pipeline/sweeps/job_cache.py):
entries written whole by an atomic rename, verified on read, built once under a lock; an
entry's files as bytes or as files on disk; a stat cache that spares re-hashing a verified
entry. Everything outside this package imports from here, never from its modules."""

from pipeline.store._entry import (
    ENTRY_FILE,
    LARGE_BYTES,
    SHA256,
    FileData,
    FileOnDisk,
    Outcome,
    plain_name_problem,
    regular_file_problem,
)
from pipeline.store._locations import CALIBRATION, ENGINES, Place
from pipeline.store._pending import PendingFiles
from pipeline.store._stat import vouches
from pipeline.store._verified import VerifiedStore

__all__ = [
    "CALIBRATION",
    "ENGINES",
    "ENTRY_FILE",
    "LARGE_BYTES",
    "SHA256",
    "FileData",
    "FileOnDisk",
    "Outcome",
    "PendingFiles",
    "Place",
    "VerifiedStore",
    "plain_name_problem",
    "regular_file_problem",
    "vouches",
]
