"""AWQ's clip search (precision=int4_awq, ModelOpt's `awq_clip`) in bounded memory: the
same search on the same tokens, without ModelOpt's whole-model path.

ModelOpt runs its session once per GEMM over every calibration batch and keeps all of a
GEMM's input activations to sample 64 tokens from them (`_clip_search`: every
(n // 64)-th row of the concatenated batches). Here one session of the fp32 graph, reading
its weights from their files, runs each batch once with every GEMM input as an output,
and keeps only the rows ModelOpt would sample; then each weight is read from its file and
searched with ModelOpt's `AWQClipHelper` and `_clip_search` (its own numbers: the tests
compare the resulting graphs bit for bit), a slice of output columns at a time to bound
the search's working memory: each column's blocks, scales and loss are its own, so the
slicing does not change a number.

Which rows ModelOpt samples depends on the total row count, known only after the last
batch. It is predicted from the first batch, scaled by each batch's sample count (how a
GEMM input's rows grow for any model whose batches share every other dimension); where
the prediction fails (batches of other sequence lengths) the sampled tokens are as evenly
spread but not ModelOpt's, and the record says so."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core import console
from pipeline.precision.common import streamed
from pipeline.precision.common.ops import MATMULS
from pipeline.precision.int4 import rtn

if TYPE_CHECKING:
    from onnx import ModelProto

    from pipeline.inputs.calibration_data import CalibrationSet

MAX_TOKENS = 64  # ModelOpt's _clip_search default
# bytes of the search's (columns x tokens x inputs) products held at once
SEARCH_BYTES = 256 << 20


def gemm_activations(source: ModelProto, exclude: list[str]) -> dict[str, str]:
    """Weight name -> the activation it multiplies, for each GEMM ModelOpt's awq_clip
    searches: a MatMul/Gemm whose B is a 2-D initializer and whose A is not. A weight
    shared by several GEMMs is searched on the last one's activation, as ModelOpt does."""
    inits = {t.name: t for t in source.graph.initializer}
    pairs: dict[str, str] = {}
    for node in source.graph.node:
        if node.op_type not in MATMULS or len(node.input) < 2:
            continue
        if any(re.match(p, node.name) for p in exclude) or node.input[0] in inits:
            continue
        w = inits.get(node.input[1])
        if w is not None and len(w.dims) == 2:
            pairs[w.name] = node.input[0]
    return pairs


def sampled_rows(
    model: ModelProto,
    base: Path | None,
    activations: list[str],
    batches: list[dict[str, np.ndarray]],
    counts: list[int],
) -> tuple[dict[str, np.ndarray], bool]:
    """Each activation's rows (tokens x its last dimension) that ModelOpt's clip search
    samples, from one pass over the batches; and whether they are exactly ModelOpt's."""
    from pipeline.graph import onnx_runtime

    session = onnx_runtime.session_with_outputs(model, base, activations)
    kept: dict[str, list[np.ndarray]] = {a: [] for a in activations}
    offset = dict.fromkeys(activations, 0)
    stride: dict[str, int] = {}
    with console.bar(total=len(batches), desc="AWQ activations (streamed)", unit="batch") as bar:
        for i, feeds in enumerate(batches):
            outs = onnx_runtime.run_named(session, activations, feeds, "to sample activations")
            for a, x in zip(activations, outs):
                rows = x.reshape(-1, x.shape[-1])
                if i == 0:  # the total predicted from the first batch's rows per sample
                    total = rows.shape[0] * sum(counts) // counts[0]
                    stride[a] = max(1, total // MAX_TOKENS)
                first = -offset[a] % stride[a]
                kept[a].append(np.array(rows[first :: stride[a]]))
                offset[a] += rows.shape[0]
            del outs
            bar.update(1)
    exact = all(max(1, offset[a] // MAX_TOKENS) == stride[a] for a in activations)
    return {a: np.concatenate(kept[a]) for a in activations}, exact


def clip_alphas(
    source: ModelProto,
    base: Path | None,
    pairs: dict[str, str],
    rows: dict[str, np.ndarray],
    block_size: int,
) -> dict[str, np.ndarray]:
    """Each weight's best clip ratio per (output column, block), flat in ModelOpt's
    order, from ModelOpt's own search on the sampled rows."""
    from modelopt.onnx.quantization.int4 import AWQClipHelper, _clip_search

    inits = {t.name: t for t in source.graph.initializer}
    alphas: dict[str, np.ndarray] = {}
    with console.bar(total=len(pairs), desc="AWQ clip search", unit="weight") as bar:
        for name, act in pairs.items():
            w = streamed.weight(inits[name], base)
            x = rows[act]
            block = rtn.fitting_block(w.shape[0], block_size)
            padded = -(-w.shape[0] // block) * block
            columns = max(1, SEARCH_BYTES // (4 * max(1, x.shape[0]) * padded))
            found = []
            for start in range(0, w.shape[1], columns):
                # a slice of output columns searched alone: ModelOpt's own column batches
                # re-quantize the whole weight for each batch
                part = np.array(w[:, start : start + columns], dtype=np.float32)
                helper = AWQClipHelper(part, block)
                _clip_search(x, part, helper, awqclip_bsz_col=columns)
                found.append(helper.best_alpha.astype(np.float32))
            alphas[name] = np.concatenate(found)  # output-column major, as ModelOpt's
            del w
            bar.update(1)
    return alphas


def search(
    source: ModelProto, base: Path | None, data: CalibrationSet, block_size: int, exclude: list[str]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """AWQ's clip ratios for each GEMM weight of `source`, and how its tokens were sampled
    (what record_sampling keeps)."""
    from pipeline.inputs import samples

    pairs = gemm_activations(source, exclude)
    if not pairs:
        return {}, {}
    counts = [samples.count(b, data.axes) for b in data.batches]
    activations = list(dict.fromkeys(pairs.values()))
    rows, exact = sampled_rows(source, base, activations, data.batches, counts)
    tokens = max(len(r) for r in rows.values())
    alphas = clip_alphas(source, base, pairs, rows, block_size)
    how = "ModelOpt's" if exact else "evenly spread, not ModelOpt's (batches of other shapes)"
    return alphas, {SAMPLING: f"{tokens} tokens a GEMM, {how}"}


# graph metadata that carries the sampling through the calibration cache
SAMPLING = "awq_tokens"


def record_sampling(model: ModelProto, sampled: dict[str, str]) -> None:
    from onnx import helper

    helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props}, **sampled})


def sampling(model: ModelProto) -> dict[str, str]:
    """What record_sampling wrote into a streamed AWQ graph (nothing for any other)."""
    return {p.key: p.value for p in model.metadata_props if p.key == SAMPLING}
