"""A decoder's prompts, as token ids: what model.prompts and calibration.source=prompts read.

A prompt source is a file or a folder of them (sorted by name):

    *.txt   one prompt per line (blank lines skipped), tokenized by model.tokenizer
    *.npy   token ids [prompts, tokens], or one prompt [tokens]
    *.npz   the same under the key `input_ids`

The tokenizer is a Hugging Face `tokenizer.json` (or a folder holding one), read by the
`tokenizers` library that every `transformers` install brings: the fast tokenizer file each
model on the Hub ships, loaded without network or model code. Nothing is unpickled."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeline.core import fileio
from pipeline.core.errors import PipelineError, first_line
from pipeline.inputs.array_folder import read_npy

SUFFIXES = (".txt", ".npy", ".npz")
TOKENIZER_FILE = "tokenizer.json"


def read(
    source: str | Path, tokenizer: str | None, key: str, tracked: tuple[str, ...] = ()
) -> list[np.ndarray]:
    """Every prompt under `source` as a 1-D int64 array of token ids, in file order;
    `key` names the setting in errors (model.prompts, calibration.path). A tokenizer must
    lie under one of `tracked` (the paths DVC tracks for the reading stage), or a new one
    would leave the data it made as it was."""
    path = Path(source)
    if not path.exists():
        raise PipelineError(f"{key}={source}: no such file or folder")
    files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES) if path.is_dir() else [path]
    if not files or any(f.suffix not in SUFFIXES for f in files):
        raise PipelineError(
            f"{key}={source}: holds no prompts (.txt, one per line, with model.tokenizer; or "
            f"token ids in .npy, or .npz under `input_ids`)"
        )
    encode = None
    out: list[np.ndarray] = []
    for f in files:
        if f.suffix == ".txt":
            encode = encode or _tokenizer(tokenizer, f, tracked)
            lines = [ln for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
            out += [np.asarray(encode(ln), dtype=np.int64) for ln in lines]
        else:
            out += _token_arrays(f, key)
    if not out or any(p.size == 0 for p in out):
        raise PipelineError(f"{key}={source}: a prompt with no tokens (every one needs one)")
    return out


def _token_arrays(path: Path, key: str) -> list[np.ndarray]:
    if path.suffix == ".npz":
        arrays = fileio.read_npz(path, "prompts")
        if "input_ids" not in arrays:
            raise PipelineError(f"{key}: {path} has no `input_ids` array ({', '.join(arrays)})")
        ids = arrays["input_ids"]
    else:
        ids = read_npy(path, "prompts")
    if ids.dtype.kind not in "iu" or ids.ndim not in (1, 2):
        raise PipelineError(
            f"{key}: {path} holds {ids.dtype} {list(ids.shape)}; token ids are integers "
            f"[prompts, tokens] or [tokens]"
        )
    return [row.astype(np.int64) for row in np.atleast_2d(ids)]


def _tokenizer(
    name: str | None, prompts: Path, tracked: tuple[str, ...]
) -> Callable[[str], list[int]]:
    """str -> token ids with the user's tokenizer.json."""
    from pipeline.inputs.sample_data import tracked_by

    if not name:
        raise PipelineError(
            f"{prompts} is text: set model.tokenizer to a tokenizer.json (or a folder holding "
            f"one), or give token ids (.npy)"
        )
    path = Path(name)
    path = path / TOKENIZER_FILE if path.is_dir() else path
    if not path.is_file():
        raise PipelineError(f"model.tokenizer={name}: no {TOKENIZER_FILE} there")
    if tracked and not any(tracked_by(path, t) for t in tracked):
        raise PipelineError(
            f"model.tokenizer={name} is under none of {', '.join(tracked)}, so DVC would not "
            f"see it change; put it in the model's folder (model.source) or beside the prompts"
        )
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PipelineError(
            "model.tokenizer needs the `tokenizers` package (pip install tokenizers)"
        ) from None
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:
        raise PipelineError(f"model.tokenizer={name}: not a tokenizer: {first_line(e)}") from None
    return lambda text: list(tok.encode(text).ids)
