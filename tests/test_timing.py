import numpy as np

from pipeline import timing


def test_measure_respects_minimum_iterations_and_duration():
    calls = []
    lat = timing.measure(lambda: calls.append(1), warmup_s=0.0, min_duration_s=0.05, min_iterations=500)
    assert lat.size >= 500
    assert lat.sum() >= 50 * 0.99  # ms
    assert len(calls) >= lat.size


def test_stats_flags_percentiles_with_too_few_samples():
    s = timing.stats(np.linspace(1.0, 2.0, 50), batch=4)
    assert s["iterations"] == 50
    assert s["low_sample_percentiles"] == ["p99"]
    assert s["min_ms"] == 1.0 and s["max_ms"] == 2.0
    assert abs(s["median_ms"] - 1.5) < 1e-9
    assert abs(s["throughput_per_s"] - 50 * 4 / (s["seconds"])) / s["throughput_per_s"] < 1e-3


def test_stats_enough_samples():
    s = timing.stats(np.ones(1000), batch=1)
    assert s["low_sample_percentiles"] == []
    assert s["p99_tail_samples"] == 10
