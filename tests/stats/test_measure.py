"""Statistics: interval coverage, comparisons and their verdicts, summaries of restarts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.stats.intervals import Verdict, compare, interval, summarize
from autotune.study._restart import measure_restart
from autotune.core.records import EngineConfig, Resolved, RestartResult


def test_t_interval_covers_the_true_mean_95_percent_of_the_time():
    rng = np.random.default_rng(42)
    true_mean, trials = 1000.0, 4000
    hits = 0
    for _ in range(trials):
        sample = true_mean * np.exp(rng.normal(0.0, 0.05, size=3))  # three restarts, lognormal noise
        low, high = interval(sample)
        hits += low <= true_mean * math.exp(0.05**2 / 2) <= high
    coverage = hits / trials
    assert 0.93 <= coverage <= 0.97, coverage


def test_bca_interval_is_an_option_and_brackets_the_mean():
    x = [100.0, 104.0, 98.0, 101.0, 103.0, 99.0]
    low, high = interval(x, method="bca")
    assert low < np.mean(x) < high
    with pytest.raises(ValueError, match="use 't' or 'bca'"):
        interval(x, method="z")


def test_one_value_has_no_interval():
    low, high = interval([5.0])
    assert math.isnan(low) and math.isnan(high)


def test_equal_configs_rarely_declared_faster():
    rng = np.random.default_rng(7)
    wins = sum(compare(rng.normal(100, 5, 3), rng.normal(100, 5, 3)).verdict == Verdict.FASTER
               for _ in range(600))
    assert wins / 600 <= 0.05


def test_throughput_interval_stays_positive_where_the_arithmetic_t_went_negative():
    # Two restarts far apart: the arithmetic t interval (t = 12.7 at one degree of freedom) was [-47.3, 600.5]-like.
    low, high = interval([120.0, 480.0])
    assert 0.0 < low < 120.0 and high > 480.0
    assert interval([100.0, -5.0]) == (pytest.approx(math.nan, nan_ok=True), pytest.approx(math.nan, nan_ok=True))


def test_verdict_is_read_off_the_interval_and_the_p_value_agrees():
    rng = np.random.default_rng(3)
    for _ in range(300):
        a, b = rng.lognormal(4.7, 0.1, rng.integers(2, 7)), rng.lognormal(4.6, 0.1, rng.integers(2, 7))
        c = compare(a, b, comparisons=3)
        excludes_one = c.ci_low > 1.0 or c.ci_high < 1.0
        assert (c.verdict != Verdict.NOT_SIGNIFICANT) == excludes_one
        assert (c.p_value < 0.05 / 3) == excludes_one
        assert c.ci_low > 0.0


def test_clear_speedup_is_faster_and_clear_slowdown_is_slower():
    fast = compare([150.0, 152.0, 149.0, 151.0], [100.0, 101.0, 99.0, 100.5])
    assert fast.verdict == Verdict.FASTER and fast.ci_low > 1.4 and fast.ci_high < 1.6
    slow = compare([60.0, 61.0, 59.0], [100.0, 101.0, 99.0])
    assert slow.verdict == Verdict.SLOWER and slow.speedup == pytest.approx(0.6, rel=0.01)
    noisy = compare([110.0, 80.0, 130.0], [100.0, 101.0, 99.0])
    assert noisy.verdict == Verdict.NOT_SIGNIFICANT


def test_bonferroni_widens_the_interval():
    a, b = [112.0, 108.0, 110.0, 111.0], [100.0, 101.0, 99.0, 102.0]
    one, four = compare(a, b, comparisons=1), compare(a, b, comparisons=4)
    assert four.confidence > one.confidence
    assert four.ci_low <= one.ci_low and four.ci_high >= one.ci_high


def _ok(value, seed=0, cold=False, mode="PIECEWISE", sizes=(1, 2)):
    return RestartResult(status="ok", seed=seed, passes_tok_s=(value, value), cold=cold,
                         resolved=Resolved(cudagraph_mode=mode, cudagraph_capture_sizes=sizes), startup_s=10.0)


def test_summary_excludes_cold_restarts_and_flags_silent_changes():
    cfg = EngineConfig(compilation_config={"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2]})
    restarts = [_ok(50.0, 0, cold=True), _ok(100.0, 0), _ok(102.0, 1), _ok(98.0, 2)]
    s = summarize(cfg, restarts)
    assert s.values == (100.0, 102.0, 98.0) and s.seeds == (0, 1, 2)
    assert s.n_cold == 1 and s.mean == pytest.approx(100.0)
    assert s.ci_low < 100.0 < s.ci_high and not s.unstable
    assert s.resolved_differs and s.differences == ("cudagraph_mode: configured FULL -> resolved PIECEWISE",)


def test_summary_flags_unstable_and_failures():
    cfg = EngineConfig()
    s = summarize(cfg, [_ok(100.0), _ok(140.0, 1)])
    assert s.unstable and s.cv > 0.10
    failed = summarize(cfg, [_ok(100.0), RestartResult.failure("timeout", "start-up timed out after 900 s\nmore")])
    assert failed.status == "failed" and failed.failure == "start-up timed out after 900 s" and failed.n_failed == 1


class _ColdOnce:
    def __init__(self):
        self.seen = set()
        self.calls = []

    def run_restart(self, config, workload, *, restart, seed):
        cold = config.key() not in self.seen
        self.seen.add(config.key())
        self.calls.append(seed)
        return _ok(50.0 if cold else 100.0, seed, cold=cold)


def test_cold_restart_is_followed_by_a_warm_one_on_the_same_seed():
    engine = _ColdOnce()
    first = measure_restart(engine, EngineConfig(), None, restart=0, seed=7)
    assert [r.cold for r in first] == [True, False] and engine.calls == [7, 7]
    second = measure_restart(engine, EngineConfig(), None, restart=1, seed=8)
    assert len(second) == 1 and not second[0].cold
