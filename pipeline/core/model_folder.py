"""A decoder's folder as optimum and ONNX Runtime GenAI's model builder write one, read into
the settings a user would otherwise write by hand (model=hf_decoder, model.folder):

    model.onnx (+ model.onnx.data / model.onnx_data)   the graph and its external data
    genai_config.json   (GenAI) model.decoder.filename, context_length, search.max_length
    config.json         (optimum, transformers) max_position_embeddings
    tokenizer.json      the tokenizer every Hugging Face model ships

The ONNX file becomes model.onnx_path and tokenizer.json model.tokenizer; where
profile.decoder is not given, its numbers come from the folder: max_seq_len from the
GenAI search's max_length (else the context length), max_input_len half of it, max_batch
the search's beams. What is given wins. Light: config validation reads it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.errors import PipelineError

# The graph's file where a folder holds several: GenAI's and optimum's names, in order.
ONNX_NAMES = ("model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx")
GENAI_CONFIG = "genai_config.json"
HF_CONFIG = "config.json"
TOKENIZER = "tokenizer.json"


@dataclass(frozen=True)
class ModelFolder:
    onnx: Path
    tokenizer: Path | None
    max_seq_len: int | None  # the longest sequence the folder says to serve
    max_batch: int

    def decoder_numbers(self) -> dict[str, int] | None:
        """profile.decoder's three numbers from the folder; None where it says no length."""
        if not self.max_seq_len or self.max_seq_len < 2:
            return None
        return {
            "max_batch": self.max_batch,
            "max_input_len": self.max_seq_len // 2,
            "max_seq_len": self.max_seq_len,
        }


def read(folder: Path) -> ModelFolder:
    """The folder's graph, tokenizer and lengths; one line for what is missing."""
    if not folder.is_dir():
        raise PipelineError(f"model.folder={folder}: no such folder")
    genai = _json(folder / GENAI_CONFIG)
    hf = _json(folder / HF_CONFIG)
    decoder = _get(genai, "model", "decoder") or {}
    onnx = _graph(folder, decoder.get("filename"))
    context = _int(_get(genai, "model", "context_length")) or _int(
        hf.get("max_position_embeddings")
    )
    longest = _int(_get(genai, "search", "max_length")) or context
    if context and longest:
        longest = min(longest, context)
    beams = _int(_get(genai, "search", "num_beams")) or 1
    tokenizer = folder / TOKENIZER
    return ModelFolder(onnx, tokenizer if tokenizer.is_file() else None, longest, beams)


def fill(model: Any, profile: Any) -> None:
    """model.onnx_path, model.tokenizer and profile.decoder (the DictConfig groups, before
    they are made read-only) from model.folder, where each is not given."""
    got = read(Path(model.folder))
    if model.onnx_path is None:
        model.onnx_path = str(got.onnx)
    if model.tokenizer is None and got.tokenizer is not None:
        model.tokenizer = str(got.tokenizer)
    decoder = profile.decoder
    if int(decoder.max_seq_len) == 0:
        numbers = got.decoder_numbers()
        if numbers is None:
            raise PipelineError(
                f"model.folder={model.folder} says no sequence length (no {GENAI_CONFIG} "
                f"context_length or search.max_length, no {HF_CONFIG} "
                f"max_position_embeddings): give profile.decoder"
            )
        for key, value in numbers.items():
            decoder[key] = value


def _graph(folder: Path, named: Any) -> Path:
    if isinstance(named, str) and named:
        path = folder / named
        if not path.is_file() or Path(named).name != named:
            raise PipelineError(
                f"model.folder={folder}: {GENAI_CONFIG} names the graph {named!r}, which is "
                f"not a file in the folder"
            )
        return path
    found = sorted(p.name for p in folder.glob("*.onnx"))
    for name in ONNX_NAMES:
        if name in found:
            return folder / name
    if len(found) == 1:
        return folder / found[0]
    if not found:
        raise PipelineError(f"model.folder={folder}: no .onnx file in the folder")
    raise PipelineError(
        f"model.folder={folder} holds several graphs ({', '.join(found)}) and none is called "
        f"{' or '.join(ONNX_NAMES)}: give model.onnx_path"
    )


# Open shape: genai_config.json or a Hugging Face config.json, third-party files read by key.
def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        got = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PipelineError(f"cannot read {path}: {e}") from None
    if not isinstance(got, dict):
        raise PipelineError(f"{path} is no JSON object")
    return got


def _get(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)  # type: ignore[assignment]
    return d


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
