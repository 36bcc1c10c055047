"""A multirun job's folder name: Hydra's `override_dirname`, made a single safe file name.

conf/config.yaml names each job folder `${trt_jobdir:${hydra.job.override_dirname}}`.
Hydra's name keeps a value's `/`, so `model.onnx_path=/data/m.onnx` would nest three
folders (and a `..` in a value would climb out of the sweep folder); `%` and `/` are
percent-encoded instead, which keeps distinct overrides distinct. Hydra's name has no
length limit either, while one file name holds 255 bytes: a longer name keeps every key
with the longest values cut in the middle (the tail, a path's file name, kept longer) and
ends in `~` and a hash of the whole, so it stays readable, unique and the same on every
run. The full overrides stay in `<job>/.hydra/overrides.yaml` and result.json.

Registered when Hydra imports this plugin package, before it composes. Launchers hand
their workers (joblib's loky processes, Ray tasks, submitit jobs) Hydra's singleton state,
registered resolvers included, and the worker resolves its job folder's name itself."""

from __future__ import annotations

import hashlib
import re

RESOLVER = "trt_jobdir"
MAX_BYTES = 255  # NAME_MAX on Linux file systems (ext4, xfs, NFS) and macOS
HASH_CHARS = 12
ELLIPSIS = "..."
# Where one `key=value` ends: a comma before the next key. Only the shortening relies on
# it (a value holding ",k=" is cut in an odd place); the hash covers the whole name.
ITEM = re.compile(r",(?=[\w.+~@%-]+=)")


def _size(text: str) -> int:
    return len(text.encode())


def _elide(value: str, cap: int) -> str:
    """The value's head and, longer, its tail (a path's file name) around an ellipsis."""
    if len(value) <= cap:
        return value
    head = (cap - len(ELLIPSIS)) // 3
    return value[:head] + ELLIPSIS + value[len(value) - (cap - len(ELLIPSIS) - head) :]


def _shorten(safe: str, budget: int) -> str:
    """Every key kept and the longest values cut to one common length, when that fits;
    else the name's first bytes."""
    items = [item.partition("=") for item in ITEM.split(safe)]
    for cap in range(max(len(v) for _, _, v in items), 2 * len(ELLIPSIS), -1):
        text = ",".join(k + eq + _elide(v, cap) for k, eq, v in items)
        if _size(text) <= budget:
            return text
    # Cut on a character boundary: a split UTF-8 sequence is dropped, not mangled.
    return safe.encode()[:budget].decode(errors="ignore")


def name(override_dirname: str) -> str:
    whole = str(override_dirname)
    safe = whole.replace("%", "%25").replace("/", "%2F")
    if _size(safe) <= MAX_BYTES:
        return safe
    digest = hashlib.sha256(whole.encode()).hexdigest()[:HASH_CHARS]
    return f"{_shorten(safe, MAX_BYTES - HASH_CHARS - 1)}~{digest}"


def register() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, name)
