"""The warm-up rule (``autotune.stats.warmup``) on synthetic series, and pass sizing by time."""

from __future__ import annotations

import random

import pytest

from autotune.stats import warmup


def _stop_after(series: list[float], minimum: int = 1, maximum: int = 20) -> int:
    """Warm-up passes the live rule runs on ``series`` (asked after every pass, as the engines ask it)."""
    for n in range(len(series) + 1):
        if warmup.warmup_end(series[:n], minimum, maximum):
            return n
    raise AssertionError("the rule never stopped within the series")


def _noise(level: float, spread: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_the_measured_h200_ramp_ends_after_the_ramp() -> None:
    # A speculative configuration's first passes on the H200 (issue 21), then passes within +-10% of steady.
    ramp = [720.0, 1586.0, 2089.0, 3826.0]
    series = ramp + _noise(3800.0, 0.10, 16, seed=1)
    stop = _stop_after(series)
    assert stop > len(ramp)
    assert stop <= len(ramp) + 4


def test_a_longer_ramp_keeps_warming_up_past_the_minimum() -> None:
    ramp = [500.0, 900.0, 1400.0, 1900.0, 2500.0, 3100.0, 3700.0]
    series = ramp + _noise(3800.0, 0.05, 12, seed=2)
    assert _stop_after(series) >= len(ramp)


def test_the_issue_baseline_ends_at_the_minimum_and_the_fixed_tolerance_would_not() -> None:
    baseline = [3517.0, 3401.0, 3773.0, 2831.0]  # a baseline's passes on the H200: no ramp, noise
    assert _stop_after(baseline + [3500.0] * 4) == warmup.DROP_FIRST + warmup.MIN_TAIL
    assert all(abs(a - b) / max(a, b) > 0.03 for a, b in zip(baseline, baseline[1:]))


def test_stationary_noise_of_15_percent_mostly_ends_at_the_minimum() -> None:
    least = warmup.DROP_FIRST + warmup.MIN_TAIL
    # A trend test on three passes takes noise for a rise about one time in seven (TREND_T): most, not all.
    stops = [_stop_after(_noise(3500.0, 0.15, 20, seed=s)) for s in range(200)]
    assert sum(s == least for s in stops) / len(stops) > 0.7
    assert max(stops) < 20


def test_the_cap_holds_on_a_series_that_never_settles() -> None:
    rising = [100.0 * 1.3**i for i in range(30)]
    assert not warmup.is_warm(rising[:10])
    assert _stop_after(rising, minimum=1, maximum=6) == 6


def test_the_floor_holds_and_zero_runs_no_warm_up() -> None:
    flat = [1000.0] * 20
    assert _stop_after(flat, minimum=7, maximum=9) == 7
    assert warmup.warmup_end([], 0, 4)


def test_a_falling_tail_is_not_warmed_up_further() -> None:
    # Warming makes a process faster; a drop is noise or throttling, which more warm-up does not fix.
    assert warmup.is_warm([500.0, 4000.0, 3600.0, 3200.0])


def test_mser_truncates_a_transient_and_keeps_a_stationary_series() -> None:
    assert warmup.mser_truncation([100.0, 200.0, 1000.0, 1010.0, 990.0, 1000.0]) == 2
    assert warmup.mser_truncation([1000.0, 1010.0, 990.0, 1000.0, 1005.0]) == 0
    assert warmup.mser_truncation([1.0, 2.0]) is None


def test_mser_5_batches_a_long_series() -> None:
    series = [100.0] * 5 + [1000.0 + (i % 3) for i in range(30)]
    assert warmup.mser_truncation(series, batch=warmup.MSER_BATCH) == 5
    assert warmup.is_warm([50.0, *series])


def test_a_non_positive_pass_is_never_warm() -> None:
    assert not warmup.is_warm([100.0, 1000.0, 0.0, 1000.0, 1000.0])


@pytest.mark.parametrize(("target", "round_s", "rounds"),
                         [(5.0, 1.0, 5), (5.0, 0.8, 6), (5.0, 30.0, 1), (0.0, 1.0, 1), (5.0, None, 1),
                          (5.0, 1e-9, warmup.MAX_ROUNDS)])
def test_timed_passes_are_sized_in_whole_rounds(target: float, round_s: float | None, rounds: int) -> None:
    assert warmup.timed_rounds(target, round_s) == rounds


def test_pass_seconds_is_settable_validated_and_left_out_of_the_identity_at_its_default(tmp_path) -> None:
    from autotune.config.space import SpaceError, load_space
    from autotune.core.records import Workload

    assert "pass_seconds" not in Workload().to_dict()  # a stored study's workload digest stays what it was
    assert Workload.from_dict(Workload(pass_seconds=2.5).to_dict()).pass_seconds == 2.5
    base = "engine_args: {model: m}\nsearch: {cudagraph_mode: [NONE, FULL]}\n"
    good = tmp_path / "good.yaml"
    good.write_text(base + "workload: {pass_seconds: 2}\n")
    assert load_space(good).workload.pass_seconds == 2.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(base + "workload: {pass_seconds: -1}\n")
    with pytest.raises(SpaceError) as info:
        load_space(bad)
    message = str(info.value)
    assert "\n" not in message and "workload.pass_seconds" in message


def test_the_report_totals_phases_over_every_restart_and_counts_those_without() -> None:
    from autotune.core import facts as F
    from autotune.core.records import RestartResult
    from autotune.report.phases import phase_totals, render_phases

    a = RestartResult("ok", passes_tok_s=(1.0,), facts={F.PHASE_COMPILE_S: 60.0, F.PHASE_TIMED_S: 15.0,
                                                        F.WARMUP_PASSES: 4})
    b = RestartResult("ok", passes_tok_s=(1.0,), facts={F.PHASE_COMPILE_S: 6.0, F.PHASE_TIMED_S: 15.0,
                                                        F.PHASE_WARMUP_S: 3.0, F.WARMUP_PASSES: 6})
    old = RestartResult("ok", passes_tok_s=(1.0,))
    totals = phase_totals([a, b, old])
    assert totals is not None
    assert dict(totals.seconds) == {F.PHASE_COMPILE_S: 66.0, F.PHASE_WARMUP_S: 3.0, F.PHASE_TIMED_S: 30.0}
    assert (totals.restarts, totals.without, totals.warmup_passes) == (2, 1, 10)
    assert totals.to_dict()["total_s"] == 99.0
    text = " ".join(render_phases(totals))
    assert "compile 1.1 min (67%)" in text and "1 restarts did not say" in text and "5.0 passes" in text
    assert phase_totals([old]) is None and render_phases(None) == []
