"""The accuracy gate per kind of output: what each task judges, and a metric of the user's."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
from omegaconf import OmegaConf

from pipeline.core import choices, kv_cache
from pipeline.core.errors import PipelineError
from pipeline.precision.gate import accuracy, tasks
from tests.conftest import compose

RNG = np.random.default_rng(0)


def judged(results: list[dict]) -> set[tuple[str, str]]:
    return {(r["subject"], r["gate"]) for r in results}


def test_every_task_but_auto_says_what_it_judges():
    assert set(tasks.JUDGED) == set(choices.Task) - {choices.Task.auto}


def test_boxes_in_pixels_are_judged_by_relative_error_not_absolute():
    """A YOLO head: [batch, 4 + classes, anchors] in pixels. Half a pixel off everywhere is
    a fine int8 result; its absolute error is not a fault, and its argmax means nothing."""
    ref = [{"boxes": RNG.uniform(0, 320, (2, 22, 100))}]
    got = [{"boxes": ref[0]["boxes"] + 0.5}]
    gate = compose("precision=int8").precision.gate
    criteria = accuracy.Criteria(gate, tasks.OutputTasks("detection"))
    figures, results = criteria.judge(ref, got)
    assert figures["boxes"]["max_abs_error"] == pytest.approx(0.5)
    assert "top1_agreement" not in figures["boxes"]
    assert judged(results) == {
        ("boxes", "max_rel_error"),
        ("boxes", "min_cosine"),
    }
    assert accuracy.passed(results)
    # judged as class scores, the same output fails on its absolute error
    _, as_classes = accuracy.Criteria(gate, tasks.OutputTasks("classification")).judge(ref, got)
    assert not accuracy.passed(as_classes)


def test_auto_takes_class_scores_for_n_by_c_and_dense_maps_otherwise():
    auto = tasks.OutputTasks("auto", {"hn": "sequence"})
    assert auto.task("logits", np.zeros((4, 10))) == "classification"
    assert auto.task("map", np.zeros((4, 1, 32, 32))) == "dense"
    assert auto.task("score", np.zeros(4)) == "regression"
    assert auto.task("hn", np.zeros((1, 4, 32))) == "sequence"
    auto.check_outputs(["hn", "y"])
    with pytest.raises(PipelineError, match="model.output_tasks names 'hn'"):
        auto.check_outputs(["h", "y"])


def test_a_decoders_logits_are_judged_by_the_next_token_and_its_kv_cache_as_state():
    """`auto` on a decoder's outputs as transformers/optimum name them: logits [batch, seq,
    vocab] by the token each position picks (and each position's cosine), present.N.* by
    the cosine of each row; no absolute or relative error of logits is judged."""
    logits = RNG.standard_normal((2, 8, 50))
    got = logits.copy()
    got[1, 5] = -got[1, 5]  # one position of 16 picks another token
    kv = RNG.standard_normal((2, 4, 8, 16))
    reference = [{"logits": logits, "present.0.key": kv}]
    figures = accuracy.compare(reference, [{"logits": got, "present.0.key": kv}], "auto")
    assert figures["logits"]["task"] == "next_token"
    assert figures["logits"]["top1_agreement"] == pytest.approx(15 / 16)
    assert figures["logits"]["rows"] == 16 and figures["logits"]["cosine"] < 0
    assert figures["present.0.key"]["task"] == "state"
    assert tasks.JUDGED["next_token"][:2] == ("min_cosine", "min_top1_agreement")
    assert tasks.JUDGED["state"] == ("min_cosine",)


def test_a_decoders_steps_are_judged_per_phase_and_the_gate_takes_the_worse():
    """A prefill (logits as long as the KV cache it returns) and decode steps (one token
    over a longer cache): rows of the vocabulary axis across batches of other shapes, top-1
    per phase, the worse phase judged; the cache as rows of head_dim."""
    prefill = {
        "logits": RNG.standard_normal((1, 6, 50)),
        "present.0.key": RNG.standard_normal((1, 2, 6, 8)),
    }
    steps = [
        {
            "logits": RNG.standard_normal((1, 1, 50)),
            "present.0.key": RNG.standard_normal((1, 2, 6 + k, 8)),
        }
        for k in range(1, 5)
    ]
    got = [{k: v.copy() for k, v in b.items()} for b in [prefill, *steps]]
    got[2]["logits"] = -got[2]["logits"]  # one of 4 decode steps picks another token
    figures = accuracy.compare([prefill, *steps], got, "auto")
    logits = figures["logits"]
    assert logits["by_phase"]["prefill"] == {
        "top1_agreement": 1.0,
        "cosine": pytest.approx(1.0),
        "rows": 6,
    }
    assert logits["by_phase"]["decode"]["top1_agreement"] == 0.75
    assert logits["top1_agreement"] == 0.75 and logits["cosine"] < 0
    assert figures["present.0.key"]["rows"] == 2 * (6 + 7 + 8 + 9 + 10)
    assert tasks.decoder_phase(prefill) == "prefill" and tasks.decoder_phase(steps[0]) == "decode"


def test_top1_runs_along_the_class_axis_of_every_step():
    ref = RNG.standard_normal((2, 40, 50))  # a CTC matrix: [batch, steps, classes]
    got = ref.copy()
    got[0, 3] = -got[0, 3]  # one step of 80 reads another class
    figures = accuracy.compare([{"y": ref}], [{"y": got}], "classification")
    assert figures["y"]["top1_agreement"] == pytest.approx(79 / 80)


def test_sequence_cosine_is_the_worst_step_and_steps_of_nothing_are_left_out():
    ref = RNG.standard_normal((2, 10, 16))
    ref[1, 4] *= 1e-9  # a state of nothing: its direction is noise
    got = ref + 1e-3 * RNG.standard_normal(ref.shape)
    figures = accuracy.compare([{"h": ref}], [{"h": got}], "sequence")["h"]
    assert figures["rows"] == 19 and figures["cosine"] > 0.999


def test_a_failing_line_names_the_task_and_the_key_behind_the_threshold():
    ref = [{"map": RNG.uniform(0, 1, (2, 1, 8, 8))}]
    got = [{"map": ref[0]["map"] * 1.5}]
    gate = compose("precision=fp16").precision.gate
    _, results = accuracy.Criteria(gate, tasks.OutputTasks("dense")).judge(ref, got)
    with pytest.raises(accuracy.GateFailed) as e:
        accuracy.raise_on_failure(results, "fp16 ONNX", {})
    assert (
        "rel_error of output 'map' (dense) is 0.5, needs <= 0.03 (precision.gate.max_rel_error)"
        in str(e.value)
    )


@pytest.fixture
def metric_module(tmp_path, monkeypatch):
    pkg = tmp_path / "mymetrics"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ocr.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            def flips(fp32, candidate, labels):
                seen = [labels is not None]
                changed = sum(int((a["y"].argmax(-1) != b["y"].argmax(-1)).sum())
                              for a, b in zip(fp32, candidate))
                return changed + (100 if labels and "text" not in labels[0] else 0)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("mymetrics.ocr", None)
    sys.modules.pop("mymetrics", None)


def test_a_metric_of_the_users_is_judged_with_labels_beside_the_outputs(metric_module):
    gate = OmegaConf.create(
        {**OmegaConf.to_container(compose().precision.gate), "metric": "mymetrics.ocr:flips"}
    )
    with pytest.raises(PipelineError, match="has no threshold"):
        tasks.user_metric(gate)
    gate.metric_max = 0
    with pytest.raises(PipelineError, match="outside model.source"):
        tasks.user_metric(gate, str(metric_module / "elsewhere"))
    metric = tasks.user_metric(gate, str(metric_module))
    ref = [{"y": RNG.standard_normal((4, 5)), "label:text": np.array(["a", "b", "c", "d"])}]
    got = [{"y": ref[0]["y"].copy()}]
    got[0]["y"][0] = -got[0]["y"][0]
    criteria = accuracy.Criteria(gate, tasks.OutputTasks("classification"), metric)
    figures, results = criteria.judge(ref, got)
    assert figures["mymetrics.ocr:flips"]["metric"] == 1  # labels arrived under "text"
    assert "label:text" not in figures  # labels are never compared as outputs
    failed = [r for r in results if not r["passed"]]
    assert [(r["subject"], r["gate"]) for r in failed][-1] == ("mymetrics.ocr:flips", "metric_max")


def test_an_edited_metric_keys_its_judgements_anew(metric_module):
    """Cached searches and judgements are keyed by the metric: by its name alone, a fixed
    metric would be served the figures of the one before the fix."""
    gate = OmegaConf.create(
        {
            **OmegaConf.to_container(compose().precision.gate),
            "metric": "mymetrics.ocr:flips",
            "metric_max": 0,
        }
    )

    def key() -> dict:
        return accuracy.Criteria(
            gate, tasks.OutputTasks("classification"), tasks.user_metric(gate)
        ).key()

    before = key()
    module = metric_module / "mymetrics" / "ocr.py"
    module.write_text(module.read_text().replace("100", "1000"))
    after = key()
    assert before["metric"] == after["metric"] == "mymetrics.ocr:flips"
    assert before != after


def test_a_decoders_perplexity_over_its_prompts_is_judged_against_fp32s():
    """The prompt's next tokens travel as a prefill's label; perplexity is exp of the mean
    negative log-likelihood over the positions that have one (-1: after the last)."""
    vocab = 8
    ref = np.zeros((1, 3, vocab))
    ref[0, :, 2] = np.log(4.0)  # p(token 2) = 4 / (4 + 7) at each position
    got = ref.copy()
    got[0, :, 2] = 0.0  # uniform: p = 1/8
    labels = {"label:next_token_ids": np.array([[2, 2, -1]])}
    reference = [{"logits": ref, **labels}]
    figures = accuracy.compare(reference, [{"logits": got}], "next_token")["logits"]
    assert figures["perplexity_fp32"] == pytest.approx(11 / 4)
    assert figures["perplexity"] == pytest.approx(8.0)
    assert figures["perplexity_increase"] == pytest.approx(8.0 / (11 / 4) - 1)
    assert "max_perplexity_increase" in tasks.JUDGED["next_token"]


def test_a_kv_cache_is_one_entry_naming_its_worst_tensor():
    """Sixty `present.N.key|value` figures fold into one entry per metric, the worst one
    (lowest cosine, highest error) with its tensor named; other outputs keep their order."""
    figures = {"logits": {"cosine": 0.99}}
    for n in range(30):
        for part in ("key", "value"):
            figures[f"present.{n}.{part}"] = {"task": "state", "cosine": 1.0, "max_abs_error": 0.01}
    figures["present.17.value"] = {"task": "state", "cosine": 0.97, "max_abs_error": 0.02}
    figures["present.3.key"]["max_abs_error"] = 0.5
    folded = kv_cache.folded(figures)
    assert list(folded) == ["logits", kv_cache.CACHE]
    cache = folded[kv_cache.CACHE]
    assert (cache["tensors"], cache["task"], cache["cosine"]) == (60, "state", 0.97)
    assert cache["worst"] == {"cosine": "present.17.value", "max_abs_error": "present.3.key"}
    assert cache["max_abs_error"] == 0.5
    one = {"logits": {"cosine": 1.0}, "present.0.key": {"cosine": 1.0}}
    assert kv_cache.folded(one) == one  # a single tensor stays as it is
