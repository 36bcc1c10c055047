"""A decoder's inputs for both of its phases, made by running it: each batch of prompts
as a prefill (an empty past), then `steps` greedy decode steps, each one token over the
KV cache the step before returned. Every step is one batch of feeds, so the reference set
and the calibration set hold the activations each profile will see, not one phase's.

The fp32 graph makes them (ONNX Runtime, the settings every accuracy figure uses). Prompts
are batched in order and each batch is cut to its shortest prompt: no pad token, which the
model would read as text. Inputs are fed by role (pipeline/inputs/decoder_profiles.py):

    input_ids        the prompt, then the token picked last (argmax of the last logits)
    attention_mask   ones over past + new tokens
    position_ids     past .. past + new - 1
    token_type_ids   zeros
    past_key_values  empty at the prefill, then the `present` outputs of the step before"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import PipelineError
from pipeline.graph.onnx_model import TensorSpec
from pipeline.graph.onnx_runtime import Graph, ort_session
from pipeline.inputs.array_folder import LABEL_PREFIX, NEXT_TOKENS
from pipeline.inputs.decoder_profiles import MASK_INPUT, TOKEN_INPUTS, kv_dims, kv_inputs

if TYPE_CHECKING:
    from pipeline.core.config import DecoderProfile, ModelConfig

Arrays = dict[str, np.ndarray]
LOGITS = "logits"


@dataclass(frozen=True)
class Limits:
    """How long a run may grow: prompts are cut to max_input_len and the steps stop at
    max_seq_len tokens (profile.decoder's numbers; 0: no limit)."""

    steps: int
    max_input_len: int = 0
    max_seq_len: int = 0


def batches(
    graph: Graph, specs: list[TensorSpec], prompts: list[np.ndarray], batch: int, limits: Limits
) -> list[Arrays]:
    """Feeds for every step of every batch of prompts: prefill, then the decode steps."""
    _check_roles(specs)
    session = ort_session(graph, basic_optimizations=True)
    outputs = [o.name for o in session.get_outputs()]
    present = present_outputs(specs, outputs)
    logits = _logits_output(session.get_outputs())
    feeds: list[Arrays] = []
    for start in range(0, len(prompts), batch):
        group = prompts[start : start + batch]
        length = min(len(p) for p in group)
        if limits.max_input_len:
            length = min(length, limits.max_input_len)
        ids = np.stack([p[:length] for p in group])
        steps = limits.steps
        if limits.max_seq_len:
            steps = max(0, min(steps, limits.max_seq_len - length))
        feeds += _run(session, specs, ids, steps, present, logits)
    return feeds


def next_tokens(ids: np.ndarray) -> np.ndarray:
    """[batch, seq]: the token after each position, -1 after the last."""
    out = np.full(ids.shape, -1, dtype=np.int64)
    out[:, :-1] = ids[:, 1:]
    return out


def phase(feeds: Arrays, specs: list[TensorSpec]) -> str:
    """`prefill` for a step over an empty past, else `decode`."""
    kv = kv_inputs(specs)
    return "prefill" if not kv or feeds[kv[0].name].shape[2] == 0 else "decode"


def _run(
    session: Any,
    specs: list[TensorSpec],
    ids: np.ndarray,
    steps: int,
    present: dict[str, str],
    logits: str,
) -> list[Arrays]:
    kv = {t.name: t for t in kv_inputs(specs)}
    past = empty_pasts(specs, len(ids))
    done, out = 0, []
    for step in range(steps + 1):
        feeds = {**token_feeds(specs, ids, done), **past}
        out.append(feeds)
        if step == steps:  # its outputs are the export's to compute, with the others'
            break
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        past = {name: got[present[name]] for name in kv}
        done += ids.shape[1]
        ids = got[logits][:, -1, :].argmax(-1)[:, None].astype(ids.dtype)
    return out


def token_feeds(specs: list[TensorSpec], ids: np.ndarray, done: int) -> Arrays:
    """A step's inputs but the KV cache: the tokens `ids` [batch, new] after `done`."""
    batch, new = ids.shape
    out: Arrays = {}
    for t in specs:
        if t.name == "input_ids":
            out[t.name] = ids.astype(t.dtype)
        elif t.name == MASK_INPUT:
            out[t.name] = np.ones((batch, done + new), dtype=t.dtype)
        elif t.name == "position_ids":
            out[t.name] = np.broadcast_to(np.arange(done, done + new), (batch, new)).astype(t.dtype)
        elif t.name == "token_type_ids":
            out[t.name] = np.zeros((batch, new), dtype=t.dtype)
    return out


def _check_roles(specs: list[TensorSpec]) -> None:
    if reason := unfeedable(specs):
        raise PipelineError(f"model.prompts: {reason}; give model.reference_data instead")


def unfeedable(specs: list[TensorSpec]) -> str | None:
    """Why a decoder's steps cannot be fed by role (None: they can): no KV cache, no
    input_ids, or an input of another role (a flag to freeze, embeddings)."""
    kv = {t.name for t in kv_inputs(specs)}
    if not kv:
        names = ", ".join(t.name for t in specs)
        return f"the model has no past_key_values.* input (inputs: {names})"
    if "input_ids" not in {t.name for t in specs}:
        return "the model takes no `input_ids`"
    known = {*TOKEN_INPUTS, MASK_INPUT, *kv}
    for t in specs:
        if t.name not in known:
            return (
                f"input '{t.name}' is none of input_ids, attention_mask, position_ids and "
                f"the KV cache (freeze it: model.constant_inputs.{t.name}=<value>)"
            )
    return None


def present_outputs(specs: list[TensorSpec], outputs: list[str]) -> dict[str, str]:
    """Each KV input's output for the next step: its name with `present` for the past
    (optimum's past_key_values.0.key -> present.0.key), else the rank-4 outputs in order."""
    kv = [t.name for t in kv_inputs(specs)]
    by_name = {}
    for name in kv:
        for old in ("past_key_values", "past"):
            if name.startswith(old) and (new := "present" + name[len(old) :]) in outputs:
                by_name[name] = new
                break
    if len(by_name) == len(kv):
        return by_name
    rest = [o for o in outputs if o.startswith("present")]
    if len(rest) != len(kv):
        raise PipelineError(
            f"model.prompts: the model has {len(kv)} KV-cache inputs and {len(rest)} "
            f"present.* outputs to feed them from the step before; give model.reference_data"
        )
    return dict(zip(kv, rest))


def _logits_output(outputs: list[Any]) -> str:
    names = [o.name for o in outputs]
    if LOGITS in names:
        return LOGITS
    rank3 = [o.name for o in outputs if len(o.shape or []) == 3]
    if len(rank3) != 1:
        raise PipelineError(
            f"model.prompts picks each next token from `logits` [batch, seq, vocab], and the "
            f"model has no such output (outputs: {', '.join(names)})"
        )
    return str(rank3[0])


def empty_pasts(specs: list[TensorSpec], batch: int) -> Arrays:
    """A prefill's past for every KV input."""
    return {t.name: _empty_past(t, batch) for t in kv_inputs(specs)}


def logits_of(outputs: Arrays) -> np.ndarray:
    """A step's logits [batch, seq, vocab]: `logits`, else the one rank-3 output."""
    if LOGITS in outputs:
        return np.asarray(outputs[LOGITS])
    rank3 = [v for v in outputs.values() if np.ndim(v) == 3]
    if len(rank3) != 1:
        raise PipelineError(
            f"a decoder's logits [batch, seq, vocab] are the output `logits` or its one "
            f"rank-3 output; outputs: {', '.join(outputs)}"
        )
    return np.asarray(rank3[0])


def _empty_past(t: TensorSpec, batch: int) -> np.ndarray:
    """A prefill's past: [batch, heads, 0, head_dim] of the KV input's type."""
    heads, size = kv_dims(t, "give model.reference_data instead of model.prompts")
    return np.zeros((batch, heads, 0, size), dtype=t.dtype)


def reference(
    model_cfg: ModelConfig,
    numbers: DecoderProfile,
    graph: Graph,
    specs: list[TensorSpec],
    batch: int,
) -> tuple[list[Arrays], dict[str, Any]]:
    """model.prompts run through `graph`: the reference batches of every step, and where
    they came from (export.json's `reference`)."""
    from pipeline.inputs import prompts, sample_data
    from pipeline.inputs.array_folder import data_sha256

    assert model_cfg.prompts, "only called for model.prompts"
    if not sample_data.tracked_by(model_cfg.prompts, model_cfg.reference_source):
        raise PipelineError(
            f"model.prompts={model_cfg.prompts} is not under model.reference_source="
            f"{model_cfg.reference_source}, so DVC would not see it change; put the prompts "
            f"in that folder or point model.reference_source at theirs"
        )
    tracked = (model_cfg.reference_source, model_cfg.source)
    given = prompts.read(model_cfg.prompts, model_cfg.tokenizer, "model.prompts", tracked)
    limits = Limits(
        int(model_cfg.decode_steps), int(numbers.max_input_len), int(numbers.max_seq_len)
    )
    made = batches(graph, specs, given, batch, limits)
    phases = [phase(b, specs) for b in made]
    for feeds, step in zip(made, phases):
        if step == "prefill":  # the prompt's own next tokens: what its perplexity is of
            feeds[LABEL_PREFIX + NEXT_TOKENS] = next_tokens(feeds["input_ids"])
    return made, {
        "source": "prompts",
        "random": False,
        "path": str(model_cfg.prompts),
        "prompts": len(given),
        "decode_steps": limits.steps,
        "batches": {p: phases.count(p) for p in ("prefill", "decode")},
        "sha256": data_sha256(made),
    }
