import gc
import time

import numpy as np

from pipeline.bench import measure_loop


def test_measure_respects_minimum_iterations_and_duration():
    calls = []
    lat = measure_loop.measure(lambda: calls.append(1), measure_loop.Budget(0.0, 0.05, 500))
    assert lat.size >= 500
    assert lat.sum() >= 50 * 0.99  # ms
    assert len(calls) >= lat.size


def test_warmup_runs_at_least_once_and_is_not_sampled():
    calls = []
    lat = measure_loop.measure(lambda: calls.append(1), measure_loop.Budget(1e-9, 0.0, 3))
    assert lat.size == 3 and len(calls) >= 4


def test_progress_and_after_hooks_stay_out_of_the_samples():
    # Each hook sleeps far longer than the measured call; none of it may show up in a sample.
    progress_calls, after_calls = [], []

    def progress(fraction):
        progress_calls.append(fraction)
        time.sleep(0.02)

    def after():
        after_calls.append(1)
        time.sleep(0.002)

    lat = measure_loop.measure(
        lambda: None,
        measure_loop.Budget(0.0, 0.0, 50),
        progress=progress,
        after=after,
    )
    assert progress_calls and len(after_calls) == lat.size == 50
    assert min(progress_calls) >= 0.0 and max(progress_calls) <= 1.0
    assert lat.max() < 2.0  # ms: far below either sleep


def test_garbage_collector_is_restored():
    assert gc.isenabled()
    measure_loop.measure(lambda: None, measure_loop.Budget(0.0, 0.0, 5))
    assert gc.isenabled()
    gc.disable()
    try:
        measure_loop.measure(lambda: None, measure_loop.Budget(0.0, 0.0, 5))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_stats_flags_percentiles_with_too_few_samples_beyond_them():
    s = measure_loop.stats(np.linspace(1.0, 2.0, 150), batch=4)
    assert s["iterations"] == 150
    assert s["p90_tail_samples"] == 15 and s["p95_tail_samples"] == 7 and s["p99_tail_samples"] == 1
    assert s["low_sample_percentiles"] == ["p95", "p99"]
    assert s["min_ms"] == 1.0 and s["max_ms"] == 2.0
    assert abs(s["median_ms"] - 1.5) < 1e-9
    assert abs(s["throughput_per_s"] - 150 * 4 / s["seconds"]) / s["throughput_per_s"] < 1e-3


def test_stats_percentiles_are_ordered_and_mean_is_inside():
    lat = np.random.default_rng(0).lognormal(0.0, 0.5, 2000)
    s = measure_loop.stats(lat, batch=1)
    assert s["min_ms"] <= s["median_ms"] <= s["p90_ms"] <= s["p95_ms"] <= s["p99_ms"] <= s["max_ms"]
    assert s["min_ms"] <= s["mean_ms"] <= s["max_ms"] and s["std_ms"] > 0


def test_enough_iterations_clear_every_flag():
    n = measure_loop.min_iterations_for(99)
    assert n == 1000
    assert measure_loop.stats(np.ones(n), batch=1)["low_sample_percentiles"] == []
    assert measure_loop.stats(np.ones(n - 1), batch=1)["low_sample_percentiles"] == ["p99"]
    assert measure_loop.stats(np.ones(n), batch=1, min_tail_samples=20)[
        "low_sample_percentiles"
    ] == ["p99"]


def test_fraction_done_is_the_goal_further_away():
    # The loop stops only when both goals are met, so the fraction is the smaller one.
    assert measure_loop.fraction_done(5, 10, 900, 1000) == 0.5
    assert measure_loop.fraction_done(9, 10, 100, 1000) == 0.1
    assert measure_loop.fraction_done(20, 10, 2000, 1000) == 1.0
    assert measure_loop.fraction_done(20, 10, 999, 1000) == 0.999
    assert (
        measure_loop.fraction_done(0, 0, 50, 100) == 0.5
    )  # no duration asked: only the count matters
    assert measure_loop.fraction_done(3, 10, 7, 0) == 0.3


def test_progress_stays_below_one_until_both_goals_are_met():
    # Each goal alone would read 100% early: the count in the first case, the time in the second.
    for duration_s, iterations, sleep_s in ((0.4, 1, 0.0), (0.0, 250, 0.0015)):
        seen = []
        lat = measure_loop.measure(
            lambda s=sleep_s: time.sleep(s),
            measure_loop.Budget(0.0, duration_s, iterations),
            progress=seen.append,
        )
        # 1.0 only on the very iteration that meets both goals (the loop ends there), never before
        assert len(seen) >= 2 and all(0.0 <= f < 1.0 for f in seen[:-1]) and seen[-1] <= 1.0, (
            duration_s,
            iterations,
            seen,
        )
        assert seen == sorted(seen) and seen[-1] > 0.5
        assert lat.size >= iterations and lat.sum() >= duration_s * 1e3 * 0.99


def test_the_budget_stops_a_slow_model_short_of_its_iterations_after_one_at_least():
    budget = measure_loop.Budget(0.0, 0.0, 1000, max_duration_s=0.05)
    lat = measure_loop.measure(lambda: time.sleep(0.01), budget)
    assert 3 <= lat.size < 20 and budget.cut_short(lat.size)
    # a call slower than the whole budget still gives one sample
    assert (
        measure_loop.measure(
            lambda: time.sleep(0.03), measure_loop.Budget(0.0, 0.0, 10, 0.001)
        ).size
        == 1
    )
    # no budget: every minimum is met
    assert measure_loop.measure(lambda: None, measure_loop.Budget(0.0, 0.0, 500, 0.0)).size == 500
