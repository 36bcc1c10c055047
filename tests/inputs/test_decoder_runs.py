"""A decoder's data for both phases (issue 40, item 2): prompts (token ids, or text with a
tokenizer.json) run through the fp32 graph as a prefill and greedy decode steps; every
step is a reference batch and, with calibration=prompts, a calibration batch. On a GPT-2
exported by `transformers` with its KV cache (random weights: the structure is the point)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout
from pipeline.flow import calibrate_stage, stages
from pipeline.graph import onnx_model
from pipeline.inputs import decoder_runs, prompts, reference_file
from pipeline.report.inspect import accuracy_view
from tests.conftest import REPO, compose
from tests.wild import hf

DECODER = "profile.decoder={max_batch: 2, max_input_len: 10, max_seq_len: 16}"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return hf.gpt2(tmp_path_factory.mktemp("gpt2") / "gpt2.onnx")


def config(gpt2, *overrides: str):
    return compose(
        "model=onnx_file",
        f"model.onnx_path={gpt2}",
        f"model.source={gpt2}",
        DECODER,
        *overrides,
    )


def test_every_step_is_a_reference_batch_fed_the_token_the_step_before_picked(
    gpt2, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/reference").mkdir(parents=True)
    ids = np.random.default_rng(0).integers(1, hf.VOCAB, size=(2, 12))
    np.save(tmp_path / "data/reference/prompts.npy", ids)
    cfg = config(gpt2, "model.prompts=data/reference/prompts.npy", "model.decode_steps=3")
    layout = Layout(tmp_path / "run")
    summary = stages.export(cfg, layout)
    # each prompt cut to max_input_len (10), then 3 steps: 2 prefills and 6 decode steps
    assert summary["reference"]["batches"] == {"prefill": 2, "decode": 6}
    pairs = reference_file.read(layout.export_dir / "reference.npz")
    first = pairs[:4]  # the first prompt's prefill and its steps
    assert np.array_equal(first[0][0]["input_ids"], ids[:1, :10])
    for (before, outs), (after, _) in itertools.pairwise(first):
        picked = outs["logits"][:, -1, :].argmax(-1)
        assert after["input_ids"].tolist() == [picked.tolist()]
        past = before["past_key_values.0.key"].shape[2] + before["input_ids"].shape[1]
        assert after["past_key_values.0.key"].shape[2] == past
        assert np.array_equal(after["past_key_values.1.value"], outs["present.1.value"])
        assert after["attention_mask"].shape == (1, past + 1)
    assert first[0][0]["past_key_values.0.key"].shape == (1, 4, 0, 16)


def test_int8_calibrates_on_both_phases_and_is_judged_per_phase(gpt2, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(1)
    for folder, n in (("data/reference", 3), ("data/calibration", 6)):
        (tmp_path / folder).mkdir(parents=True)
        np.save(tmp_path / folder / "prompts.npy", rng.integers(1, hf.VOCAB, size=(n, 8)))
    cfg = config(
        gpt2,
        "precision=int8",
        "calibration=prompts",
        "calibration.path=data/calibration/prompts.npy",
        "calibration.method=max",
        # random weights: the mechanism is the point, not int8's figures on them
        "precision.gate.min_cosine=0.99",
        "precision.gate.min_top1_agreement=0.5",
        "model.prompts=data/reference/prompts.npy",
        "model.decode_steps=4",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path / "run")
    stages.export(cfg, layout)
    summary = stages.calibrate(cfg, layout)
    data = summary["calibration"]["data"]
    assert (data["source"], data["num_batches"], data["decode_steps"]) == ("prompts", 30, 4)
    accuracy = json.loads((layout.metrics_dir / "accuracy.json").read_text())
    logits = accuracy["accuracy"]["logits"]
    assert set(logits["by_phase"]) == {"prefill", "decode"}
    # a prompt's steps stay with its prefill in one part; the verdict judges held-out prompts
    split = accuracy["holdout"]
    assert logits["by_phase"]["decode"]["rows"] == split["verdict_batches"] // 5 * 4
    assert split["search_batches"] % 5 == 0 and split["verdict_batches"] % 5 == 0
    assert accuracy["accuracy"]["present.0.key"]["task"] == "state"
    # every cache tensor's figure is kept; the table and the report give the cache one row
    tensors = [k for k in accuracy["accuracy"] if k.startswith("present.")]
    rows = dict(calibrate_stage.gate_rows(accuracy, False))
    said = [k for k in rows if "present" in k or k.startswith("KV cache")]
    assert said == ["KV cache cosine"] and len(tensors) > 2
    assert f"worst of {len(tensors)}: present." in rows["KV cache cosine"]
    report = [r[0] for r in accuracy_view.rows(accuracy["accuracy"])]
    assert report[0] == "logits" and report[1].startswith(f"KV cache ({len(tensors)} tensors")
    assert len(report) == 2
    # the prompts' own next tokens ride with each prefill: perplexity against fp32's
    assert logits["perplexity_fp32"] > 1 and "perplexity_increase" in logits
    worst = min(p["top1_agreement"] for p in logits["by_phase"].values())
    assert logits["top1_agreement"] == worst


def test_text_prompts_are_tokenized_with_the_users_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "prompts.txt").write_text("the cat sat\n\nthe dog\n")
    got = prompts.read(tmp_path / "prompts.txt", str(tmp_path), "model.prompts")
    assert [p.tolist() for p in got] == [[1, 2, 3], [1, 0]]
    # a tokenizer DVC does not track for the stage would change the data unseen
    with pytest.raises(PipelineError, match="is under none of data/reference"):
        prompts.read(tmp_path / "prompts.txt", str(tmp_path), "model.prompts", ("data/reference",))


@pytest.mark.parametrize(
    "make, tokenizer, line",
    [
        (lambda d: (d / "p.txt").write_text("hi\n"), None, "is text: set model.tokenizer"),
        (lambda d: (d / "p.txt").write_text("hi\n"), "nowhere", "model.tokenizer=nowhere: no"),
        (lambda d: np.save(d / "p.npy", np.ones((2, 3))), None, "token ids are integers"),
        (lambda d: (d / "p.csv").write_text("1,2\n"), None, "holds no prompts"),
    ],
)
def test_prompts_it_cannot_read_are_one_line(tmp_path, make, tokenizer, line):
    make(tmp_path)
    with pytest.raises(PipelineError) as e:
        prompts.read(tmp_path, tokenizer, "model.prompts")
    assert line in str(e.value) and "\n" not in str(e.value)


def test_a_model_without_a_kv_cache_is_one_line():
    model = onnx_model.load(REPO / "pipeline/zoo/onnx/tiny_mlp.onnx", check=False)
    specs = onnx_model.inputs(model)
    with pytest.raises(PipelineError, match="has no past_key_values"):
        decoder_runs.batches(
            model.SerializeToString(), specs, [np.ones(3)], 1, decoder_runs.Limits(2)
        )


def test_prompts_outside_the_tracked_folder_are_refused(gpt2, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "prompts.npy", np.ones((1, 4), dtype=np.int64))
    cfg = config(gpt2, "model.prompts=prompts.npy", "model.reference_source=data/reference")
    with pytest.raises(PipelineError, match="not under model.reference_source"):
        stages.export(cfg, Layout(tmp_path / "run"))


@pytest.mark.parametrize("streaming", ["auto", "never"])
def test_int4_awq_reads_every_batch_whatever_its_shape(gpt2, tmp_path, monkeypatch, streaming):
    """A decoder's prompts give batches of many shapes (each decode step's past one longer):
    AWQ reads every one of them through the streamed clip search; with streaming switched
    off, ModelOpt's stacking keeps the largest group of one shape, and says so."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(2)
    for folder, n in (("data/reference", 2), ("data/calibration", 4)):
        (tmp_path / folder).mkdir(parents=True)
        np.save(tmp_path / folder / "prompts.npy", rng.integers(1, hf.VOCAB, size=(n, 8)))
    cfg = config(
        gpt2,
        "precision=int4_awq",
        "calibration=prompts",
        "calibration.path=data/calibration/prompts.npy",
        f"calibration.streaming={streaming}",
        "precision.gate.min_cosine=0",  # random weights: which batches AWQ read is the point
        "precision.gate.min_top1_agreement=0",
        "precision.gate.max_perplexity_increase=null",
        "model.prompts=data/reference/prompts.npy",
        "model.decode_steps=3",
        "build.reference_engines=never",
        f"calibration.cache_dir={tmp_path / 'cache'}",
    )
    layout = Layout(tmp_path / "run")
    stages.export(cfg, layout)
    data = stages.calibrate(cfg, layout)["calibration"]["data"]
    if streaming == "auto":
        assert data["num_batches"] == 4 * (1 + 3)  # each prompt's prefill and 3 steps
        assert "every one read" in data["every_shape"] and "one_shape" not in data
    else:
        assert data["num_batches"] == 4 and "every_shape" not in data  # the 4 prefills
        assert data["one_shape"].startswith("4 of 16 batches")
