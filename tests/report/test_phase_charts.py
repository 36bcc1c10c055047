"""A decoder's phases drawn (report/pictures/plots.phases_svg): TTFT against prompt length
and TPOT against past length, a line per backend, the same bytes for the same numbers."""

from __future__ import annotations

from pipeline.report.pictures import plots

DECODER = {
    "backends": {
        "onnxruntime": {
            "ttft_ms": {"1": 0.5, "16": 1.5, "32": 2.9},
            "tpot_ms": {"1": 0.3, "63": 0.4},
        },
        "tensorrt": {
            "ttft_ms": {"1": 0.1, "16": 0.2, "32": 0.3},
            "tpot_ms": {"1": 0.05, "63": 0.06},
        },
    }
}


def test_both_phases_are_drawn_per_backend_and_the_bytes_repeat():
    svg = plots.phases_svg(DECODER, "gpt2, fp16")
    assert "time to first token (prefill)" in svg and "time per output token (decode)" in svg
    assert "prompt length (tokens)" in svg and "past length (tokens)" in svg
    assert svg.count("onnxruntime") == 2 and svg.count("tensorrt") == 2  # a legend per panel
    assert svg == plots.phases_svg(DECODER, "gpt2, fp16")


def test_a_model_without_a_cache_says_so():
    assert "no KV cache: not a decoder" in plots.phases_svg(None)
    assert "no GPU here" in plots.phases_svg({"skipped": "no GPU here"})
