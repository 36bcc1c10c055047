"""An engine's bytes per parameter against its precision's ideal (core/engine_sizes.py)."""

from __future__ import annotations

import pytest

from pipeline.core import engine_sizes

WEIGHTS = {"parameters": 1_000_000, "gemm": 800_000}


@pytest.mark.parametrize(
    ("precision", "ideal"),
    [
        ("fp32", 4.0),
        ("fp16", 2.0),
        ("bf16", 2.0),
        # GEMM weights at a byte, the rest (tables, norms) in fp16
        ("int8", 0.8 * 1.0 + 0.2 * 2.0),
        # int4 blocks of 128 with a fp16 scale each
        ("int4_awq", 0.8 * (0.5 + 2 / 128) + 0.2 * 2.0),
    ],
)
def test_the_ideal_is_the_precisions_types_over_the_graphs_weights(precision, ideal):
    per = engine_sizes.per_parameter(3_000_000, WEIGHTS, precision, 128)
    assert per is not None
    assert per["bytes"] == 3.0
    assert per["ideal"] == pytest.approx(ideal, abs=1e-4)
    assert per["ratio"] == pytest.approx(3.0 / ideal, abs=1e-3)
    assert f"ideal {ideal:.3g} for {precision}" in engine_sizes.per_parameter_text(per, precision)


def test_auto_has_no_one_ideal_and_a_graph_without_weights_no_figure():
    per = engine_sizes.per_parameter(3_000_000, WEIGHTS, "auto", 128)
    assert per is not None and per["ideal"] is None and per["ratio"] is None
    assert engine_sizes.per_parameter_text(per, "auto") == "3 B over 1 M parameters"
    assert engine_sizes.per_parameter(10, {"parameters": 0, "gemm": 0}, "fp16", 128) is None
